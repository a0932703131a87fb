#!/usr/bin/python3
"""Alternating cold runs of `dlfs bench` under mpirun: the defaults against
other options, side by side, with the page cache dropped before each run.

Prints each variant's median epoch time (the sum of the job's epochs), its
median per epoch, and the median of the per-pair ratios against the last
variant, which cancels the disk's drift between minutes better than a
ratio of medians. As root (it drops the page cache).

  bench/cache/paired_runs.py VOLUME                      # defaults vs --cache-budget 0
  REPS=20 NP=2 EPOCHS=3 bench/cache/paired_runs.py fm.dlfs
  VARIANTS='{"default": [], "holds": ["--cache-budget", "64M"], "off": ["--cache-budget", "0"]}' \\
      bench/cache/paired_runs.py fm.dlfs

Environment: DLFS (the binary, default build/dlfs), REPS (8), NP (2),
EPOCHS (3), VARIANTS (JSON: name -> extra arguments; "env:K=V" sets K for
the ranks).
"""
import json
import os
import statistics
import subprocess
import sys
import time

if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
    print(__doc__)
    sys.exit(0 if len(sys.argv) == 2 else 2)
volume = sys.argv[1]
binary = os.environ.get("DLFS", "build/dlfs")
reps = int(os.environ.get("REPS", "8"))
ranks = os.environ.get("NP", "2")
epochs = os.environ.get("EPOCHS", "3")
variants = json.loads(os.environ.get("VARIANTS", '{"default": [], "off": ["--cache-budget", "0"]}'))

runs = {name: [] for name in variants}
for _ in range(reps):
    for name, extra in variants.items():
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        envs = [a[4:] for a in extra if a.startswith("env:")]
        args = [a for a in extra if not a.startswith("env:")]
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", ranks,
               *sum((["-x", e] for e in envs), []), binary, "bench", volume,
               "--epochs", epochs, "--json", *args]
        env = dict(os.environ, **dict(e.split("=", 1) for e in envs))
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
        report = json.loads(out)
        runs[name].append((report["seconds"], [e["seconds"] for e in report["epochs"]],
                           report.get("cache_plan", "")))

base = list(variants)[-1]
for name, rs in runs.items():
    per_epoch = [statistics.median(r[1][k] for r in rs) for k in range(len(rs[0][1]))]
    line = (f"{name:10s} epochs {statistics.median(r[0] for r in rs):.4f} s  per epoch "
            + " ".join(f"{e:.4f}" for e in per_epoch))
    if name != base:
        ratios = sorted(a[0] / b[0] for a, b in zip(rs, runs[base]))
        line += (f"  vs {base}: median of pairs {statistics.median(ratios):.3f}"
                 f" (quartiles {ratios[len(ratios) // 4]:.3f}-{ratios[3 * len(ratios) // 4]:.3f})")
    print(line, "|", rs[0][2])
