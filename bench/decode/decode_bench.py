#!/usr/bin/python3
"""Decode benchmark (issue 12): input pipelines that deliver decoded,
augmented image tensors, measured side by side in one run, cold cache.

Data (generated once, kept in --dir):
  jpeg:   --jpegs photograph-like JPEG files (bench/data/make_photo_jpegs.py:
          350-500 px, quality 90, ~110 KB), 100 classes, as an ImageFolder tree
          and packed into a volume;
  fmnist: Fashion-MNIST's training images as PNG files
          (bench/data/idx_to_files.py --png), tree and volume.

Contenders, same output per data set (jpeg: RandomResizedCrop(224) +
RandomHorizontalFlip + ToTensor + Normalize(ImageNet mean/std), float32
NCHW; fmnist: the 28x28 gray image as float32 [1, 28, 28]), one epoch each,
batch --batch:
  torchvision     ImageFolder + PIL transforms, DataLoader(num_workers=--workers)
  loaderdataset   dlfs.torch.LoaderDataset + the same PIL transforms, DataLoader
                  (num_workers=--workers)
  imageloader     dlfs.torch.ImageLoader (decode_threads=--threads)
  imageloader-warm  the same with the page cache warm: its decode rate
  library limit   the library's own decode of the same files from memory
                  (bench/decode/decode_limit.cc: tjDecompress2 / spng_decode_image),
                  one thread, times --threads; and measured on --threads
  pipeline (C++)  dlfs' ImagePipeline on the same files from memory, no I/O
                  (what the decode threads do per image), on --threads

Every timed run is a fresh process; the page cache is dropped before it
(needs root; without root the runs are warm and the table says so). Runs
alternate between contenders, --reps times; the table gives the median.
CPU is user+sys of the process and its DataLoader workers over the epoch.

  /usr/bin/python3 bench/decode/decode_bench.py      # as root; full size
  /usr/bin/python3 bench/decode/decode_bench.py --jpegs 2000 --fmnist 10000 --reps 1
  /usr/bin/python3 bench/decode/decode_bench.py --dir /tmp/dlfs-bench/decode-tiny \
      --jpegs 200 --fmnist 1000 --reps 1 --batch 32          # smoke run, ~1.5 min

Prints a Markdown table (the results page, docs/benchmarks.md, quotes it) and writes the raw
results as JSON next to the data. Run from the repository root after
building (build/dlfs, build/python, build/bench/dlfs_decode_limit).
"""
import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("DLFS_BUILD", os.path.join(REPO, "build"))
DLFS = os.path.join(BUILD, "dlfs")
LIMIT = os.path.join(BUILD, "bench", "dlfs_decode_limit")
GENERATORS = os.path.join(REPO, "bench", "data")  # make_photo_jpegs.py, idx_to_files.py
PY = "/usr/bin/python3"
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
FMNIST_SRC = "/usr/share/datasets/fashion-mnist"
FMNIST_CLASSES = "T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot"


# ---- one timed run (in its own process) -------------------------------------

def cpu_now():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def run_one(args):
    """Runs one contender for one epoch; prints {images, seconds, cpu_seconds}."""
    sys.path.insert(0, os.path.join(BUILD, "python"))
    import io

    import torch
    import torch.utils.data as tud
    import torchvision.datasets as datasets
    import torchvision.transforms as T
    from PIL import Image

    import dlfs.torch as dt

    torch.set_num_threads(1)
    jpeg = args.data == "jpeg"
    if jpeg:
        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                        T.Normalize(MEAN, STD)])
        mode = "RGB"
    else:
        tf = T.ToTensor()
        mode = "L"

    def pil_loader(path):
        with open(path, "rb") as f:
            return Image.open(f).convert(mode)

    def from_bytes(a):
        return tf(Image.open(io.BytesIO(a.tobytes())).convert(mode))

    def stack(samples, labels):
        return torch.stack(samples), torch.from_numpy(labels)

    if args.run == "torchvision":
        ds = datasets.ImageFolder(args.tree, transform=tf, loader=pil_loader)
        loader = tud.DataLoader(ds, batch_size=args.batch, shuffle=True,
                                num_workers=args.workers)
    elif args.run == "loaderdataset":
        ds = dt.LoaderDataset(args.volume, args.batch, seed=0, transform=from_bytes,
                              batch_transform=stack)
        loader = tud.DataLoader(ds, batch_size=None, num_workers=args.workers)
    else:  # imageloader, imageloader-warm
        if jpeg:
            loader = dt.ImageLoader(args.volume, args.batch, size=224, crop="random-resized",
                                    flip=True, dtype="float32", layout="NCHW", mean=MEAN,
                                    std=STD, decode_threads=args.threads)
        else:
            loader = dt.ImageLoader(args.volume, args.batch, size=28, crop="center",
                                    dtype="float32", layout="NCHW", color="gray",
                                    decode_threads=args.threads)
    cpu0, t0 = cpu_now(), time.perf_counter()
    n = 0
    for x, _ in loader:
        n += len(x)
    seconds = time.perf_counter() - t0
    del loader  # DataLoader workers are joined (and counted) by now
    print(json.dumps({"images": n, "seconds": seconds, "cpu_seconds": cpu_now() - cpu0,
                      "shape": list(x.shape[1:]), "dtype": str(x.dtype)}))


# ---- the driver -----------------------------------------------------------------

def can_drop_caches():
    return os.geteuid() == 0 and os.access("/proc/sys/vm/drop_caches", os.W_OK)


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def sh(cmd, **kw):
    print("+ " + " ".join(map(str, cmd)), file=sys.stderr, flush=True)
    return subprocess.run(list(map(str, cmd)), check=True, **kw)


def prepare(args):
    """Generates the trees and packs the volumes (once)."""
    os.makedirs(args.dir, exist_ok=True)
    data = {}
    jtree = os.path.join(args.dir, f"jpeg-{args.jpegs}")
    if not os.path.exists(jtree):
        sh([PY, os.path.join(GENERATORS, "make_photo_jpegs.py"), "--files", args.jpegs,
            "--classes", min(100, args.jpegs), jtree])
    data["jpeg"] = (jtree, jtree + ".dlfs")
    ftree_root = os.path.join(args.dir, f"fmnist-png-{args.fmnist}")
    if not os.path.exists(ftree_root):
        sh([PY, os.path.join(GENERATORS, "idx_to_files.py"), "--png", "--limit", args.fmnist,
            "--class-names", FMNIST_CLASSES, FMNIST_SRC, ftree_root])
    ftree = os.path.join(ftree_root, "train")
    data["fmnist"] = (ftree, ftree_root + ".dlfs")
    for tree, vol in data.values():
        if not os.path.exists(vol):
            sh([DLFS, "pack", tree, "-o", vol, "-q"])
    return data


def timed_python(args, name, contender, tree, vol, cold):
    if cold:
        drop_caches()
    out = subprocess.run([PY, os.path.abspath(__file__), "--run", contender, "--data", name,
                          "--tree", tree, "--volume", vol, "--batch", str(args.batch),
                          "--workers", str(args.workers), "--threads", str(args.threads)],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def check_same_output(name, runs):
    """The comparison holds only if every contender delivered the same tensors."""
    seen = {(r["images"], tuple(r["shape"]), r["dtype"]) for rs in runs.values() for r in rs}
    if len(seen) != 1:
        detail = {c: [(r["images"], r["shape"], r["dtype"]) for r in rs] for c, rs in runs.items()}
        sys.exit(f"decode_bench: {name}: contenders delivered different output: {detail}")


def limit_runs(tree, threads, extra):
    """dlfs_decode_limit: the median of 3 in-process repetitions (warm: from memory)."""
    out = subprocess.run([LIMIT, tree, "--threads", str(threads), "--reps", "3", *extra],
                         check=True, capture_output=True, text=True).stdout
    runs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {"images": runs[0]["images"],
            "images_per_s": statistics.median(r["images_per_s"] for r in runs),
            "cpu_s_per_1000": statistics.median(r["cpu_s_per_1000"] for r in runs)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.path.join(os.environ.get("DLFS_BENCH_DIR",
                                                                 "/tmp/dlfs-bench"), "decode"),
                    help="where data and results live (not tmpfs)")
    ap.add_argument("--jpegs", type=int, default=20000, help="JPEG files (default 20000)")
    ap.add_argument("--fmnist", type=int, default=60000,
                    help="Fashion-MNIST training images (default all 60000)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers (PIL contenders)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="ImageLoader decode threads (default: the cores)")
    ap.add_argument("--only", choices=["jpeg", "fmnist"], help="one data set only")
    # Internal: one timed run.
    ap.add_argument("--run", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--tree", help=argparse.SUPPRESS)
    ap.add_argument("--volume", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        return run_one(args)

    cold = can_drop_caches()
    if not cold:
        print("decode_bench: not root: page cache NOT dropped (warm runs)", file=sys.stderr)
    data = prepare(args)
    contenders = ["torchvision", "loaderdataset", "imageloader", "imageloader-warm"]
    results = {}
    for name in (["jpeg", "fmnist"] if not args.only else [args.only]):
        tree, vol = data[name]
        runs = {c: [] for c in contenders}
        for rep in range(args.reps):
            order = contenders[rep % len(contenders):] + contenders[:rep % len(contenders)]
            for c in order:
                warm = c == "imageloader-warm"
                if warm:  # read once to warm the cache, then time
                    timed_python(args, name, "imageloader", tree, vol, cold=False)
                r = timed_python(args, name, "imageloader" if warm else c, tree, vol,
                                 cold=cold and not warm)
                runs[c].append(r)
                print(f"{name} rep {rep}: {c}: {r['images'] / r['seconds']:,.0f} images/s, "
                      f"{r['cpu_seconds'] / r['images'] * 1000:.2f} CPU s/1000",
                      file=sys.stderr, flush=True)
        check_same_output(name, runs)
        lib1 = limit_runs(tree, 1, [])
        libn = limit_runs(tree, args.threads, [])
        extra = (["--pipeline", "224", "--crop", "random-resized", "--flip", "--float"]
                 if name == "jpeg" else ["--pipeline", "28", "--crop", "center"])
        pipe = limit_runs(tree, args.threads, extra)
        results[name] = {"runs": runs, "library_1": lib1, "library_n": libn, "pipeline": pipe}

    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, kernel {platform.release()}",
            "commit": subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip(),
            "cache": "dropped before each run" if cold else "warm (not root)",
            "args": {k: v for k, v in vars(args).items() if v is not None and k != "run"}}
    path = os.path.join(args.dir, f"results-{int(time.time())}.json")
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    print_table(meta, results, args)
    print(f"\n(raw results: {path})")


def print_table(meta, results, args):
    print(f"\nRun of {meta['date']}, commit {meta['commit']}, {meta['machine']}; "
          f"page cache {meta['cache']}; median of {args.reps}; batch {args.batch}, "
          f"{args.workers} DataLoader workers, {args.threads} decode threads.\n")
    labels = {"torchvision": "torchvision ImageFolder + PIL, DataLoader",
              "loaderdataset": "dlfs.torch.LoaderDataset + PIL, DataLoader",
              "imageloader": "**dlfs.torch.ImageLoader**",
              "imageloader-warm": "dlfs.torch.ImageLoader, warm cache (decode rate)"}
    for name, r in results.items():
        what = ("ImageNet-like JPEGs, RandomResizedCrop 224 + flip + normalise"
                if name == "jpeg" else "Fashion-MNIST PNGs, 28x28 float32")
        rate = {c: statistics.median(x["images"] / x["seconds"] for x in runs)
                for c, runs in r["runs"].items()}
        cpu = {c: statistics.median(x["cpu_seconds"] / x["images"] * 1000 for x in runs)
               for c, runs in r["runs"].items()}
        base = rate["torchvision"]
        print(f"### {what} ({r['runs']['imageloader'][0]['images']} images)\n")
        print("| input pipeline | images/s | × torchvision | CPU s per 1,000 images |")
        print("|---|---:|---:|---:|")
        for c in r["runs"]:
            print(f"| {labels[c]} | {rate[c]:,.0f} | {rate[c] / base:.2f} | {cpu[c]:.2f} |")
        lib1, libn, pipe = r["library_1"], r["library_n"], r["pipeline"]
        limit = lib1["images_per_s"] * args.threads
        lib = "TurboJPEG tjDecompress2" if name == "jpeg" else "libspng spng_decode_image"
        print(f"| library limit: {lib}, 1 thread × {args.threads} | {limit:,.0f} | "
              f"{limit / base:.2f} | {lib1['cpu_s_per_1000']:.2f} |")
        print(f"| {lib}, measured on {args.threads} threads | {libn['images_per_s']:,.0f} | "
              f"{libn['images_per_s'] / base:.2f} | {libn['cpu_s_per_1000']:.2f} |")
        print(f"| dlfs ImagePipeline from memory (C++, no I/O), {args.threads} threads | "
              f"{pipe['images_per_s']:,.0f} | {pipe['images_per_s'] / base:.2f} | "
              f"{pipe['cpu_s_per_1000']:.2f} |")
        print(f"\nImageLoader / torchvision: **{rate['imageloader'] / base:.2f}×** "
              f"(target ≥ {3 if name == 'jpeg' else 5}×); ImageLoader decode rate (warm) / "
              f"library limit: **{rate['imageloader-warm'] / limit:.2f}** (target ≥ 0.85).\n")


if __name__ == "__main__":
    sys.exit(main())
