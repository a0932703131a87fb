#!/usr/bin/python3
"""Tables from bench/run_lmdbio_bench.sh's JSON lines: median ms per
iteration per mode and rank count, the speedup over the baseline at the same
rank count, and CPU seconds / context switches. Fails if any run's digest
differs from the baseline's for the same database and rank count (the modes
must read the same bytes)."""
import collections
import json
import statistics
import sys

MODES = ["baseline", "lmm", "lmm-dm", "lmm-dio", "lmm-dio-prov", "lmm-dio-prov-coal",
         "lmm-dio-prov-coal-stag", "lmm-dio-prov-coal-stag@direct"]


def main(path):
    runs = [json.loads(line) for line in open(path) if line.strip()]
    by = collections.defaultdict(list)
    for r in runs:
        by[(r["db"], r["ranks"], r["mode"])].append(r)
    bad = []
    for (db, np, mode), rs in by.items():
        base = by.get((db, np, "baseline"))
        if base and any(r["digest"] != base[0]["digest"] for r in rs):
            bad.append(f"{db} np={np} {mode}")
    for db in sorted({r["db"] for r in runs}):
        nps = sorted({r["ranks"] for r in runs if r["db"] == db})
        sample = next(r for r in runs if r["db"] == db)
        print(f"\n### {db}: {sample['entries']} records, batch {sample['batch']}, "
              f"{sample['iters']} iterations per run, median of "
              f"{len(by[(db, nps[0], 'baseline')])}\n")
        print("| mode | " + " | ".join(f"np={n} ms/iter (× baseline)" for n in nps) + " |")
        print("|---|" + "---:|" * len(nps))
        med = {}
        for mode in MODES:
            cells = []
            for n in nps:
                rs = by.get((db, n, mode), [])
                if not rs:
                    cells.append("–")
                    continue
                med[(n, mode)] = statistics.median(r["ms_per_iter"] for r in rs)
                base = med.get((n, "baseline"))
                ratio = f" ({base / med[(n, mode)]:.2f}×)" if base and mode != "baseline" else ""
                cells.append(f"{med[(n, mode)]:.1f}{ratio}")
            print(f"| {mode} | " + " | ".join(cells) + " |")
        n = nps[-1]
        print(f"\nAt np={n}: CPU seconds (user+sys, all ranks) and context switches "
              "(voluntary / involuntary), medians:\n")
        print("| mode | CPU s | voluntary | involuntary | bytes read or copied / delivered |")
        print("|---|---:|---:|---:|---:|")
        for mode in MODES:
            rs = by.get((db, n, mode), [])
            if not rs:
                continue
            cpu = statistics.median(r["user_s"] + r["sys_s"] for r in rs)
            vol = statistics.median(r["voluntary_switches"] for r in rs)
            inv = statistics.median(r["involuntary_switches"] for r in rs)
            amp = statistics.median(r["read_bytes"] / max(r["record_bytes"], 1) for r in rs)
            print(f"| {mode} | {cpu:.2f} | {vol:.0f} | {inv:.0f} | {amp:.2f} |")
    if bad:
        print("\nDIGEST MISMATCH (modes read different bytes): " + ", ".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/dlfs-bench/lmdbio_bench.jsonl"))
