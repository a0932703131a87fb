#!/usr/bin/python3
"""Reads the raw outputs of bench/io/run_io_bench.sh; prints one run or the summary.

    bench/io/io_bench_report.py line FILE KIND
    bench/io/io_bench_report.py summary RUNS_DIR SPEC REPS OUT_JSON [OUT_PNG]

KIND says how FILE is read:
  fio          fio --output-format=json: IOPS are samples/s, bw_bytes the MB/s
  json         {samples_per_s, mb_per_s, cpu_s_per_gb, ...} (dlfs bench --json,
               dlfs_file_reader, dlfs_lmdb_bench, torch_files.py,
               python_contenders.py)
  json-steady  dlfs bench --json with several epochs: epochs after the first only
SPEC has one "group|name|kind|command" line per contender; run k, repetition r
is RUNS_DIR/k.r.json. The summary prints medians (each column separately),
the read-path table with its ratios and targets (issue 11), where dlfs's time
went, writes everything (every run too) to OUT_JSON and plots samples/s per
contender with the range of the repetitions to OUT_PNG (matplotlib).
"""

import json
import math
import os
import statistics
import sys
import time

NAN = float("nan")
KEYS = ("samples_per_s", "mb_per_s", "cpu_s_per_gb", "device_mb_per_s", "ring_empty_frac",
        "in_flight", "verify_s")


def pipeline_of(p, seconds):
    return {"ring_empty_frac": p["ring_empty_seconds"] / seconds if seconds else NAN,
            "in_flight": p["mean_reads_in_flight"], "verify_s": p["verify_seconds"]}


def norm(path, kind):
    with open(path) as f:
        j = json.load(f)
    if kind == "fio":
        job = j["jobs"][0]
        r = job["read"]
        secs = job["job_runtime"] / 1e3
        cpu = (job["usr_cpu"] + job["sys_cpu"]) / 100 * secs
        return {"samples_per_s": r["iops"], "mb_per_s": r["bw_bytes"] / 1e6,
                "cpu_s_per_gb": cpu / (r["io_bytes"] / 1e9) if r["io_bytes"] else NAN,
                "device_mb_per_s": r["bw_bytes"] / 1e6}
    if kind == "json-steady":
        later = j["epochs"][1:] or j["epochs"]
        secs = sum(e["seconds"] for e in later)
        samples = sum(e["samples"] for e in later)
        gb = sum(e["mb_per_s"] * e["seconds"] for e in later) / 1e3
        cpu = sum(e["cpu_s_per_gb"] * e["mb_per_s"] * e["seconds"] / 1e3 for e in later)
        out = {"samples_per_s": samples / secs, "mb_per_s": gb * 1e3 / secs,
               "cpu_s_per_gb": cpu / gb if gb else NAN,
               "epochs": [{k: e[k] for k in ("samples_per_s", "mb_per_s", "cpu_s_per_gb")}
                          for e in j["epochs"]]}
        if all("pipeline" in e for e in later):
            out["ring_empty_frac"] = sum(e["pipeline"]["ring_empty_seconds"] for e in later) / secs
            out["in_flight"] = sum(e["pipeline"]["mean_reads_in_flight"] * e["seconds"]
                                   for e in later) / secs
            out["verify_s"] = sum(e["pipeline"]["verify_seconds"] for e in later)
        return out
    out = {k: j[k] for k in ("samples_per_s", "mb_per_s", "cpu_s_per_gb", "p50_batch_ms",
                             "p99_batch_ms", "engine", "samples", "files", "bytes",
                             "payload_bytes", "device_bytes", "io_uring_flags", "memory",
                             "first_epoch_samples_per_s") if k in j}
    if j.get("payload_bytes"):
        out["device_mb_per_s"] = j["mb_per_s"] * j["device_bytes"] / j["payload_bytes"]
    if "pipeline" in j:
        out.update(pipeline_of(j["pipeline"], j["seconds"]))
    return out


def line(path, kind):
    m = norm(path, kind)
    extra = ""
    if "in_flight" in m:
        extra = f"  ({m['in_flight']:.0f} in flight, rings empty {100 * m['ring_empty_frac']:.0f}%)"
    return (f"{m['samples_per_s']:10.0f} samples/s {m['mb_per_s']:8.1f} MB/s "
            f"{m['cpu_s_per_gb']:7.3f} CPU s/GB{extra}")


def median(values):
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else NAN


def plot(rows, reps, out_png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [("A", "A. ImageNet-like, ~110 KB samples"), ("B", "B. Fashion-MNIST, 784 B"),
              ("C", "C. ~100 KB samples: map-style and FUSE")]
    sizes = [sum(1 for r in rows if r["group"] == g) for g, _ in groups]
    fig, axes = plt.subplots(len(groups), 1, figsize=(10, 0.32 * sum(sizes) + 2.5),
                             gridspec_kw={"height_ratios": [max(s, 1) for s in sizes]})
    for ax, (g, title) in zip(axes, groups):
        rs = [r for r in rows if r["group"] == g]
        names = [r["name"] for r in rs]
        med = [r["median"]["samples_per_s"] for r in rs]
        lo = [m - min(p["samples_per_s"] for p in r["runs"]) for m, r in zip(med, rs)]
        hi = [max(p["samples_per_s"] for p in r["runs"]) - m for m, r in zip(med, rs)]
        # dlfs (C++ and mount) blue, dlfs from Python green, the device grey, peers red.
        colors = ["#1f77b4" if n.startswith("dlfs") or "dlfs mount" in n
                  else "#7f7f7f" if n.startswith("fio")
                  else "#2ca02c" if ("Dataset" in n and "Folder" not in n) else "#d62728"
                  for n in names]
        y = range(len(rs))
        ax.barh(list(y), med, xerr=[lo, hi], color=colors, capsize=3)
        ax.set_yticks(list(y))
        ax.set_yticklabels(names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_title(title, fontsize=10, loc="left")
        ax.grid(axis="x", which="both", alpha=0.3)
    axes[-1].set_xlabel(f"samples/s (median of {reps}, bars: range), cold page cache, log scale")
    fig.tight_layout()
    fig.savefig(out_png + ".tmp.png", dpi=110)
    os.replace(out_png + ".tmp.png", out_png)


def summary(runs, spec, reps, out_path, out_png=None):
    rows = []
    with open(spec) as f:
        lines = f.read().splitlines()
    for idx, text in enumerate(lines):
        group, name, kind, cmd = text.split("|", 3)
        per_rep = [norm(f"{runs}/{idx}.{r}.json", kind) for r in range(1, reps + 1)]
        med = {k: median(p.get(k) for p in per_rep) for k in KEYS}
        rows.append({"group": group, "name": name, "kind": kind, "command": cmd,
                     "median": med, "runs": per_rep})

    def get(group, name):
        for r in rows:
            if r["group"] == group and r["name"] == name:
                return r["median"]
        return None

    def ratio(a, b, key="samples_per_s"):
        return a[key] / b[key] if a and b and b[key] else NAN

    def val(m, key="samples_per_s"):
        return m[key] if m else NAN

    a_fio, a_dev = get("A", "fio, mean sample size (QD 64)"), get("A", "dlfs, device")
    a_dev23 = get("A", "dlfs, device, epochs 2-3 of 3")
    a_tier, a_tier23 = get("A", "dlfs, node cache"), get("A", "dlfs, node cache, epochs 2-3 of 3")
    a_f2 = get("A", "files, 2 threads")
    b_fio, b_dev = get("B", "fio 4 KiB (QD 64, batched submit)"), get("B", "dlfs, device")
    b_tier23 = get("B", "dlfs, node cache, epochs 2-3 of 3")
    b_ld = get("B", "LoaderDataset, node cache, epochs 2-3 of 3")
    c_fio, c_dev, c_tier = get("C", "fio 100 KiB (QD 64)"), get("C", "dlfs, device"), \
        get("C", "dlfs, node cache")
    c_vd1, c_vdb = get("C", "VolumeDataset per sample, 2 workers"), \
        get("C", "VolumeDataset batched, 2 workers")
    c_vdb0 = get("C", "VolumeDataset batched, 0 workers")
    c_df, c_dfm = get("C", "DatasetFolder over files, 2 workers"), \
        get("C", "DatasetFolder over dlfs mount, 2 workers")
    c_ipc = get("C", "DataLoader IPC ceiling (no storage), 2 workers")
    c_f2, c_fm2 = get("C", "files, 2 threads"), get("C", "files through dlfs mount, 2 threads")
    cpu_ratio = (a_f2["cpu_s_per_gb"] / a_dev["cpu_s_per_gb"]
                 if a_f2 and a_dev and a_dev["cpu_s_per_gb"] else NAN)
    # (measure, value, goal, unit): the read-path table of issue 11.
    table = [
        ("C: dlfs (device) / fio 100 KiB randread, QD 64", ratio(c_dev, c_fio), 0.95, "x"),
        ("A: dlfs (device) / fio, one epoch", ratio(a_dev, a_fio), 0.95, "x"),
        ("A: dlfs (device) / fio, epochs 2-3", ratio(a_dev23, a_fio), None, "x"),
        ("A: dlfs (device) / files, 2 threads", ratio(a_dev, a_f2), 3.0, "x"),
        ("A: dlfs CPU s/GB (device, verify on)", val(a_dev, "cpu_s_per_gb"), -0.1, "s/GB"),
        ("A: files CPU s/GB / dlfs CPU s/GB", cpu_ratio, 8.0, "x"),
        ("B: dlfs (device) 784 B / fio 4 KiB (batched submit)", ratio(b_dev, b_fio), 0.9, "x"),
        ("C: VolumeDataset batched / DatasetFolder, 2 workers each", ratio(c_vdb, c_df), 1.5, "x"),
        ("C: VolumeDataset per sample / DatasetFolder, 2 workers each", ratio(c_vd1, c_df), None,
         "x"),
        ("C: DatasetFolder over dlfs mount / over files, 2 workers", ratio(c_dfm, c_df), 0.7, "x"),
        ("B: C++ loader, node cache, epochs 2-3 (samples/s)", val(b_tier23), 1e6, "/s"),
        ("B: LoaderDataset, node cache, epochs 2-3 (samples/s)", val(b_ld), 5e5, "/s"),
    ]
    info = [
        ("A: dlfs (node cache) / fio, one epoch", ratio(a_tier, a_fio)),
        ("A: dlfs (node cache) / fio, epochs 2-3", ratio(a_tier23, a_fio)),
        ("A: dlfs (node cache) / files, 2 threads", ratio(a_tier, a_f2)),
        ("A: dlfs uring / dlfs pread (device)", ratio(a_dev, get("A", "dlfs pread, device"))),
        ("A: dlfs (device) / lmdb, 2 threads", ratio(a_dev, get("A", "lmdb, 2 threads"))),
        ("A: dlfs (device) / files, 8 threads", ratio(a_dev, get("A", "files, 8 threads"))),
        ("B: dlfs (device) / files, 2 threads", ratio(b_dev, get("B", "files, 2 threads"))),
        ("C: dlfs (node cache) / fio 100 KiB", ratio(c_tier, c_fio)),
        ("C: VolumeDataset batched, 0 workers / DatasetFolder, 2 workers", ratio(c_vdb0, c_df)),
        ("C: DataLoader IPC ceiling / DatasetFolder, 2 workers", ratio(c_ipc, c_df)),
        ("C: files through dlfs mount / files, 2 threads", ratio(c_fm2, c_f2)),
    ]

    print(f"\nmedians of {reps} runs, page cache dropped before each (1 MB = 10^6 B)")
    for group, title in (("A", "A. ImageNet-like, mean ~110 KB"),
                         ("B", "B. Fashion-MNIST: 70,000 samples of 784 B"),
                         ("C", "C. ~100 KB samples: map-style and FUSE")):
        print(f"\n{title}")
        print(f"  {'contender':50s} {'samples/s':>10s} {'range':>19s} {'MB/s':>8s} "
              f"{'CPU s/GB':>9s} {'in flight':>9s} {'empty':>6s}")
        for r in rows:
            if r["group"] != group:
                continue
            m = r["median"]
            runs_sps = [p["samples_per_s"] for p in r["runs"]]
            rng = f"{min(runs_sps):.0f}-{max(runs_sps):.0f}"
            inf = "" if math.isnan(m["in_flight"]) else f"{m['in_flight']:.1f}"
            emp = "" if math.isnan(m["ring_empty_frac"]) else f"{100 * m['ring_empty_frac']:.0f}%"
            print(f"  {r['name']:50s} {m['samples_per_s']:10.0f} {rng:>19s} {m['mb_per_s']:8.1f} "
                  f"{m['cpu_s_per_gb']:9.3f} {inf:>9s} {emp:>6s}")

    def verdict(value, goal):
        if goal is None:
            return ""
        if math.isnan(value):
            return "n/a"
        met = value <= -goal if goal < 0 else value >= goal
        return "met" if met else "MISSED"

    print("\nread-path table (issue 11)")
    for text, value, goal, unit in table:
        g = "" if goal is None else (f"(goal <= {-goal:g} {unit})" if goal < 0
                                     else f"(goal >= {goal:g}{' ' + unit if unit != 'x' else 'x'})")
        shown = f"{value:,.0f}" if unit == "/s" else f"{value:.3f}" if unit == "s/GB" \
            else f"{value:.2f}x"
        print(f"  {text:62s} {shown:>12s}  {g:22s} {verdict(value, goal)}")
    print("other ratios")
    for text, value in info:
        print(f"  {text:62s} {value:11.2f}x")

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
        "table": [{"measure": t, "value": v, "goal": (None if g is None else abs(g)),
                   "at_most": g is not None and g < 0, "met": verdict(v, g) == "met"}
                  for t, v, g, _ in table],
        "ratios": [{"what": t, "ratio": v} for t, v in info],
    }
    with open(out_path + ".tmp", "w") as f:
        json.dump(clean(doc), f, indent=2)
    os.replace(out_path + ".tmp", out_path)
    print(f"\nJSON: {out_path}")
    if out_png:
        plot(rows, reps, out_png)
        print(f"plot: {out_png}")


def main():
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(__doc__)
    elif len(sys.argv) == 4 and sys.argv[1] == "line":
        print(line(sys.argv[2], sys.argv[3]))
    elif len(sys.argv) in (6, 7) and sys.argv[1] == "summary":
        summary(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5],
                sys.argv[6] if len(sys.argv) == 7 else None)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
