#!/usr/bin/python3
"""Generate an ImageNet-like ImageFolder tree of real JPEG files for the decode
benchmark (bench/decode/decode_bench.py).

OUT_DIR gets --classes directories ("n00000042") holding --files JPEG files in
total ("n00000042_000123.JPEG"). Each image is photograph-like, not noise:
smooth gradients (low-frequency waves), textured regions (oriented
high-frequency waves, as fur, grass or fabric), solid shapes, a slight blur
and mild Gaussian noise (sigma 7). Sides are 350-500 px, quality 90 (PIL's
default 4:2:0 subsampling); the mean file is about 110 KB, like ImageNet's
training JPEGs.

--sizes imagenet draws sizes (and qualities) like ImageNet's training set
instead: 94 % of the images have a longer side of 300-500 px (aspect 1:1 to
3:2, a quarter of them portrait), 5 % 600-1300 px and 1 % 2000-2800 px, at
quality 85-96; about 420 x 380 px on average, with a mean file of ~110 KB.
--sizes large: longer side 600-1600 px (aspect as above), quality 90 — the
"600-1,600 px photo-like JPEGs" the pack-time preparation issue started from.

Every image is a function of (--seed, its index) alone, so the same options
give byte-identical trees in any order and with any --jobs. The tree is
written to OUT_DIR.tmp-<pid> and renamed into place when complete. Needs
python3-numpy and python3-pil; run with /usr/bin/python3.

  bench/data/make_photo_jpegs.py --files 20000 --classes 100 OUT_DIR
"""
import argparse
import io
import multiprocessing
import os
import shutil
import sys
import time

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

QUALITY = 90
NOISE = 7.0
TEXTURE = 110.0


def imagenet_size(rng):
    """(width, height, quality) as --sizes imagenet draws them."""
    u = rng.random()
    if u < 0.01:
        longer = int(rng.integers(2000, 2801))
    elif u < 0.06:
        longer = int(rng.integers(600, 1301))
    else:
        longer = int(rng.integers(300, 501))
    aspect = float(rng.choice([4 / 3, 4 / 3, 3 / 2, 5 / 4, 1.0]))
    shorter = int(longer / aspect)
    w, h = (shorter, longer) if rng.random() < 0.25 else (longer, shorter)
    return w, h, int(rng.integers(85, 97))


def photo(seed, index, sizes="fixed"):
    """JPEG bytes of image `index`."""
    rng = np.random.default_rng([seed, index])
    w, h = (int(v) for v in rng.integers(350, 501, 2))
    quality = QUALITY
    if sizes == "imagenet":
        w, h, quality = imagenet_size(np.random.default_rng([seed, index, 1]))
    elif sizes == "large":
        r = np.random.default_rng([seed, index, 2])
        longer = int(r.integers(600, 1601))
        shorter = int(longer / float(r.choice([4 / 3, 4 / 3, 3 / 2, 5 / 4, 1.0])))
        w, h = (shorter, longer) if r.random() < 0.25 else (longer, shorter)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    for c in range(3):  # a smooth background per channel
        a = rng.uniform(40, 200)
        for _ in range(3):
            fx, fy = rng.uniform(0.002, 0.03, 2)
            a = a + rng.uniform(15, 45) * np.sin((x * fx + y * fy) * 6.283 + rng.uniform(0, 6.283))
        img[..., c] = a
    for _ in range(6):  # textured regions with soft edges
        mask = Image.new("L", (w, h), 0)
        x0, y0, s = int(rng.integers(0, w)), int(rng.integers(0, h)), int(rng.integers(60, 250))
        ImageDraw.Draw(mask).ellipse([x0 - s, y0 - s, x0 + s, y0 + s * rng.uniform(0.5, 1.5)],
                                     fill=255)
        m = np.asarray(mask.filter(ImageFilter.GaussianBlur(4)), np.float32)[..., None] / 255
        f, th = rng.uniform(0.08, 0.35), rng.uniform(0, 3.14)
        phase = rng.normal(0, 1.2, (h, w)).astype(np.float32)
        wave = np.sin((x * np.cos(th) + y * np.sin(th)) * f * 6.283 + phase)
        img += m * wave[..., None] * TEXTURE * rng.uniform(0.85, 1, 3).astype(np.float32)
    pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(pil)
    for _ in range(10):  # solid objects
        x0, y0, s = int(rng.integers(0, w)), int(rng.integers(0, h)), int(rng.integers(10, 120))
        col = tuple(int(v) for v in rng.integers(0, 256, 3))
        draw.ellipse([x0, y0, x0 + s, y0 + int(s * rng.uniform(0.5, 1.5))], fill=col)
    arr = np.asarray(pil.filter(ImageFilter.GaussianBlur(0.7)), np.float32)
    arr += rng.normal(0, NOISE, arr.shape).astype(np.float32)
    buf = io.BytesIO()
    Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def write_one(job):
    seed, index, path, sizes = job
    data = photo(seed, index, sizes)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", metavar="OUT_DIR", help="tree to create (must not exist)")
    p.add_argument("--files", type=int, default=20000, help="files in total (default 20000)")
    p.add_argument("--classes", type=int, default=100, help="class directories (default 100)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--sizes", choices=["fixed", "imagenet", "large"], default="fixed",
                   help="350-500 px at quality 90 (default), ImageNet's distribution, or "
                        "600-1600 px")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="processes (default: the cores)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    args = p.parse_args(argv)
    if args.files < 1 or args.classes < 1 or args.classes > args.files:
        p.error("need 1 <= --classes <= --files")
    out = args.out_dir.rstrip("/") or "/"
    if os.path.lexists(out):
        sys.exit(f"make_photo_jpegs: {out} already exists")
    tmp = f"{out}.tmp-{os.getpid()}"
    jobs = []
    per_class, extra = divmod(args.files, args.classes)
    k = 0
    for c in range(args.classes):
        cls = f"n{c:08d}"
        os.makedirs(os.path.join(tmp, cls))
        for i in range(per_class + (1 if c < extra else 0)):
            jobs.append((args.seed, k, os.path.join(tmp, cls, f"{cls}_{i:06d}.JPEG"), args.sizes))
            k += 1
    start = time.monotonic()
    total = 0
    try:
        with multiprocessing.Pool(args.jobs) as pool:
            for n, size in enumerate(pool.imap(write_one, jobs, chunksize=16), 1):
                total += size
                if not args.quiet and sys.stderr.isatty() and n % 100 == 0:
                    print(f"\r  {n}/{len(jobs)} files, mean {total / n / 1000:.1f} KB",
                          end="", file=sys.stderr)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    os.sync()
    os.rename(tmp, out)
    if not args.quiet:
        print(f"\rmake_photo_jpegs: {len(jobs)} JPEGs, {total / 1e6:.1f} MB "
              f"(mean {total / len(jobs) / 1000:.1f} KB) in {time.monotonic() - start:.0f} s "
              f"under {out}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
