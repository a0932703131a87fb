#!/usr/bin/python3
"""A weighted mixture against one volume of the same samples, from memory.

Packs NA + NB samples of SIZE bytes as two volumes (a, b) and as one (c),
then alternates `dlfs bench c.dlfs` and `dlfs bench a.dlfs b.dlfs --weights`
(REPS times each, page cache warm, --buffered; also the one volume with two
I/O threads, as a mixture of two has) and prints the median samples/s and
the ratios: what reading a mixture costs over reading one volume (issue 21's
target: >= 0.95x).

  bench/mixture/run_mixture_bench.py [--dir /tmp/mixbench] [--reps 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/mixbench")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--na", type=int, default=140_000)
    ap.add_argument("--nb", type=int, default=60_000)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--dlfs", default=os.path.join(REPO, "build", "dlfs"))
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(REPO, "build", "python"))
    import dlfs  # noqa: E402

    os.makedirs(args.dir, exist_ok=True)
    paths = {k: os.path.join(args.dir, f"{k}.dlfs") for k in "abc"}
    if not all(os.path.exists(p) for p in paths.values()):
        pad = bytes(args.size - 8)
        with dlfs.Writer(paths["a"], force=True) as a, dlfs.Writer(paths["b"], force=True) as b, \
                dlfs.Writer(paths["c"], force=True) as c:
            for i in range(args.na + args.nb):
                sample = i.to_bytes(8, "little") + pad
                (a if i < args.na else b).add(f"s/{i:07d}", sample)
                c.add(f"s/{i:07d}", sample)
    share = args.na / (args.na + args.nb)
    common = ["--batch", str(args.batch), "--epochs", "3", "--buffered", "--cache-budget", "0",
              "--json"]
    runs = {"one volume": [args.dlfs, "bench", paths["c"], *common],
            # Like for like in I/O: a mixture of two volumes has two loaders,
            # so two I/O threads.
            "one, 2 I/O threads": [args.dlfs, "bench", paths["c"], "--io-threads", "2", *common],
            "mixture": [args.dlfs, "bench", paths["a"], paths["b"], "--weights",
                        f"{share},{1 - share}", *common]}
    rates = {k: [] for k in runs}
    for _ in range(args.reps):
        for name, cmd in runs.items():
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            epochs = json.loads(out)["epochs"]
            rates[name].append(statistics.median(e["samples_per_s"] for e in epochs[1:]))
    med = {k: statistics.median(v) for k, v in rates.items()}
    for k, v in med.items():
        print(f"{k:20s} {v:12.0f} samples/s (median of {args.reps}; runs "
              f"{[round(r) for r in rates[k]]})")
    print(f"mixture / one volume: {med['mixture'] / med['one volume']:.3f}")
    print(f"mixture / one volume with 2 I/O threads: "
          f"{med['mixture'] / med['one, 2 I/O threads']:.3f}")


if __name__ == "__main__":
    main()
