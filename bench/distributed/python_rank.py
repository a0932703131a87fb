#!/usr/bin/python3
"""One rank of bench/distributed/python_job_bench.py: a training-shaped
loop over dlfs.torch.LoaderDataset + DataLoader (batch_size=None; each batch
one (B, sample bytes) uint8 tensor and its labels, as a model would take
them), finding its share of the job itself, and what the loader cost in
memory. Writes OUT/rank<r>.json.
"""
import argparse
import json
import os
import sys
import time


def memory():
    """(private, proportional) resident bytes of this process."""
    fields = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                fields[parts[0][:-1]] = int(parts[1]) * 1024
    return fields["Private_Clean"] + fields["Private_Dirty"], fields["Pss"]


def barrier(out, name, rank, world):
    open(os.path.join(out, f".{name}.{rank}"), "w").close()
    while not all(os.path.exists(os.path.join(out, f".{name}.{r}")) for r in range(world)):
        time.sleep(0.01)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--volume", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--mode", choices=["plain", "cluster_cache", "shard_local"], default="plain")
    p.add_argument("--private-directory", action="store_true",
                   help="as before: every rank its own directory, ranks from the variables, "
                        "no MPI")
    a = p.parse_args()

    import torch  # noqa: F401 (imported before measuring: its memory is not the loader's)
    import torch.utils.data as tud

    import dlfs
    import dlfs.torch as dt

    keywords = {} if a.mode == "plain" else {a.mode: True}
    if a.private_directory:
        info = dlfs.distributed.launch_info()
        keywords.update(rank=info["rank"], world_size=info["world_size"], directory="private")
    job = dlfs.distributed.job() if not a.private_directory else None
    before = memory()
    dataset = dt.LoaderDataset(a.volume, a.batch, seed=1, **keywords)
    loader = tud.DataLoader(dataset, batch_size=None)
    rank = dataset.rank
    world = dataset.world_size
    first = next(iter(loader))  # the loader made, one batch read
    barrier(a.out, "made", rank, world)
    after = memory()
    del first
    report = {"rank": rank, "world": world, "launcher": job.launcher if job else "explicit",
              "private_bytes": after[0] - before[0], "pss_bytes": after[1] - before[1],
              "epochs": []}
    for epoch in range(a.epochs):
        dataset.set_epoch(epoch)
        barrier(a.out, f"epoch{epoch}", rank, world)
        start, samples = time.perf_counter(), 0
        for images, labels in loader:  # what a training step receives
            samples += len(labels)
        seconds = time.perf_counter() - start
        stats = dataset.epoch_stats()[-1]
        report["epochs"].append({"epoch": epoch, "samples": samples, "seconds": seconds,
                                 "storage_bytes": stats["storage_bytes"],
                                 "cache_bytes": stats["cache_bytes"],
                                 "peer_bytes": stats["peer_bytes"],
                                 "network_bytes": stats["network_bytes"]})
    with open(os.path.join(a.out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
