#!/usr/bin/python3
"""MLPerf Storage, emulated (issue 23): how many simulated accelerators a
reader keeps busy, by the benchmark's rules, dlfs next to DLIO's PyTorch
reading pattern on the same data under the same memory limit.

    bench/mlperf/mlperf_storage.py --workload resnet50 --accelerator h100 \\
        --contender dlfs --accelerators 4 --data /tmp/mlps --dataset-gib 8
    bench/mlperf/mlperf_storage.py --workload unet3d --contender dlio-pytorch --search --json

The rules (mlcommons/storage v1.0/v2.0 workloads, DLIO's statscounter.py):
each simulated accelerator is one process that takes a batch from its reader
and then "computes" by sleeping the workload's time per batch. Per process
and epoch, AU = compute time / (epoch wall time - the excluded first step),
the per-epoch AU is the mean over processes, and a run passes when the mean
over epochs is at least the workload's threshold. Throughput, as DLIO counts
it: (steps - 2) x batch / that time per process, summed over processes; MiB/s
is that times the workload's nominal sample size.

Contenders, each in a memory cgroup of at most a fifth of the data set (page
cache included; the JSON says "memory_limited"), page cache dropped first:
  dlfs          dlfs.Loader per process (rank r of N, shuffled, drop_last),
                defaults as they ship (node cache, O_DIRECT, io_uring)
  dlio-pytorch  torch DataLoader per process as DLIO sets it up: num_workers =
                the workload's reader threads, prefetch_factor =
                ceil(2 / workers), persistent_workers, fork, drop_last, no
                pin_memory; each rank takes a contiguous slice of the epoch's
                shuffled order; a sample is read whole (records by offset
                from 1,251-sample record files for resnet50, one file per
                sample for cosmoflow, np.load of one .npz per sample for
                unet3d) and, as DLIO's readers do, a fixed array goes back
  fio           (--fio) fio's throughput on the reference files, as the
                number of accelerators it could feed at the threshold

Data (--data DIR) is generated once per contender and reused: random bytes
with the workload's size distribution (seeded, so both contenders read the
same sizes). --sample-scale shrinks every sample (tests, quick looks).
Needs root for the cgroup and drop_caches; without, it runs unlimited and
says so.
"""
import argparse
import json
import math
import os
import pathlib
import queue
import shutil
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]  # this file is in bench/<benchmark>/

# Sample size (mean, stdev in bytes), batch, compute seconds per batch,
# the AU threshold, DLIO's reader threads, samples per reference file, the
# reference format, and the array a DLIO reader hands back per sample.
WORKLOADS = {
    "resnet50": dict(mean=114660, stdev=0, batch=400, compute=dict(a100=0.435, h100=0.224),
                     au=0.90, threads=8, per_file=1251, layout="records", resize=1),
    "unet3d": dict(mean=146600628, stdev=68341808, batch=7, compute=dict(a100=0.636, h100=0.323),
                   au=0.90, threads=4, per_file=1, layout="npz", resize=2097152),
    "cosmoflow": dict(mean=2828486, stdev=71311, batch=1, compute=dict(a100=0.00551, h100=0.00350),
                      au=0.70, threads=4, per_file=1, layout="records", resize=1),
}
CONTENDERS = ("dlfs", "dlio-pytorch")
SEED = 1234


# ---------------------------------------------------------------- the rules

def dlio_epoch_metrics(start, end, proc, compute, batch, exclude_start=1, exclude_end=0):
    """One process's epoch as DLIO's StatsCounter.compute_metrics_train has
    it: (AU in %, samples/s). `proc[i]` is step i's wall time (load plus
    compute), `compute[i]` its compute time; start/end bound the epoch."""
    n = len(compute)
    last = n - exclude_end
    compute_time = sum(compute[exclude_start:last])
    total = (end - start) - sum(proc[:exclude_start]) - sum(proc[last:])
    au = compute_time / total if compute_time > 0 and total > 0 else 0.0
    # DLIO counts the steps as len - 2 here, whatever it excluded.
    throughput = (n - 2) / total * batch if total > 0 else 0.0
    return au * 100, throughput


def summarize(per_rank, batch, mean_bytes, threshold):
    """per_rank[r][e] = (start, end, proc, compute). AU per epoch: the mean
    over ranks (DLIO weights by steps, equal here); throughput per epoch: the
    sum over ranks; the run: means over epochs."""
    epochs = min(len(r) for r in per_rank)
    au_epochs, tput_epochs = [], []
    for e in range(epochs):
        metrics = [dlio_epoch_metrics(*r[e], batch) for r in per_rank]
        au_epochs.append(sum(m[0] for m in metrics) / len(metrics))
        tput_epochs.append(sum(m[1] for m in metrics))
    au = sum(au_epochs) / epochs if epochs else 0.0
    tput = sum(tput_epochs) / epochs if epochs else 0.0
    return {
        "au": round(au, 3),
        "au_per_epoch": [round(a, 3) for a in au_epochs],
        "passed": epochs > 0 and au >= threshold * 100,
        "samples_per_s": round(tput, 2),
        "mib_per_s": round(tput * mean_bytes / 2**20, 2),
        "epochs": epochs,
    }


# ---------------------------------------------------------------- data

def sample_sizes(workload, dataset_bytes, scale):
    """Sizes drawn from the workload's distribution (clipped to 3 stdev, at
    least 4 KiB) until they add up to the data set; the same for every
    contender (seeded)."""
    import numpy as np
    w = WORKLOADS[workload]
    mean, stdev = w["mean"] * scale, w["stdev"] * scale
    rng = np.random.default_rng(SEED)
    n = max(w["batch"], math.ceil(dataset_bytes / mean))
    sizes = rng.normal(mean, stdev, n) if stdev else np.full(n, mean)
    sizes = np.clip(sizes, max(4096, mean - 3 * stdev), mean + 3 * stdev).astype(np.int64)
    return [int(s) for s in sizes]


class RandomBytes:
    """Incompressible bytes for samples, cut from one random block."""

    def __init__(self, largest):
        import numpy as np
        self.rng = np.random.default_rng(SEED + 1)
        self.block = self.rng.integers(0, 256, max(largest, 1 << 20) * 2, dtype=np.uint8)

    def take(self, size):
        at = int(self.rng.integers(0, len(self.block) - size))
        return self.block[at:at + size]


def manifest_matches(path, want):
    try:
        return json.loads(path.read_text()) == want
    except (OSError, ValueError):
        return False


def generate(contender, data, workload, sizes, python_dir):
    """The data set for one contender under data/<workload>-<scale>/; made
    once, reused while its manifest matches. Returns its description."""
    w = WORKLOADS[workload]
    root = data / contender
    manifest = root / "manifest.json"
    want = {"workload": workload, "sizes": sizes, "format": 1}
    if manifest_matches(manifest, want):
        return root
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    source = RandomBytes(max(sizes))
    t0 = time.time()
    print(f"mlperf_storage: generating {len(sizes)} samples, {sum(sizes) / 2**30:.2f} GiB, "
          f"for {contender} in {root}", file=sys.stderr, flush=True)
    if contender == "dlfs":
        sys.path.insert(0, str(python_dir))
        import dlfs
        with dlfs.Writer(root / "train.dlfs", alignment=4096) as writer:
            for i, size in enumerate(sizes):
                writer.add(f"train/{i:08d}", source.take(size))
    elif w["layout"] == "npz":
        import numpy as np
        for i, size in enumerate(sizes):
            np.savez(root / f"img_{i:08d}.npz", x=source.take(size))
    else:
        per_file = w["per_file"]
        for first in range(0, len(sizes), per_file):
            with open(root / f"rec_{first // per_file:06d}.rec", "wb") as f:
                for i in range(first, min(first + per_file, len(sizes))):
                    f.write(source.take(sizes[i]).tobytes())
    os.sync()
    manifest.write_text(json.dumps(want))
    print(f"mlperf_storage: generated in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return root


# ---------------------------------------------------------------- readers

def epoch_order(n, epoch):
    import numpy as np
    return np.random.default_rng(SEED + 100 + epoch).permutation(n)


def rank_slice(order, rank, world):
    """DLIO's dlio_sampler: rank r takes a contiguous ceil(n/world) slice."""
    per = math.ceil(len(order) / world)
    return order[rank * per:(rank + 1) * per]


class RecordDataset:
    """What DLIO's PyTorch readers do per sample: read it whole, hand back a
    fixed array (the reader's resized image), not the bytes read."""

    def __init__(self, root, sizes, workload):
        w = WORKLOADS[workload]
        self.root, self.sizes, self.layout, self.per_file = root, sizes, w["layout"], w["per_file"]
        self.resize = w["resize"]
        offsets, at = [], 0
        for i, s in enumerate(sizes):
            if i % self.per_file == 0:
                at = 0
            offsets.append(at)
            at += s
        self.offsets = offsets
        self.fds = {}
        self.out = None

    def __len__(self):
        return len(self.sizes)

    def __getitem__(self, i):
        import numpy as np
        if self.out is None:
            self.out = np.random.default_rng(i).integers(0, 256, self.resize, dtype=np.uint8)
        if self.layout == "npz":
            with np.load(self.root / f"img_{i:08d}.npz") as z:
                if z["x"].nbytes != self.sizes[i]:
                    raise IOError(f"img_{i:08d}.npz: {z['x'].nbytes} bytes, expected {self.sizes[i]}")
            return self.out
        k = i // self.per_file
        fd = self.fds.get(k)
        if fd is None:
            fd = self.fds[k] = os.open(self.root / f"rec_{k:06d}.rec", os.O_RDONLY)
        got = os.pread(fd, self.sizes[i], self.offsets[i])
        if len(got) != self.sizes[i]:
            raise IOError(f"rec_{k:06d}.rec: short read of sample {i}")
        return self.out


class EpochSampler:
    """The epoch's shuffled order, this rank's slice; set_epoch as torch's."""

    def __init__(self, n, rank, world):
        self.n, self.rank, self.world, self.epoch = n, rank, world, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        return iter(int(i) for i in rank_slice(epoch_order(self.n, self.epoch), self.rank,
                                               self.world))

    def __len__(self):
        return len(rank_slice(range(self.n), self.rank, self.world))


def torch_reader(cfg, rank, world):
    import torch.utils.data as tud
    w = WORKLOADS[cfg["workload"]]
    dataset = RecordDataset(pathlib.Path(cfg["root"]), cfg["sizes"], cfg["workload"])
    sampler = EpochSampler(len(dataset), rank, world)
    workers = w["threads"]
    loader = tud.DataLoader(dataset, batch_size=w["batch"], sampler=sampler, num_workers=workers,
                            prefetch_factor=math.ceil(2 / workers), persistent_workers=True,
                            multiprocessing_context="fork", pin_memory=False, drop_last=True)

    def epoch(e):
        sampler.set_epoch(e)
        return iter(loader)

    return epoch


def dlfs_reader(cfg, rank, world):
    sys.path.insert(0, cfg["python_dir"])
    import dlfs
    w = WORKLOADS[cfg["workload"]]
    loader = dlfs.Loader(str(pathlib.Path(cfg["root"]) / "train.dlfs"), batch_size=w["batch"],
                         shuffle=True, seed=SEED, rank=rank, world_size=world, drop_last=True)

    def epoch(e):
        loader.set_epoch(e)
        return iter(loader)

    return epoch


def accelerator(cfg, rank, world, barrier, results):
    """One simulated accelerator: its reader, then per epoch and step: take a
    batch, sleep the compute time; the step times go back to the parent."""
    try:
        w = WORKLOADS[cfg["workload"]]
        compute = w["compute"][cfg["accelerator"]]
        steps = len(cfg["sizes"]) // w["batch"] // world  # DLIO: floor(n / batch / ranks)
        make = dlfs_reader if cfg["contender"] == "dlfs" else torch_reader
        next_epoch = make(cfg, rank, world)
        epochs = []
        for e in range(cfg["epochs"]):
            barrier.wait()
            start = time.perf_counter()
            batches = next_epoch(e)
            proc, comp = [], []
            for _ in range(steps):
                t0 = time.perf_counter()
                next(batches)
                t1 = time.perf_counter()
                time.sleep(compute)
                t2 = time.perf_counter()
                proc.append(t2 - t0)
                comp.append(t2 - t1)
            end = time.perf_counter()
            del batches
            epochs.append((start, end, proc, comp))
        results.put((rank, epochs, None))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which fails the run
        barrier.abort()
        results.put((rank, None, f"{type(e).__name__}: {e}"))


def run_inside(cfg):
    """The run itself (inside the cgroup): one process per accelerator."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    world = cfg["accelerators"]
    barrier, results = ctx.Barrier(world), ctx.Queue()
    procs = [ctx.Process(target=accelerator, args=(cfg, r, world, barrier, results))
             for r in range(world)]
    for p in procs:
        p.start()
    per_rank, errors, got = [None] * world, [], 0
    deadline = time.monotonic() + cfg["timeout"]
    while got < world and not errors:
        try:
            rank, epochs, error = results.get(timeout=1)
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:  # killed (the memory limit) before it could report
                errors.append(f"an accelerator process died (exit {dead[0].exitcode})")
            elif time.monotonic() > deadline:
                errors.append(f"no result within {cfg['timeout']:.0f} s")
            continue
        got += 1
        if error:
            errors.append(f"rank {rank}: {error}")
        per_rank[rank] = epochs
    if errors:
        for p in procs:
            if p.is_alive():
                p.kill()
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
        elif p.exitcode not in (0, None):
            errors.append(f"an accelerator process exited with {p.exitcode}")
    if errors:
        return {"error": "; ".join(dict.fromkeys(errors))}
    w = WORKLOADS[cfg["workload"]]
    return summarize(per_rank, w["batch"], w["mean"] * cfg["sample_scale"], w["au"])


# ---------------------------------------------------------------- memory

class MemoryLimit:
    """A cgroup v1 (memory.limit_in_bytes) or v2 (memory.max) of `limit`
    bytes, page cache included; None where cgroups cannot be made."""

    def __init__(self, limit):
        self.limit, self.path, self.version = limit, None, None
        for root, version, file in (("/sys/fs/cgroup/memory", 1, "memory.limit_in_bytes"),
                                    ("/sys/fs/cgroup", 2, "memory.max")):
            root = pathlib.Path(root)
            if not (root / "cgroup.procs").exists() or not os.access(root, os.W_OK):
                continue
            if version == 2 and "memory" not in (root / "cgroup.subtree_control").read_text():
                continue
            try:
                path = root / f"dlfs-mlperf-{os.getpid()}-{time.monotonic_ns()}"
                path.mkdir()
                (path / file).write_text(str(limit))
                if version == 1:  # no swap either, where the kernel accounts it
                    try:
                        (path / "memory.memsw.limit_in_bytes").write_text(str(limit))
                    except OSError:
                        pass
            except OSError:
                continue
            self.path, self.version = path, version
            break

    def enter(self):
        """For preexec_fn: moves the calling (child) process in."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def peak(self):
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            return int((self.path / name).read_text())
        except (OSError, ValueError):
            return None

    def oom_kills(self):
        try:
            if self.version == 1:
                text = (self.path / "memory.oom_control").read_text()
            else:
                text = (self.path / "memory.events").read_text()
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return None

    def remove(self):
        if self.path:
            for _ in range(50):
                try:
                    self.path.rmdir()
                    return
                except OSError:
                    time.sleep(0.1)


def drop_caches():
    """The page cache, and node cache regions nobody is attached to (left
    by a run the memory limit killed): every run starts cold."""
    import fcntl
    for region in pathlib.Path("/dev/shm").glob(f"dlfs-{os.geteuid()}-*"):
        try:
            with open(region, "rb") as f:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # attached processes hold it shared
                region.unlink()
        except OSError:
            pass
    if os.geteuid() != 0:
        return False
    subprocess.run(["sync"], check=True)
    pathlib.Path("/proc/sys/vm/drop_caches").write_text("3\n")
    return True


def run(cfg, dataset_bytes):
    """One run of cfg["accelerators"] accelerators in a fresh cgroup (none
    with cfg["unlimited"])."""
    unlimited = cfg.get("unlimited", False)
    if not cfg["timeout"]:
        # A run 10x slower than its compute time cannot be near the threshold.
        w = WORKLOADS[cfg["workload"]]
        steps = len(cfg["sizes"]) // w["batch"] // cfg["accelerators"]
        cfg = dict(cfg, timeout=max(120.0, 10 * cfg["epochs"] * steps *
                                    w["compute"][cfg["accelerator"]]))
    limit = None if unlimited else MemoryLimit(cfg["memory_limit"] or dataset_bytes // 5)
    dropped = drop_caches()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg, f)
    child = subprocess.Popen([sys.executable, __file__, "--run-inside", f.name],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True,
                             preexec_fn=limit.enter if limit and limit.path else None)
    try:
        out, err = child.communicate(timeout=cfg["timeout"] + 120)
        try:
            result = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            result = {"error": f"exit {child.returncode}: {err.strip()[-800:]}"}
    except subprocess.TimeoutExpired:  # the run's own deadline did not end it
        os.killpg(child.pid, 9)
        child.communicate()
        result = {"error": f"no result within {cfg['timeout'] + 120:.0f} s"}
    finally:
        os.unlink(f.name)
    result.update(accelerators=cfg["accelerators"], contender=cfg["contender"],
                  workload=cfg["workload"], accelerator=cfg["accelerator"],
                  page_cache_dropped=dropped,
                  memory_limited=bool(limit and limit.path),
                  memory_limit_bytes=limit.limit if limit and limit.path else None,
                  memory_within_rules=bool(limit and limit.path and
                                           limit.limit <= dataset_bytes // 5))
    if limit and limit.path:
        result["peak_memory_bytes"] = limit.peak()
        kills = limit.oom_kills()
        if kills:
            result["oom_kills"] = kills
            result["error"] = (result.get("error", "") + f" (the memory limit killed {kills} "
                               f"process(es))").strip()
        limit.remove()
    if "error" in result:
        result["passed"] = False
    return result


def search(cfgs, dataset_bytes, largest, report):
    """The largest N that passes, for each contender: doubling, then
    bisection. The contenders take turns at every step (the order rotating),
    so each comparison is made minutes apart, not a search apart: this
    disk's speed drifts from minute to minute."""
    names = list(cfgs)
    good = {c: 0 for c in names}
    bad = {c: None for c in names}
    runs = {c: [] for c in names}

    def turn(k, step):
        order = names[k % len(names):] + names[:k % len(names)]
        for c in order:
            n = step(c)
            if n is None:
                continue
            r = run(dict(cfgs[c], accelerators=n), dataset_bytes)
            report(r)
            runs[c].append(r)
            if r["passed"]:
                good[c] = max(good[c], n)
            else:
                bad[c] = n if bad[c] is None else min(bad[c], n)

    n, k = 1, 0
    while n <= largest and any(bad[c] is None for c in names):
        turn(k, lambda c: n if bad[c] is None else None)
        n, k = n * 2, k + 1
    while any(bad[c] is not None and bad[c] - good[c] > 1 for c in names):
        turn(k, lambda c: (good[c] + bad[c]) // 2
             if bad[c] is not None and bad[c] - good[c] > 1 else None)
        k += 1
    # Per contender: the passing run at its largest N; if none passes, the
    # 1-accelerator run (what one accelerator gets, for comparison).
    best = {c: next((r for r in runs[c] if r["accelerators"] == max(good[c], 1)), None)
            for c in names}
    return good, best, runs


def fio_limit(workload, root, sizes, scale, seconds):
    """fio's read throughput on the reference files, in bytes/s, O_DIRECT at
    queue depth 32: random sample-sized reads in record files, random 1 MiB
    pieces of the files else (what the device gives large reads)."""
    w = WORKLOADS[workload]
    if w["per_file"] > 1:
        bs = max(4096, (int(w["mean"] * scale) + 4095) // 4096 * 4096)
        pattern = ["--rw=randread", f"--bs={bs}"]
    else:
        pattern = ["--rw=randread", "--bs=1M"]
    drop_caches()
    out = subprocess.run(
        ["fio", "--name=limit", f"--opendir={root}", "--direct=1", "--ioengine=io_uring",
         "--iodepth=32", "--numjobs=1", "--time_based", f"--runtime={seconds}",
         "--group_reporting", "--output-format=json", *pattern],
        capture_output=True, text=True, check=True).stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]
    return job["read"]["bw_bytes"]


def main():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="resnet50")
    p.add_argument("--accelerator", choices=("a100", "h100"), default="h100")
    p.add_argument("--contender", choices=(*CONTENDERS, "none"), action="append",
                   help="dlfs or dlio-pytorch (repeatable; default: both; none: only --fio)")
    p.add_argument("--accelerators", type=int, default=1, help="simulated accelerators (1)")
    p.add_argument("--search", action="store_true", help="find the largest passing number")
    p.add_argument("--max-accelerators", type=int, default=64)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--data", type=pathlib.Path, default=pathlib.Path("/tmp/dlfs-mlperf-storage"),
                   help="where data sets are generated and kept (%(default)s)")
    p.add_argument("--dataset-gib", type=float, default=8.0,
                   help="data set size; the memory limit is a fifth of it (%(default)s)")
    p.add_argument("--sample-scale", type=float, default=1.0,
                   help="multiply every sample size (and nothing else) by this")
    p.add_argument("--fio", type=float, default=0, metavar="SECONDS",
                   help="also measure fio's limit on the reference files for this long")
    p.add_argument("--unlimited", action="store_true", help="no memory cgroup (not by the rules)")
    p.add_argument("--memory-limit-mib", type=float, default=0,
                   help="the cgroup's limit instead of a fifth of the data set (tests)")
    p.add_argument("--timeout", type=float, default=0,
                   help="seconds a run may take before it fails (default: 10x its compute "
                        "time, at least 120)")
    p.add_argument("--python-dir", default=str(REPO / "build" / "python"),
                   help="where the dlfs package is (%(default)s)")
    p.add_argument("--json", action="store_true", help="print JSON lines only")
    p.add_argument("--run-inside", help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.run_inside:
        cfg = json.loads(pathlib.Path(args.run_inside).read_text())
        print(json.dumps(run_inside(cfg)), flush=True)
        return 0

    w = WORKLOADS[args.workload]
    dataset_bytes = int(args.dataset_gib * 2**30)
    sizes = sample_sizes(args.workload, dataset_bytes, args.sample_scale)
    data = args.data / f"{args.workload}-x{args.sample_scale:g}-{args.dataset_gib:g}g"
    # AU leaves out each process's first step: it needs at least 3.
    most = len(sizes) // w["batch"] // 3
    if most < (1 if args.search else args.accelerators):
        p.error(f"{len(sizes)} samples make fewer than 3 batches of {w['batch']} per "
                "accelerator: a larger --dataset-gib or a smaller --sample-scale")
    contenders = [c for c in args.contender or CONTENDERS if c != "none"]
    if args.fio and not shutil.which("fio"):
        p.error("--fio: fio is not installed (apt-get install fio)")

    def report(r):
        if args.json:
            print(json.dumps(r), flush=True)
        else:
            au = f"AU {r['au']:6.2f} %" if "au" in r else "AU   -   "
            print(f"  {r['contender']:13s} {r['accelerators']:3d} accel  {au}  "
                  f"{r.get('samples_per_s', 0):9.1f} samples/s {r.get('mib_per_s', 0):8.1f} MiB/s  "
                  f"{'pass' if r['passed'] else 'FAIL'}"
                  + (f"  peak {r['peak_memory_bytes'] / 2**20:.0f} MiB"
                     if r.get("peak_memory_bytes") else "")
                  + (f"  ({r['error']})" if r.get("error") else ""), flush=True)

    if not args.json:
        limit = int(args.memory_limit_mib * 2**20) or dataset_bytes // 5
        print(f"{args.workload} on {args.accelerator}: {len(sizes)} samples, "
              f"{sum(sizes) / 2**30:.2f} GiB, batch {w['batch']}, compute "
              f"{w['compute'][args.accelerator]} s, AU >= {w['au'] * 100:.0f} %, "
              f"memory limit {limit / 2**20:.0f} MiB, {args.epochs} epochs")
    fio_before = []
    if args.fio:
        root = generate("dlio-pytorch", data, args.workload, sizes, args.python_dir)
        fio_before.append(fio_limit(args.workload, root, sizes, args.sample_scale, args.fio))
    summary, cfgs = {}, {}
    for contender in contenders:
        root = generate(contender, data, args.workload, sizes, args.python_dir)
        cfgs[contender] = dict(workload=args.workload, accelerator=args.accelerator,
                               contender=contender, root=str(root), sizes=sizes,
                               epochs=args.epochs, sample_scale=args.sample_scale,
                               python_dir=args.python_dir, accelerators=args.accelerators,
                               timeout=args.timeout, unlimited=args.unlimited,
                               memory_limit=int(args.memory_limit_mib * 2**20))
    if args.search:
        good, best, _ = search(cfgs, dataset_bytes, min(most, args.max_accelerators), report)
        for contender in contenders:
            b = best[contender]
            summary[contender] = dict(b or {}, accelerators=good[contender], search=True,
                                      au_at=b["accelerators"] if b else None,
                                      contender=contender, workload=args.workload,
                                      accelerator=args.accelerator)
            if args.json:
                print(json.dumps(summary[contender]), flush=True)
            else:
                print(f"  {contender}: {good[contender]} accelerator(s) pass")
    else:
        for contender in contenders:
            summary[contender] = run(cfgs[contender], dataset_bytes)
            report(summary[contender])
    if args.fio:
        root = generate("dlio-pytorch", data, args.workload, sizes, args.python_dir)
        # Measured before and after the contenders: this disk drifts, and the
        # limit is the better of the two.
        bws = fio_before + [fio_limit(args.workload, root, sizes, args.sample_scale, args.fio)]
        bw = max(bws)
        # At the threshold a step lasts compute / AU and reads one batch.
        per_accel = w["batch"] * w["mean"] * args.sample_scale * w["au"] / \
            w["compute"][args.accelerator]
        limit = {"contender": "fio", "mib_per_s": round(bw / 2**20, 1),
                 "mib_per_s_runs": [round(b / 2**20, 1) for b in bws],
                 "accelerators_at_threshold": round(bw / per_accel, 2),
                 "workload": args.workload, "accelerator": args.accelerator}
        print(json.dumps(limit) if args.json else
              f"  fio limit     {bw / 2**20:.0f} MiB/s (runs: "
              f"{', '.join(str(x) for x in limit['mib_per_s_runs'])}) = "
              f"{limit['accelerators_at_threshold']:.2f} accelerators at the threshold",
              flush=True)
    failed = [c for c, r in summary.items() if r.get("error")]
    return 1 if failed and not args.search else 0


if __name__ == "__main__":
    sys.exit(main())
