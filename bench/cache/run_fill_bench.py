#!/usr/bin/python3
"""The node cache's fill and small-sample reads (issue 36): what `dlfs bench`
gives with default options against the two choices a user could make by
hand, --cache-budget <holds the volume> and --cache-budget 0, side by side in
one run: cold (page cache dropped before every run), configurations
alternating, medians of --reps.

    bench/cache/run_fill_bench.py                        (as root; ~20 min)
    bench/cache/run_fill_bench.py --reps 1 --big-samples 4000   (development)

Volumes (made once in --dir): Fashion-MNIST packed from Debian's
dataset-fashion-mnist (70,000 samples of 784 B) and BIG_SAMPLES x ~100 KB
(bench/data/make_imagenet_like.py; 16,000: 1.6 GB).
Rows:
  fm, --epochs 2/5/20    default, holds (--cache-budget 64M), off (0): the
                         whole run's wall time (the process, start to exit),
                         epochs 2..N samples/s, device bytes per epoch
                         (/proc/diskstats of the volume's disk)
  fm, mpirun -np RANKS,  the same three under `mpirun -np --ranks` (default:
  --epochs 3/5/20        one rank per core, where the fill competes with the
                         ranks for the cores); rank 0 reports the job; timed:
                         the sum of the job's epochs (mpirun's start takes
                         seconds here)
  fm --direct            the cache off with O_DIRECT forced: the read
                         amplification the default now avoids
  big, --epochs 3/10     default, holds (the volume + 10 %), off
  big, half budget       --cache-budget half the volume, --epochs 3: device
                         bytes of epoch 3 (per the engine) over the volume
  page-cache floor       `dd bs=4M` of Fashion-MNIST into a cold page cache,
                         beside the first --fm-epochs row: the least any
                         reader through the page cache waits for its bytes
--fm-epochs, --big-epochs and --ranks choose rows; --no-extras leaves out
the O_DIRECT and half-budget rows (the issue's check: --fm-epochs 5,20
--big-epochs 3,10 --ranks 0 --no-extras).
The verdicts: default within 10 % of the better of holds/off (wall time;
under mpirun the epochs' time);
fm off >= 0.8M samples/s and <= 1.5x its bytes per epoch from the device;
fm holds epochs 2..5 >= 4M samples/s;
big half budget epoch 3 <= 52 % of the volume from the device.
Prints a table; --json PATH writes every run; --plot PNG draws samples/s
per epoch of the longest Fashion-MNIST and 1.6 GB comparisons (medians over
the repetitions), cache off against on; --replot JSON draws it again from a
saved --json without running anything.
"""
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench/common"))
import script  # noqa: E402  (bench/common/script.py)
import volumes  # noqa: E402  (bench/common/volumes.py)


def disk_of(path):
    """The /proc/diskstats name of the disk holding `path` (its whole disk)."""
    st = os.stat(path)
    sys_dev = pathlib.Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    real = sys_dev.resolve()
    # A partition's directory sits inside its disk's.
    if (real / "partition").exists():
        real = real.parent
    return real.name


def sectors_read(disk):
    for line in pathlib.Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if f[2] == disk:
            return int(f[5]) * 512
    return 0


def run(dlfs, volume, epochs, extra, disk, ranks=1):
    script.drop_caches()
    before = sectors_read(disk)
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)]
    start = time.monotonic()
    proc = subprocess.run([*(mpirun if ranks > 1 else []), dlfs, "bench", volume, "--json",
                           "--epochs", str(epochs), *extra], capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"dlfs bench {volume} {' '.join(extra)} failed: {proc.stderr}")
    report = json.loads(proc.stdout)
    report["wall_seconds"] = wall
    report["disk_bytes"] = sectors_read(disk) - before
    return report


def make_volumes(args):
    return (volumes.fashion_mnist(args.dlfs, args.dir),
            volumes.imagenet_like(args.dlfs, args.dir, args.big_samples))


def median(values):
    return statistics.median(values) if values else float("nan")


def last_epoch_device(report):
    last = report["epochs"][-1]
    if "cache" in last:
        return last["cache"].get("device_bytes", 0)
    if "pipeline" in last:
        return last["pipeline"]["io_bytes"]
    return last["storage_bytes"]  # under mpirun: all ranks


def plan(report):
    """The fill plan: `dlfs bench`'s, or under mpirun rank 0's and how many ranks fill."""
    if "cache_plan" in report:
        return f"{report['cache_plan']} [{report['ranks_filling']}/{report['ranks']} ranks fill]"
    return report["epochs"][-1].get("cache", {}).get("plan", "")


def summarize(runs):
    """Medians over repetitions of one configuration."""
    later = [statistics.mean(e["samples_per_s"] for e in r["epochs"][1:]) for r in runs
             if len(r["epochs"]) > 1]
    return {
        "wall": median([r["wall_seconds"] for r in runs]),
        "epochs": median([sum(e["seconds"] for e in r["epochs"]) for r in runs]),
        "epoch1": median([r["epochs"][0]["samples_per_s"] for r in runs]),
        "later": median(later),
        "disk_per_epoch": median([r["disk_bytes"] / len(r["epochs"]) for r in runs]),
        "last_epoch_device": median([last_epoch_device(r) for r in runs]),
        "plan": plan(runs[-1]),
        "engine": runs[-1]["engine"],
    }


def page_cache_floor(volume):
    """Seconds to read `volume` cold into the page cache with `dd bs=4M`: what
    any reader of its bytes through the page cache waits at least."""
    script.drop_caches()
    start = time.monotonic()
    subprocess.run(["dd", f"if={volume}", "of=/dev/null", "bs=4M"], check=True,
                   capture_output=True)
    return time.monotonic() - start


def compare(dlfs, volume, epochs, configs, reps, disk, results, name, ranks=1, floor=False):
    runs = {c: [] for c in configs}
    floors = []
    for _ in range(reps):
        if floor:
            floors.append(page_cache_floor(volume))
        for c, extra in configs.items():  # alternating
            runs[c].append(run(dlfs, volume, epochs, extra, disk, ranks))
    if floor:
        results[f"{name} page-cache floor"] = floors
    out = {c: summarize(r) for c, r in runs.items()}
    results[f"{name} --epochs {epochs}"] = {"summary": out, "runs": runs}
    return out


def plot(results, out):
    """Samples/s per epoch, one panel per volume, a line per configuration."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    panels = [k for k in ("fm --epochs 20", "big --epochs 10") if k in results]
    if not panels:
        sys.exit("--plot: the results hold neither 'fm --epochs 20' nor 'big --epochs 10'")
    labels = {"default": "defaults (the loader decides)", "holds": "--cache-budget holding it",
              "off": "--cache-budget 0 (cache off)"}
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, key in zip(axes[0], panels):
        for config, runs in results[key]["runs"].items():
            per_epoch = zip(*[[e["samples_per_s"] for e in r["epochs"]] for r in runs])
            ys = [statistics.median(v) for v in per_epoch]
            ax.plot(range(1, len(ys) + 1), ys, marker="o", markersize=3,
                    label=labels.get(config, config))
        name = "Fashion-MNIST, 70,000 x 784 B" if key.startswith("fm") else "16,000 x ~100 KB"
        ax.set(title=name, xlabel="epoch", ylabel="samples/s (median of the runs)", yscale="log")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    script.save_figure(fig, axes[0], "dlfs bench, cold start, page cache dropped before each run",
                       out)


def main():
    p = script.parser(__doc__, "fill", str(REPO / "build/dlfs"))
    p.add_argument("--big-samples", type=int, default=16000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--ranks", type=int, default=os.cpu_count(),
                   help="ranks of the mpirun rows (default: one per core; 0 leaves them out)")
    p.add_argument("--fm-epochs", default="2,5,20",
                   help="the Fashion-MNIST rows' --epochs (comma-separated)")
    p.add_argument("--big-epochs", default="3,10", help="the 1.6 GB rows' --epochs")
    p.add_argument("--no-extras", action="store_true",
                   help="leave out the O_DIRECT and half-budget rows (the issue's check only)")
    p.add_argument("--json", help="write every run here")
    p.add_argument("--plot", help="draw samples/s per epoch to this PNG")
    p.add_argument("--replot", metavar="JSON", help="only draw --plot from a saved --json")
    args = p.parse_args()
    if args.replot:
        plot(json.loads(pathlib.Path(args.replot).read_text()), args.plot or "fill_bench.png")
        return
    if os.geteuid() != 0:
        sys.exit("run as root: every run starts with the page cache dropped")
    fm, big = make_volumes(args)
    disk = disk_of(fm)
    results = {}
    fm_bytes = 70000 * 784
    big_bytes = json.loads(subprocess.run([args.dlfs, "info", str(big), "--json"],
                                          capture_output=True, text=True,
                                          check=True).stdout)["bytes"]
    verdicts = []

    def line(name, s, base=None, key="wall"):
        rel = f"{base / s[key]:.2f}x" if base else ""
        what = "wall" if key == "wall" else "epochs"
        print(f"  {name:<10} {what} {s[key]:6.2f} s {rel:>6}  epoch 1 {s['epoch1'] / 1e6:5.2f}M/s  "
              f"later {s['later'] / 1e6:5.2f}M/s  disk/epoch {s['disk_per_epoch'] / 1e6:7.1f} MB"
              f"  {s['plan']}")

    print(f"Fashion-MNIST ({fm_bytes / 1e6:.1f} MB of samples), {args.reps} cold runs each")
    fm_epochs = [int(e) for e in args.fm_epochs.split(",") if e]
    for epochs in fm_epochs:
        first = epochs == fm_epochs[0]
        s = compare(args.dlfs, str(fm), epochs,
                    {"default": [], "holds": ["--cache-budget", "64M"],
                     "off": ["--cache-budget", "0"]}, args.reps, disk, results, "fm",
                    floor=first)
        if first:
            floor = median(results["fm page-cache floor"])
            print(f" the page-cache floor: dd bs=4M of the volume, cold: {floor:.3f} s "
                  f"({70000 / floor / 1e6:.2f}M samples/s); the cache off's first epoch: "
                  f"{70000 / s['off']['epoch1']:.3f} s ({70000 / s['off']['epoch1'] / floor:.2f}x)")
        best = min(s["holds"]["wall"], s["off"]["wall"])
        print(f" --epochs {epochs}")
        for c in ("default", "holds", "off"):
            line(c, s[c], best)
        verdicts.append((f"fm --epochs {epochs}: default within 10 % of the better",
                         s["default"]["wall"] <= 1.10 * best))
        if first:
            verdicts.append((f"fm holds: epochs 2-{epochs} >= 4M samples/s",
                             s["holds"]["later"] >= 4e6))
            off = s["off"]
            verdicts.append(("fm off: >= 0.8M samples/s (epoch 1, cold)", off["epoch1"] >= 0.8e6))
            verdicts.append(("fm off: <= 1.5x the samples' bytes per epoch from the disk",
                             off["disk_per_epoch"] <= 1.5 * fm_bytes))
    for epochs in (3, 5, 20) if args.ranks > 1 else ():
        s = compare(args.dlfs, str(fm), epochs,
                    {"default": [], "holds": ["--cache-budget", "64M"],
                     "off": ["--cache-budget", "0"]}, args.reps, disk, results,
                    f"fm mpirun -np {args.ranks}", args.ranks)
        # mpirun's start (seconds here) would hide the reading: the epochs' sum.
        best = min(s["holds"]["epochs"], s["off"]["epochs"])
        print(f" mpirun -np {args.ranks}, --epochs {epochs}")
        for c in ("default", "holds", "off"):
            line(c, s[c], best, "epochs")
        verdicts.append((f"fm mpirun -np {args.ranks} --epochs {epochs}: default within 10 % of "
                         "the better (the epochs' time)", s["default"]["epochs"] <= 1.10 * best))
    if not args.no_extras:
        s = compare(args.dlfs, str(fm), 2, {"direct": ["--cache-budget", "0", "--direct"]},
                    args.reps, disk, results, "fm direct")
        print(" --epochs 2, cache off, O_DIRECT forced (--direct): what the default avoids")
        line("direct", s["direct"])

    print(f"{big.name} ({big_bytes / 1e9:.2f} GB)")
    holds = f"{int(big_bytes * 1.1) >> 20}M"
    for epochs in [int(e) for e in args.big_epochs.split(",") if e]:
        s = compare(args.dlfs, str(big), epochs,
                    {"default": [], "holds": ["--cache-budget", holds],
                     "off": ["--cache-budget", "0"]}, args.reps, disk, results, "big")
        best = min(s["holds"]["wall"], s["off"]["wall"])
        print(f" --epochs {epochs}")
        for c in ("default", "holds", "off"):
            line(c, s[c], best)
        verdicts.append((f"big --epochs {epochs}: default within 10 % of the better",
                         s["default"]["wall"] <= 1.10 * best))
    half = f"{(big_bytes // 2) >> 20}M"
    if not args.no_extras:
        s = compare(args.dlfs, str(big), 3, {"half": ["--cache-budget", half]}, args.reps, disk,
                    results, "big half")
        print(f" --epochs 3, --cache-budget {half} (half)")
        line("half", s["half"])
        share = s["half"]["last_epoch_device"] / big_bytes
        print(f"  epoch 3 read {share * 100:.1f} % of the volume from the device")
        verdicts.append(("big half budget: epoch 3 <= 52 % of the volume from the device",
                         share <= 0.52))
    print("verdicts")
    for what, ok in verdicts:
        print(f"  {'yes' if ok else 'NO ':<4} {what}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
