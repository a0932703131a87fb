#!/usr/bin/python3
"""The cluster cache benchmark (issue 22): `dlfs bench --cluster-cache` against
the cache off (`--cache-budget 0`) on an emulated parallel file system
(tools/pfs-emu: a latency per request, 400 MB/s shared, a page cache per fake
node), side by side in one run, repetitions alternating, medians.

    bench/cache/run_cluster_cache_bench.py                  (as root; ~10 min)
    bench/cache/run_cluster_cache_bench.py --latencies 4 --nodes 4 --reps 1   (~1 min)

The volume is SAMPLES x ~100 KB (bench/data/make_imagenet_like.py); each fake
node's cache budget is a third of it, so the volume is three times one
node's budget and 0.75 of four nodes' budgets together. Every run is one
mpirun job of RANKS ranks split into NODES fake nodes (DLFS_RANKS_PER_NODE),
node k reading the volume through pfs-emu's view n<k> (its own page cache;
dlfs reads with O_DIRECT, so every read reaches the emulated storage). Node
caches live in /dev/shm and go with the job: every run starts cold.

For each latency and node count it prints epoch 1 (filling) and the later
epochs (median of epochs 2..EPOCHS, numbered from 1) as samples/s, the
ratio to the cache off, the bytes read from storage and received from
peers per later epoch as a share of the volume, and the model's prediction
(bench/cache/cluster_model.py, calibrated on these runs) beside each
measured cell. Writes every run as JSON lines (--out) and a plot (--plot).
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import cluster_model  # noqa: E402


def parse_list(text):
    return [int(x) for x in text.split(",") if x]


def mount(pfs_emu, backing, mnt, nodes, latency_ms, bandwidth, log):
    mnt.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([pfs_emu, "--nodes", str(nodes), "--latency-us",
                             str(latency_ms * 1000), "--bandwidth-mbps", str(bandwidth),
                             str(backing), str(mnt)], stderr=log)
    for _ in range(100):
        if os.path.ismount(mnt):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    sys.exit(f"run_cluster_cache_bench: pfs-emu did not mount {mnt} (see {log.name})")


def unmount(proc, mnt):
    subprocess.run(["fusermount3", "-u", str(mnt)], check=False)
    proc.wait(timeout=60)


def run_job(dlfs, mnt, nodes, ranks, mode, budget, epochs, batch):
    """One mpirun job; returns dlfs bench's JSON."""
    rpn = ranks // nodes
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
    flags = ["--epochs", str(epochs), "--batch", str(batch), "--json"]
    flags += (["--cluster-cache", "--cache-budget", str(budget)] if mode == "cluster"
              else ["--cache-budget", "0"])
    for k in range(nodes):
        if k:
            cmd.append(":")
        cmd += ["-np", str(rpn), "-x", f"DLFS_RANKS_PER_NODE={rpn}", dlfs, "bench",
                str(mnt / f"n{k}" / "vol.dlfs"), *flags]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        sys.exit(f"run_cluster_cache_bench: {' '.join(cmd)} failed:\n{out.stderr}")
    return json.loads(out.stdout)


def summarize(runs, volume_bytes):
    """Medians per (latency, nodes, mode) over repetitions."""
    cells = {}
    for r in runs:
        cells.setdefault((r["latency_ms"], r["nodes"], r["mode"]), []).append(r)
    out = {}
    for key, rs in cells.items():
        first = [r["epochs"][0]["seconds"] for r in rs]
        later = [statistics.median(e["seconds"] for e in r["epochs"][1:]) for r in rs]
        storage = [statistics.median(e["storage_bytes"] for e in r["epochs"][1:]) for r in rs]
        peer = [statistics.median(e["peer_bytes"] for e in r["epochs"][1:]) for r in rs]
        samples = rs[0]["epochs"][0]["samples"]
        out[key] = {
            "first_seconds": statistics.median(first),
            "later_seconds": statistics.median(later),
            "first_samples_per_s": samples / statistics.median(first),
            "later_samples_per_s": samples / statistics.median(later),
            "storage_share": statistics.median(storage) / volume_bytes,
            "peer_share": statistics.median(peer) / volume_bytes,
            "reps": len(rs),
        }
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=str(REPO / "build"), help="build directory (default build)")
    p.add_argument("--dir", default="/tmp/dlfs-cluster-bench", help="work directory")
    p.add_argument("--samples", type=int, default=7680, help="samples of ~100 KB (default 7680)")
    p.add_argument("--nodes", type=parse_list, default=[1, 2, 4], help="fake node counts")
    p.add_argument("--latencies", type=parse_list, default=[0, 1, 4], help="ms per request")
    p.add_argument("--ranks", type=int, default=4, help="ranks per job (default 4)")
    p.add_argument("--epochs", type=int, default=4, help="epochs per job (default 4)")
    p.add_argument("--batch", type=int, default=32, help="batch per rank (default 32)")
    p.add_argument("--reps", type=int, default=3, help="repetitions (default 3)")
    p.add_argument("--bandwidth", type=int, default=400, help="pfs-emu MB/s shared (400)")
    p.add_argument("--out", default=None, help="JSON lines of every run (default DIR/runs.jsonl)")
    p.add_argument("--plot", default=None, help="PNG of measured and predicted speed-ups")
    p.add_argument("--from-runs", default=None, metavar="RUNS",
                   help="no runs: the table and plot of an earlier run's JSON lines")
    a = p.parse_args()
    if a.from_runs:
        with open(a.from_runs) as f:
            runs = [json.loads(line) for line in f if line.strip()]
        a.nodes = sorted({r["nodes"] for r in runs})
        a.latencies = sorted({r["latency_ms"] for r in runs})
        a.reps = max(r["rep"] for r in runs) + 1
        a.ranks, a.samples, a.bandwidth = runs[0]["ranks"], runs[0]["samples"], \
            runs[0]["bandwidth_mbps"]
        report(runs, a, runs[0]["data_bytes"], runs[0]["budget"])
        return
    if os.geteuid() != 0:
        sys.exit("run_cluster_cache_bench: needs root (FUSE mount of pfs-emu, page cache)")
    if any(a.ranks % n for n in a.nodes):
        sys.exit("run_cluster_cache_bench: --ranks must be a multiple of every node count")
    build = pathlib.Path(a.build)
    subprocess.run(["cmake", "--build", str(build), "--target", "dlfs_cli", "pfs-emu"],
                   check=True, stdout=subprocess.DEVNULL)
    dlfs = str(build / "dlfs")
    pfs_emu = str(build / "tools" / "pfs-emu" / "pfs-emu")
    work = pathlib.Path(a.dir)
    backing, mnt = work / "backing", work / "mnt"
    backing.mkdir(parents=True, exist_ok=True)
    volume = backing / "vol.dlfs"
    tree = work / f"tree-{a.samples}"
    if not tree.exists():
        subprocess.run([sys.executable, str(REPO / "bench" / "data" / "make_imagenet_like.py"),
                        "--files", str(a.samples), "--mean-kb", "100", "-q", str(tree)],
                       check=True)
    if not volume.exists():
        subprocess.run([dlfs, "pack", str(tree), "-o", str(volume), "-q"], check=True)
    info = json.loads(subprocess.run([dlfs, "info", str(volume), "--json"], capture_output=True,
                                     check=True, text=True).stdout)
    data_bytes = info["bytes"]  # sample bytes
    budget = (data_bytes + 2) // 3
    # pfs-emu serves the backing file from memory: its emulated costs are the only ones.
    subprocess.run(["cat", str(volume)], stdout=subprocess.DEVNULL, check=True)

    out_path = pathlib.Path(a.out) if a.out else work / "runs.jsonl"
    runs = []
    with open(work / "pfs-emu.log", "a") as log, open(out_path, "w") as out:
        for latency in a.latencies:
            proc = mount(pfs_emu, backing, mnt, max(a.nodes), latency, a.bandwidth, log)
            try:
                for rep in range(a.reps):
                    for nodes in a.nodes:
                        modes = ["off", "cluster"] if rep % 2 == 0 else ["cluster", "off"]
                        for mode in modes:
                            j = run_job(dlfs, mnt, nodes, a.ranks, mode, budget, a.epochs,
                                        a.batch)
                            run = {"latency_ms": latency, "nodes": nodes, "mode": mode,
                                   "rep": rep, "ranks": a.ranks, "budget": budget,
                                   "data_bytes": data_bytes, "samples": a.samples,
                                   "bandwidth_mbps": a.bandwidth,
                                   "load": os.getloadavg()[0], "epochs": j["epochs"],
                                   "cluster_cache": j.get("cluster_cache")}
                            runs.append(run)
                            out.write(json.dumps(run) + "\n")
                            out.flush()
                            later = [e["seconds"] for e in j["epochs"][1:]]
                            print(f"  {latency} ms, {nodes} node(s), {mode:7s} rep {rep}: "
                                  f"epoch 1 {j['epochs'][0]['seconds']:.2f} s, later "
                                  f"{statistics.median(later):.2f} s", file=sys.stderr)
            finally:
                unmount(proc, mnt)

    report(runs, a, data_bytes, budget)


def report(runs, a, data_bytes, budget):
    cells = summarize(runs, data_bytes)
    model = cluster_model.Model.calibrate(runs)
    print(f"volume {data_bytes / 1e6:.0f} MB ({a.samples} samples), budget {budget / 1e6:.0f} MB "
          f"per node, {a.ranks} ranks, pfs-emu {a.bandwidth} MB/s shared, medians of {a.reps}")
    print(model.describe())
    print()
    print("| ms | nodes | off: samples/s (epoch 1 / later) | cluster: epoch 1 | cluster: later "
          "| later vs off (model) | storage / volume, later | peers / volume, later |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for latency in a.latencies:
        for nodes in a.nodes:
            off, on = cells[(latency, nodes, "off")], cells[(latency, nodes, "cluster")]
            predicted = model.speedup(latency, nodes, a.ranks, data_bytes, budget)
            print(f"| {latency} | {nodes} | {off['first_samples_per_s']:.0f} / "
                  f"{off['later_samples_per_s']:.0f} | {on['first_samples_per_s']:.0f} "
                  f"({off['first_seconds'] / on['first_seconds']:.2f}x) | "
                  f"{on['later_samples_per_s']:.0f} | "
                  f"**{off['later_seconds'] / on['later_seconds']:.2f}x** ({predicted:.2f}x) | "
                  f"{on['storage_share']:.3f} | {on['peer_share']:.3f} |")
    if a.plot:
        plot(cells, model, a, data_bytes, budget)


def plot(cells, model, a, data_bytes, budget):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for latency in a.latencies:
        measured = [cells[(latency, n, "off")]["later_seconds"] /
                    cells[(latency, n, "cluster")]["later_seconds"] for n in a.nodes]
        line, = ax.plot(a.nodes, measured, "o-", label=f"{latency} ms measured")
        ax.plot(a.nodes, [model.speedup(latency, n, a.ranks, data_bytes, budget) for n in a.nodes],
                "x--", color=line.get_color(), label=f"{latency} ms model")
    ax.set_xlabel("fake nodes (budget per node: a third of the volume)")
    ax.set_ylabel("later epochs: cluster cache / cache off")
    ax.set_xticks(a.nodes)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.plot, dpi=100)


if __name__ == "__main__":
    main()
