#!/usr/bin/python3
"""PyTorch DataLoader over one file per sample: ImageFolder's storage path.

    /usr/bin/python3 bench/io/torch_files.py LIST_OR_DIR [--workers 2] [--batch 256] [--seed 0]

A map-style Dataset returns the raw bytes of file i as a uint8 tensor (no
decoding), a RandomSampler with a seeded generator shuffles, and the
DataLoader runs `--workers` worker processes with a collate that keeps the
list (samples differ in size, nothing to stack). LIST_OR_DIR is a text file
with one path per line (relative to the list's directory) or a directory
(walked, sorted). Only the epoch is timed: from creating the iterator (which
starts the workers) to the last batch.

Prints one JSON object: files, bytes, seconds, samples_per_s, mb_per_s (1 MB =
10^6 bytes) and cpu_s_per_gb (user+sys of this process and its reaped workers,
from getrusage). Run it with Debian's interpreter, /usr/bin/python3, which is
the one python3-torch is installed for. Cold cache is the caller's job.
"""

import argparse
import json
import os
import resource
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler


class RawFiles(Dataset):
    """Sample i is the bytes of file i, as a 1-D uint8 tensor."""

    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            buf = bytearray(size)
            got = f.readinto(buf) if size else 0
        if got != size:
            raise IOError(f"{self.paths[i]}: read {got} of {size} bytes")
        if size == 0:
            return torch.empty(0, dtype=torch.uint8)
        return torch.frombuffer(buf, dtype=torch.uint8)


def keep_list(batch):
    return batch


def list_files(source):
    if os.path.isdir(source):
        out = []
        for root, dirs, files in os.walk(source):
            dirs.sort()
            out.extend(os.path.join(root, f) for f in files)
        out.sort()
        return out
    base = os.path.dirname(os.path.abspath(source))
    with open(source) as f:
        return [p if os.path.isabs(p) else os.path.join(base, p) for p in f.read().split("\n") if p]


def cpu_seconds():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source", help="list file (one path per line) or directory")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=0, help="read only the first K of the epoch")
    args = ap.parse_args()

    paths = list_files(args.source)
    if not paths:
        sys.exit(f"torch_files: {args.source}: no files")
    dataset = RawFiles(paths)
    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(args.seed))
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler,
                        num_workers=args.workers, collate_fn=keep_list)

    files = nbytes = 0
    cpu0 = cpu_seconds()
    t0 = time.perf_counter()
    it = iter(loader)
    for batch in it:
        files += len(batch)
        nbytes += sum(t.numel() for t in batch)
        if args.limit and files >= args.limit:
            break
    del it  # joins the workers (they are then counted in RUSAGE_CHILDREN)
    secs = time.perf_counter() - t0
    cpu = cpu_seconds() - cpu0
    print(json.dumps({
        "files": files, "bytes": nbytes, "seconds": round(secs, 6),
        "samples_per_s": round(files / secs, 1), "mb_per_s": round(nbytes / secs / 1e6, 2),
        "cpu_seconds": round(cpu, 4), "cpu_s_per_gb": round(cpu / (nbytes / 1e9), 4) if nbytes else 0,
        "workers": args.workers, "batch": args.batch, "seed": args.seed,
        "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
