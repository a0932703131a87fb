#!/usr/bin/python3
"""Write every image of an MNIST-style IDX data set as its own file.

    /usr/bin/python3 bench/data/idx_to_files.py IDX_DIR OUT_DIR
    /usr/bin/python3 bench/data/idx_to_files.py --png [--class-names a,b,...] IDX_DIR OUT_DIR

For each split (train-images-idx3-ubyte[.gz], t10k-... becomes "test") it
writes OUT_DIR/<split>/<index>.bin holding the image's raw bytes (784 for
28x28), indices zero-padded to at least 5 digits — the names `dlfs pack`
gives the same samples, plus ".bin".

With --png it writes an ImageFolder tree instead: OUT_DIR/<split>/<class>/
<index>.png, 8-bit grayscale PNGs, the class from the split's labels file
(*-labels-idx1-ubyte[.gz]); class directories are named "<label>-<name>"
with the names of --class-names ("/" becomes "-"), or "<label>", zero-padded
so that sorted order is label order (as torchvision's ImageFolder and
`dlfs pack` assign labels). --limit N keeps the first N images per split.

OUT_DIR must not exist; the tree is written to OUT_DIR.tmp and renamed into
place when complete. Standard library only (gzip, struct, zlib).
"""

import argparse
import gzip
import os
import re
import shutil
import struct
import sys
import zlib


def open_idx(path):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def png_gray(pixels, rows, cols):
    """An 8-bit grayscale PNG of `pixels` (rows * cols bytes)."""
    raw = b"".join(b"\x00" + pixels[r * cols:(r + 1) * cols] for r in range(rows))

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", cols, rows, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def read_labels(idx_dir, split, count):
    for name in (f"{split}-labels-idx1-ubyte", f"{split}-labels.idx1-ubyte"):
        for suffix in ("", ".gz"):
            path = os.path.join(idx_dir, name + suffix)
            if os.path.exists(path):
                with open_idx(path) as f:
                    magic, n = struct.unpack(">II", f.read(8))
                    if magic != 0x00000801 or n < count:
                        sys.exit(f"idx_to_files: {path}: bad labels file")
                    return f.read(count)
    sys.exit(f"idx_to_files: no labels file for split {split} in {idx_dir}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("idx_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--png", action="store_true",
                    help="an ImageFolder tree of PNGs (split/class/index.png) instead of .bin")
    ap.add_argument("--class-names", default="",
                    help="--png: comma-separated names of labels 0, 1, ...")
    ap.add_argument("--limit", type=int, default=0, help="at most this many images per split")
    args = ap.parse_args()
    names = [n.replace("/", "-") for n in args.class_names.split(",")] if args.class_names else []
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
            if args.limit:
                count = min(count, args.limit)
            width = max(5, len(str(max(count - 1, 0))))
            out = os.path.join(tmp, "test" if split == "t10k" else split)
            os.makedirs(out)
            labels = read_labels(args.idx_dir, split, count) if args.png else b""
            classes = max(len(names), max(labels, default=0) + 1)
            digits = len(str(max(classes - 1, 0)))
            for i in range(count):
                image = f.read(size)
                if len(image) != size:
                    sys.exit(f"idx_to_files: {path}: truncated at image {i}")
                if args.png:
                    label = labels[i]
                    cls = f"{label:0{digits}d}" + (f"-{names[label]}" if label < len(names)
                                                   else "")
                    d = os.path.join(out, cls)
                    os.makedirs(d, exist_ok=True)
                    with open(os.path.join(d, f"{i:0{width}d}.png"), "wb") as g:
                        g.write(png_gray(image, rows, cols))
                    continue
                with open(os.path.join(out, f"{i:0{width}d}.bin"), "wb") as g:
                    g.write(image)
            total += count
    os.sync()
    os.rename(tmp, args.out_dir)
    print(f"idx_to_files: wrote {total} files under {args.out_dir}")


if __name__ == "__main__":
    main()
