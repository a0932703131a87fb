#!/usr/bin/python3
"""Data-parallel training (DistributedDataParallel) fed by dlfs, under any
launcher — the same script for each:

    mpirun -np 4 /usr/bin/python3 examples/train_ddp.py out/fashion-mnist-train.dlfs
    srun --mpi=pmix -n 4 /usr/bin/python3 examples/train_ddp.py out/fashion-mnist-train.dlfs
    torchrun --nproc_per_node 4 examples/train_ddp.py out/fashion-mnist-train.dlfs

dlfs finds each process's share of every epoch itself (dlfs.distributed):
under mpirun and srun through MPI (one metadata read for the job, one
directory copy per node, --shard-local and --cluster-cache available), under
torchrun from its variables (the node's processes still share one directory
copy). dlfs.distributed.init_process_group() starts torch.distributed for
the same ranks (gloo on CPU, NCCL where there is a GPU), with a rendezvous
over MPI when there is no torchrun.

--loader image: dlfs.torch.ImageLoader decodes the PNG (or JPEG, raw) samples
  in C++ threads into one float tensor per batch.
--loader dataset: dlfs.torch.LoaderDataset hands whole batches of stored
  bytes to a DataLoader (batch_size=None); this script decodes them with
  dlfs.decode_image.

Every epoch prints, on rank 0, the mean loss over the job and where the
epoch's bytes came from (storage, this node's cache, other nodes), summed
over the ranks (with --loader dataset and --workers, each DataLoader worker
reads for itself and keeps its own figures: they are not printed). --record FILE appends each rank's mean loss per epoch and,
with --loader image, its sample indices (JSON lines), for checking that
every sample was read once.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data as tud

import dlfs
import dlfs.distributed
import dlfs.torch as dlfs_torch


class Net(nn.Module):
    """A small CNN for 1-channel images of `side` pixels."""

    def __init__(self, side, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * (side // 4) ** 2, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def make_image_loader(args):
    return dlfs_torch.ImageLoader(
        args.volume, args.batch, size=args.size, crop="center", dtype="float32", layout="NCHW",
        color="gray", seed=args.seed, shuffle=True, drop_last=True, return_indices=True,
        shard_local=args.shard_local, cluster_cache=args.cluster_cache)


def make_dataset_loader(args):
    pipeline = dlfs.ImagePipeline(args.size, crop="center", dtype="float32", layout="NCHW",
                                  color="gray")

    def to_tensors(samples, labels):
        # One epoch's random choices do not matter for a center crop: epoch 0.
        images = np.stack([pipeline(s, 0, 0) for s in samples])
        return torch.from_numpy(images), torch.from_numpy(labels)

    dataset = dlfs_torch.LoaderDataset(
        args.volume, args.batch, seed=args.seed, shuffle=True, drop_last=True,
        batch_transform=to_tensors, shard_local=args.shard_local,
        cluster_cache=args.cluster_cache)
    return dataset, tud.DataLoader(dataset, batch_size=None, num_workers=args.workers)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("volume", help="a volume of labelled images (e.g. dlfs pack of an "
                                  "ImageFolder tree of PNGs)")
    p.add_argument("--loader", choices=["image", "dataset"], default="image")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=64, help="per rank")
    p.add_argument("--size", type=int, default=28, help="image side after resizing")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=0,
                   help="DataLoader workers (--loader dataset; 0 under MPI with "
                        "--shard-local/--cluster-cache)")
    p.add_argument("--shard-local", action="store_true",
                   help="each node reads its own targets; the rest comes over MPI")
    p.add_argument("--cluster-cache", action="store_true",
                   help="the nodes' caches as one cache of the volume (MPI)")
    p.add_argument("--record", help="append each rank's sample indices per epoch (JSON lines)")
    args = p.parse_args()

    job = dlfs.distributed.init_process_group()
    rank, world = job.rank, job.world_size
    torch.manual_seed(args.seed)
    classes = len(dlfs.Volume(args.volume).classes) or 10
    model = Net(args.size, classes)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if args.loader == "image":
        loader = make_image_loader(args)
        batches = loader
    else:
        loader, batches = make_dataset_loader(args)
    if rank == 0:
        print(f"dlfs: {job.launcher}, {world} ranks; {args.loader} loader, "
              f"{len(loader)} batches per rank per epoch", flush=True)
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        start, losses, seen = time.perf_counter(), [], []
        for step in batches:
            if args.loader == "image":
                images, labels, indices = step
                seen += indices.tolist()
            else:
                images, labels = step
            opt.zero_grad()
            loss = F.cross_entropy(model(images), labels)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        mean = torch.tensor([sum(losses), len(losses)], dtype=torch.float64)
        stats = torch.zeros(3, dtype=torch.float64)
        # LoaderDataset's figures are its own process's: none when workers read.
        counted = args.loader == "image" or args.workers == 0
        if counted:
            e = loader.epoch_stats()[-1]
            stats += torch.tensor([e["storage_bytes"], e["cache_bytes"], e["peer_bytes"]],
                                  dtype=torch.float64)
        if world > 1:
            dist.all_reduce(mean)
            dist.all_reduce(stats)
        if args.record:
            with open(args.record, "a") as f:
                f.write(json.dumps({"rank": rank, "epoch": epoch, "indices": seen,
                                    "loss": sum(losses) / max(len(losses), 1)}) + "\n")
        if rank == 0:
            where = (f"read {stats[0] / 1e6:.1f} MB from storage, {stats[1] / 1e6:.1f} MB from "
                     f"node caches, {stats[2] / 1e6:.1f} MB from other nodes" if counted else
                     "bytes read: counted by each DataLoader worker, not printed")
            print(f"epoch {epoch}: loss {mean[0] / max(mean[1], 1):.4f}, "
                  f"{time.perf_counter() - start:.1f} s; {where}", flush=True)
    if world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
