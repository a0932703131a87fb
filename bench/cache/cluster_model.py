#!/usr/bin/python3
"""The cluster cache's scaling model (issue 22): the time of an epoch after the
first (the caches filled) from the node count N, each node's cache budget B,
the volume V (bytes) and its sample count, storage bandwidth and latency,
the network and the rate at which a node moves cached samples to its
ranks; calibrated on the fake-node runs of run_cluster_cache_bench.py, then
used to predict jobs of 64, 1,024 and 9,216 ranks.

    bench/cache/cluster_model.py [RUNS.jsonl]     (default /tmp/dlfs-cluster-bench/runs.jsonl)

The model. A share c = min(1, N * B / V) of the volume's bytes is cached
(placement keeps what fits, cache/placement.h); the rest comes from storage
every epoch. An epoch lasts
  storage + max(peers, memory)
  storage  (1 - c) * V / S + (1 - c) * n * L / (R * Q)   shared storage: bandwidth S,
           latency L per request, n samples, R ranks with Q reads in flight each
  peers    c * V * (N - 1) / N / (N * W)                 each node's link W receives
           the part of its ranks' samples other nodes cache
  memory   c * V / (N * M)                               each node hands c * V / N to
           its ranks (exchange copies, checksums) at M bytes/s
and without the cache an epoch lasts the storage term with c = 0. The
speed-up is their ratio. The storage and cache parts add up rather than
overlap: a rank reads its uncached samples on a thread during the exchange,
but each window waits for both and, on the calibration host, both use the
same cores. (Taking the longer of the two instead predicted 3.0x for two
fake nodes where 2.6x was measured; the sum predicts 2.6x.)

Calibrated here (one host, fake nodes): S from the cache-off runs at each
latency (V / their epoch time, so the latency term is folded into S there),
and M from the runs where the caches hold the whole volume (all fake nodes
share this host's two cores and memory, so M is the host's rate, not a
node's: the "peers" term is part of it). The prediction beside each measured
cell uses only these two constants.

At scale, M per node is this host's rate per core times the cores a node gives
the loader (one per rank), and the cluster's figures are stated below.
"""
import json
import statistics
import sys

# A cluster for the predictions (stated, not measured here).
RANKS_PER_NODE = 4
NODE_CACHE_BUDGET = 64e9     # a quarter of a 256 GB node (the default budget rule)
PFS_BANDWIDTH = 50e9         # bytes/s, shared by the whole job
PFS_LATENCY = 1e-3           # seconds per request
LINK_BANDWIDTH = 12.5e9      # bytes/s per node (100 Gb/s)
READS_IN_FLIGHT = 64         # per rank (the engine's queue depth)
HOST_CORES = 2               # the calibration host's cores
DATASETS = {
    # samples, mean bytes per sample (ImageNet-like JPEGs, bench/data/make_imagenet_like.py)
    "ImageNet-1k": (1_281_167, 110e3),
    "ImageNet-21k": (14_197_122, 110e3),
}


class Model:
    def __init__(self, storage_rate, memory_rate):
        self.storage_rate = storage_rate  # {latency ms: bytes/s}, cache off
        self.memory_rate = memory_rate    # bytes/s from the caches, this host

    @classmethod
    def calibrate(cls, runs):
        def later(run):
            return statistics.median(e["seconds"] for e in run["epochs"][1:])

        storage = {}
        for lat in sorted({r["latency_ms"] for r in runs}):
            off = [r["data_bytes"] / later(r) for r in runs
                   if r["mode"] == "off" and r["latency_ms"] == lat]
            if off:
                storage[lat] = statistics.median(off)
        full = [r["data_bytes"] / later(r) for r in runs if r["mode"] == "cluster"
                and r["nodes"] * r["budget"] >= r["data_bytes"]]
        if not storage or not full:
            sys.exit("cluster_model: needs cache-off runs and runs whose caches hold the volume")
        return cls(storage, statistics.median(full))

    def describe(self):
        rates = ", ".join(f"{lat} ms: {s / 1e6:.0f} MB/s" for lat, s in self.storage_rate.items())
        return (f"model: storage (cache off) {rates}; from the caches "
                f"{self.memory_rate / 1e6:.0f} MB/s on this host")

    def seconds(self, latency_ms, nodes, volume, budget):
        """Predicted epoch time after the first, on this host."""
        c = min(1.0, nodes * budget / volume)
        return (1 - c) * volume / self.storage_rate[latency_ms] + c * volume / self.memory_rate

    def speedup(self, latency_ms, nodes, ranks, volume, budget):
        del ranks  # the host's rates already hold the ranks' share of its cores
        off = volume / self.storage_rate[latency_ms]
        return off / self.seconds(latency_ms, nodes, volume, budget)

    def cluster_seconds(self, ranks, samples, volume, cached=True):
        """Predicted epoch time on the cluster above (cache off: cached=False)."""
        nodes = max(1, ranks // RANKS_PER_NODE)
        c = min(1.0, nodes * NODE_CACHE_BUDGET / volume) if cached else 0.0
        storage = ((1 - c) * volume / PFS_BANDWIDTH +
                   (1 - c) * samples * PFS_LATENCY / (ranks * READS_IN_FLIGHT))
        peers = c * volume * (nodes - 1) / nodes / (nodes * LINK_BANDWIDTH)
        per_node = self.memory_rate / HOST_CORES * RANKS_PER_NODE
        memory = c * volume / (nodes * per_node)
        return storage + max(peers, memory)


def main():
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(__doc__)
        return
    path = sys.argv[1] if len(sys.argv) > 1 else "/tmp/dlfs-cluster-bench/runs.jsonl"
    with open(path) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    model = Model.calibrate(runs)
    print(model.describe())
    print()
    print("Measured (medians) against the model, epochs after the first:")
    print("| ms | nodes | off s | cluster s | model s | speed-up | model |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    cells = {}
    for r in runs:
        t = statistics.median(e["seconds"] for e in r["epochs"][1:])
        cells.setdefault((r["latency_ms"], r["nodes"], r["mode"]), []).append((t, r))
    for (lat, nodes, mode), ts in sorted(cells.items()):
        if mode != "cluster" or (lat, nodes, "off") not in cells:
            continue
        on = statistics.median(t for t, _ in ts)
        off = statistics.median(t for t, _ in cells[(lat, nodes, "off")])
        r = ts[0][1]
        predicted = model.seconds(lat, nodes, r["data_bytes"], r["budget"])
        print(f"| {lat} | {nodes} | {off:.2f} | {on:.2f} | {predicted:.2f} | {off / on:.2f}x | "
              f"{model.speedup(lat, nodes, r['ranks'], r['data_bytes'], r['budget']):.2f}x |")
    print()
    print(f"Predicted at scale: {RANKS_PER_NODE} ranks per node, {NODE_CACHE_BUDGET / 1e9:.0f} GB "
          f"cache per node, storage {PFS_BANDWIDTH / 1e9:.0f} GB/s shared with "
          f"{PFS_LATENCY * 1e3:.0f} ms per request, {LINK_BANDWIDTH / 1e9:.1f} GB/s per node link, "
          f"{model.memory_rate / HOST_CORES / 1e6:.0f} MB/s per loader core from the caches "
          f"(calibrated), epochs after the first:")
    print("| data set | ranks | nodes | cached | cache off s | cluster cache s | speed-up |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, (samples, mean) in DATASETS.items():
        volume = samples * mean
        for ranks in (64, 1024, 9216):
            nodes = ranks // RANKS_PER_NODE
            off = model.cluster_seconds(ranks, samples, volume, cached=False)
            on = model.cluster_seconds(ranks, samples, volume)
            c = min(1.0, nodes * NODE_CACHE_BUDGET / volume)
            print(f"| {name} ({volume / 1e12:.2f} TB) | {ranks} | {nodes} | {c:.0%} | {off:.2f} | "
                  f"{on:.3f} | {off / on:.1f}x |")


if __name__ == "__main__":
    main()
