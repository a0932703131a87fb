#!/usr/bin/python3
"""Each rank's node-cache fill decision and epoch times: run under mpirun,
every rank reads the volume with a dlfs.Loader told how many epochs come
(epochs=) and prints its epoch times and stats()["cache_fill_plan"], the
saving and cost the loader predicted. Shows whether the ranks of a node
agree and whether the predicted saving is of the order of an epoch.

    mpirun --allow-run-as-root --oversubscribe -np 2 bench/cache/fill_plans.py VOLUME
"""
import argparse
import os
import pathlib
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("volume")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--python-dir", default=str(REPO / "build/python"),
                   help="where the dlfs package is (default: build/python)")
    args = p.parse_args()
    sys.path.insert(0, args.python_dir)
    import dlfs

    loader = dlfs.Loader(args.volume, batch_size=args.batch, epochs=args.epochs)
    times = []
    for _ in range(args.epochs):
        start = time.monotonic()
        for _batch in loader:
            pass
        times.append(time.monotonic() - start)
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0"))
    print(f"rank {rank}: epochs " + " ".join(f"{t:.3f}" for t in times) + " s; "
          + (loader.stats().get("cache_fill_plan") or "no plan"), flush=True)


if __name__ == "__main__":
    main()
