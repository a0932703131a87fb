#!/usr/bin/python3
"""A volume on object storage (issue 52): ~100 KB samples in an S3 object on
a single-node Ceph RADOS Gateway (scripts/rgw.sh, started and stopped here),
read cold by `dlfs bench s3://...` with its defaults, side by side with
(a) curl --parallel --parallel-max 64 fetching the same samples as ranged
GETs of the same object (the server's limit, as a client that does nothing
else reaches it), and (b) what a PyTorch user writes instead: boto3, one
get_object per sample (each sample its own object), in a DataLoader with 2
workers. Alternating, medians of --reps; the page cache is dropped before
each run of dlfs.

    bench/s3/s3_bench.py                       (as root; ~2 min)
    bench/s3/s3_bench.py --samples 3000 --reps 5

Prints each contender's MB/s and its client's CPU seconds per GB, then the
ratios the issue sets goals for: dlfs over S3 / curl (goal >= 0.9), CPU per
GB over S3 / the local path's (`dlfs bench` of the same volume as a local
file, cold; goal <= 2); dlfs / boto3; and with a budget that holds the
volume, the share of it epochs 2-3 fetch (goal <= 5 %).
Needs Ceph's radosgw, curl and python3-boto3 (scripts/install-deps.sh --bench).
"""
import json
import os
import pathlib
import random
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
sys.path.insert(0, str(REPO / "build/python"))
import script  # noqa: E402  (bench/common/script.py)

SAMPLE = 100_000


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def curl_args(env):
    return ["--aws-sigv4", f"aws:amz:{env['AWS_REGION']}:s3", "--user",
            f"{env['AWS_ACCESS_KEY_ID']}:{env['AWS_SECRET_ACCESS_KEY']}",
            "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]


def curl_parallel(env, url, extents, config):
    """curl fetching every extent as a ranged GET, 64 in flight."""
    with open(config, "w") as f:
        for k, (offset, length) in enumerate(extents):
            f.write(f'url = "{url}"\nrange = "{offset}-{offset + length - 1}"\n'
                    f'output = "/dev/null"\naws-sigv4 = "aws:amz:{env["AWS_REGION"]}:s3"\n'
                    f'user = "{env["AWS_ACCESS_KEY_ID"]}:{env["AWS_SECRET_ACCESS_KEY"]}"\n'
                    'header = "x-amz-content-sha256: UNSIGNED-PAYLOAD"\n'
                    "silent\nshow-error\nfail\n")  # "next" resets every option
            if k + 1 < len(extents):
                f.write("next\n")
    cpu = children_cpu()
    start = time.monotonic()
    subprocess.run(["curl", "-sS", "-f", "--no-progress-meter", "--parallel", "--parallel-max", "64",
                    "-K", config],
                   check=True)
    seconds = time.monotonic() - start
    total = sum(length for _, length in extents)
    return {"mb_s": total / seconds / 1e6, "cpu_s_per_gb": (children_cpu() - cpu) / (total / 1e9)}


def dlfs_bench(dlfs, target, *extra):
    script.drop_caches()
    out = subprocess.run([dlfs, "bench", target, "--json", *extra], check=True,
                         capture_output=True, text=True).stdout
    r = json.loads(out)
    e = r["epochs"][0]
    return {"mb_s": e["mb_per_s"], "cpu_s_per_gb": e["cpu_s_per_gb"], "report": r}


BOTO_WORKER = r'''
import os, sys, time, resource, json
import boto3, botocore.config, torch

class PerSample(torch.utils.data.Dataset):
    def __init__(self, bucket, keys):
        self.bucket, self.keys, self.client = bucket, keys, None
    def __len__(self):
        return len(self.keys)
    def __getitem__(self, i):
        if self.client is None:  # one client per worker process
            self.client = boto3.client(  # Debian's boto3 1.26 does not read AWS_ENDPOINT_URL
                "s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                config=botocore.config.Config(max_pool_connections=64,
                                              s3={"addressing_style": "path"}))
        return self.client.get_object(Bucket=self.bucket, Key=self.keys[i])["Body"].read()

bucket, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
keys = [f"{prefix}/{i:06d}" for i in range(n)]
loader = torch.utils.data.DataLoader(PerSample(bucket, keys), batch_size=64, shuffle=True,
                                     num_workers=2, collate_fn=lambda b: b)
start = time.monotonic()
total = sum(len(s) for batch in loader for s in batch)
seconds = time.monotonic() - start
print(json.dumps({"bytes": total, "seconds": seconds}))
'''


def boto3_loader(bucket, prefix, n):
    cpu = children_cpu()
    out = subprocess.run([sys.executable, "-c", BOTO_WORKER, bucket, prefix, str(n)],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out.splitlines()[-1])
    return {"mb_s": r["bytes"] / r["seconds"] / 1e6,
            "cpu_s_per_gb": (children_cpu() - cpu) / (r["bytes"] / 1e9)}


def upload_samples(bucket, prefix, samples):
    """Each sample its own object (what the boto3 contender reads)."""
    import concurrent.futures

    import boto3
    import botocore.config
    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                          config=botocore.config.Config(max_pool_connections=32,
                                                        s3={"addressing_style": "path"}))
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda kv: client.put_object(Bucket=bucket, Key=f"{prefix}/{kv[0]:06d}",
                                                   Body=kv[1]), enumerate(samples)))


def main():
    p = script.parser(__doc__, "s3", str(REPO / "build/dlfs"))
    p.add_argument("--samples", type=int, default=3000)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: every dlfs run starts with the page cache dropped")
    for tool in ("curl", "radosgw"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found (scripts/install-deps.sh --bench)")
    import dlfs
    work = pathlib.Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    local = work / "s3-100k.dlfs"
    rng = random.Random(52)
    samples = [rng.randbytes(SAMPLE) for _ in range(args.samples)]
    with dlfs.Writer(str(local), force=True) as w:
        for i, data in enumerate(samples):
            w.add(f"s/{i:06d}", data, label=i % 10)
    with dlfs.Volume(str(local)) as vol:
        extents = [vol.extent(i)[1:] for i in range(len(vol))]
    random.Random(1).shuffle(extents)
    with tempfile.TemporaryDirectory() as tmp:
        state = pathlib.Path(tmp) / "rgw"
        subprocess.run([REPO / "scripts/rgw.sh", "start", state], check=True,
                       stdout=subprocess.DEVNULL)
        try:
            env = dict(line.split("=", 1) for line in (state / "env").read_text().split())
            os.environ.update(env)
            bucket = env["DLFS_S3_BUCKET"]
            http = f"{env['AWS_ENDPOINT_URL']}/{bucket}/s3-100k.dlfs"
            subprocess.run(["curl", "-sS", "-f", *curl_args(env), "-T", local, http], check=True)
            upload_samples(bucket, "samples", samples)
            url = f"s3://{bucket}/s3-100k.dlfs"
            runs = {"dlfs over S3": [], "curl --parallel 64": [], "boto3 DataLoader": [],
                    "dlfs local file": []}
            for _ in range(args.reps):  # alternating
                runs["dlfs over S3"].append(dlfs_bench(args.dlfs, url, "--epochs", "1"))
                runs["curl --parallel 64"].append(
                    curl_parallel(env, http, extents, f"{tmp}/curl.cfg"))
                runs["boto3 DataLoader"].append(boto3_loader(bucket, "samples", args.samples))
                runs["dlfs local file"].append(dlfs_bench(args.dlfs, str(local), "--epochs", "1"))
            budget = dlfs_bench(args.dlfs, url, "--epochs", "3", "--cache-budget", "2G")["report"]
        finally:
            subprocess.run([REPO / "scripts/rgw.sh", "stop", state], check=True,
                           stdout=subprocess.DEVNULL)
    size = local.stat().st_size
    med = {name: {k: statistics.median(r[k] for r in rs) for k in ("mb_s", "cpu_s_per_gb")}
           for name, rs in runs.items()}
    print(f"{args.samples} samples of {SAMPLE // 1000} KB ({size / 1e6:.0f} MB) on a single-node "
          f"Ceph RGW, {args.reps} cold runs each, alternating, medians")
    for name, m in med.items():
        print(f"  {name:<20} {m['mb_s']:8.1f} MB/s   CPU {m['cpu_s_per_gb']:6.2f} s/GB")
    s3 = med["dlfs over S3"]
    print(f"  dlfs over S3 / curl --parallel 64: {s3['mb_s'] / med['curl --parallel 64']['mb_s']:.2f}x "
          "(goal >= 0.9)")
    print(f"  dlfs over S3 / boto3 DataLoader: {s3['mb_s'] / med['boto3 DataLoader']['mb_s']:.2f}x")
    print(f"  CPU per GB, dlfs over S3 / dlfs local file: "
          f"{s3['cpu_s_per_gb'] / med['dlfs local file']['cpu_s_per_gb']:.1f}x (goal <= 2); "
          f"/ curl's: {s3['cpu_s_per_gb'] / med['curl --parallel 64']['cpu_s_per_gb']:.2f}x")
    later = sum(e["cache"]["device_bytes"] for e in budget["epochs"][1:])
    print(f"  --cache-budget 2G, 3 epochs: epochs 2-3 fetched {later / size * 100:.1f} % of the "
          "volume (goal <= 5 %)")


if __name__ == "__main__":
    main()
