#!/usr/bin/python3
"""dlfs.torch.LoaderDataset through DataLoader workers, against the ceiling of
PyTorch's worker transport (issue 50, item 4). Measured side by side in one
run, contenders alternating, medians:

  loader, 2 workers   LoaderDataset(cache_budget=...) over a volume held in
                      memory (the node cache, filled by a first epoch),
                      DataLoader(batch_size=None, num_workers=2,
                      persistent_workers=True): batches cross in the
                      workers' shared memory slots (the default);
  ordinary transport  the same with shared_memory=False: each batch's
                      tensors go through DataLoader's own transport (a new
                      shared-memory file per tensor, its descriptor passed
                      over a socket), as before the slots;
  plain tensors       the ceiling: an IterableDataset holding the same
                      samples as pre-made (batch, size) uint8 tensors and
                      int64 label tensors in memory, split between the same
                      2 persistent workers, yielding (samples, labels) as
                      LoaderDataset does (same batch size, same collation);
  loader, 0 workers   LoaderDataset in the main process, for reference.

Each repetition makes one DataLoader per contender, runs one warm-up epoch
(fills the node cache, starts the workers, moves the plain tensors into
shared memory) and times --epochs epochs; a contender's figure is the median
over every timed epoch of every repetition. Samples are fixed-size (e.g.
Fashion-MNIST's 784-byte pixels, packed raw), so both sides hand out one
(batch, size) tensor per batch.

    /usr/bin/python3 bench/python/workers_bench.py --volume fm.dlfs [--reps 5]

Run from the repository root after building (build/python).
"""
import argparse
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "build", "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.utils.data as tud  # noqa: E402

import dlfs  # noqa: E402
import dlfs.torch as dt  # noqa: E402


class PlainBatches(tud.IterableDataset):
    """Pre-made batch tensors, each worker yielding its share in turn."""

    def __init__(self, samples, labels, batch):
        self.batches = [(samples[i:i + batch].clone(), labels[i:i + batch].clone())
                        for i in range(0, len(labels), batch)]

    def __iter__(self):
        info = tud.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for k in range(worker, len(self.batches), workers):
            yield self.batches[k]


def load_plain(volume):
    vol = dlfs.Volume(volume)
    n = len(vol)
    first = vol.read(0)
    samples = np.empty((n, len(first)), dtype=np.uint8)
    for i in range(n):
        a = vol.read_array(i)
        if len(a) != samples.shape[1]:
            sys.exit(f"{volume}: samples differ in size (sample {i}): use fixed-size samples")
        samples[i] = a
    labels = vol.labels_at(np.arange(n, dtype=np.int64))
    return torch.from_numpy(samples), torch.from_numpy(labels)


def epochs(dataset, workers, count, set_epoch):
    """Samples/s of `count` timed epochs after a warm-up one."""
    dl = tud.DataLoader(dataset, batch_size=None, num_workers=workers,
                        persistent_workers=workers > 0)
    rates = []
    for e in range(count + 1):
        if set_epoch:
            dataset.set_epoch(e)
        start = time.perf_counter()
        n = 0
        for samples, labels in dl:
            n += len(labels)
        secs = time.perf_counter() - start
        if e > 0:
            rates.append(n / secs)
    del dl  # its workers end here
    return rates


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--volume", required=True, help="a volume of fixed-size samples")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs per repetition")
    ap.add_argument("--cache-budget", type=int, default=1 << 30)
    args = ap.parse_args()

    samples, labels = load_plain(args.volume)
    budget = args.cache_budget

    def loader(workers, **kw):
        def run():
            ds = dt.LoaderDataset(args.volume, args.batch, seed=0, cache_budget=budget, **kw)
            return epochs(ds, workers, args.epochs, True)
        return run

    contenders = {
        f"LoaderDataset, {args.workers} workers": loader(args.workers),
        f"LoaderDataset, {args.workers} workers, ordinary transport":
            loader(args.workers, shared_memory=False),
        f"plain tensors, {args.workers} workers (ceiling)":
            lambda: epochs(PlainBatches(samples, labels, args.batch), args.workers,
                           args.epochs, False),
        "LoaderDataset, 0 workers": loader(0),
    }
    rates = {name: [] for name in contenders}
    names = list(contenders)
    for rep in range(args.reps):
        for k in range(len(names)):  # the order rotates between repetitions
            name = names[(k + rep) % len(names)]
            rates[name] += contenders[name]()
    print(f"{args.volume}: {len(labels)} samples of {samples.shape[1]} bytes, batch "
          f"{args.batch}, {args.reps} repetitions x {args.epochs} epochs, medians")
    med = {name: statistics.median(r) for name, r in rates.items()}
    for name in names:
        print(f"{name:<52} {med[name]:>12,.0f} samples/s")
    ceiling = med[names[2]]
    print()
    print(f"{'loader / ceiling, ' + str(args.workers) + ' workers (goal >= 0.9)':<52} "
          f"{med[names[0]] / ceiling:6.2f}x")
    print(f"{'ordinary transport / ceiling':<52} {med[names[1]] / ceiling:6.2f}x")
    print(f"{'loader, workers / loader, 0 workers':<52} {med[names[0]] / med[names[3]]:6.2f}x")


if __name__ == "__main__":
    main()
