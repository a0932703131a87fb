"""One rank of a distributed job for tests/python/test_distributed.py: it
trains a small model with DDP (gloo) fed by dlfs.torch.ImageLoader and by
dlfs.torch.LoaderDataset, each finding its share of the job itself (or
LoaderDataset through comm=MPI.COMM_WORLD), and writes what it read to
OUT/rank<r>.json. Run under mpirun, or as 4 processes with torchrun's
variables. The images' first two pixels hold their sample index (PNG is
lossless), so the bytes LoaderDataset hands out name their sample too.
"""
import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

import dlfs
import dlfs.distributed
from testutil import wait_until


def private_bytes():
    """(private, proportional) resident bytes of this process."""
    fields = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                fields[parts[0][:-1]] = int(parts[1]) * 1024
    return fields["Private_Clean"] + fields["Private_Dirty"], fields["Pss"]


def arrived(out, name, ranks):
    """Whether every rank of `ranks` has reached barrier `name`."""
    return all(os.path.exists(os.path.join(out, f".{name}.{r}")) for r in ranks)


def file_barrier(out, name, rank, world):
    """Every rank has reached `name` (no collective needed: no MPI under torchrun)."""
    open(os.path.join(out, f".{name}.{rank}"), "w").close()
    wait_until(lambda: arrived(out, name, range(world)), 120, f"every rank at barrier {name}",
               interval=0.02)


def late(out, name, rank, world):
    """A late rank: until every other rank has reached barrier `name`, as far
    as the job lets them go without this one (an event, not a time)."""
    wait_until(lambda: arrived(out, name, [r for r in range(world) if r != rank]), 120,
               f"the other ranks at barrier {name}", interval=0.02)


def regions(kind):
    shm = os.environ.get("DLFS_CACHE_DIR", "/dev/shm")
    return sorted(n for n in os.listdir(shm) if n.startswith("dlfs-") and kind in n)


def directory_notes(caught):
    """dlfs's warnings, from warnings.catch_warnings(record=True), that a
    process keeps a copy of a volume's directory of its own rather than its
    node's (they say why)."""
    return [str(w.message) for w in caught if "copy of the directory" in str(w.message)]


def index_of(png_bytes):
    pixels = dlfs.decode_image(np.asarray(png_bytes), color="gray")
    return int(pixels[0, 0, 0]) + 256 * int(pixels[0, 1, 0])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--volume", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--comm", choices=["auto", "mpi4py"], default="auto")
    p.add_argument("--mode", choices=["plain", "shard_local", "cluster_cache"], default="plain")
    p.add_argument("--train", action="store_true", help="DDP training (else read only)")
    p.add_argument("--stop-after", type=int, help="LoaderDataset: stop the last epoch after "
                                                  "this many batches and save rank 0's state")
    p.add_argument("--resume", help="LoaderDataset: resume from this state (JSON)")
    p.add_argument("--memory-volume", help="first, measure private memory of a loader on it")
    p.add_argument("--fail", choices=["bad-path", "exception"])
    p.add_argument("--fail-rank", type=int, default=1)
    p.add_argument("--late-rank", type=int, help="this rank lists the regions late: once the "
                                                 "others went on as far as the job lets them")
    a = p.parse_args()

    report = {}
    job = dlfs.distributed.job()  # under mpirun: MPI initialized here, by dlfs
    rank, world = job.rank, job.world_size
    report.update(rank=rank, world=world, launcher=job.launcher, mpi=job.mpi,
                  node_name=job.node_name)
    if a.fail == "bad-path":
        path = a.volume + ".missing" if rank == a.fail_rank else a.volume
        dlfs.Loader(path, a.batch)  # collective: every rank raises rank 1's error
        raise AssertionError("not reached")
    if a.fail == "exception":
        loader = dlfs.Loader(a.volume, a.batch)
        for step, _ in enumerate(loader):
            if rank == a.fail_rank:
                raise RuntimeError("a bug in the training loop")
        # The others block (as in a collective) until the job is aborted: a
        # stand-in for a hung collective, not a wait any assertion depends on.
        time.sleep(300)
        raise AssertionError("not reached")

    if a.memory_volume:
        import dlfs.torch as dt  # (torch's own memory is not the loader's)

        before = private_bytes()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ds = dt.LoaderDataset(a.memory_volume, 256, cache_budget=0)
            first = next(iter(ds))  # its loader, made, and one batch read
        file_barrier(a.out, "made", rank, world)
        if rank == a.late_rank:
            late(a.out, "measured", rank, world)
        after = private_bytes()
        report["memory"] = {"private": after[0] - before[0], "pss": after[1] - before[1],
                            "dir_regions": regions("-dir"), "notes": directory_notes(caught)}
        # The last process of a node to let go of its directory region
        # removes it: no rank lets go before every rank has listed them.
        file_barrier(a.out, "measured", rank, world)
        del first, ds

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.utils.data as tud

    import dlfs.torch as dt

    if a.train:
        dlfs.distributed.init_process_group("gloo")
    extra = {} if a.mode == "plain" else {a.mode: True}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        images = dt.ImageLoader(a.volume, a.batch, size=16, crop="center", dtype="float32",
                                layout="NCHW", color="gray", seed=a.seed, return_indices=True,
                                **extra)
        comm = None
        if a.comm == "mpi4py":
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
        dataset = dt.LoaderDataset(a.volume, a.batch, seed=a.seed, comm=comm, **extra)
    report["directory_notes"] = directory_notes(caught)
    # Every rank's regions exist once every rank has opened the volume, and
    # stay until every rank has listed them (its loaders hold them).
    file_barrier(a.out, "opened", rank, world)
    if rank == a.late_rank:
        late(a.out, "listed", rank, world)
    report["dir_regions"] = regions("-dir")
    file_barrier(a.out, "listed", rank, world)
    if a.resume:
        with open(a.resume) as f:
            dataset.load_state_dict(json.load(f))

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16 * 16, 4))
    if a.train and world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    epochs = []
    first_epoch = dataset.epoch if a.resume else 0
    for epoch in range(first_epoch, first_epoch + a.epochs):
        record = {"epoch": epoch}
        if not a.resume:
            images.set_epoch(epoch)
            seen, losses = [], []
            for x, y, idx in images:
                seen += idx.tolist()
                losses.append(step(x, y) if a.train else 0.0)
            record.update(images=seen, image_loss=float(np.mean(losses)),
                          image_stats=images.epoch_stats()[-1])
        dataset.set_epoch(epoch)
        seen, losses = [], []
        last = epoch == first_epoch + a.epochs - 1
        for k, (samples, labels) in enumerate(tud.DataLoader(dataset, batch_size=None)):
            seen += [index_of(s) for s in samples]
            if a.train:
                x = torch.stack([torch.from_numpy(dlfs.decode_image(np.asarray(s), color="gray"))
                                 for s in samples]).float().div(255).reshape(-1, 1, 16, 16)
                losses.append(step(x, labels))
            if a.stop_after and last and k + 1 == a.stop_after:
                if rank == 0:
                    with open(os.path.join(a.out, "state.json"), "w") as f:
                        json.dump(dataset.state_dict(k + 1), f)
                break
        record.update(dataset=seen, dataset_loss=float(np.mean(losses)) if losses else 0.0)
        epochs.append(record)
    report["epochs"] = epochs
    with open(os.path.join(a.out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    if a.train and world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
