#!/usr/bin/python3
"""Samples/s of one job as its ranks grow: `mpirun -np N dlfs bench VOL` for
N in --ranks, all ranks on this node, rank 0 reporting the job's samples/s
(every rank reads its share of each shuffled epoch). Two volumes, each with
the node cache off (--cache-budget 0: every epoch from the device) and with
the defaults (the node cache shared by the node's ranks, filled when the
loader judges it pays): Fashion-MNIST (70,000 x 784 B, packed from Debian's
dataset-fashion-mnist) and SAMPLES x ~100 KB (bench/data/make_imagenet_like.py).

    bench/distributed/scaling_bench.py --plot docs/scaling.png   (as root; ~6 min)
    bench/distributed/scaling_bench.py --ranks 1 2 --reps 1      (a quick look)

Each volume is read once before the runs (a host that caches a VM's disk
then serves them alike); every run starts with the page cache dropped and no
node-cache region left;
rank counts and configurations alternate within each repetition; medians of
--reps. Prints epoch 1 and the median of later epochs per rank count, and the
ratio to one rank; --json writes every run, --plot draws samples/s against
ranks (--replot JSON draws a saved run again). On a machine with fewer cores
than ranks the ranks share the cores: read the curve's shape against the
core count printed with it.
"""
import glob
import json
import os
import pathlib
import statistics
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench/common"))
import script  # noqa: E402  (bench/common/script.py)
import volumes  # noqa: E402  (bench/common/volumes.py)
CONFIGS = {"cache off": ["--cache-budget", "0"], "defaults": []}


def fresh_start():
    for region in glob.glob(f"/dev/shm/dlfs-{os.getuid()}-*"):
        os.unlink(region)
    subprocess.run(["sync"], check=True)
    pathlib.Path("/proc/sys/vm/drop_caches").write_text("3\n")


def run(args, volume, ranks, extra):
    fresh_start()
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), args.dlfs,
           "bench", str(volume), "--json", "--epochs", str(args.epochs), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr}")
    report = json.loads(proc.stdout)
    return [e["samples_per_s"] for e in report["epochs"]]


def make_volumes(args):
    return {"Fashion-MNIST, 70,000 x 784 B": volumes.fashion_mnist(args.dlfs, args.dir),
            f"{args.samples:,} x ~100 KB": volumes.imagenet_like(args.dlfs, args.dir, args.samples)}


def summarize(runs):
    """Per rank count: medians over repetitions of epoch 1 and of later epochs."""
    out = {}
    for ranks, reps in runs.items():
        later = [statistics.median(r[1:]) for r in reps if len(r) > 1]
        out[ranks] = {"epoch1": statistics.median(r[0] for r in reps),
                      "later": statistics.median(later) if later else float("nan")}
    return out


def plot(results, out, cores):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, (volume, configs) in zip(axes[0], results.items()):
        for (config, runs), color in zip(configs.items(), ("tab:blue", "tab:red")):
            s = summarize({int(k): v for k, v in runs.items()})
            ranks = sorted(s)
            for which, style in (("epoch1", "--"), ("later", "-")):
                ax.plot(ranks, [s[n][which] for n in ranks], style, color=color, marker="o",
                        markersize=4,
                        label=f"{config}, {'epoch 1' if which == 'epoch1' else 'later epochs'}")
        ax.set(title=volume, xlabel="ranks (mpirun -np, one node)", ylabel="samples/s, all ranks",
               xscale="log", yscale="log")
        ax.set_xticks(ranks, [str(n) for n in ranks])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.axvline(cores, color="gray", linewidth=0.8)
        ax.text(cores, ax.get_ylim()[0], f" {cores} cores", color="gray", fontsize=8,
                va="bottom")
    script.save_figure(fig, axes[0], "dlfs bench under mpirun: one job's samples/s against its ranks",
                       out)


def main():
    p = script.parser(__doc__, "fill", str(REPO / "build/dlfs"))
    p.add_argument("--samples", type=int, default=16000, help="~100 KB samples (default 16000)")
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json", help="write every run here")
    p.add_argument("--plot", help="draw samples/s against ranks to this PNG")
    p.add_argument("--replot", metavar="JSON", help="only draw --plot from a saved --json")
    args = p.parse_args()
    cores = os.cpu_count()
    if args.replot:
        saved = json.loads(pathlib.Path(args.replot).read_text())
        plot(saved["results"], args.plot or "scaling.png", saved["cores"])
        return
    if os.geteuid() != 0:
        sys.exit("run as root: every run starts with the page cache dropped")
    vols = make_volumes(args)
    for volume in vols.values():
        # Once through the disk before anything is timed: a host that caches a
        # VM's virtual disk then serves every run alike.
        subprocess.run(["dd", f"if={volume}", "of=/dev/null", "bs=4M", "iflag=direct",
                        "status=none"], check=True)
    results = {name: {c: {n: [] for n in args.ranks} for c in CONFIGS} for name in vols}
    for rep in range(args.reps):
        for name, volume in vols.items():
            for ranks in args.ranks:
                for config, extra in CONFIGS.items():
                    epochs = run(args, volume, ranks, extra)
                    results[name][config][ranks].append(epochs)
                    print(f"rep {rep + 1} {name} -np {ranks} {config}: "
                          + " ".join(f"{e:,.0f}" for e in epochs), file=sys.stderr)
    print(f"medians of {args.reps}, {args.epochs} epochs per run, {cores} cores; samples/s of "
          "all ranks (x: over 1 rank)")
    for name, configs in results.items():
        print(name)
        for config, runs in configs.items():
            s = summarize(runs)
            base = s[min(s)]
            for n in sorted(s):
                print(f"  {config:<10} -np {n:<3} epoch 1 {s[n]['epoch1']:>12,.0f} "
                      f"({s[n]['epoch1'] / base['epoch1']:.2f}x)   later "
                      f"{s[n]['later']:>12,.0f} ({s[n]['later'] / base['later']:.2f}x)")
    saved = {"cores": cores, "epochs": args.epochs, "reps": args.reps, "results": results}
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(saved, indent=1))
    if args.plot:
        plot(json.loads(json.dumps(results)), args.plot, cores)


if __name__ == "__main__":
    main()
