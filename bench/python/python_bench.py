#!/usr/bin/python3
"""Python-side benchmarks (issue: Python and PyTorch). Prints a table of
ratios measured side by side in one run, cold cache before every timed run:

  1. dlfs.torch.LoaderDataset through DataLoader vs the C++ loader
     (`dlfs bench`), same volume and loader options;
  2. dlfs.torch.VolumeDataset vs torchvision ImageFolder over the original
     files, both with DataLoader(num_workers=2), raw bytes (no decoding);
  3. reading every file through `dlfs mount` vs reading the original files
     (random order, 2 threads, dlfs_file_reader: bench/io/file_reader.cc).

    sudo /usr/bin/python3 bench/python/python_bench.py --tree DIR --volume VOL [--reps 3]

Needs root for dropping the page cache; run from the repository root after
building (build/dlfs, build/python, build/bench/dlfs_file_reader).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "build", "python"))

import torch  # noqa: E402
import torch.utils.data as tud  # noqa: E402

import dlfs  # noqa: E402
import dlfs.torch as dt  # noqa: E402

DLFS = os.path.join(REPO, "build", "dlfs")
FILE_READER = os.path.join(REPO, "build", "bench", "dlfs_file_reader")


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def timed(fn):
    drop_caches()
    start = time.perf_counter()
    n, nbytes = fn()
    secs = time.perf_counter() - start
    return {"samples_per_s": n / secs, "mb_per_s": nbytes / secs / 1e6, "samples": n}


def cxx_loader(volume, batch):
    out = subprocess.run([DLFS, "bench", volume, "--batch", str(batch), "--drop-cache",
                          "--json"], check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    return {"samples_per_s": r["samples_per_s"], "mb_per_s": r["mb_per_s"],
            "samples": r["samples"]}


def loader_dataset(volume, batch):
    def run():
        ds = dt.LoaderDataset(volume, batch, seed=0)
        n = nbytes = 0
        for samples, labels in tud.DataLoader(ds, batch_size=None, num_workers=0):
            n += len(samples)
            nbytes += sum(len(s) for s in samples)  # numpy views or (converted) tensors
        return n, nbytes
    return timed(run)


def raw_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def as_list(batch):
    return batch


def shuffled_bytes(dataset, batch, workers):
    """Drains a DataLoader over (bytes, label) items in shuffled order."""
    dl = tud.DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers,
                        collate_fn=as_list, generator=torch.Generator().manual_seed(0))
    n = nbytes = 0
    for items in dl:
        n += len(items)
        nbytes += sum(len(x) for x, _ in items)
    return n, nbytes


def volume_dataset(volume, batch, workers):
    return timed(lambda: shuffled_bytes(dt.VolumeDataset(volume), batch, workers))


def image_folder(tree, batch, workers):
    import torchvision.datasets as datasets

    def run():
        ds = datasets.DatasetFolder(tree, loader=raw_bytes, is_valid_file=lambda p: True)
        return shuffled_bytes(ds, batch, workers)
    return timed(run)


def file_reader(root, threads):
    drop_caches()
    out = subprocess.run([FILE_READER, root, "--threads", str(threads)], check=True,
                         capture_output=True, text=True).stdout
    r = json.loads(out)
    return {"samples_per_s": r["samples_per_s"], "mb_per_s": r["mb_per_s"],
            "samples": r["files"]}


def median(runs):
    keys = runs[0].keys()
    return {k: statistics.median(r[k] for r in runs) for k in keys}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", required=True, help="the original files (class directories)")
    ap.add_argument("--volume", required=True, help="the same files packed by dlfs pack")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: cold-cache runs drop the page cache")

    results = {}

    def measure(name, fn):
        runs = [fn() for _ in range(args.reps)]
        results[name] = median(runs)
        r = results[name]
        print(f"{name:<44} {r['samples_per_s']:>10,.0f} samples/s {r['mb_per_s']:>9,.1f} MB/s",
              flush=True)

    measure("C++ loader (dlfs bench)", lambda: cxx_loader(args.volume, args.batch))
    measure("LoaderDataset via DataLoader (0 workers)",
            lambda: loader_dataset(args.volume, args.batch))
    measure("VolumeDataset, 2 workers", lambda: volume_dataset(args.volume, args.batch, 2))
    measure("ImageFolder over files, 2 workers", lambda: image_folder(args.tree, args.batch, 2))

    mnt = tempfile.mkdtemp(prefix="dlfs-bench-mnt-")
    subprocess.run([DLFS, "mount", args.volume, mnt], check=True)
    try:
        measure("files through dlfs mount, 2 threads", lambda: file_reader(mnt, 2))
    finally:
        subprocess.run(["fusermount3", "-u", mnt], check=False)
        os.rmdir(mnt)
    measure("original files, 2 threads", lambda: file_reader(args.tree, 2))

    def ratio(a, b):
        return results[a]["samples_per_s"] / results[b]["samples_per_s"]

    ratios = {
        "LoaderDataset / C++ loader (target >= 0.8)":
            ratio("LoaderDataset via DataLoader (0 workers)", "C++ loader (dlfs bench)"),
        "VolumeDataset / ImageFolder (2 workers each)":
            ratio("VolumeDataset, 2 workers", "ImageFolder over files, 2 workers"),
        "dlfs mount / original files":
            ratio("files through dlfs mount, 2 threads", "original files, 2 threads"),
    }
    print()
    for k, v in ratios.items():
        print(f"{k:<48} {v:6.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "ratios": ratios}, f, indent=2)


if __name__ == "__main__":
    main()
