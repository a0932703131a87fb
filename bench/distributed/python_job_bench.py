#!/usr/bin/python3
"""Distributed training from Python (issue 38): 4 ranks on two fake nodes
(DLFS_RANKS_PER_NODE=2), side by side in one run, repetitions alternating,
medians.

    bench/distributed/python_job_bench.py            (as root: drops the page cache; ~5 min)
    bench/distributed/python_job_bench.py --reps 1   (~2 min)

A. Throughput: the training-shaped Python loop (bench/distributed/python_rank.py:
   LoaderDataset + DataLoader, each batch one uint8 tensor and its labels)
   under mpirun, against `mpirun dlfs bench` with the same options (batch,
   seed, epochs, defaults otherwise), on Fashion-MNIST packed from Debian's
   IDX files (70,000 x 784 B). Job samples/s per epoch: samples of all ranks
   over the slowest rank's time (what dlfs bench reports). Goal >= 0.9x.
B. Memory: a volume of 1,000,000 small samples: what the 4 ranks' loaders
   (LoaderDataset, its loader, one batch) add to the processes' private and
   proportional memory, (i) every rank its own directory (ranks given, no
   MPI: how Python jobs ran before), (ii) under mpirun (collective open, one
   directory copy per node), (iii) with torchrun's variables (no MPI: the
   node's region).
C. The cluster cache: the Python loop with cluster_cache=True, 3 epochs on
   Fashion-MNIST: storage bytes per epoch against the volume's (goal: the
   third epoch <= 5 %), beside `mpirun dlfs bench --cluster-cache`.

Prints the tables and writes JSON (--json). Environment: DLFS_BUILD_DIR
(<repo>/build), DLFS_BENCH_DIR (/tmp/dlfs-bench).
"""
import argparse
import json
import os
import pathlib
import platform
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("DLFS_BUILD_DIR", REPO / "build"))
BENCH = pathlib.Path(os.environ.get("DLFS_BENCH_DIR", "/tmp/dlfs-bench")) / "python-job"
RANK = REPO / "bench" / "distributed" / "python_rank.py"
PY = "/usr/bin/python3"
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4"]


def env(**extra):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("OMPI_", "PMIX_", "RANK", "WORLD_SIZE", "LOCAL_", "MASTER_"))}
    e.update(DLFS_RANKS_PER_NODE="2", PYTHONPATH=str(BUILD / "python"), OMP_NUM_THREADS="1",
             **extra)
    return e


def drop_caches():
    if os.geteuid() == 0:
        subprocess.run(["sync"], check=True)
        pathlib.Path("/proc/sys/vm/drop_caches").write_text("3\n")


def volumes(dlfs):
    BENCH.mkdir(parents=True, exist_ok=True)
    fm = BENCH / "fashion-mnist.dlfs"
    if not fm.exists():
        subprocess.run([dlfs, "pack", "/usr/share/datasets/fashion-mnist", "-o", fm, "-q"],
                       check=True)
    big = BENCH / "small-1m.dlfs"
    if not big.exists():
        idx = BENCH / "idx-1m"
        idx.mkdir(exist_ok=True)
        n = 1_000_000
        with open(idx / "train-images-idx3-ubyte", "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, 2, 2) + os.urandom(4 * n))
        with open(idx / "train-labels-idx1-ubyte", "wb") as f:
            f.write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))
        subprocess.run([dlfs, "pack", idx, "-o", big, "-q"], check=True)
        shutil.rmtree(idx)
    return fm, big


def python_job(volume, *args, launcher="mpirun"):
    """Reports by rank of python_rank.py under `launcher`."""
    out = BENCH / f"run-{time.monotonic_ns()}"
    out.mkdir()
    cmd = [PY, str(RANK), "--volume", str(volume), "--out", str(out), *map(str, args)]
    if launcher == "mpirun":
        subprocess.run(MPIRUN + cmd, check=True, env=env(), capture_output=True)
    else:  # torchrun's variables, no MPI
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = [subprocess.Popen(cmd, env=env(RANK=str(r), WORLD_SIZE="4", LOCAL_RANK=str(r),
                                               LOCAL_WORLD_SIZE="4", MASTER_ADDR="127.0.0.1",
                                               MASTER_PORT=str(port)))
                 for r in range(4)]
        if any(p.wait() for p in procs):
            sys.exit("python_rank.py failed")
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in range(4)]
    shutil.rmtree(out)
    return reports


def job_epochs(reports):
    """Per epoch: (job samples/s, storage bytes, cache bytes, peer bytes) over the ranks."""
    out = []
    for e in range(len(reports[0]["epochs"])):
        rows = [r["epochs"][e] for r in reports]
        out.append({"samples_per_s": sum(x["samples"] for x in rows) /
                    max(x["seconds"] for x in rows),
                    **{k: sum(x[k] for x in rows)
                       for k in ("storage_bytes", "cache_bytes", "peer_bytes")}})
    return out


def bench_job(dlfs, volume, *args):
    proc = subprocess.run(MPIRUN + [dlfs, "bench", str(volume), "--json", *map(str, args)],
                          check=True, env=env(), capture_output=True)
    j = json.loads(proc.stdout)
    return [{"samples_per_s": e["samples_per_s"], "storage_bytes": e["storage_bytes"],
             "peer_bytes": e["peer_bytes"]} for e in j["epochs"]]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--json", default=str(BENCH / "python_job_bench.json"))
    a = p.parse_args()
    dlfs = str(BUILD / "dlfs")
    fm, big = volumes(dlfs)
    info = json.loads(subprocess.run([dlfs, "info", str(fm), "--json"], check=True,
                                     capture_output=True).stdout)
    results = {"machine": platform.node(), "cpus": os.cpu_count(),
               "date": time.strftime("%Y-%m-%d %H:%M"),
               "commit": subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                        capture_output=True, text=True).stdout.strip()}

    # A. throughput, alternating
    py_runs, cpp_runs = [], []
    for _ in range(a.reps):
        drop_caches()
        cpp_runs.append(bench_job(dlfs, fm, "--batch", a.batch, "--epochs", a.epochs,
                                  "--seed", 1))
        drop_caches()
        py_runs.append(job_epochs(python_job(fm, "--batch", a.batch, "--epochs", a.epochs)))
    print(f"A. Fashion-MNIST ({info['samples']} x 784 B), mpirun -np 4, two fake nodes, "
          f"batch {a.batch}, medians of {a.reps}")
    print(f"{'epoch':>5} {'dlfs bench samples/s':>22} {'Python loop samples/s':>22} "
          f"{'ratio':>6}")
    results["throughput"] = []
    for e in range(a.epochs):
        c = statistics.median(r[e]["samples_per_s"] for r in cpp_runs)
        py = statistics.median(r[e]["samples_per_s"] for r in py_runs)
        results["throughput"].append({"epoch": e, "dlfs_bench": c, "python": py})
        print(f"{e:>5} {c:>22,.0f} {py:>22,.0f} {py / c:>6.2f}")
    c_all = statistics.median(sum(x["samples_per_s"] for x in r) / a.epochs for r in cpp_runs)
    py_all = statistics.median(sum(x["samples_per_s"] for x in r) / a.epochs for r in py_runs)
    print(f"{'mean':>5} {c_all:>22,.0f} {py_all:>22,.0f} {py_all / c_all:>6.2f}")

    # B. memory
    dir_bytes = json.loads(subprocess.run([dlfs, "info", str(big), "--json"], check=True,
                                          capture_output=True).stdout)["directory_bytes"]
    print(f"\nB. {1_000_000:,} small samples (directory {dir_bytes / 1e6:.1f} MB): what 4 ranks' "
          "loaders add")
    print(f"{'how':<44} {'private MB':>11} {'PSS MB':>9} {'x directory':>12}")
    results["memory"] = {"directory_bytes": dir_bytes}
    for name, args, launcher in (
            ("every rank its own directory (before)", ["--private-directory"], "mpirun"),
            ("mpirun (collective open)", [], "mpirun"),
            ("torchrun variables (node region)", [], "torchrun")):
        reps = [python_job(big, "--epochs", 0, *args, launcher=launcher) for _ in range(a.reps)]
        priv = statistics.median(sum(r["private_bytes"] for r in rep) for rep in reps)
        pss = statistics.median(sum(r["pss_bytes"] for r in rep) for rep in reps)
        results["memory"][name] = {"private_bytes": priv, "pss_bytes": pss}
        print(f"{name:<44} {priv / 1e6:>11.1f} {pss / 1e6:>9.1f} {priv / dir_bytes:>12.2f}")

    # C. cluster cache
    drop_caches()
    py = job_epochs(python_job(fm, "--batch", a.batch, "--epochs", 3, "--mode", "cluster_cache"))
    drop_caches()
    cpp = bench_job(dlfs, fm, "--batch", a.batch, "--epochs", 3, "--seed", 1, "--cluster-cache")
    print(f"\nC. cluster cache, Fashion-MNIST ({info['bytes'] / 1e6:.1f} MB of samples): bytes "
          "from storage per epoch, share of the volume")
    print(f"{'epoch':>5} {'Python loop':>14} {'dlfs bench':>14}")
    results["cluster_cache"] = {"volume_bytes": info["bytes"], "python": py, "dlfs_bench": cpp}
    for e in range(3):
        print(f"{e:>5} {py[e]['storage_bytes'] / info['bytes']:>13.1%} "
              f"{cpp[e]['storage_bytes'] / info['bytes']:>13.1%}")
    pathlib.Path(a.json).write_text(json.dumps(results, indent=2))
    print(f"\n{results['date']}, {results['machine']} ({results['cpus']} CPUs), commit "
          f"{results['commit']}; JSON: {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
