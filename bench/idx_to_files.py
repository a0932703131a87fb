#!/usr/bin/python3
"""Write every image of an MNIST-style IDX data set as its own file.

    /usr/bin/python3 bench/idx_to_files.py IDX_DIR OUT_DIR

For each split (train-images-idx3-ubyte[.gz], t10k-... becomes "test") it
writes OUT_DIR/<split>/<index>.bin holding the image's raw bytes (784 for
28x28), indices zero-padded to at least 5 digits — the names `dlfs pack`
gives the same samples, plus ".bin". OUT_DIR must not exist; the tree is
written to OUT_DIR.tmp and renamed into place when complete. Standard
library only (gzip + struct).
"""

import argparse
import gzip
import os
import re
import shutil
import struct
import sys


def open_idx(path):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("idx_dir")
    ap.add_argument("out_dir")
    args = ap.parse_args()
    if os.path.exists(args.out_dir):
        sys.exit(f"idx_to_files: {args.out_dir} exists")

    pattern = re.compile(r"^(\w+)-images[-.]idx3-ubyte(\.gz)?$")
    splits = sorted((m.group(1), name) for name in os.listdir(args.idx_dir)
                    if (m := pattern.match(name)))
    if not splits:
        sys.exit(f"idx_to_files: {args.idx_dir}: no *-images-idx3-ubyte[.gz] files")

    tmp = args.out_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    total = 0
    for split, name in splits:
        path = os.path.join(args.idx_dir, name)
        with open_idx(path) as f:
            magic, count, rows, cols = struct.unpack(">IIII", f.read(16))
            if magic != 0x00000803:
                sys.exit(f"idx_to_files: {path}: bad magic 0x{magic:08x}")
            size = rows * cols
            width = max(5, len(str(max(count - 1, 0))))
            out = os.path.join(tmp, "test" if split == "t10k" else split)
            os.makedirs(out)
            for i in range(count):
                image = f.read(size)
                if len(image) != size:
                    sys.exit(f"idx_to_files: {path}: truncated at image {i}")
                with open(os.path.join(out, f"{i:0{width}d}.bin"), "wb") as g:
                    g.write(image)
            total += count
    os.sync()
    os.rename(tmp, args.out_dir)
    print(f"idx_to_files: wrote {total} files under {args.out_dir}")


if __name__ == "__main__":
    main()
