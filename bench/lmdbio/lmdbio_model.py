#!/usr/bin/python3
"""The LMDBIO scaling model of docs/lmdbio.md: time per iteration of each mode
as a function of ranks per node R, nodes N, request latency L, shared
bandwidth W, record size s and batch B, calibrated on the pfs-emu runs of
bench/lmdbio/run_lmdbio_bench.sh, then used to predict the paper's setting.

  bench/lmdbio/lmdbio_model.py [RESULTS.jsonl]

For each mode the model counts, from how the mode reads (docs/lmdbio.md),
  Q  requests on the critical path of one iteration (each waits L),
  V  bytes the file system serves per iteration (all nodes, shared link W),
  S  cursor steps on the critical path of one iteration (CPU, g per step),
and predicts
  t = a * L * Q + c * V / W + g * S + d_mode
where a and c are shared by all modes (1 if the counts were exact and
latency and transfer never overlapped), g is measured (the baseline's cursor
step on the local disk) and d_mode is each mode's fixed cost per iteration
(collectives, copies, CPU of this machine). a, c and d_mode are fitted, by
least squares on relative errors with non-negative parameters, to the median
time per iteration of every mode at every latency > 0 and node count. The
script prints the counts against the measured ones, the fit and its error
per mode, and predictions for the paper's setting.
"""
import collections
import itertools
import json
import math
import statistics
import sys

import numpy as np

MODES = ["baseline", "lmm", "lmm-dm", "lmm-dio", "lmm-dio-prov", "lmm-dio-prov-coal",
         "lmm-dio-prov-coal-stag"]
PAGE = 4096
HEADER = 16           # LMDB overflow page header
READ_AROUND = 128 << 10   # kernel read-around / readahead window (FUSE's and Lustre's default)
MAX_READ = 1 << 20    # the readers' largest request (map_window_reader.cc)
IN_FLIGHT = 16        # requests in flight per reader (pread engine threads)
COALESCE = 4 << 20    # coalesce_bytes: bytes per reader per read step
MAX_COALESCE = 64


def keys_per_leaf(key_bytes=20):
    """Records per LMDB leaf page with overflow values: node header 8, key,
    8-byte page number, 2-byte pointer; pages about full (sequential puts)."""
    return (PAGE - 16) // (8 + key_bytes + 8 + 2)


def counts(mode, B, N, R, s, readers=2, iters=None, K=None):
    """(Q, V, S) per iteration for one mode; see the module docstring."""
    K = K or keys_per_leaf()
    sigma = math.ceil((s + HEADER) / PAGE) * PAGE  # file bytes per record (overflow pages)
    b = B / (N * R)            # records per rank
    w = B / N                  # records per node
    rho = min(readers, R)      # readers per node (lmm-dm and later)
    leaf_pages = B / K + 1     # leaf pages one batch spans
    # Leaf pages a node's cursor needs and did not touch the iteration before.
    new_leaves = min(1 + w / K, B / K)
    if mode == "baseline":
        # Every rank walks the whole batch through the map; every leaf fault
        # pulls in the read-around window (mostly other nodes' records), and
        # each rank faults its own records a window at a time, one after
        # another. A node's page cache holds at most the batch's span.
        other_leaves = (B - w) / K + 1  # leaf faults outside the node's own records
        node_bytes = min(B * sigma, other_leaves * READ_AROUND + w * sigma + R * READ_AROUND / 2)
        return leaf_pages + math.ceil(b * sigma / READ_AROUND), N * node_bytes, B
    if mode == "lmm":
        # One reader walks the batch (one 4 KiB leaf fault after another: no
        # read-around), then asks for its node's records at once (WILLNEED).
        return leaf_pages + 1, B * sigma + N * leaf_pages * PAGE, B
    if mode == "lmm-dm":
        # The cursor passes through all readers of the job in turn; a reader
        # whose node lacks the leaf page waits for it unless its speculative
        # prefetch (the previous fetch shifted by the stride) covered it,
        # which it does when one fetch spans a leaf's records.
        fetch = w / rho
        miss = max(0.0, 1 - fetch / K)
        return N * new_leaves * miss + 1, B * sigma + N * new_leaves * PAGE, B
    # Explicit reads of the record map's runs: each node reads its records'
    # pages once; a step's reads are in flight together.
    node_step = w * sigma
    if mode in ("lmm-dio", "lmm-dio-prov"):
        rounds = math.ceil(node_step / rho / MAX_READ / IN_FLIGHT)
        return rounds, B * sigma, 0
    # Iterations per read step, as map_window_reader.cc computes it.
    F = min(MAX_COALESCE, max(1, math.ceil(COALESCE / (s * w / rho))))
    if iters:
        F = min(F, iters)
    rounds = math.ceil(F * node_step / rho / MAX_READ / IN_FLIGHT)
    if mode == "lmm-dio-prov-coal":
        return rounds / F, B * sigma, 0
    if mode == "lmm-dio-prov-coal-stag":
        # Turns: a group reads half its bytes, passes the turn, reads the
        # rest: two request rounds per step.
        return (rounds + 1) / F, B * sigma, 0
    raise ValueError(mode)


def load(path):
    runs = [json.loads(line) for line in open(path) if line.strip()]
    return [r for r in runs if r.get("rep", 1) > 0]


def mean_value_bytes(r):
    return r["record_bytes"] / sum(p["records"] for p in r["per_rank"])


def nnls(A, y):
    """Non-negative least squares for a few columns: the best solution over
    the subsets of columns whose unconstrained fit is non-negative."""
    best = (np.inf, np.zeros(A.shape[1]))
    for k in range(1, A.shape[1] + 1):
        for cols in itertools.combinations(range(A.shape[1]), k):
            x, *_ = np.linalg.lstsq(A[:, cols], y, rcond=None)
            if (x < 0).any():
                continue
            full = np.zeros(A.shape[1])
            full[list(cols)] = x
            err = float(np.sum((A @ full - y) ** 2))
            if err < best[0]:
                best = (err, full)
    return best[1]


def main(path):
    runs = load(path)
    by = collections.defaultdict(list)
    for r in runs:
        by[(r["db"], r["latency_ms"], r["nodes"], r["mode"])].append(r)
    # g: the CPU of one cursor step, from the baseline on the local disk
    # (pages cached after the first fault of each read-around).
    steps = [(sum(p["skip_s"] for p in r["per_rank"]),
              sum(p["skipped"] + p["records"] for p in r["per_rank"]))
             for r in runs if r["mode"] == "baseline" and r["latency_ms"] == 0]
    g = min((t / n for t, n in steps if n), default=0.2e-6)
    print(f"cursor step (g): {g * 1e6:.2f} µs, from the baseline on the local disk\n")

    points = []  # (mode, L s, W B/s, Q, V, S, measured s, measured bytes, key)
    for (db, lat, n, mode), rs in sorted(by.items()):
        if lat == 0 or mode not in MODES:
            continue
        r0 = rs[0]
        R = r0["ranks_per_node"]
        s = mean_value_bytes(r0)
        K = r0["entries"] / max(1, r0.get("leaf_pages", 0)) if r0.get("leaf_pages") else None
        Q, V, S = counts(mode, r0["batch"], n, R, s, iters=r0["iters"], K=K)
        t = statistics.median(r["ms_per_iter"] for r in rs) / 1e3
        served = statistics.median(r["counters"]["read_bytes"] / r["iters"] for r in rs
                                   if "counters" in r)
        points.append((mode, lat / 1e3, r0["bandwidth_mbps"] * 1e6, Q, V, S, t, served,
                       (db, lat, n)))
    if not points:
        sys.exit(f"{path}: no pfs-emu runs (latency > 0) to calibrate on")

    print("Bytes served per iteration, model vs pfs-emu's counters (MB):\n")
    print("| mode | " + " | ".join(f"{db} {lat} ms, {n} nodes" for db, lat, n in
                                   sorted({p[8] for p in points})) + " |")
    cols = sorted({p[8] for p in points})
    print("|---|" + "---:|" * len(cols))
    verr = []
    for mode in MODES:
        cells = []
        for key in cols:
            p = next((p for p in points if p[0] == mode and p[8] == key), None)
            if p is None:
                cells.append("–")
                continue
            cells.append(f"{p[4] / 1e6:.2f} / {p[7] / 1e6:.2f}")
            verr.append(p[4] / p[7] - 1)
        print(f"| {mode} | " + " | ".join(cells) + " |")
    print(f"\nbytes: model/measured - 1, RMS {100 * math.sqrt(np.mean(np.square(verr))):.0f} %, "
          f"worst {100 * max(verr, key=abs):+.0f} %")

    # Fit a, c (shared) and d_mode (per mode) on relative errors.
    modes = [m for m in MODES if any(p[0] == m for p in points)]
    A = np.zeros((len(points), 2 + len(modes)))
    y = np.zeros(len(points))
    for i, (mode, L, W, Q, V, S, t, *_rest) in enumerate(points):
        A[i, 0] = L * Q / t
        A[i, 1] = V / W / t
        A[i, 2 + modes.index(mode)] = 1 / t
        y[i] = 1 - g * S / t
    x = nnls(A, y)
    a, c = x[0], x[1]
    d = dict(zip(modes, x[2:]))
    rel = (A @ x - y)  # (pred - t) / t
    print(f"\nFit on {len(points)} medians (latency 1 and 4 ms): a = {a:.2f} (latency rounds), "
          f"c = {c:.2f} (link time); fixed cost per iteration d (ms): " +
          ", ".join(f"{m} {d[m] * 1e3:.2f}" for m in modes))
    print(f"fit error (predicted / measured - 1): RMS {100 * math.sqrt(np.mean(rel ** 2)):.0f} %, "
          f"worst {100 * max(rel, key=abs):+.0f} %; per mode RMS: " +
          ", ".join(f"{m} {100 * math.sqrt(np.mean([rel[i] ** 2 for i, p in enumerate(points) if p[0] == m])):.0f} %"
                    for m in modes))

    def predict(mode, B, N, R, s, L, W, readers, iters=None):
        Q, V, S = counts(mode, B, N, R, s, readers=readers, iters=iters)
        return a * L * Q + c * V / W + g * S + d.get(mode, 0)

    print("\nCalibration points, ms per iteration (model / measured):\n")
    print("| mode | " + " | ".join(f"{db} {lat} ms, {n} nodes" for db, lat, n in cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for mode in modes:
        cells = []
        for key in cols:
            i = next((i for i, p in enumerate(points) if p[0] == mode and p[8] == key), None)
            if i is None:
                cells.append("–")
                continue
            t = points[i][6]
            cells.append(f"{(1 + rel[i]) * t * 1e3:.1f} / {t * 1e3:.1f}")
        print(f"| {mode} | " + " | ".join(cells) + " |")

    # The paper's setting (TOPC'19: 9,216 cores; nodes of 36 cores, or 72
    # ranks on 128 nodes), CIFAR-like records (3,083 bytes), Caffe order.
    print("\nPredictions (the assumptions are in docs/lmdbio.md): ms per iteration and "
          "speed-up of each mode over the baseline.\n")
    settings = []
    for (N, R) in ((256, 36), (128, 72)):
        for b in (1, 8):
            for L, W in ((1e-3, 20e9), (4e-3, 20e9)):
                settings.append((N, R, b, L, W))
    print("| nodes × ranks | batch per rank (B) | latency, bandwidth | " +
          " | ".join(modes) + " |")
    print("|---|---|---|" + "---:|" * len(modes))
    for N, R, b, L, W in settings:
        B = N * R * b
        base = predict("baseline", B, N, R, 3083, L, W, readers=4)
        cells = []
        for mode in modes:
            t = predict(mode, B, N, R, 3083, L, W, readers=4, iters=512)
            cells.append(f"{t * 1e3:.1f}" + ("" if mode == "baseline" else f" ({base / t:.0f}×)"))
        print(f"| {N} × {R} | {b} ({B:,}) | {L * 1e3:g} ms, {W / 1e9:g} GB/s | " +
              " | ".join(cells) + " |")


if __name__ == "__main__":
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(__doc__)
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/dlfs-lmdbio-bench/lmdbio_pfs.jsonl")
