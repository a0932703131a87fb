#!/usr/bin/python3
"""Generate the WebDataset-style tar shards of the fields benchmark
(bench/fields/run_fields_bench.sh). Every set is shards of SHARD_SAMPLES keys, one
member per field ("<dir>/<key>.<field>"), so `dlfs pack` makes one sample per
key with named fields (format v2) and `dlfs bench --fields NAME` reads one.

  fashion-mnist OUT_DIR [--limit N]
      Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist):
      each training image's 784 raw pixel bytes as field "pix", its label as
      "cls" (the first N images with --limit).
  tokens OUT_DIR --samples N [--seed S]
      Tokenised-text-like arrays: 200-2000 uint16 token ids per sample
      (uniform length), ids drawn from a Zipf law (exponent 1.1) over a
      50,257-token vocabulary whose ranks are mapped to ids by a fixed random
      permutation (real tokenisers do not number tokens by frequency); field
      "tok", little-endian.
  jpeg-tar TREE OUT_DIR
      An ImageFolder tree of JPEGs (bench/data/make_photo_jpegs.py) as shards:
      each file's bytes as field "jpg", its class index as "cls".

Deterministic for given options. Stdlib plus numpy (tokens only); run with
/usr/bin/python3.
"""
import argparse
import gzip
import io
import os
import struct
import sys
import tarfile

SHARD_SAMPLES = 10000
FASHION = "/usr/share/datasets/fashion-mnist"


class Shards:
    """Writes members into OUT_DIR/shard-NNNNN.tar, SHARD_SAMPLES keys each."""

    def __init__(self, out_dir):
        os.makedirs(out_dir)
        self.out_dir = out_dir
        self.keys = 0
        self.tar = None

    def add(self, key, fields):
        if self.keys % SHARD_SAMPLES == 0:
            self.close()
            name = os.path.join(self.out_dir, "shard-%05d.tar" % (self.keys // SHARD_SAMPLES))
            self.tar = tarfile.open(name, "w")
        for field, data in fields.items():
            ti = tarfile.TarInfo(f"{key}.{field}")
            ti.size = len(data)
            self.tar.addfile(ti, io.BytesIO(data))
        self.keys += 1

    def close(self):
        if self.tar is not None:
            self.tar.close()
            self.tar = None


def fashion_mnist(out_dir, limit):
    with gzip.open(os.path.join(FASHION, "train-images-idx3-ubyte.gz")) as f:
        magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
        assert magic == 2051, "not an IDX image file"
        pixels = f.read()
    with gzip.open(os.path.join(FASHION, "train-labels-idx1-ubyte.gz")) as f:
        magic, n_labels = struct.unpack(">II", f.read(8))
        assert magic == 2049 and n_labels == n, "labels do not match the images"
        labels = f.read()
    size = rows * cols
    n = min(n, limit) if limit else n
    shards = Shards(out_dir)
    for i in range(n):
        shards.add(f"train/{i:05d}", {"pix": pixels[i * size:(i + 1) * size],
                                      "cls": str(labels[i]).encode()})
    shards.close()
    return n


def tokens(out_dir, samples, seed):
    import numpy as np

    vocab = 50257
    rng = np.random.default_rng(seed)
    rank_to_id = rng.permutation(vocab).astype(np.uint16)
    ranks = np.arange(1, vocab + 1, dtype=np.float64)
    p = ranks ** -1.1
    p /= p.sum()
    shards = Shards(out_dir)
    for i in range(samples):
        length = int(rng.integers(200, 2001))
        ids = rank_to_id[rng.choice(vocab, size=length, p=p)]
        shards.add(f"tok/{i:06d}", {"tok": ids.astype("<u2").tobytes()})
    shards.close()
    return samples


def jpeg_tar(tree, out_dir):
    classes = sorted(d for d in os.listdir(tree) if os.path.isdir(os.path.join(tree, d)))
    shards = Shards(out_dir)
    for label, c in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(tree, c))):
            with open(os.path.join(tree, c, name), "rb") as f:
                data = f.read()
            key = f"{c}/{os.path.splitext(name)[0]}"
            shards.add(key, {"jpg": data, "cls": str(label).encode()})
    shards.close()
    return shards.keys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="kind", required=True)
    a = sub.add_parser("fashion-mnist")
    a.add_argument("out_dir")
    a.add_argument("--limit", type=int, default=0)
    a = sub.add_parser("tokens")
    a.add_argument("out_dir")
    a.add_argument("--samples", type=int, required=True)
    a.add_argument("--seed", type=int, default=0)
    a = sub.add_parser("jpeg-tar")
    a.add_argument("tree")
    a.add_argument("out_dir")
    args = ap.parse_args()
    if args.kind == "fashion-mnist":
        n = fashion_mnist(args.out_dir, args.limit)
    elif args.kind == "tokens":
        n = tokens(args.out_dir, args.samples, args.seed)
    else:
        n = jpeg_tar(args.tree, args.out_dir)
    print(f"{args.kind}: {n} samples in {args.out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
