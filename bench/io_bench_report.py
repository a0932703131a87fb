#!/usr/bin/python3
"""Reads the raw outputs of bench/run_io_bench.sh; prints one run or the summary.

    io_bench_report.py line FILE KIND
    io_bench_report.py summary RUNS_DIR SPEC REPS OUT_JSON

KIND says how FILE is read:
  fio          fio --output-format=json: IOPS are samples/s, bw_bytes the MB/s
  json         {samples_per_s, mb_per_s, cpu_s_per_gb, ...} (dlfs bench --json,
               dlfs_file_reader, dlfs_lmdb_bench, torch_files.py)
  json-warm    the same (a run whose caller kept inodes cached)
  json-steady  dlfs bench --json with several epochs: epochs after the first only
SPEC has one "group|name|kind|command" line per contender; run k, repetition r
is RUNS_DIR/k.r.json. The summary prints medians (each column separately),
ratios and the targets, and writes everything (every run too) to OUT_JSON.
"""

import json
import math
import os
import statistics
import sys
import time

NAN = float("nan")


def norm(path, kind):
    with open(path) as f:
        j = json.load(f)
    if kind == "fio":
        job = j["jobs"][0]
        r = job["read"]
        secs = job["job_runtime"] / 1e3
        cpu = (job["usr_cpu"] + job["sys_cpu"]) / 100 * secs
        pct = r["clat_ns"].get("percentile", {})
        return {"samples_per_s": r["iops"], "mb_per_s": r["bw_bytes"] / 1e6,
                "cpu_s_per_gb": cpu / (r["io_bytes"] / 1e9) if r["io_bytes"] else NAN,
                "device_mb_per_s": r["bw_bytes"] / 1e6,
                "p50_ms": pct.get("50.000000", 0) / 1e6, "p99_ms": pct.get("99.000000", 0) / 1e6}
    if kind == "json-steady":
        later = j["epochs"][1:] or j["epochs"]
        secs = sum(e["seconds"] for e in later)
        samples = sum(e["samples"] for e in later)
        gb = sum(e["mb_per_s"] * e["seconds"] for e in later) / 1e3
        cpu = sum(e["cpu_s_per_gb"] * e["mb_per_s"] * e["seconds"] / 1e3 for e in later)
        return {"samples_per_s": samples / secs, "mb_per_s": gb * 1e3 / secs,
                "cpu_s_per_gb": cpu / gb if gb else NAN,
                "epochs": [{k: e[k] for k in ("samples_per_s", "mb_per_s", "cpu_s_per_gb")}
                           for e in j["epochs"]]}
    out = {k: j[k] for k in ("samples_per_s", "mb_per_s", "cpu_s_per_gb", "p50_batch_ms",
                             "p99_batch_ms", "engine", "samples", "files", "bytes",
                             "payload_bytes", "device_bytes") if k in j}
    if j.get("payload_bytes"):
        out["device_mb_per_s"] = j["mb_per_s"] * j["device_bytes"] / j["payload_bytes"]
    return out


def line(path, kind):
    m = norm(path, kind)
    dev = f"  (device {m['device_mb_per_s']:.0f} MB/s)" if "device_mb_per_s" in m and kind != "fio" else ""
    return (f"{m['samples_per_s']:9.0f} samples/s {m['mb_per_s']:8.1f} MB/s "
            f"{m['cpu_s_per_gb']:7.3f} CPU s/GB{dev}")


def median(values):
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else NAN


def summary(runs, spec, reps, out_path):
    rows = []
    with open(spec) as f:
        lines = f.read().splitlines()
    for idx, text in enumerate(lines):
        group, name, kind, cmd = text.split("|", 3)
        per_rep = [norm(f"{runs}/{idx}.{r}.json", kind) for r in range(1, reps + 1)]
        med = {k: median(p.get(k) for p in per_rep)
               for k in ("samples_per_s", "mb_per_s", "cpu_s_per_gb", "device_mb_per_s")}
        rows.append({"group": group, "name": name, "kind": kind, "command": cmd,
                     "median": med, "runs": per_rep})

    def get(group, name):
        for r in rows:
            if r["group"] == group and r["name"] == name:
                return r["median"]
        return None

    def ratio(a, b, key="samples_per_s"):
        return a[key] / b[key] if a and b and b[key] else NAN

    uring, fio = get("A", "dlfs uring"), get("A", "fio limit")
    f2, f8 = get("A", "files 2 threads"), get("A", "files 8 threads")
    fm2 = get("B", "files 2 threads")
    fm_co = get("B", "dlfs uring, coalescing (default gap)")
    fm_nc = get("B", "dlfs uring, no coalescing")
    cpu_ratio = f2["cpu_s_per_gb"] / uring["cpu_s_per_gb"] if f2 and uring and uring["cpu_s_per_gb"] else NAN
    targets = [
        ("A: dlfs uring >= 0.9x fio limit (samples/s)", ratio(uring, fio), 0.9),
        ("A: dlfs uring >= 2.5x files, 2 threads (samples/s)", ratio(uring, f2), 2.5),
        ("A: dlfs CPU s/GB <= 1/5 of files, 2 threads (files / dlfs)", cpu_ratio, 5.0),
        ("B: dlfs, coalescing (default gap) >= 20x files, 2 threads", ratio(fm_co, fm2), 20.0),
        ("B: dlfs, no coalescing >= 20x files, 2 threads", ratio(fm_nc, fm2), 20.0),
    ]
    info = [
        ("A: dlfs uring / files, 8 threads", ratio(uring, f8)),
        ("A: dlfs uring / torch DataLoader, 2 workers", ratio(uring, get("A", "torch DataLoader 2 workers"))),
        ("A: dlfs uring / lmdb, 2 threads", ratio(uring, get("A", "lmdb 2 threads"))),
        ("A: dlfs uring / dlfs pread", ratio(uring, get("A", "dlfs pread"))),
        ("A: files 8 threads / files 2 threads", ratio(f8, f2)),
        ("B: dlfs, default gap / files, 8 threads", ratio(fm_co, get("B", "files 8 threads"))),
        ("B: dlfs, no coalescing / fio 4 KiB", ratio(fm_nc, get("B", "fio 4 KiB limit"))),
    ]

    print(f"\nmedians of {reps} runs, guest page cache dropped before each (1 MB = 10^6 B)")
    for group, title, ref_name, ref in (
            ("A", "A. ImageNet-like: 20,000 files, mean 110 KB", "x dlfs uring", uring),
            ("B", "B. Fashion-MNIST: 70,000 samples of 784 B", "x files 2 thr", fm2)):
        print(f"\n{title}")
        print(f"  {'contender':44s} {'samples/s':>10s} {'MB/s':>8s} {'CPU s/GB':>9s} "
              f"{'device MB/s':>11s} {ref_name:>14s}")
        for r in rows:
            if r["group"] != group:
                continue
            m = r["median"]
            dev = "" if math.isnan(m["device_mb_per_s"]) else f"{m['device_mb_per_s']:.0f}"
            print(f"  {r['name']:44s} {m['samples_per_s']:10.0f} {m['mb_per_s']:8.1f} "
                  f"{m['cpu_s_per_gb']:9.3f} {dev:>11s} {ratio(m, ref):14.2f}")
    print("\ntargets")
    for text, value, goal in targets:
        verdict = "met" if value >= goal else "MISSED"  # NaN compares false: missed
        print(f"  {text:62s} {value:7.2f}x  (goal {goal:g}x)  {verdict}")
    print("other ratios")
    for text, value in info:
        print(f"  {text:62s} {value:7.2f}x")

    def clean(x):  # JSON has no NaN
        if isinstance(x, float) and math.isnan(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x

    doc = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"nproc": os.cpu_count(), "kernel": os.uname().release},
        "reps": reps,
        "contenders": rows,
        "targets": [{"target": t, "ratio": v, "goal": g, "met": v >= g} for t, v, g in targets],
        "ratios": [{"what": t, "ratio": v} for t, v in info],
    }
    with open(out_path + ".tmp", "w") as f:
        json.dump(clean(doc), f, indent=2)
    os.replace(out_path + ".tmp", out_path)
    print(f"\nJSON: {out_path}")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "line":
        print(line(sys.argv[2], sys.argv[3]))
    elif len(sys.argv) == 6 and sys.argv[1] == "summary":
        summary(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
