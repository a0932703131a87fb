#!/usr/bin/python3
"""Train a small CNN on Fashion-MNIST for one epoch on CPU, fed by dlfs'
ImageLoader, and the same epoch fed by torchvision's ImageFolder, both from
the same PNG files, so the input pipelines can be compared side by side.

Both sides decode PNGs: ImageFolder opens one file per image and decodes it
with PIL in DataLoader worker processes; dlfs.torch.ImageLoader reads the
PNGs packed in a volume (io_uring, read ahead) and decodes them in C++ on its
own threads into one float32 [B, 1, 28, 28] tensor per batch — the same
values as ImageFolder's ToTensor().

    bench/data/idx_to_files.py --png /usr/share/datasets/fashion-mnist out/fashion-mnist-png
    dlfs pack out/fashion-mnist-png/train -o out/fashion-mnist-train.dlfs
    dlfs pack out/fashion-mnist-png/test -o out/fashion-mnist-test.dlfs
    /usr/bin/python3 examples/train_fashion_mnist.py --train out/fashion-mnist-train.dlfs \
        --test out/fashion-mnist-test.dlfs --png-dir out/fashion-mnist-png

(scripts/demo.sh does all of this.)

--prepared NAME=TRAIN,TEST trains the same way from volumes whose images were
prepared at pack time (e.g. `dlfs pack ... --image-format raw --image-color
gray`, or `--image-format jpeg --jpeg-quality 90`) and compares their test
accuracy with the original volumes' (the same seeds and batches, so raw
pixels, which are the PNGs' own, give the same model).
"""
import argparse
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data as tud

import dlfs
import dlfs.torch as dlfs_torch


class LeNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.flatten(1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def dlfs_loaders(train, test, batch, seed, threads):
    kw = dict(size=28, crop="center", dtype="float32", layout="NCHW", color="gray",
              decode_threads=threads)
    return (dlfs_torch.ImageLoader(train, batch, seed=seed, shuffle=True, **kw),
            dlfs_torch.ImageLoader(test, 1000, shuffle=False, **kw))


def imagefolder_loaders(png_dir, batch, workers, seed):
    import torchvision.datasets as datasets
    import torchvision.transforms as T

    tf = T.Compose([T.Grayscale(), T.ToTensor()])
    train = datasets.ImageFolder(os.path.join(png_dir, "train"), transform=tf)
    test = datasets.ImageFolder(os.path.join(png_dir, "test"), transform=tf)
    g = torch.Generator().manual_seed(seed)
    return (tud.DataLoader(train, batch_size=batch, shuffle=True, num_workers=workers,
                           generator=g),
            tud.DataLoader(test, batch_size=1000, num_workers=workers))


def input_throughput(loader):
    """Samples per second of the input pipeline alone (no training)."""
    start, n = time.perf_counter(), 0
    for x, _ in loader:
        n += len(x)
    return n / (time.perf_counter() - start), n


def train_epoch(model, loader, seed):
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    model.train()
    start, n, waiting = time.perf_counter(), 0, 0.0
    it = iter(loader)
    while True:
        t = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            break
        waiting += time.perf_counter() - t
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        n += len(x)
    return time.perf_counter() - start, waiting, n


def accuracy(model, loader):
    model.eval()
    right = total = 0
    with torch.no_grad():
        for x, y in loader:
            right += (model(x).argmax(1) == y).sum().item()
            total += len(y)
    return right / total


def run(name, train_loader, test_loader, seed):
    rate, n = input_throughput(train_loader)
    torch.manual_seed(seed)
    model = LeNet()
    epoch_s, waiting_s, trained = train_epoch(model, train_loader, seed)
    acc = accuracy(model, test_loader)
    print(f"{name:<34} input {rate:>9,.0f} samples/s | epoch {epoch_s:6.1f} s "
          f"(waiting for data {waiting_s:5.1f} s) | {trained} samples | "
          f"test accuracy {acc:.2%}", flush=True)
    return {"input_samples_per_s": rate, "epoch_s": epoch_s, "wait_s": waiting_s, "acc": acc}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", required=True, help="volume of the training PNGs (dlfs pack)")
    ap.add_argument("--test", required=True, help="volume of the test PNGs")
    ap.add_argument("--png-dir", help="the PNG tree (train/, test/) for the ImageFolder run")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--workers", type=int, default=2,
                    help="DataLoader workers for the ImageFolder run")
    ap.add_argument("--decode-threads", type=int, default=None,
                    help="ImageLoader decode threads (default: one per core)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prepared", action="append", default=[], metavar="NAME=TRAIN,TEST",
                    help="also train from these prepared volumes and compare accuracy")
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))

    print(f"dlfs volumes {args.train}, {args.test}: {len(dlfs.Volume(args.train))} + "
          f"{len(dlfs.Volume(args.test))} PNG samples")
    a = run("dlfs ImageLoader (PNG, C++ decode)",
            *dlfs_loaders(args.train, args.test, args.batch_size, args.seed,
                          args.decode_threads), args.seed)
    for spec in args.prepared:
        name, _, volumes = spec.partition("=")
        train, _, test = volumes.partition(",")
        p = run(f"dlfs ImageLoader ({name})",
                *dlfs_loaders(train, test, args.batch_size, args.seed, args.decode_threads),
                args.seed)
        diff = 100 * (p["acc"] - a["acc"])
        print(f"prepared ({name}) / original: test accuracy {p['acc']:.2%} vs {a['acc']:.2%} "
              f"({diff:+.2f} points: {'within' if abs(diff) <= 0.5 else 'NOT within'} ±0.5); "
              f"input pipeline {p['input_samples_per_s'] / a['input_samples_per_s']:.2f}x the "
              f"samples/s", flush=True)
    if not args.png_dir:
        return 0
    b = run("torchvision ImageFolder (PNG files)", *imagefolder_loaders(
        args.png_dir, args.batch_size, args.workers, args.seed), args.seed)
    print(f"dlfs / ImageFolder: input pipeline "
          f"{a['input_samples_per_s'] / b['input_samples_per_s']:.1f}x the samples/s; "
          f"training epoch {a['epoch_s']:.1f} s vs {b['epoch_s']:.1f} s, "
          f"of which waiting for data {a['wait_s']:.1f} s vs {b['wait_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
