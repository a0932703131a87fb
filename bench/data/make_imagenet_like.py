#!/usr/bin/python3
"""Generate an ImageNet-like ImageFolder tree for benchmarks.

OUT_DIR gets --classes directories named like ImageNet synsets ("n00000042")
holding --files files in total ("n00000042_000123.JPEG"), spread as evenly as
possible. File sizes are log-normal with sigma --sigma and mu chosen so that
the mean is --mean-kb (ImageNet's training JPEGs average about 110 KB). The
bytes are pseudo-random, so incompressible: nothing downstream can win by
compressing them.

Everything is a function of --seed: sizes come from random.Random(seed), and
each file's bytes are SHAKE-128 of (seed, class, index), so the same options
always give byte-identical trees, independent of generation order.

The tree is written to OUT_DIR.tmp-<pid> and renamed to OUT_DIR when complete,
so an interrupted run never leaves a tree that looks finished. OUT_DIR must
not exist. Stdlib only; run with /usr/bin/python3.

  bench/data/make_imagenet_like.py --files 20000 --classes 100 --mean-kb 110 OUT_DIR
"""

import argparse
import hashlib
import math
import os
import random
import shutil
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", metavar="OUT_DIR", help="tree to create (must not exist)")
    p.add_argument("--files", type=int, default=20000, help="files in total (default 20000)")
    p.add_argument("--classes", type=int, default=100, help="class directories (default 100)")
    p.add_argument("--mean-kb", type=float, default=110.0,
                   help="mean file size in KB of 1000 bytes (default 110)")
    p.add_argument("--sigma", type=float, default=0.6,
                   help="sigma of the log-normal size distribution (default 0.6)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    args = p.parse_args(argv)
    if args.files < 1 or args.classes < 1 or args.classes > args.files:
        p.error("need 1 <= --classes <= --files")
    if args.mean_kb <= 0 or args.sigma < 0:
        p.error("need --mean-kb > 0 and --sigma >= 0")
    return args


def file_sizes(n, mean_bytes, sigma, rng):
    # E[lognormal(mu, sigma)] = exp(mu + sigma^2 / 2)
    mu = math.log(mean_bytes) - sigma * sigma / 2
    return [max(1, int(round(rng.lognormvariate(mu, sigma)))) for _ in range(n)]


def main(argv):
    args = parse_args(argv)
    out = args.out_dir.rstrip("/") or "/"
    if os.path.lexists(out):
        sys.exit(f"make_imagenet_like: {out} already exists")
    rng = random.Random(args.seed)
    sizes = file_sizes(args.files, args.mean_kb * 1000, args.sigma, rng)
    total = sum(sizes)

    tmp = f"{out}.tmp-{os.getpid()}"
    os.makedirs(tmp)
    start = time.monotonic()
    written = 0
    per_class, extra = divmod(args.files, args.classes)
    k = 0
    try:
        for c in range(args.classes):
            cls = f"n{c:08d}"
            os.mkdir(os.path.join(tmp, cls))
            for i in range(per_class + (1 if c < extra else 0)):
                key = f"{args.seed}/{c}/{i}".encode()
                data = hashlib.shake_128(key).digest(sizes[k])
                with open(os.path.join(tmp, cls, f"{cls}_{i:06d}.JPEG"), "wb") as f:
                    f.write(data)
                written += len(data)
                k += 1
                if not args.quiet and sys.stderr.isatty() and k % 500 == 0:
                    print(f"\r  {k}/{args.files} files, {written / 1e6:.0f}/{total / 1e6:.0f} MB",
                          end="", file=sys.stderr)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if not args.quiet:
        if sys.stderr.isatty():
            print("\r\033[K", end="", file=sys.stderr)
        print(f"{out}: {args.files} files in {args.classes} classes, {total} bytes "
              f"(mean {total / args.files / 1000:.1f} KB, min {min(sizes)}, max {max(sizes)}), "
              f"{time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
