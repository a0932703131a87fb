#!/usr/bin/python3
"""Tables (and a plot) from bench/lmdbio/run_lmdbio_bench.sh's JSON lines.

  bench/lmdbio/lmdbio_bench_report.py RESULTS.jsonl [--plot OUT.png]

Prints, per database: the median milliseconds per iteration of every mode at
every latency and node count with the speed-up over the baseline of the same
column; the requests and bytes the file system served per iteration (pfs-emu
runs; measured over the iterations only) and for the open; the modes that
are slower than the mode before them. Fails (exit 1) if any run's digest
differs from the baseline's for the same database and node count: every mode
must read the same bytes. With --plot, draws the speed-up over the baseline
against latency (at the most nodes) and against nodes (at the highest
latency), one panel per database and axis. Runs with rep 0 (warm-up) are
ignored.
"""
import argparse
import collections
import json
import os
import statistics
import sys

MODES = ["baseline", "lmm", "lmm-dm", "lmm-dio", "lmm-dio-prov", "lmm-dio-prov-coal",
         "lmm-dio-prov-coal-stag"]
# The mode each one is compared with: lmm-dm and lmm-dio both build on lmm.
BEFORE = {"lmm": "baseline", "lmm-dm": "lmm", "lmm-dio": "lmm", "lmm-dio-prov": "lmm-dio",
          "lmm-dio-prov-coal": "lmm-dio-prov", "lmm-dio-prov-coal-stag": "lmm-dio-prov-coal"}
SLOWER = 1.10  # "slower than the mode before it": by more than this factor


def load(path):
    runs = [json.loads(line) for line in open(path) if line.strip()]
    return [r for r in runs if r.get("rep", 1) > 0]


def median(rs, key):
    return statistics.median(key(r) for r in rs)


def fs_label(lat):
    return "local disk" if lat == 0 else f"{lat} ms"


def check_digests(by):
    bad = []
    digest = {}
    for (db, lat, nodes, mode), rs in by.items():
        for r in rs:
            digest.setdefault((db, nodes), collections.defaultdict(set))[mode].add(r["digest"])
    for (db, nodes), per_mode in sorted(digest.items()):
        base = per_mode.get("baseline", set())
        for mode, ds in per_mode.items():
            if len(base) != 1 or ds != base:
                bad.append(f"{db} nodes={nodes} {mode}")
    return bad


def report(runs):
    by = collections.defaultdict(list)
    for r in runs:
        by[(r["db"], r["latency_ms"], r["nodes"], r["mode"])].append(r)
    lats = sorted({r["latency_ms"] for r in runs})
    nodes = sorted({r["nodes"] for r in runs})
    modes = [m for m in MODES if any(r["mode"] == m for r in runs)]
    med = {k: median(rs, lambda r: r["ms_per_iter"]) for k, rs in by.items()}
    loads = [r["load1_before"] for r in runs if "load1_before" in r]
    if loads:
        print(f"1-minute load average before the runs: median {statistics.median(loads):.1f}, "
              f"max {max(loads):.1f} (2 cores: above ~2 the machine was busy)")
    for db in sorted({r["db"] for r in runs}):
        sample = next(r for r in runs if r["db"] == db)
        reps = max(len(rs) for k, rs in by.items() if k[0] == db)
        rpn = sample.get("ranks_per_node", 0)
        bw = sample.get("bandwidth_mbps", 0)
        print(f"\n### {db}: {sample['entries']:,} records, batch {sample['batch']}, "
              f"{sample['iters']} iterations per run, {rpn} ranks per node, median of {reps}\n")
        print(f"Milliseconds per iteration (speed-up over the baseline in the same column). "
              f"pfs-emu: the latency per request, {bw:g} MB/s shared.\n")
        cols = [(lat, n) for lat in lats for n in nodes]
        print("| mode | " + " | ".join(f"{fs_label(lat)}, {n} node{'s' if n > 1 else ''}"
                                       for lat, n in cols) + " |")
        print("|---|" + "---:|" * len(cols))
        for mode in modes:
            cells = []
            for lat, n in cols:
                t = med.get((db, lat, n, mode))
                base = med.get((db, lat, n, "baseline"))
                if t is None:
                    cells.append("–")
                elif mode == "baseline" or not base:
                    cells.append(f"{t:.2f}")
                else:
                    cells.append(f"{t:.2f} ({base / t:.1f}×)")
            print(f"| {mode} | " + " | ".join(cells) + " |")

        emu = [lat for lat in lats if lat > 0]
        if emu:
            lat = max(emu)
            print(f"\nWhat the file system served at {lat} ms (pfs-emu counters; medians): "
                  "requests and MB per iteration, and the open's requests (the whole run "
                  "minus the iterations) and time.\n")
            print("| mode | " + " | ".join(
                f"{n} node{'s' if n > 1 else ''}: req/iter | MB/iter | open req | open s"
                for n in nodes) + " |")
            print("|---|" + "---:|---:|---:|---:|" * len(nodes))
            for mode in modes:
                cells = []
                for n in nodes:
                    rs = [r for r in by.get((db, lat, n, mode), []) if "counters" in r]
                    if not rs:
                        cells.append("– | – | – | –")
                        continue
                    it = rs[0]["iters"]
                    req = median(rs, lambda r: r["counters"]["read_requests"] / it)
                    mb = median(rs, lambda r: r["counters"]["read_bytes"] / it / 1e6)
                    op = median(rs, lambda r: r["run_requests"] - r["counters"]["read_requests"])
                    os_ = median(rs, lambda r: r["setup_s_max"])
                    cells.append(f"{req:.1f} | {mb:.2f} | {op:.0f} | {os_:.2f}")
                print(f"| {mode} | " + " | ".join(cells) + " |")
            rs = by.get((db, lat, max(nodes), "baseline"), [])
            if rs:
                per_iter = median(rs, lambda r: r["record_bytes"] / r["iters"] / 1e6)
                print(f"\nThe records themselves: {per_iter:.2f} MB per iteration.")

        slower = []
        for lat, n in cols:
            for mode in modes:
                prev = BEFORE.get(mode)
                t, tp = med.get((db, lat, n, mode)), med.get((db, lat, n, prev))
                if t and tp and t > SLOWER * tp:
                    slower.append(f"{mode} {t:.2f} vs {prev} {tp:.2f} ({fs_label(lat)}, {n} nodes)")
        if slower:
            print(f"\nSlower than the mode before it by more than {SLOWER - 1:.0%}: " +
                  "; ".join(slower) + ".")
    return by, lats, nodes, modes, med


def plot(path, runs, lats, nodes, modes, med):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    dbs = sorted({r["db"] for r in runs})
    fig, axes = plt.subplots(len(dbs), 2, figsize=(11, 4.2 * len(dbs)), squeeze=False)
    styles = dict(zip(MODES, ["k--", "C0o-", "C1v-", "C2s-", "C3^-", "C4D-", "C5*-"]))
    for row, db in enumerate(dbs):
        ax_l, ax_n = axes[row]
        n_max, l_max = max(nodes), max(lats)
        for mode in modes:
            xs, ys = [], []
            for lat in lats:
                t, b = med.get((db, lat, n_max, mode)), med.get((db, lat, n_max, "baseline"))
                if t and b:
                    xs.append(lat)
                    ys.append(b / t)
            ax_l.plot(xs, ys, styles.get(mode, "-"), label=mode)
            xs, ys = [], []
            for n in nodes:
                t, b = med.get((db, l_max, n, mode)), med.get((db, l_max, n, "baseline"))
                if t and b:
                    xs.append(n)
                    ys.append(b / t)
            ax_n.plot(xs, ys, styles.get(mode, "-"), label=mode)
        ax_l.set_title(f"{db}: {n_max} fake nodes")
        ax_l.set_xlabel("latency per request, ms (0: local disk)")
        ax_l.set_xticks(lats)
        ax_n.set_title(f"{db}: {fs_label(l_max)} per request" + (" (pfs-emu)" if l_max else ""))
        ax_n.set_xlabel("fake nodes (2 ranks each)")
        ax_n.set_xticks(nodes)
        for ax in (ax_l, ax_n):
            ax.set_ylabel("speed-up over baseline")
            ax.axhline(1, color="grey", lw=0.8)
            ax.grid(alpha=0.3)
    axes[0][1].legend(fontsize=8, loc="upper left")
    fig.suptitle("LMDBIO modes: time per iteration, baseline / mode (medians)")
    fig.tight_layout()
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"\nplot: {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", default="/tmp/dlfs-lmdbio-bench/lmdbio_pfs.jsonl")
    ap.add_argument("--plot", help="write the speed-up plot here (PNG)")
    args = ap.parse_args()
    runs = load(args.results)
    if not runs:
        sys.exit(f"{args.results}: no runs")
    by, lats, nodes, modes, med = report(runs)
    if args.plot:
        plot(args.plot, runs, lats, nodes, modes, med)
    bad = check_digests(by)
    if bad:
        print("\nDIGEST MISMATCH (modes read different bytes): " + ", ".join(bad))
        return 1
    print("\nEvery run's digest equals the baseline's for the same database and node count.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
