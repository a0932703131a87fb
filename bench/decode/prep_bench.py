#!/usr/bin/python3
"""Pack-time image preparation benchmark (issue 39): what `dlfs pack
--max-side / --jpeg-quality / --image-format raw` buy at training time.

Data (generated once, kept in --dir): --images photograph-like JPEGs with
ImageNet's size distribution (bench/data/make_photo_jpegs.py --sizes
imagenet: longer side 300-500 px for 94 %, 600-1300 px for 5 %, 2000-2800 px
for 1 %, quality 85-96; mean ~110 KB), 100 classes, as an ImageFolder tree,
packed once per variant:

  original         dlfs pack TREE                       (the JPEGs as they are)
  max-side 512     --max-side 512                       (JPEG, quality 90 where resized)
  max-side 256     --max-side 256
  jpeg-quality 90  --jpeg-quality 90                    (re-encoded where that shrinks them)
  raw 256          --max-side 256 --image-format raw    (decoded pixels)
  raw 256 + zstd   ... --compress zstd

Measured: dlfs.torch.ImageLoader, RandomResizedCrop(224) + flip, output as
ToTensor + Normalize give it (float32 NCHW) and as uint8 NHWC (what FFCV's
loaders hand out, normalising on the GPU), --threads decode threads (default 2), batch
--batch, its default options otherwise: O_DIRECT reads (the page cache is
not used, so its state does not matter) and the node cache. Each run is a
fresh process that reads two epochs: "epoch 1" includes the start (buffers
sized and touched for the variant's samples) and reads the disk while the
node cache fills; "epoch 2" is the steady state, its samples from the node
cache in memory (FFCV's "from RAM"). Variants alternate within each
repetition; the table gives the median of --reps. Volume sizes and pack
times are beside them (packing on --pack-threads).

Then, without I/O or the loader: dlfs' ImagePipeline on every variant's
samples from memory, one thread (build/bench/dlfs_decode_limit --pipeline
224), the decode work alone.

  /usr/bin/python3 bench/decode/prep_bench.py                        # 5000 images
  /usr/bin/python3 bench/decode/prep_bench.py --images 600 --reps 1   # smoke run
  /usr/bin/python3 bench/decode/prep_bench.py --sizes large --images 400 --pipeline-only
                    # 600-1600 px JPEGs, the decode work alone

Prints a Markdown table (the results page, docs/benchmarks.md, quotes it) and writes the raw
results as JSON next to the data. Run from the repository root after
building (build/dlfs, build/python).
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
PY = "/usr/bin/python3"
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
VARIANTS = {
    "original": [],
    "max-side 512": ["--max-side", "512"],
    "max-side 256": ["--max-side", "256"],
    "jpeg-quality 90": ["--jpeg-quality", "90"],
    "raw 256": ["--max-side", "256", "--image-format", "raw"],
    "raw 256 + zstd": ["--max-side", "256", "--image-format", "raw", "--compress", "zstd"],
}


def cpu_now():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def run_one(args):
    """Two epochs of ImageLoader over --volume; prints each one's {images,
    seconds, cpu_seconds} as a JSON list."""
    sys.path.insert(0, os.path.join(BUILD, "python"))
    import torch

    import dlfs.torch as dt

    torch.set_num_threads(1)
    out_kw = (dict(dtype="float32", layout="NCHW", mean=MEAN, std=STD)
              if args.dtype == "float32" else dict(dtype="uint8", layout="NHWC"))
    loader = dt.ImageLoader(args.volume, args.batch, size=224, crop="random-resized", flip=True,
                            decode_threads=args.threads, seed=0, **out_kw)
    out = []
    cpu0, t0 = cpu_now(), time.perf_counter()  # epoch 1 counts the loader's start
    for epoch in range(2):
        loader.set_epoch(epoch)
        n = 0
        for x, _ in loader:
            n += len(x)
        t1, cpu1 = time.perf_counter(), cpu_now()
        out.append({"images": n, "seconds": t1 - t0, "cpu_seconds": cpu1 - cpu0,
                    "shape": list(x.shape[1:])})
        t0, cpu0 = t1, cpu1
    print(json.dumps(out))


def sh(cmd, **kw):
    print("+ " + " ".join(map(str, cmd)), file=sys.stderr, flush=True)
    return subprocess.run(list(map(str, cmd)), check=True, **kw)


def volume_bytes(vol):
    return sum(os.path.getsize(p) for p in [vol] if os.path.exists(p))


def prepare(args):
    """Generates the tree (once) and packs every variant (once, timed)."""
    os.makedirs(args.dir, exist_ok=True)
    tree = os.path.join(args.dir, f"{args.sizes}-{args.images}")
    if not os.path.exists(tree):
        sh([PY, os.path.join(REPO, "bench", "data", "make_photo_jpegs.py"), "--files",
            args.images, "--classes", min(100, args.images), "--sizes", args.sizes, tree])
    files = [os.path.join(d, f) for d, _, fs in os.walk(tree) for f in fs]
    sizes = [os.path.getsize(f) for f in files]
    data = {"tree": tree, "files": len(files), "mean_file_bytes": statistics.mean(sizes),
            "tree_bytes": sum(sizes), "variants": {}}
    for name, flags in VARIANTS.items():
        vol = os.path.join(args.dir, f"{args.sizes}-{args.images}-{name.replace(' ', '_')}.dlfs")
        meta = vol + ".json"
        if not os.path.exists(meta):
            t0 = time.perf_counter()
            out = sh([DLFS, "pack", tree, "-o", vol, "-q", "--force", "--prepare-threads",
                      args.pack_threads, *flags], capture_output=True, text=True).stdout
            seconds = time.perf_counter() - t0
            with open(meta, "w") as f:
                json.dump({"pack_seconds": seconds, "report": out}, f)
        with open(meta) as f:
            m = json.load(f)
        info = json.loads(sh([DLFS, "info", "--json", vol], capture_output=True,
                             text=True).stdout)
        data["variants"][name] = {"volume": vol, "bytes": volume_bytes(vol),
                                  "pack_seconds": m["pack_seconds"], "report": m["report"],
                                  "images": info["images"]}
    return data


def pipeline_limits(args, data):
    """Each variant's samples as files, then ImagePipeline on them from memory, one
    thread: {variant: {dtype: (images/s, CPU s per 1000)}}, medians of 3."""
    sys.path.insert(0, os.path.join(BUILD, "python"))
    import dlfs
    out = {}
    for name, v in data["variants"].items():
        if "zstd" in name:  # decoded, its samples are raw 256's
            continue
        files = v["volume"] + ".files"
        if not os.path.exists(files):
            os.makedirs(files + ".tmp", exist_ok=True)
            vol = dlfs.Volume(v["volume"])
            for i in range(len(vol)):  # decoded bytes (zstd undone): what the stage decodes
                with open(os.path.join(files + ".tmp", f"{i:06d}"), "wb") as f:
                    f.write(vol[i][0])
            os.rename(files + ".tmp", files)
        out[name] = {}
        for dtype, flags in (("float32", ["--float"]), ("uint8", [])):
            text = subprocess.run([LIMIT, files, "--threads", "1", "--reps", "3", "--pipeline",
                                   "224", "--crop", "random-resized", "--flip", *flags],
                                  check=True, capture_output=True, text=True).stdout
            reps = [json.loads(l) for l in text.splitlines() if l.startswith("{")]
            out[name][dtype] = (statistics.median(r["images_per_s"] for r in reps),
                                statistics.median(r["cpu_s_per_1000"] for r in reps))
            print(f"pipeline: {name} {dtype}: {out[name][dtype][0]:,.0f} images/s",
                  file=sys.stderr, flush=True)
    return out


def print_pipeline(data, limits):
    print(f"\nImagePipeline alone (no I/O, no loader), 1 thread, from memory; "
          f"{data['files']} images, RandomResizedCrop 224 + flip; median of 3:\n")
    print("| variant | float32 NCHW images/s | × original | uint8 NHWC images/s | × original |")
    print("|---|---:|---:|---:|---:|")
    for name, r in limits.items():
        f, u = r["float32"][0], r["uint8"][0]
        print(f"| {name} | {f:,.0f} | {f / limits['original']['float32'][0]:.2f} | {u:,.0f} | "
              f"{u / limits['original']['uint8'][0]:.2f} |")


def timed(args, vol, dtype):
    out = subprocess.run([PY, os.path.abspath(__file__), "--run", "--volume", vol, "--batch",
                          str(args.batch), "--threads", str(args.threads), "--dtype", dtype],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.path.join(os.environ.get("DLFS_BENCH_DIR",
                                                                 "/tmp/dlfs-bench"), "prep"),
                    help="where data and results live (not tmpfs)")
    ap.add_argument("--images", type=int, default=5000, help="JPEG files (default 5000)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2, help="decode threads (default 2)")
    ap.add_argument("--pack-threads", type=int, default=os.cpu_count() or 1,
                    help="threads preparing images when packing (default: the cores)")
    ap.add_argument("--sizes", choices=["imagenet", "large", "fixed"], default="imagenet",
                    help="make_photo_jpegs.py --sizes (default imagenet)")
    ap.add_argument("--pipeline-only", action="store_true",
                    help="only the ImagePipeline-from-memory table (no loader runs)")
    ap.add_argument("--dtypes", default="float32,uint8",
                    help="outputs to measure: float32 (NCHW, normalised), uint8 (NHWC)")
    ap.add_argument("--run", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    ap.add_argument("--volume", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        return run_one(args)

    data = prepare(args)
    limits = pipeline_limits(args, data)
    if args.pipeline_only:
        print_pipeline(data, limits)
        return 0
    dtypes = args.dtypes.split(",")
    modes = [f"{d} epoch {e}" for d in dtypes for e in (1, 2)]
    runs = {(v, m): [] for v in VARIANTS for m in modes}
    names = list(VARIANTS)
    for rep in range(args.reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            for dtype in dtypes:
                epochs = timed(args, data["variants"][name]["volume"], dtype)
                for e, r in enumerate(epochs, 1):
                    mode = f"{dtype} epoch {e}"
                    runs[(name, mode)].append(r)
                    print(f"rep {rep}: {name} {mode}: {r['images'] / r['seconds']:,.0f} "
                          f"images/s, {r['cpu_seconds'] / r['images'] * 1000:.2f} CPU s/1000",
                          file=sys.stderr, flush=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, kernel {platform.release()}",
            "commit": subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip(),
            "args": {k: v for k, v in vars(args).items() if v is not None and k != "run"}}
    path = os.path.join(args.dir, f"results-{int(time.time())}.json")
    with open(path, "w") as f:
        json.dump({"meta": meta, "data": data, "pipeline": limits,
                   "runs": {f"{v}|{m}": r for (v, m), r in runs.items()}}, f, indent=1)
    print_table(meta, data, runs, modes, args)
    print_pipeline(data, limits)
    print(f"\n(raw results: {path})")


def print_table(meta, data, runs, modes, args):
    print(f"\nRun of {meta['date']}, commit {meta['commit']}, {meta['machine']}; "
          f"{data['files']} JPEGs, mean {data['mean_file_bytes'] / 1000:.0f} KB "
          f"({data['tree_bytes'] / 1e6:.0f} MB); RandomResizedCrop 224 + flip; "
          f"{args.threads} decode threads, batch {args.batch}; median of {args.reps}. "
          f"images/s of epoch 1 (fresh process: start, disk) and epoch 2 (node cache); "
          f"× original and CPU s per 1,000 images of epoch 2.\n")
    rate = {k: statistics.median(r["images"] / r["seconds"] for r in v) for k, v in runs.items()}
    cpu = {k: statistics.median(r["cpu_seconds"] / r["images"] * 1000 for r in v)
           for k, v in runs.items()}
    dtypes = sorted({m.split()[0] for m in modes}, key=[m.split()[0] for m in modes].index)
    head = "| variant | volume | per image | pack s |"
    rule = "|---|---:|---:|---:|"
    for d in dtypes:
        head += f" {d} epoch 1 | {d} epoch 2 | × original | CPU s/1000 |"
        rule += "---:|---:|---:|---:|"
    print(head)
    print(rule)
    for name in VARIANTS:
        v = data["variants"][name]
        row = (f"| {name} | {v['bytes'] / 1e6:,.0f} MB | {v['bytes'] / data['files'] / 1000:.0f} KB"
               f" | {v['pack_seconds']:.0f} |")
        for d in dtypes:
            e1, e2 = f"{d} epoch 1", f"{d} epoch 2"
            row += (f" {rate[(name, e1)]:,.0f} | {rate[(name, e2)]:,.0f} | "
                    f"{rate[(name, e2)] / rate[('original', e2)]:.2f} | {cpu[(name, e2)]:.2f} |")
        print(row)
    print()
    for name in VARIANTS:
        im = data["variants"][name]["images"]
        if im:
            print(f"- {name}: {im['changed']} of {im['images']} images changed "
                  f"({im['resized']} resized; stored {im['stored']})")
    for d in dtypes:
        w = f"{d} epoch 2"
        g256 = rate[("max-side 256", w)] / rate[("original", w)]
        graw = rate[("raw 256", w)] / rate[("original", w)]
        print(f"\nGoals, {w}: max-side 256 / original = **{g256:.2f}×** (goal ≥ 3×), "
              f"raw 256 / original = **{graw:.2f}×** (goal ≥ 6× on ImageNet-sized JPEGs, "
              "issue 50).")


if __name__ == "__main__":
    sys.exit(main())
