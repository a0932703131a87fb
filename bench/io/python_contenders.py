#!/usr/bin/python3
"""Python-side contenders of bench/io/run_io_bench.sh; each prints one JSON object.

    bench/io/python_contenders.py volume-dataset VOL --mode per-sample|batched --workers N
    bench/io/python_contenders.py dataset-folder TREE --workers N
    bench/io/python_contenders.py dataset-folder VOL --mount --workers N
    bench/io/python_contenders.py loader-dataset VOL --epochs N
    bench/io/python_contenders.py ipc-ceiling --size BYTES --count N --workers N
    bench/io/python_contenders.py file-reader VOL --mount --threads N

volume-dataset  dlfs.torch.VolumeDataset through a DataLoader: per-sample
                (ds[i], batch_size=256, shuffle) or batched (ds[[i, ...]] from a
                BatchSampler of 256, batch_size=None): one read_many per batch.
dataset-folder  torchvision's DatasetFolder over TREE (ImageFolder's storage
                path: its class scan, then open/read/close per file), or with
                --mount over `dlfs mount VOL` at a fresh mount point
                (the mount is set up before the clock starts and removed
                after); batch_size=256, shuffle.
loader-dataset  dlfs.torch.LoaderDataset via DataLoader(batch_size=None), N
                epochs in one process; reports epochs 2..N (the node cache
                serves what it holds) and the first epoch separately.
ipc-ceiling     a DataLoader whose dataset returns a ready-made bytes object of
                SIZE per item: what moving samples from worker processes costs
                by itself (no storage at all).
file-reader     bench/io/file_reader.cc (dlfs_file_reader) over `dlfs mount VOL`
                (mounted before, unmounted after; its own JSON is passed on).

Every contender returns raw bytes (no decoding) and uses a seeded shuffle.
Output keys: samples, bytes, seconds, samples_per_s, mb_per_s, cpu_s_per_gb
(user+sys of this process and its reaped workers per 10^9 bytes). The caller
drops the page cache first. Run with /usr/bin/python3 (Debian's torch).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("DLFS_BUILD_DIR", os.path.join(REPO, "build"))
sys.path.insert(0, os.path.join(BUILD, "python"))

import torch  # noqa: E402
import torch.utils.data as tud  # noqa: E402


def cpu_seconds():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def keep(batch):
    return batch


def raw_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def report(samples, nbytes, secs, cpu, **extra):
    out = {"samples": samples, "bytes": nbytes, "seconds": round(secs, 6),
           "samples_per_s": round(samples / secs, 1) if secs else 0,
           "mb_per_s": round(nbytes / secs / 1e6, 2) if secs else 0,
           "cpu_seconds": round(cpu, 4),
           "cpu_s_per_gb": round(cpu / (nbytes / 1e9), 4) if nbytes else 0}
    out.update(extra)
    print(json.dumps(out))


def timed(make_iter, count):
    """Drains the iterator make_iter() returns; count(item) -> (samples, bytes)."""
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    it = make_iter()
    n = nb = 0
    for item in it:
        a, b = count(item)
        n, nb = n + a, nb + b
    del it  # joins the workers, so RUSAGE_CHILDREN counts them
    return n, nb, time.perf_counter() - t0, cpu_seconds() - cpu0


def volume_dataset(args):
    import dlfs.torch as dt

    ds = dt.VolumeDataset(args.volume)
    gen = torch.Generator().manual_seed(args.seed)
    if args.mode == "per-sample":
        def make():
            return iter(tud.DataLoader(ds, batch_size=args.batch, shuffle=True, generator=gen,
                                       num_workers=args.workers, collate_fn=keep))

        def count(items):
            return len(items), sum(len(x) for x, _ in items)
    else:
        def make():
            sampler = tud.BatchSampler(tud.RandomSampler(ds, generator=gen), args.batch, False)
            return iter(tud.DataLoader(ds, sampler=sampler, batch_size=None,
                                       num_workers=args.workers, collate_fn=keep))

        def count(item):
            samples, _ = item
            return len(samples), sum(len(s) for s in samples)
    report(*timed(make, count), mode=args.mode, workers=args.workers)


def dataset_folder(args):
    import torchvision.datasets as datasets

    root, mnt = args.source, None
    if args.mount:
        mnt = tempfile.mkdtemp(prefix="dlfs-bench-mnt-")
        subprocess.run([os.path.join(BUILD, "dlfs"), "mount", args.source, mnt], check=True)
        root = mnt
    try:
        gen = torch.Generator().manual_seed(args.seed)

        def make():
            ds = datasets.DatasetFolder(root, loader=raw_bytes, is_valid_file=lambda p: True)
            return iter(tud.DataLoader(ds, batch_size=args.batch, shuffle=True, generator=gen,
                                       num_workers=args.workers, collate_fn=keep))

        def count(items):
            return len(items), sum(len(x) for x, _ in items)
        report(*timed(make, count), workers=args.workers, mount=bool(args.mount))
    finally:
        if mnt:
            subprocess.run(["fusermount3", "-u", mnt], check=False)
            os.rmdir(mnt)


def loader_dataset(args):
    import dlfs.torch as dt

    ds = dt.LoaderDataset(args.volume, args.batch, seed=args.seed)

    def count(item):
        samples, labels = item
        if isinstance(samples, torch.Tensor):  # stacked: counting row by row would cost
            return len(labels), samples.numel() * samples.element_size()  # more than reading
        return len(labels), sum(len(s) for s in samples)

    epochs = []
    for e in range(args.epochs):
        ds.set_epoch(e)
        n, nb, secs, cpu = timed(lambda: iter(tud.DataLoader(ds, batch_size=None)), count)
        epochs.append((n, nb, secs, cpu))
    later = epochs[1:] or epochs
    report(sum(e[0] for e in later), sum(e[1] for e in later), sum(e[2] for e in later),
           sum(e[3] for e in later),
           first_epoch_samples_per_s=round(epochs[0][0] / epochs[0][2], 1),
           epochs=[{"samples_per_s": round(e[0] / e[2], 1)} for e in epochs])


class _Ready(tud.Dataset):
    def __init__(self, size, count):
        self.data, self.count = os.urandom(size), count

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        return bytes(bytearray(self.data)), 0


def ipc_ceiling(args):
    ds = _Ready(args.size, args.count)

    def make():
        return iter(tud.DataLoader(ds, batch_size=args.batch, num_workers=args.workers,
                                   collate_fn=keep))
    report(*timed(make, lambda items: (len(items), sum(len(x) for x, _ in items))),
           workers=args.workers)


def file_reader(args):
    mnt = tempfile.mkdtemp(prefix="dlfs-bench-mnt-")
    subprocess.run([os.path.join(BUILD, "dlfs"), "mount", args.volume, mnt], check=True)
    try:
        out = subprocess.run([os.path.join(BUILD, "bench", "dlfs_file_reader"), mnt,
                              "--threads", str(args.threads), "--seed", str(args.seed)],
                             check=True, capture_output=True, text=True).stdout
    finally:
        subprocess.run(["fusermount3", "-u", mnt], check=False)
        os.rmdir(mnt)
    sys.stdout.write(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    v = sub.add_parser("volume-dataset")
    v.add_argument("volume")
    v.add_argument("--mode", choices=["per-sample", "batched"], default="per-sample")
    f = sub.add_parser("dataset-folder")
    f.add_argument("source", help="a tree of files, or with --mount a volume")
    f.add_argument("--mount", action="store_true", help="read the volume through dlfs mount")
    ld = sub.add_parser("loader-dataset")
    ld.add_argument("volume")
    ld.add_argument("--epochs", type=int, default=3)
    ipc = sub.add_parser("ipc-ceiling")
    ipc.add_argument("--size", type=int, default=110_000)
    ipc.add_argument("--count", type=int, default=6000)
    fr = sub.add_parser("file-reader")
    fr.add_argument("volume")
    fr.add_argument("--mount", action="store_true", required=True)
    fr.add_argument("--threads", type=int, default=2)
    fr.add_argument("--seed", type=int, default=0)
    for p in (v, f, ld, ipc):
        p.add_argument("--workers", type=int, default=2)
        p.add_argument("--batch", type=int, default=256)
        p.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    {"volume-dataset": volume_dataset, "dataset-folder": dataset_folder,
     "loader-dataset": loader_dataset, "ipc-ceiling": ipc_ceiling,
     "file-reader": file_reader}[args.what](args)


if __name__ == "__main__":
    main()
