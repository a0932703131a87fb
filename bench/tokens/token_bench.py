#!/usr/bin/python3
"""Token corpora: dlfs against Megatron-LM's GPTDataset on the same corpus.

    bench/tokens/token_bench.py --dir /work/scratch/tok --megatron /path/to/Megatron-LM
    bench/tokens/token_bench.py --dir /tmp/tok --docs 20000      # a quick look, no checkout

Writes a Megatron indexed dataset (.bin/.idx, uint16 tokens, --docs
documents of 1..2*--mean-tokens tokens), then measures, each in a fresh
process:
  index   what a job builds before its first window and its peak memory:
          `dlfs pack` of the pair (the token volume's index); Megatron's
          GPTDataset build (document, sample and shuffle indices) from its
          own code when --megatron names a checkout, else a numpy model of
          those documented indices (numpy's RandomState shuffles, as
          Megatron's);
  start   a fresh process's time to its first batch: TokenDataset (dlfs's
          order) and TokenDataset(order="megatron") (Megatron's order, built
          in C++) against Megatron's GPTDataset build + first item;
  rate    windows of --seq-len + 1 tokens per second into int64 tensors,
          and per CPU second (one core): TokenDataset in batches of 8 (by
          default through the page cache here; also with direct_io=True),
          against GPTDataset.__getitem__ (or the numpy model's read);
  sources a job over --sources small volumes: time to its first batch.
Medians of --runs; the page cache is left warm (the corpus fits in memory:
this measures the loaders, not the disk). Prints the ratios; --json FILE
keeps the numbers. bench/tokens/README.md has the method.
"""
import argparse
import json
import os
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DLFS_BUILD", REPO / "build"))
PY = "/usr/bin/python3"
ENV = dict(os.environ, PYTHONPATH=str(BUILD / "python"))
sys.path.insert(0, str(BUILD / "python"))  # the many-source volumes are written from here


def write_corpus(prefix, docs, mean, seed=1):
    """Megatron's MMIDIDX pair, uint16 tokens (dtype code 8), one sequence per document."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 2 * mean, size=docs).astype(np.int64)
    with open(f"{prefix}.bin", "wb") as f:
        for start in range(0, docs, 65536):
            n = int(lengths[start:start + 65536].sum())
            f.write(rng.integers(0, 50000, size=n, dtype=np.uint16).tobytes())
    pointers = np.zeros(docs, dtype=np.int64)
    pointers[1:] = np.cumsum(lengths * 2)[:-1]
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8))
        f.write(struct.pack("<Q", docs) + struct.pack("<Q", docs + 1))
        f.write(lengths.astype("<i4").tobytes())
        f.write(pointers.tobytes())
        f.write(np.arange(docs + 1, dtype="<i8").tobytes())
    return int(lengths.sum())


def timed(cmd, env=ENV):
    """Runs cmd; (seconds, peak RSS bytes, stdout)."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(p.pid, 0)
    seconds = time.perf_counter() - t
    out, err = p.stdout.read(), p.stderr.read()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"token_bench.py: {' '.join(map(str, cmd))} failed:\n{err}")
    return seconds, usage.ru_maxrss * 1024, out


DLFS_START = r"""
import sys, time, json, dlfs.torch as dt
kw = json.loads(sys.argv[2])
t = time.perf_counter()
ds = dt.TokenDataset(json.loads(sys.argv[1]), **kw)
it = iter(ds)
next(it)
first = time.perf_counter() - t
n, t, c = 0, time.perf_counter(), time.process_time()
for item in it:
    n += item["tokens"].shape[0]
    if n >= int(sys.argv[3]):
        break
print(json.dumps({"first": first, "windows": n, "seconds": time.perf_counter() - t,
                  "cpu": time.process_time() - c}))
"""

MEGATRON_START = r"""
import sys, time, json, random, tempfile, importlib.util
spec = importlib.util.spec_from_file_location("mg", sys.argv[1])
mg = importlib.util.module_from_spec(spec); spec.loader.exec_module(mg)
M = mg.load_megatron(sys.argv[2], sys.argv[3])
prefix, seq, windows = sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
t = time.perf_counter()
cfg = dict(seed=1234, seq_len=seq, blend=([prefix], None), split="1", sizes=[None, None, None],
           vocab_size=65536, eod=0)
ds = mg.build_megatron(M, cfg, tempfile.mkdtemp())[0]
ds[0]
first = time.perf_counter() - t
random.seed(1)
idx = [random.randrange(len(ds)) for _ in range(windows)]
t, c = time.perf_counter(), time.process_time()
for i in idx:
    ds[i]["tokens"]
print(json.dumps({"first": first, "windows": windows, "seconds": time.perf_counter() - t,
                  "cpu": time.process_time() - c}))
"""

NUMPY_MODEL = r"""
import sys, time, json, numpy as np
prefix, seq, windows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = time.perf_counter()
idx = open(prefix + ".idx", "rb").read(34)
n = int.from_bytes(idx[18:26], "little")
lengths = np.memmap(prefix + ".idx", dtype=np.int32, mode="r", offset=34, shape=(n,))
# Megatron's documented indices: a shuffled document index, the sample
# index (document position and offset where each window starts) and a
# shuffled sample order, with numpy's legacy RandomState as Megatron's.
rng = np.random.RandomState(1234)
doc_index = np.arange(n, dtype=np.int32)
rng.shuffle(doc_index)
ends = np.cumsum(lengths[doc_index], dtype=np.int64)
starts = np.arange(0, int(ends[-1]) - 1, seq, dtype=np.int64)[: (int(ends[-1]) - 1) // seq]
pos = np.searchsorted(ends, starts, side="right").astype(np.int32)
off = (starts - np.concatenate([[0], ends])[pos]).astype(np.int32)
shuffle = np.arange(len(starts), dtype=np.int64)
rng.shuffle(shuffle)
tokens = np.memmap(prefix + ".bin", dtype=np.uint16, mode="r")
pointers = np.memmap(prefix + ".idx", dtype=np.int64, mode="r", offset=34 + 4 * n, shape=(n,))
def window(k):
    j = shuffle[k]; d, o = int(pos[j]), int(off[j]); need, parts = seq + 1, []
    while need > 0 and d < n:
        doc = int(doc_index[d]); L = int(lengths[doc]) - o
        take = min(L, need); p = int(pointers[doc]) // 2 + o
        parts.append(tokens[p:p + take]); need -= take; d += 1; o = 0
    return np.concatenate(parts).astype(np.int64)
window(0)
first = time.perf_counter() - t
r = np.random.default_rng(1).integers(0, len(starts), size=windows)
t, c = time.perf_counter(), time.process_time()
for k in r:
    window(int(k))
print(json.dumps({"first": first, "windows": windows, "seconds": time.perf_counter() - t,
                  "cpu": time.process_time() - c}))
"""

MANY_SOURCES = r"""
import sys, time, json, dlfs.torch as dt
paths = json.loads(open(sys.argv[1]).read())
t = time.perf_counter()
ds = dt.TokenDataset([(p, 1.0) for p in paths], seq_len=int(sys.argv[2]), batch_size=8, seed=1)
next(iter(ds))
print(json.dumps({"first": time.perf_counter() - t}))
"""


def median_run(cmd, runs):
    got = []
    for _ in range(runs):
        seconds, peak, out = timed(cmd)
        r = json.loads(out)
        r["process_seconds"], r["peak_rss"] = seconds, peak
        got.append(r)
    key = lambda r: r.get("first", 0)  # noqa: E731
    return sorted(got, key=key)[len(got) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--dir", required=True, help="where the corpus and volumes are written")
    ap.add_argument("--docs", type=int, default=1_000_000, help="documents in the corpus")
    ap.add_argument("--mean-tokens", type=int, default=500, help="mean tokens per document")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--windows", type=int, default=20000, help="windows read per rate run")
    ap.add_argument("--sources", type=int, default=1000, help="volumes of the many-source job")
    ap.add_argument("--megatron", help="a Megatron-LM checkout (d98e8a6): its own code as the peer")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()

    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    prefix = str(d / "corpus")
    tokens = write_corpus(prefix, args.docs, args.mean_tokens)
    print(f"corpus: {args.docs:,} documents, {tokens:,} uint16 tokens ({tokens * 2 / 1e9:.2f} GB)")
    res = {"docs": args.docs, "tokens": tokens, "seq_len": args.seq_len}

    vol = str(d / "corpus.dlfs")
    packs = [timed([str(BUILD / "dlfs"), "pack", prefix, "-o", vol, "-f"]) for _ in range(args.runs)]
    seconds, peak, _ = sorted(packs)[len(packs) // 2]
    res["pack_seconds"], res["pack_peak_rss"] = seconds, peak

    kw = {"seq_len": args.seq_len, "batch_size": 8, "seed": 1}
    ours = median_run([PY, "-c", DLFS_START, json.dumps(vol), json.dumps(kw), str(args.windows)],
                      args.runs)
    # The same through O_DIRECT (what a corpus larger than the job's memory
    # gets by default): each batch waits for its reads.
    ours_d = median_run([PY, "-c", DLFS_START, json.dumps(vol), json.dumps(dict(kw, direct_io=True)),
                         str(args.windows)], args.runs)
    mkw = dict(kw, order="megatron")
    ours_m = median_run([PY, "-c", DLFS_START, json.dumps(vol), json.dumps(mkw),
                         str(args.windows)], args.runs)
    if args.megatron:
        build = str(d / "megatron-build")
        peer = median_run([PY, "-c", MEGATRON_START, str(REPO / "tests/data/megatron/make_golden.py"),
                           args.megatron, build, prefix, str(args.seq_len),
                           str(min(args.windows, 5000))], args.runs)
        peer_name = "Megatron-LM GPTDataset (its own code)"
    else:
        peer = median_run([PY, "-c", NUMPY_MODEL, prefix, str(args.seq_len),
                           str(min(args.windows, 5000))], args.runs)
        peer_name = "numpy model of Megatron's indices"
    res.update(dlfs=ours, dlfs_direct_io=ours_d, dlfs_megatron_order=ours_m, peer=peer,
               peer_name=peer_name)

    # Many sources: --sources volumes of 200 documents each.
    many = d / "many"
    many.mkdir(exist_ok=True)
    paths = []
    import dlfs  # noqa: E402 (from BUILD)
    rng = np.random.default_rng(3)
    for k in range(args.sources):
        p = many / f"s{k}.dlfs"
        if not p.exists():
            lengths = rng.integers(1, 2 * args.mean_tokens, size=200)
            with dlfs.Writer(str(p), tokens="uint16") as w:
                w.write_documents(rng.integers(0, 50000, size=int(lengths.sum()), dtype=np.uint16),
                                  lengths)
        paths.append(str(p))
    listing = d / "many.json"
    listing.write_text(json.dumps(paths))
    res["sources"] = median_run([PY, "-c", MANY_SOURCES, str(listing), str(min(args.seq_len, 256))],
                                args.runs)

    def rate(r):
        return r["windows"] / r["seconds"], r["windows"] / max(r["cpu"], 1e-9)

    gb = 1e9
    print(f"index   dlfs pack: {res['pack_seconds']:.2f} s, peak {res['pack_peak_rss'] / gb:.2f} GB"
          f" | {peer_name}: {peer['first']:.2f} s to its first window,"
          f" peak {peer['peak_rss'] / gb:.2f} GB")
    print(f"start   TokenDataset {ours['first']:.3f} s (peak {ours['peak_rss'] / gb:.2f} GB)"
          f" | order=megatron {ours_m['first']:.3f} s (peak {ours_m['peak_rss'] / gb:.2f} GB)"
          f" | peer {peer['first']:.3f} s: {peer['first'] / ours['first']:.1f}x,"
          f" {peer['first'] / ours_m['first']:.1f}x")
    for name, r in (("TokenDataset", ours), ("direct_io=True", ours_d),
                    ("order=megatron", ours_m), ("peer", peer)):
        w, c = rate(r)
        print(f"rate    {name:15s} {w:10,.0f} windows/s  {c:10,.0f} per CPU second")
    print(f"ratio   TokenDataset / peer, per CPU second: {rate(ours)[1] / rate(peer)[1]:.1f}x")
    print(f"sources {args.sources} volumes: first batch after {res['sources']['first']:.3f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
