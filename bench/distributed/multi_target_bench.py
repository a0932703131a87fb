#!/usr/bin/python3
"""Multi-target volumes (issue 6): one cold-cache epoch of the same data set
read through `dlfs bench` from a volume of 1, 2 and 4 targets.

    sudo bench/distributed/multi_target_bench.py    (root: it drops the page cache)

The ImageNet-like data set (20,000 files, mean ~110 KB,
bench/data/make_imagenet_like.py; made if missing) is packed once into
$DLFS_BENCH_DIR/multi-target/t{1,2,4}.dlfs (targets 1.. as t<N>.dlfs.t1, ...)
and reused. Each repetition reads every volume once with O_DIRECT first (so a
host that caches the VM's virtual disk treats all volumes alike), then runs
`dlfs bench VOL --engine uring --queue-depth 64 --batch 256 --drop-cache
--json` once per volume, the order rotating between repetitions. The table
shows medians of $REPS runs and the ratio to the 1-target volume.

What to expect: the target files are spread over devices only if their paths
are. Here all of them are files in one directory, so every target lies on the
same disk and no speed-up is expected; the point of the run is that splitting
a volume costs nothing on one device (one ring reads all targets, reads are
never merged across targets). On N devices the same run shows what the split
gains.

A run during which other processes used QUIET_CPU_S (0.5) CPU seconds or more
is thrown away and repeated after 30 s (the machine may be shared).

Environment: DLFS_BENCH_DIR (/tmp/dlfs-bench), DLFS_BUILD_DIR (<repo>/build),
REPS (3), TARGETS ("1 2 4"), HOST_WARMUP (1), QUIET_CPU_S (0.5), MAX_ATTEMPTS
(20), RESULTS_JSON ($DLFS_BENCH_DIR/multi_target_bench.json).
"""
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]  # this file is in bench/<benchmark>/
BENCH_DIR = pathlib.Path(os.environ.get("DLFS_BENCH_DIR", "/tmp/dlfs-bench"))
BUILD = pathlib.Path(os.environ.get("DLFS_BUILD_DIR", REPO / "build"))
DLFS = BUILD / "dlfs"
REPS = int(os.environ.get("REPS", "3"))
TARGETS = [int(t) for t in os.environ.get("TARGETS", "1 2 4").split()]
HOST_WARMUP = os.environ.get("HOST_WARMUP", "1") != "0"
QUIET_CPU_S = float(os.environ.get("QUIET_CPU_S", "0.5"))
MAX_ATTEMPTS = int(os.environ.get("MAX_ATTEMPTS", "20"))
RESULTS = pathlib.Path(os.environ.get("RESULTS_JSON", BENCH_DIR / "multi_target_bench.json"))
SOURCE = BENCH_DIR / "imagenet-like-20000f-100c-110kb-seed0"
WORK = BENCH_DIR / "multi-target"
BENCH_ARGS = ["--engine", "uring", "--queue-depth", "64", "--batch", "256", "--drop-cache",
              "--json"]


def die(msg):
    sys.exit(f"multi_target_bench: {msg}")


def run(*args, **kw):
    return subprocess.run([str(a) for a in args], check=True, **kw)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def volume(n):
    return WORK / f"t{n}.dlfs"


def target_files(n):
    v = volume(n)
    return [v] + [pathlib.Path(f"{v}.t{t}") for t in range(1, n)]


def prepare():
    if os.geteuid() != 0:
        die("run as root: every timed run starts from a dropped page cache")
    if not DLFS.exists():
        die(f"{DLFS} not found; build first (ninja -C {BUILD})")
    if not SOURCE.is_dir():
        run(sys.executable, REPO / "bench" / "data" / "make_imagenet_like.py", SOURCE)
    WORK.mkdir(parents=True, exist_ok=True)
    for n in TARGETS:
        if all(p.exists() for p in target_files(n)):
            continue
        print(f"packing {SOURCE.name} into {n} target(s) ...", flush=True)
        run(DLFS, "pack", SOURCE, "-o", volume(n), "--targets", n, "--force", "-q")


def busy_cpu_seconds():
    """CPU seconds spent by the whole machine (all CPUs, not idle or iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def bench_once(n):
    """One run; retried while something else used the CPU during it (this
    machine is shared): a run is kept only if other processes used less than
    QUIET_CPU_S CPU seconds (busy CPU time minus dlfs' own user+sys)."""
    for attempt in range(MAX_ATTEMPTS):
        drop_caches()
        before = busy_cpu_seconds()
        out = run(DLFS, "bench", volume(n), *BENCH_ARGS, capture_output=True).stdout
        r = json.loads(out)
        r["other_cpu_s"] = max(0.0, busy_cpu_seconds() - before - r["cpu_seconds"])
        if r["other_cpu_s"] < QUIET_CPU_S:
            return r
        print(f"  {n} target(s): discarded, other processes used {r['other_cpu_s']:.1f} CPU s "
              f"during the run; waiting for a quiet machine", flush=True)
        time.sleep(30)
    die(f"no quiet run in {MAX_ATTEMPTS} attempts; is something else running?")


def main():
    # Settings come from the environment only: any argument gets the help, not a 2 GB run.
    if len(sys.argv) > 1:
        print(__doc__)
        sys.exit(0 if sys.argv[1:] in (["-h"], ["--help"]) else 2)
    prepare()
    infos = {n: json.loads(run(DLFS, "info", volume(n), "--json", capture_output=True).stdout)
             for n in TARGETS}
    runs = {n: [] for n in TARGETS}
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    for rep in range(REPS):
        if HOST_WARMUP:
            for n in TARGETS:
                for p in target_files(n):
                    run("dd", f"if={p}", "of=/dev/null", "bs=4M", "iflag=direct", "status=none")
        order = TARGETS[rep % len(TARGETS):] + TARGETS[:rep % len(TARGETS)]
        for n in order:
            r = bench_once(n)
            runs[n].append(r)
            print(f"rep {rep + 1}/{REPS}: {n} target(s): {r['samples_per_s']:,.0f} samples/s, "
                  f"{r['mb_per_s']:,.0f} MB/s", flush=True)

    def med(n, key):
        return statistics.median(r[key] for r in runs[n])

    base = med(TARGETS[0], "samples_per_s")
    rows = []
    print()
    print("Same data set, one cold-cache epoch per run (dlfs bench "
          + " ".join(BENCH_ARGS[:-1]) + f"), median of {REPS}.")
    print("All target files are on ONE virtio disk here: no gain is expected from more")
    print("targets; the point is that a split volume is not slower.\n")
    print("| targets | bytes per target (MB) | samples/s | MB/s | CPU s/GB | range of samples/s "
          "| × 1 target |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for n in TARGETS:
        sps = [r["samples_per_s"] for r in runs[n]]
        per_target = "/".join(f"{d['bytes'] / 1e6:,.0f}" for d in infos[n]["target_details"])
        row = {
            "targets": n,
            "bytes_per_target": [d["bytes"] for d in infos[n]["target_details"]],
            "samples_per_s": med(n, "samples_per_s"),
            "mb_per_s": med(n, "mb_per_s"),
            "cpu_s_per_gb": med(n, "cpu_s_per_gb"),
            "min_samples_per_s": min(sps),
            "max_samples_per_s": max(sps),
            "ratio_vs_1": med(n, "samples_per_s") / base,
        }
        rows.append(row)
        print(f"| {n} | {per_target} | {row['samples_per_s']:,.0f} | {row['mb_per_s']:,.0f} | "
              f"{row['cpu_s_per_gb']:.3f} | {min(sps):,.0f}–{max(sps):,.0f} | "
              f"{row['ratio_vs_1']:.2f} |")
    RESULTS.write_text(json.dumps({
        "started": started,
        "machine": {"nproc": os.cpu_count(), "kernel": platform.release()},
        "source": str(SOURCE),
        "bench_args": BENCH_ARGS,
        "reps": REPS,
        "rows": rows,
        "runs": {str(n): runs[n] for n in TARGETS},
    }, indent=2))
    print(f"\nall runs: {RESULTS}")


if __name__ == "__main__":
    main()
