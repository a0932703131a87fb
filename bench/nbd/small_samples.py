#!/usr/bin/python3
"""Small samples behind an NBD server (issue 50, item 3): Fashion-MNIST
(70,000 x 784 B) served by nbdkit's file plugin over a Unix socket, read by
`dlfs bench` with its defaults, against libnbd's `nbdcopy` reading the whole
volume from the same server and against `dlfs bench` of the local file,
side by side: cold (page cache dropped before every run), alternating,
medians of --reps.

    bench/nbd/small_samples.py                 (as root; ~2 min)
    bench/nbd/small_samples.py --epochs 5 --reps 5
    bench/nbd/small_samples.py --server qemu-nbd   (qemu-nbd -r -t -e 16, a third-party server)

Prints, per contender, the median of epoch 1, of the whole run's epochs and
the client's CPU seconds per GB handed out (nbdcopy's: per GB of the volume,
which it reads once); then the two ratios the issue
sets goals for: dlfs's epoch 1 over NBD / nbdcopy of the whole volume (goal
<= 3) and its CPU per GB over NBD / the local path's (goal <= 2).
Needs nbdkit and nbdcopy (scripts/install-deps.sh installs them); --server
qemu-nbd needs qemu-utils (scripts/install-deps.sh --bench).
"""
import json
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench/common"))
import script  # noqa: E402  (bench/common/script.py)
import volumes  # noqa: E402  (bench/common/volumes.py)


def nbdcopy(uri, size):
    script.drop_caches()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run(["nbdcopy", "--requests=64", "--connections=1", "--request-size=131072", uri,
                    "null:"], check=True)
    seconds = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"epoch1": seconds, "epochs": seconds, "cpu_s_per_gb": cpu / (size / 1e9)}


def dlfs_bench(dlfs, target, epochs):
    script.drop_caches()
    out = subprocess.run([dlfs, "bench", target, "--epochs", str(epochs), "--json"],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    return {"epoch1": r["epochs"][0]["seconds"],
            "epochs": sum(e["seconds"] for e in r["epochs"]),
            "cpu_s_per_gb": r["cpu_s_per_gb"],
            "plan": r["epochs"][-1].get("cache", {}).get("plan", "")}


def main():
    p = script.parser(__doc__, "nbd-small", str(REPO / "build/dlfs"))
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--server", choices=["nbdkit", "qemu-nbd"], default="nbdkit")
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: every run starts with the page cache dropped")
    for tool in (args.server, "nbdcopy"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found (scripts/install-deps.sh)")
    fm = volumes.fashion_mnist(args.dlfs, args.dir)
    size = fm.stat().st_size
    with tempfile.TemporaryDirectory() as tmp:
        sock, pid = f"{tmp}/nbd.sock", f"{tmp}/nbd.pid"
        if args.server == "nbdkit":
            server = subprocess.Popen(["nbdkit", "-f", "--exit-with-parent", "-r", "-t", "16",
                                       "--log=null", "-P", pid, "-U", sock, "file", str(fm)])
        else:  # shared by 16 clients, read-only, raw
            server = subprocess.Popen(["qemu-nbd", "-r", "-t", "-e", "16", "-f", "raw",
                                       "--pid-file", pid, "-k", sock, str(fm)])
        try:
            for _ in range(200):
                if os.path.exists(pid) and os.path.getsize(pid) > 0:
                    break
                time.sleep(0.05)
            else:
                sys.exit("nbdkit did not start")
            uri = f"nbd+unix:///?socket={sock}"
            runs = {"nbdcopy": [], "dlfs over NBD": [], "dlfs local": []}
            for _ in range(args.reps):  # alternating
                runs["nbdcopy"].append(nbdcopy(uri, size))
                runs["dlfs over NBD"].append(dlfs_bench(args.dlfs, uri, args.epochs))
                runs["dlfs local"].append(dlfs_bench(args.dlfs, str(fm), args.epochs))
        finally:
            server.terminate()
            server.wait()
    med = {name: {k: statistics.median(r[k] for r in rs) for k in ("epoch1", "epochs",
                                                                     "cpu_s_per_gb")}
           for name, rs in runs.items()}
    served = "nbdkit file plugin" if args.server == "nbdkit" else "qemu-nbd -r -t -e 16"
    print(f"{fm.name} ({size / 1e6:.1f} MB), {served} over a Unix socket, "
          f"{args.reps} cold runs each, medians; dlfs bench --epochs {args.epochs}, defaults")
    for name, m in med.items():
        print(f"  {name:<14} epoch 1 {m['epoch1']:6.3f} s  all epochs {m['epochs']:6.3f} s  "
              f"CPU {m['cpu_s_per_gb']:5.2f} s/GB")
    print(f"  plan over NBD (last run): {runs['dlfs over NBD'][-1]['plan']}")
    e1 = med["dlfs over NBD"]["epoch1"] / med["nbdcopy"]["epoch1"]
    cpu = med["dlfs over NBD"]["cpu_s_per_gb"] / med["dlfs local"]["cpu_s_per_gb"]
    print(f"  epoch 1 over NBD / nbdcopy of the volume: {e1:.2f}x (goal <= 3)")
    print(f"  CPU per GB over NBD / local: {cpu:.2f}x (goal <= 2)")


if __name__ == "__main__":
    main()
