#!/usr/bin/python3
"""Train a small CNN on Fashion-MNIST for one epoch on CPU, fed by dlfs, and
the same epoch fed by torchvision's ImageFolder over a PNG tree of the same
images, so the input pipelines can be compared side by side.

The volume stores the raw 28x28 uint8 pixels (what `dlfs pack` takes from the
IDX files): the training input is exactly the data set's bytes, and "decoding"
is a reshape. ImageFolder needs one PNG per image and decodes each with PIL;
that per-file open + decode is what people pay with files today.

    /usr/bin/python3 examples/train_fashion_mnist.py --volume out/fashion-mnist.dlfs
"""
import argparse
import os
import sys
import time

import numpy as np
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


def raw_batch(samples, labels):
    """Raw 784-byte samples -> float tensor [B, 1, 28, 28] in [0, 1]."""
    x = torch.from_numpy(np.stack(samples)).view(-1, 1, 28, 28).float().div_(255)
    return x, torch.from_numpy(labels)


def dlfs_loaders(volume, batch, workers, seed):
    train = dlfs_torch.LoaderDataset(volume, batch, shuffle=True, seed=seed, root="train",
                                     batch_transform=raw_batch)
    test = dlfs_torch.LoaderDataset(volume, 1000, shuffle=False, root="test",
                                    batch_transform=raw_batch)
    return (tud.DataLoader(train, batch_size=None, num_workers=workers),
            tud.DataLoader(test, batch_size=None, num_workers=workers))


def export_png_tree(volume, out_dir):
    """Writes every image of the volume as <out>/<split>/<class>/<index>.png."""
    from PIL import Image

    vol = dlfs.Volume(volume)
    done = os.path.join(out_dir, ".complete")
    if os.path.exists(done):
        return
    print(f"exporting {len(vol)} PNGs to {out_dir} (once) ...", flush=True)
    for i in range(len(vol)):
        split, name = vol.path(i).split("/", 1)
        cls = vol.classes[vol.label(i)].replace("/", "-")
        d = os.path.join(out_dir, split, cls)
        os.makedirs(d, exist_ok=True)
        pixels = np.frombuffer(vol.read(i), dtype=np.uint8).reshape(28, 28)
        Image.fromarray(pixels, mode="L").save(os.path.join(d, name + ".png"))
    open(done, "w").close()


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
    ap.add_argument("--volume", required=True, help="Fashion-MNIST volume from `dlfs pack`")
    ap.add_argument("--png-dir", help="PNG tree for the ImageFolder run "
                    "(default: next to the volume; exported once)")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--workers", type=int, default=2,
                    help="DataLoader workers for the ImageFolder run")
    ap.add_argument("--dlfs-workers", type=int, default=0,
                    help="DataLoader workers for the dlfs run (0: the C++ loader already "
                    "reads ahead on its own threads; worker processes would only add a copy)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-imagefolder", action="store_true", help="Only the dlfs run")
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))

    print(f"dlfs volume {args.volume}: {dlfs.Volume(args.volume).info()['samples']} samples")
    a = run("dlfs LoaderDataset (raw bytes)", *dlfs_loaders(args.volume, args.batch_size,
                                                            args.dlfs_workers, args.seed),
            args.seed)
    if args.skip_imagefolder:
        return 0
    png_dir = args.png_dir or os.path.join(os.path.dirname(os.path.abspath(args.volume)),
                                           "fashion-mnist-png")
    export_png_tree(args.volume, png_dir)
    b = run("torchvision ImageFolder (PNG files)", *imagefolder_loaders(
        png_dir, args.batch_size, args.workers, args.seed), args.seed)
    print(f"dlfs / ImageFolder: input pipeline "
          f"{a['input_samples_per_s'] / b['input_samples_per_s']:.1f}x the samples/s; "
          f"training epoch {a['epoch_s']:.1f} s vs {b['epoch_s']:.1f} s, "
          f"of which waiting for data {a['wait_s']:.1f} s vs {b['wait_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
