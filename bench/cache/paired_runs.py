#!/usr/bin/python3
"""Alternating cold runs of `dlfs bench`: the defaults against other options
(or another build), side by side, with the page cache dropped before each
run; under mpirun, or as one process (NP=1).

Prints each variant's median epoch time (the sum of the job's epochs), its
median wall time (the whole launch), its median per epoch, and the median of
the per-pair ratios against the last variant, which cancels the disk's drift
between minutes better than a ratio of medians. As root (it drops the page
cache).

  bench/cache/paired_runs.py VOLUME                      # defaults vs --cache-budget 0
  REPS=20 NP=2 EPOCHS=3 bench/cache/paired_runs.py fm.dlfs
  VARIANTS='{"default": [], "holds": ["--cache-budget", "64M"], "off": ["--cache-budget", "0"]}' \\
      NP=1 EPOCHS=90 bench/cache/paired_runs.py fm.dlfs
  VARIANTS='{"base": ["bin:/work/wt-base/build/dlfs"], "default": []}' PFS=1 NP=1 \\
      bench/cache/paired_runs.py fm.dlfs                 # an older build, over pfs-emu

Environment: DLFS (the binary, default build/dlfs), REPS (8), NP (2; 1: no
mpirun), EPOCHS (3), VARIANTS (JSON: name -> extra arguments; "env:K=V" sets
K for the ranks, "bin:PATH" runs that dlfs binary instead), PFS (1: read the
volume through tools/pfs-emu, one view, 4 ms per request, 400 MB/s, mounted
afresh for every run).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
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

pfs = os.environ.get("PFS") == "1"


def mounted(path):
    """`path`, or its view through a fresh pfs-emu mount (PFS=1): (path, stop)."""
    if not pfs:
        return path, lambda: None
    backing = tempfile.mkdtemp(dir=os.path.dirname(os.path.abspath(path)))
    mnt = tempfile.mkdtemp()
    # A hard link (a copy across file systems): a symlink would lead the
    # kernel out of the mount, to the file itself.
    inside = os.path.join(backing, os.path.basename(path))
    try:
        os.link(path, inside)
    except OSError:
        shutil.copyfile(path, inside)
    proc = subprocess.Popen(["build/tools/pfs-emu/pfs-emu", "--nodes", "1", "--latency-us",
                             "4000", "--bandwidth-mbps", "400", backing, mnt],
                            stderr=subprocess.DEVNULL)
    while not os.path.ismount(mnt):
        if proc.poll() is not None:
            sys.exit("paired_runs: pfs-emu did not mount")
        time.sleep(0.05)

    def stop():
        # The kernel releases the run's files asynchronously: busy for a moment.
        for _ in range(50):
            if subprocess.run(["fusermount3", "-u", mnt], stderr=subprocess.DEVNULL).returncode == 0:
                break
            time.sleep(0.1)
        proc.wait()
        shutil.rmtree(backing)
        os.rmdir(mnt)
    return os.path.join(mnt, "n0", os.path.basename(path)), stop


runs = {name: [] for name in variants}
for _ in range(reps):
    for name, extra in variants.items():
        path, stop = mounted(volume)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        envs = [a[4:] for a in extra if a.startswith("env:")]
        run_binary = ([a[4:] for a in extra if a.startswith("bin:")] or [binary])[0]
        args = [a for a in extra if not a.startswith(("env:", "bin:"))]
        launch = (["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", ranks,
                   *sum((["-x", e] for e in envs), [])] if ranks != "1" else [])
        cmd = [*launch, run_binary, "bench", path, "--epochs", epochs, "--json", *args]
        env = dict(os.environ, **dict(e.split("=", 1) for e in envs))
        start = time.monotonic()
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
        wall = time.monotonic() - start
        stop()
        report = json.loads(out)
        plan = report.get("cache_plan") or report["epochs"][-1].get("cache", {}).get("plan", "")
        runs[name].append((report["seconds"], [e["seconds"] for e in report["epochs"]], plan,
                           wall))

base = list(variants)[-1]
for name, rs in runs.items():
    per_epoch = [statistics.median(r[1][k] for r in rs) for k in range(len(rs[0][1]))]
    line = (f"{name:10s} epochs {statistics.median(r[0] for r in rs):.4f} s  wall "
            f"{statistics.median(r[3] for r in rs):.3f} s  per epoch "
            + " ".join(f"{e:.4f}" for e in per_epoch[:10]))
    if name != base:
        ratios = sorted(a[0] / b[0] for a, b in zip(rs, runs[base]))
        line += (f"  vs {base}: median of pairs {statistics.median(ratios):.3f}"
                 f" (quartiles {ratios[len(ratios) // 4]:.3f}-{ratios[3 * len(ratios) // 4]:.3f})")
    print(line, "|", rs[0][2])
