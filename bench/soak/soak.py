#!/usr/bin/python3
"""Soak test (docs/reliability.md): reads a volume for many epochs through the Python loader and
through the FUSE mount, records resident memory and open file descriptors after every epoch, and
checks both stay flat after a warm-up.

  bench/soak/soak.sh [--epochs N] [--minutes M] [--volume V] [--csv OUT] [--tolerance-mb T] ...

Run by bench/soak/soak.sh, which finds the build. Each part runs for --epochs epochs or until its
share of --minutes is used, whichever comes first (at least --min-epochs). Per epoch:
  loader  one shuffled epoch of dlfs.Loader (set_epoch), 200 random vol[i] reads, and every
          10th epoch a fresh Loader (the old one destroyed mid-epoch); run and measured in a child
          process that keeps nothing per epoch;
  fuse    every file of `dlfs mount -f` read whole; measured in the mount process. Files read
          once are served from the page cache after that unless --fuse-evict drops them.
"Flat": after the warm-up epochs, RSS never exceeds its warm-up maximum by more than the
tolerance, and open fds end (the least of the last 3 epochs) at or below their warm-up maximum:
a leaked fd stays, while a CI run under load counted 8 fds in one epoch against 7 in every
other (not reproduced in 300 epochs beside two busy loops). Exit status 1 if a series is not
flat.
"""
import argparse
import os
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile
import time


def rss_kb(pid="self"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def fd_count(pid="self"):
    """Open fds, not counting /dev/fuse: libfuse clones one per worker thread, and its thread
    pool grows and shrinks with the load (that is not a leak)."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "/dev/fuse":
                n += 1
        except OSError:
            pass  # closed meanwhile (listdir's own fd)
    return n


def make_volume(dlfs_bin, workdir, samples):
    src = workdir / "src"
    rnd = random.Random(1)
    for i in range(samples):
        p = src / f"c{i % 10}" / f"{i:06d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rnd.randbytes(rnd.randrange(500, 20000)))
    vol = workdir / "soak.dlfs"
    subprocess.run([dlfs_bin, "pack", str(src), "-o", str(vol), "-q", "--force", "--all-files"], check=True,
                   stdout=subprocess.DEVNULL)
    shutil.rmtree(src)
    return vol


class Series:
    def __init__(self, name):
        self.name = name
        self.rows = []  # (epoch, seconds, rss_kb, fds, samples)

    def add(self, epoch, seconds, rss, fds, samples):
        self.rows.append((epoch, seconds, rss, fds, samples))

    def verdict(self, warmup, tolerance_kb):
        """(flat, text)."""
        if len(self.rows) <= warmup:
            return False, f"{self.name}: only {len(self.rows)} epochs, need more than {warmup}"
        warm, after = self.rows[:warmup], self.rows[warmup:]
        base_rss = max(r[2] for r in warm)
        growth = max(r[2] for r in after) - base_rss
        base_fds = max(r[3] for r in warm)
        fds_after = max(r[3] for r in after)
        fds_end = min(r[3] for r in after[-3:])
        flat = growth <= tolerance_kb and fds_end <= base_fds
        samples = sum(r[4] for r in self.rows)
        text = (f"{self.name}: {len(self.rows)} epochs, {samples} samples, "
                f"{self.rows[-1][1]:.0f} s; RSS {self.rows[0][2] / 1024:.1f} MB first, "
                f"{base_rss / 1024:.1f} MB at most in {warmup} warm-up epochs, "
                f"{self.rows[-1][2] / 1024:.1f} MB last, {growth / 1024:+.1f} MB at most above "
                f"warm-up after it (tolerance {tolerance_kb / 1024:.0f} MB); open fds at most "
                f"{base_fds} in warm-up, {fds_after} after, {fds_end} at the end: "
                f"{'flat' if flat else 'NOT FLAT'}")
        return flat, text


def loader_epochs(vol_path, epochs, min_epochs, deadline):
    """The loader part's work, run in a child process: one line "EPOCH SAMPLES" per epoch on
    stdout. It keeps nothing per epoch, so its memory is the loader's alone."""
    import dlfs
    vol = dlfs.Volume(str(vol_path))
    rnd = random.Random(2)
    loader = None
    epoch = 0
    while epoch < epochs and (epoch < min_epochs or time.monotonic() < deadline):
        if loader is None or epoch % 10 == 0:
            if loader is not None:
                it = iter(loader)
                next(it)  # destroyed with reads in flight
                del it
            loader = dlfs.Loader(vol, batch_size=64, seed=epoch)
        loader.set_epoch(epoch)
        n = 0
        for batch in loader:
            n += len(batch)
        assert n == len(vol), (n, len(vol))
        for _ in range(200):
            data, _ = vol[rnd.randrange(len(vol))]
            n += 1
        # Its own fds and RSS, taken here between epochs: taken from outside, they could
        # catch the next epoch's Loader being set up beside the old one (a CI run under load
        # counted 3 fds too many once, and 11.8 MB above the warm-up once, both transient).
        print(epoch, n, fd_count(), rss_kb(), flush=True)
        epoch += 1


def soak_loader(vol_path, args, deadline):
    # Measured in a child: the series kept here grows by some 200 bytes an epoch, which a long
    # run in one process counted as the loader's (14 MB over 77,000 epochs).
    series = Series("python loader")
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, __file__, "--loader-child", str(vol_path),
                             "--epochs", str(args.epochs), "--min-epochs", str(args.min_epochs),
                             "--seconds", str(max(0.0, deadline - time.monotonic()))],
                            stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        epoch, samples, fds, rss = map(int, line.split())
        series.add(epoch, time.monotonic() - start, rss, fds, samples)
    if proc.wait() != 0:
        raise RuntimeError(f"the loader child failed (exit status {proc.returncode})")
    return series


def soak_fuse(dlfs_bin, vol_path, workdir, args, deadline):
    mnt = workdir / "mnt"
    mnt.mkdir(exist_ok=True)
    proc = subprocess.Popen([dlfs_bin, "mount", "-f", str(vol_path), str(mnt)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t0 = time.monotonic()
    while not os.path.ismount(mnt):
        if proc.poll() is not None or time.monotonic() - t0 > 20:
            proc.kill()
            return None, "fuse: mount did not come up: " + proc.communicate()[1].decode()
        time.sleep(0.05)
    series = Series("fuse mount")
    start = time.monotonic()
    try:
        files = [os.path.join(d, f) for d, _, fs in os.walk(mnt) for f in fs]
        epoch = 0
        evict = random.Random(3)
        while epoch < args.epochs and (epoch < args.min_epochs or time.monotonic() < deadline):
            random.Random(epoch).shuffle(files)
            for path in files:
                with open(path, "rb") as f:
                    n = 0
                    while chunk := f.read(1 << 20):
                        n += len(chunk)
                    if args.fuse_evict is None:
                        continue
                    if evict.random() < args.fuse_evict:
                        page = evict.randrange(max(1, (n + 4095) // 4096))
                        os.posix_fadvise(f.fileno(), page * 4096, 4096, os.POSIX_FADV_DONTNEED)
                    else:
                        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            series.add(epoch, time.monotonic() - start, rss_kb(proc.pid), fd_count(proc.pid),
                       len(files))
            epoch += 1
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return series, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dlfs", help="the dlfs CLI (required)")
    ap.add_argument("--epochs", type=int, default=1000000,
                    help="epochs per part (default: no limit)")
    ap.add_argument("--minutes", type=float, default=None, help="total time for both parts")
    ap.add_argument("--min-epochs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=None, help="epochs (default: 10%%, at least 3)")
    ap.add_argument("--tolerance-mb", type=float, default=8.0)
    ap.add_argument("--volume", help="volume to read (default: 3000 synthetic samples)")
    ap.add_argument("--samples", type=int, default=3000)
    ap.add_argument("--csv", help="write every measurement here")
    ap.add_argument("--skip-fuse", action="store_true")
    ap.add_argument("--skip-loader", action="store_true")
    ap.add_argument("--fuse-evict", type=float, default=None, metavar="P",
                    help="after each file read, drop its pages from the page cache, so that "
                         "every read reaches the mount; for a fraction P of the reads drop one "
                         "page only, as memory reclaim does (issue 20 #3)")
    ap.add_argument("--loader-child", help=argparse.SUPPRESS)  # VOLUME: the loader part's child
    ap.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.loader_child:
        loader_epochs(args.loader_child, args.epochs, args.min_epochs,
                      time.monotonic() + args.seconds)
        return 0
    if args.dlfs is None:
        ap.error("the following arguments are required: --dlfs")
    if args.minutes is None and args.epochs >= 1000000:
        ap.error("give --epochs or --minutes")
    import dlfs  # noqa: F401  (fail here, before the volume is made, if it is not importable)

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="dlfs-soak-"))
    try:
        vol = pathlib.Path(args.volume) if args.volume else make_volume(args.dlfs, workdir,
                                                                          args.samples)
        parts = 2 - args.skip_fuse - args.skip_loader
        share = (args.minutes * 60 / max(1, parts)) if args.minutes else 1e12
        results = [] if args.skip_loader else [soak_loader(vol, args, time.monotonic() + share)]
        notes = []
        if not args.skip_fuse:
            series, why = soak_fuse(args.dlfs, vol, workdir, args, time.monotonic() + share)
            if series is None:
                notes.append(why)
            else:
                results.append(series)
        ok = True
        for s in results:
            warmup = args.warmup or max(3, len(s.rows) // 10)
            flat, text = s.verdict(warmup, args.tolerance_mb * 1024)
            ok &= flat
            print(text)
        for n in notes:
            print(n)
        if args.csv:
            with open(args.csv, "w") as f:
                f.write("part,epoch,seconds,rss_kb,open_fds,samples\n")
                for s in results:
                    for r in s.rows:
                        f.write(f"{s.name},{r[0]},{r[1]:.2f},{r[2]},{r[3]},{r[4]}\n")
        return 0 if ok else 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
