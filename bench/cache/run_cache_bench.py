#!/usr/bin/python3
"""The node cache benchmark (issue 25): what the default (the node cache on)
costs and gives against --cache-budget 0, side by side in one run, cold
(page cache dropped before every run), repetitions alternating, medians.

    bench/cache/run_cache_bench.py                   (as root; ~15 min)
    bench/cache/run_cache_bench.py --samples 4000 --reps 2     (development: ~3 min)

Rows, on a volume of SAMPLES x ~100 KB (bench/data/make_imagenet_like.py):
  default / off      dlfs bench, 3 epochs: epoch 1, epochs 2-3 (samples/s,
                     CPU s/GB, cache hit rate, bytes from the device)
  mpirun -np 4       the same under mpirun (one job, 4 ranks on this node):
                     epoch 1 and the node's memory growth (peak of MemTotal -
                     MemAvailable during the run, less before it)
  cgroup 1/3         defaults inside a memory cgroup (v1) limited to a third
                     of the volume: completes? epochs, hit rate
  budget 25/50/75 %  steady state: a cache of that share of the volume, filled
                     first by another process that "computes" 10 ms per batch
                     (as training does, so its filler runs freely), then dlfs
                     bench attached to it, EPOCHS epochs: the last epoch's hit
                     rate, device bytes and time against the cache off, with
                     the hit rate MIN and LRU get on the same shuffled trace
                     (bench/cache/cache_model.py)
Prints a table and writes JSON (--json PATH).
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import cache_model  # noqa: E402


def drop_caches():
    subprocess.run(["sync"], check=True)
    pathlib.Path("/proc/sys/vm/drop_caches").write_text("3\n")


def used_memory():
    info = {}
    for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
        key, value = line.split(":", 1)
        info[key] = int(value.split()[0]) * 1024
    return info["MemTotal"] - info["MemAvailable"]


class PeakMemory:
    """Peak growth of the node's used memory while the block runs."""

    def __enter__(self):
        self.base, self.peak, self.stop = used_memory(), 0, False
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def _watch(self):
        while not self.stop:
            self.peak = max(self.peak, used_memory() - self.base)
            time.sleep(0.05)

    def __exit__(self, *exc):
        self.stop = True
        self.thread.join()


def bench(dlfs, volume, epochs, extra=(), prefix=(), cgroup=None):
    drop_caches()
    cmd = [*prefix, dlfs, "bench", volume, "--json", "--epochs", str(epochs), *extra]
    if cgroup:
        cmd = ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$@"', "sh", *cmd]
    with PeakMemory() as mem:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    out = {"returncode": proc.returncode, "memory_growth": mem.peak, "stderr": proc.stderr[-400:]}
    if proc.returncode == 0:
        text = proc.stdout
        if prefix:  # under mpirun: rank 0's JSON object
            text = text[text.index("{"):]
        out.update(json.loads(text))
    return out


# Fills the node cache as a training job would: a loader whose caller
# "computes" between batches (so the filler runs freely), until the cache
# stops growing; then says so and holds the region until stdin closes.
FILLER = """
import sys, time
sys.path.insert(0, sys.argv[3])
import dlfs
loader = dlfs.Loader(sys.argv[1], 256, cache_budget=int(sys.argv[2]))
last, e = -1, 0
while True:
    loader.set_epoch(e); e += 1
    for _ in loader:
        time.sleep(0.01)
    used = loader.stats()["cache_used_bytes"]
    if used == last:
        break
    last = used
print("ready", used, flush=True)
sys.stdin.read()
"""


def filled_bench(dlfs, volume, budget, python_dir, epochs):
    """dlfs bench on a node cache another process filled (steady state)."""
    holder = subprocess.Popen([sys.executable, "-c", FILLER, volume, str(budget), python_dir],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline().split()
        r = bench(dlfs, volume, epochs, extra=["--cache-budget", str(budget)])
        r["filled_bytes"] = int(line[1]) if len(line) > 1 else 0
    finally:
        holder.stdin.close()
        holder.wait(60)
    return r


def epoch_row(run, first, last):
    eps = run.get("epochs", [])[first:last]
    if not eps:
        return None
    secs = sum(e["seconds"] for e in eps)
    samples = sum(e["samples"] for e in eps)
    cache = [e.get("cache", {}) for e in eps]
    hits = sum(c.get("hits", 0) for c in cache)
    looks = hits + sum(c.get("misses", 0) for c in cache)
    # Under mpirun, rank 0 reports only time per epoch (no pipeline, no cache).
    return {"samples_per_s": samples / secs if secs else 0,
            "cpu_s_per_gb": statistics.mean(e["cpu_s_per_gb"] for e in eps),
            "hit_rate": hits / looks if looks else 0.0,
            "device_bytes": statistics.mean(e.get("pipeline", {}).get("io_bytes", 0)
                                            for e in eps)}


def median_rows(rows):
    keys = rows[0].keys()
    return {k: statistics.median(r[k] for r in rows) for k in keys}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=16000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--epochs", type=int, default=2, help="epochs of the budget runs")
    p.add_argument("--dir", default=os.environ.get("DLFS_BENCH_DIR", "/tmp/dlfs-bench"))
    p.add_argument("--build", default=os.environ.get("DLFS_BUILD_DIR", str(REPO / "build")))
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--no-mpi", action="store_true")
    a = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("run_cache_bench: needs root (it drops the page cache and makes cgroups)")
    dlfs = str(pathlib.Path(a.build) / "dlfs")
    work = pathlib.Path(a.dir)
    work.mkdir(parents=True, exist_ok=True)
    tree = work / f"cache-bench-{a.samples}"
    volume = str(tree) + ".dlfs"
    if not tree.exists():
        make_tree = REPO / "bench" / "data" / "make_imagenet_like.py"
        subprocess.run([sys.executable, str(make_tree), "--files", str(a.samples), "--mean-kb",
                        "100", "-q", str(tree)], check=True)
    if not os.path.exists(volume):
        subprocess.run([dlfs, "pack", str(tree), "-o", volume, "-q"], check=True)
    info = json.loads(subprocess.run([dlfs, "info", volume, "--json"], capture_output=True,
                                     check=True, text=True).stdout)
    vol_bytes = info["bytes"]
    mpi = [] if a.no_mpi else ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4"]

    cgroup = None
    root = pathlib.Path("/sys/fs/cgroup/memory")
    if (root / "cgroup.procs").exists() and os.access(root, os.W_OK):
        cgroup = root / f"dlfs-cache-bench-{os.getpid()}"
        cgroup.mkdir(exist_ok=True)
        (cgroup / "memory.limit_in_bytes").write_text(str(vol_bytes // 3))

    runs = {}
    variants = [("default", dict(epochs=3)),
                ("off", dict(epochs=3, extra=["--cache-budget", "0"]))]
    if mpi:
        variants += [("mpi default", dict(epochs=2, prefix=mpi)),
                     ("mpi off", dict(epochs=2, prefix=mpi, extra=["--cache-budget", "0"]))]
    if cgroup:
        variants += [("cgroup 1/3 default", dict(epochs=3, cgroup=cgroup))]
    for share in (0.25, 0.5, 0.75):
        variants += [(f"budget {share:.2f}", dict(filled=int(vol_bytes * share)))]
    variants += [("budget off", dict(epochs=a.epochs, extra=["--cache-budget", "0"]))]
    try:
        for rep in range(a.reps):
            order = variants[rep % len(variants):] + variants[:rep % len(variants)]
            for name, kw in order:
                if "filled" in kw:
                    r = filled_bench(dlfs, volume, kw["filled"], str(pathlib.Path(a.build) / "python"),
                                     a.epochs)
                else:
                    r = bench(dlfs, volume, **kw)
                runs.setdefault(name, []).append(r)
                print(f"rep {rep} {name}: rc {r['returncode']}", file=sys.stderr)
                if a.json:  # the raw runs so far, in case a later step fails
                    pathlib.Path(a.json + ".runs").write_text(json.dumps(runs))
    finally:
        if cgroup:
            try:
                cgroup.rmdir()
            except OSError:
                pass

    table = {}
    for name, rs in runs.items():
        ok = [r for r in rs if r["returncode"] == 0]
        row = {"runs": len(rs), "completed": len(ok)}
        if ok:
            first = median_rows([epoch_row(r, 0, 1) for r in ok])
            row["epoch1"] = first
            if all(len(r.get("epochs", [])) > 1 for r in ok):
                # Budget runs: their last epoch; the others: epochs 2...
                n = len(ok[0]["epochs"])
                begin = n - 1 if name.startswith("budget") else 1
                row["later"] = median_rows([epoch_row(r, begin, n) for r in ok])
            row["memory_growth"] = statistics.median(r["memory_growth"] for r in ok)
        table[name] = row

    trace = cache_model.shuffled_epochs(a.samples, 3, seed=1)
    later = a.samples * 2
    model = {}
    for share in (0.25, 0.5, 0.75):
        c = int(a.samples * share)
        model[share] = {"min": cache_model.min_hits(trace, c)[0] / later,
                        "lru": cache_model.lru_hits(trace, c)[0] / later}

    def fmt(row, key, part="epoch1", scale=1.0, digits=0):
        v = row.get(part, {}).get(key)
        return "-" if v is None else f"{v * scale:,.{digits}f}"

    print(f"\nvolume {volume}: {a.samples} samples, {vol_bytes / 1e9:.2f} GB; "
          f"medians of {a.reps} cold runs, alternating\n")
    print(f"{'run':<20} {'done':>5} {'ep1 samples/s':>14} {'ep1 CPU s/GB':>13} "
          f"{'later samples/s':>16} {'later hit %':>11} {'later dev GB':>13} {'mem +GB':>8}")
    for name, row in table.items():
        print(f"{name:<20} {row['completed']:>2}/{row['runs']:<2} {fmt(row, 'samples_per_s'):>14} "
              f"{fmt(row, 'cpu_s_per_gb', digits=3):>13} "
              f"{fmt(row, 'samples_per_s', 'later'):>16} "
              f"{fmt(row, 'hit_rate', 'later', 100, 1):>11} "
              f"{fmt(row, 'device_bytes', 'later', 1e-9, 2):>13} "
              f"{row.get('memory_growth', 0) / 1e9:>8.2f}")
    d, o = table.get("default", {}), table.get("off", {})
    if d.get("epoch1") and o.get("epoch1"):
        print(f"\ndefault / off, first epoch: "
              f"{d['epoch1']['samples_per_s'] / o['epoch1']['samples_per_s']:.2f} (target >= 0.95)")
    md, mo = table.get("mpi default", {}), table.get("mpi off", {})
    if md.get("epoch1") and mo.get("epoch1"):
        print(f"mpirun -np 4: memory growth {md['memory_growth'] / vol_bytes:.2f}x the volume "
              f"(target <= 1.2), first epoch {md['epoch1']['samples_per_s'] / mo['epoch1']['samples_per_s']:.2f}"
              f" of the cache off")
    off = table.get("budget off", {}).get("later")
    for share in (0.25, 0.5, 0.75):
        row = table.get(f"budget {share:.2f}", {}).get("later")
        if row and off:
            print(f"budget {share:.0%}: last epoch hit {row['hit_rate']:.3f} (MIN {model[share]['min']:.3f},"
                  f" LRU {model[share]['lru']:.3f}), device {row['device_bytes'] / vol_bytes:.3f} of the"
                  f" volume (target <= {1 - share + 0.02:.2f}), time {off['samples_per_s'] / row['samples_per_s']:.2f}"
                  f" of the cache off's")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"volume_bytes": vol_bytes, "table": table,
                                                    "model": model, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
