#!/usr/bin/python3
"""A billion samples: what the directory and the loader cost as volumes grow.

For each size N (default 1e7, 1e8, 1e9) of 8-byte samples (each holds its
own index, so every read is checked), labels over 10 classes, no names:

  write    dlfs.Writer.write_batch in 1M-sample batches: samples/s, peak RSS
  info     `dlfs info --json`: directory and sample-metadata bytes per sample
  open     dlfs.Volume(path) in a fresh process: cold (the file's pages dropped
           with posix_fadvise(DONTNEED)) and warm, median of --runs
  pss      --procs processes each open the volume and check the whole directory
           (every page of it read); the PSS they add over as many processes
           that only import dlfs, against the directory's bytes
  locate   build/bench/dlfs_locate_bench: random indices located per second,
           one core (first use, blocks checked as they come; then warm)
  batch    time, peak RSS and RSS added to the first batch of a shuffled
           dlfs.Loader (batch 256), in a fresh process
  epoch    with --epoch: one shuffled epoch through dlfs.torch.LoaderDataset
           (batches of 4,096 as one tensor), every sample checked (its bytes are
           its index, its label the index mod 10) and every index once: samples/s

and, with --tree N,..., the same volume written in today's tree layout
(v1: layout="tree") at those sizes, beside the compact one. Megatron-LM's
index build is measured by bench/tokens (issue 48); its figures quoted here
come from the research note (../shared/research/scale-tokens.md §1.6).

    bench/scale/scale_bench.py --dir /work/scratch [--sizes 1e7,1e8,1e9]
        [--tree 1e7,1e8] [--procs 8] [--runs 3] [--epoch] [--json out.json]

Needs the dlfs Python module in build/python and the build's dlfs CLI and
dlfs_locate_bench; writes 15 bytes of volume per sample in --dir (1e9: 15 GB)
and deletes each volume after measuring it unless --keep.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DLFS_BUILD", REPO / "build"))
PY = "/usr/bin/python3"
ENV = dict(os.environ, PYTHONPATH=str(BUILD / "python"))

WRITE = r"""
import sys, time, resource, numpy as np, dlfs
n, path, layout = int(sys.argv[1]), sys.argv[2], sys.argv[3]
chunk = 1 << 20
t = time.perf_counter()
with dlfs.Writer(path, force=True, layout=layout) as w:
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        idx = np.arange(start, start + m, dtype=np.uint64)
        names = None
        if layout == "tree":  # the tree layout needs paths
            names = [f"{i:012d}" for i in range(start, start + m)]
        w.write_batch(idx, np.full(m, 8, dtype=np.uint64), (idx % 10).astype(np.int64), names)
seconds = time.perf_counter() - t
print(seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""

OPEN = r"""
import sys, time, dlfs
t = time.perf_counter()
v = dlfs.Volume(sys.argv[1])
print(time.perf_counter() - t, len(v))
"""

HOLD = r"""
import sys, dlfs
v = dlfs.Volume(sys.argv[1]) if sys.argv[1] != "-" else None
if v is not None:
    v.check_directory()   # every page of the directory read
print("ready", flush=True)
sys.stdin.read()
"""

FIRST_BATCH = r"""
import sys, time, resource, dlfs
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
before = rss()
t = time.perf_counter()
v = dlfs.Volume(sys.argv[1])
loader = dlfs.Loader(v, batch_size=256, seed=1)
batch = next(iter(loader))
seconds = time.perf_counter() - t
print(seconds, rss() - before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
      len(batch.samples))
"""

EPOCH = r"""
import sys, time, numpy as np, dlfs, dlfs.torch
path = sys.argv[1]
n = len(dlfs.Volume(path))
# What a PyTorch user runs: LoaderDataset, fixed-size samples stacked into
# one tensor per batch. A sample's bytes are its index and its label the
# index mod 10: each batch is checked, and every index must come once.
ds = dlfs.torch.LoaderDataset(path, 4096, seed=2)
seen = np.zeros(n, dtype=np.uint8)
got = bad = 0
t = time.perf_counter()
for samples, labels in ds:
    idx = np.ascontiguousarray(np.asarray(samples)).view(np.uint64).ravel()
    bad += int((np.asarray(labels) != (idx % 10)).sum()) + int((idx >= n).sum())
    seen[idx[idx < n]] += 1
    got += len(idx)
seconds = time.perf_counter() - t
bad += int((seen != 1).sum())
print(seconds, got, bad)
"""


def run(code, *args, **kw):
    out = subprocess.run([PY, "-c", code, *map(str, args)], env=ENV, check=True,
                         capture_output=True, text=True, **kw)
    return out.stdout.split()


def available_memory():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def drop_file(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def pss_of(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
    return total


def hold(path, procs):
    """PSS of `procs` processes holding the volume open (or "-": none)."""
    ps = [subprocess.Popen([PY, "-c", HOLD, str(path)], env=ENV, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    try:
        for p in ps:
            assert p.stdout.readline().strip() == "ready"
        return pss_of([p.pid for p in ps])
    finally:
        for p in ps:
            p.stdin.close()
            p.wait()


def measure(n, layout, args):
    path = Path(args.dir) / f"scale-{layout}-{n}.dlfs"
    r = {"samples": n, "layout": layout}
    seconds, peak = run(WRITE, n, path, layout)
    r["write_seconds"] = float(seconds)
    r["write_samples_per_second"] = n / float(seconds)
    r["write_peak_rss"] = int(peak)
    info = json.loads(subprocess.run([str(BUILD / "dlfs"), "info", "--json", str(path)],
                                     check=True, capture_output=True, text=True).stdout)
    r["directory_bytes"] = info["directory_bytes"]
    r["directory_bytes_per_sample"] = info["directory_bytes_per_sample"]
    r["sample_metadata_bytes_per_sample"] = info["sample_metadata_bytes_per_sample"]
    cold, warm = [], []
    for _ in range(args.runs):
        drop_file(path)
        cold.append(float(run(OPEN, path)[0]))
        warm.append(float(run(OPEN, path)[0]))
    r["open_cold_seconds"] = statistics.median(cold)
    r["open_warm_seconds"] = statistics.median(warm)
    # A tree directory is a copy per process: skipped where those copies
    # would not fit in half the memory available (1e8 samples: 8 x 4.4 GB).
    if (layout == "compact" or
            args.procs * info["directory_bytes"] < 0.5 * available_memory()):
        base = hold("-", args.procs)
        held = hold(path, args.procs)
        r["pss_added"] = held - base
        r["pss_ratio"] = (held - base) / info["directory_bytes"]
    else:
        r["pss_added"] = r["pss_ratio"] = None
    loc = json.loads(subprocess.run([str(BUILD / "bench" / "dlfs_locate_bench"), str(path),
                                     "--lookups", str(args.lookups)],
                                    check=True, capture_output=True, text=True).stdout)
    r["locate_per_second_first_use"] = loc["locate_per_second_first_use"]
    r["locate_per_second"] = loc["locate_per_second"]
    r["locate_many_per_second"] = loc["locate_many_per_second"]
    drop_file(path)
    seconds, added, peak, got = run(FIRST_BATCH, path)
    r["first_batch_seconds"] = float(seconds)
    r["first_batch_rss_added"] = int(added)
    r["first_batch_peak_rss"] = int(peak)
    if args.epoch:
        seconds, seen, bad = run(EPOCH, path)
        r["epoch_seconds"] = float(seconds)
        r["epoch_samples_per_second"] = int(seen) / float(seconds)
        r["epoch_samples"] = int(seen)
        r["epoch_bad"] = int(bad)
    if not args.keep:
        path.unlink()
    return r


def row(r):
    gb = 1e9
    line = (f"{r['layout']:8s} {r['samples']:>13,d}  write {r['write_samples_per_second'] / 1e6:5.2f} M/s"
            f" peak {r['write_peak_rss'] / gb:5.2f} GB | dir {r['directory_bytes_per_sample']:5.2f}"
            f" B/sample ({r['sample_metadata_bytes_per_sample']:4.2f} to locate)"
            f" | open cold {r['open_cold_seconds'] * 1e3:8.1f} ms warm {r['open_warm_seconds'] * 1e3:7.1f} ms"
            f" | PSS " + (f"x{r['pss_ratio']:.3f}" if r["pss_ratio"] is not None else "(skipped)") +
            f" | locate {r['locate_per_second'] / 1e6:5.1f} M/s"
            f" ({r['locate_many_per_second'] / 1e6:5.1f} batched)"
            f" | first batch {r['first_batch_seconds']:6.2f} s +{r['first_batch_rss_added'] / gb:5.2f} GB")
    if "epoch_samples_per_second" in r:
        line += (f" | epoch {r['epoch_samples_per_second'] / 1e6:5.2f} M/s"
                 f" ({r['epoch_samples']:,d} samples, {r['epoch_bad']} wrong)")
    return line


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, help="where the volumes are written")
    ap.add_argument("--sizes", default="1e7,1e8,1e9", help="compact volumes' sample counts")
    ap.add_argument("--tree", default="", help="sizes also written in the tree (v1) layout")
    ap.add_argument("--procs", type=int, default=8, help="processes sharing the directory")
    ap.add_argument("--runs", type=int, default=3, help="opens per measurement (median)")
    ap.add_argument("--lookups", type=int, default=10_000_000)
    ap.add_argument("--epoch", action="store_true", help="also read one shuffled epoch")
    ap.add_argument("--keep", action="store_true", help="keep the volumes")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("note: not root; cold opens drop only the volume's pages (posix_fadvise), which "
              "needs no root", file=sys.stderr)
    results = []
    plan = [(int(float(s)), "compact") for s in args.sizes.split(",") if s]
    plan += [(int(float(s)), "tree") for s in args.tree.split(",") if s]
    for n, layout in sorted(plan, key=lambda x: (x[0], x[1] != "tree")):
        r = measure(n, layout, args)
        results.append(r)
        print(row(r), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
