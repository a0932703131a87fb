#!/usr/bin/env bash
# The NBD benchmark (issue 16, docs/benchmarks.md "Storage servers over
# NBD"): one volume read by `dlfs bench` from the local file (io_uring,
# O_DIRECT) and from nbdkit serving the same file over a Unix socket and
# over TCP on 127.0.0.1, with an added read latency of 0, 50 and 200 µs per
# read (emulated fabric latency), for a sweep of queue depths and 1-4
# connections; then tables of throughput, the ratios (NBD with latency vs
# without, NBD vs local) and the client's CPU seconds per GB next to the
# local path's, and the peer: libnbd's nbdcopy reading the whole volume from
# the same servers (no added latency), all measured in this run.
#
#   bench/nbd/run_nbd_bench.sh            (as root; ~15-30 min on the 2.2 GB volume)
#   SMALL=1 bench/nbd/run_nbd_bench.sh    (a 300-file volume, a reduced sweep: ~1 min)
#
# Every run: one shuffled epoch, cache budget 0 (every sample read from the
# target, none from the node cache), checksums verified, page cache dropped
# first (--drop-cache; nbdkit's file plugin reads through the page cache,
# cold at the start of each run like the local path's device). The latency
# is added by bench/nbd/usdelay.c, a 40-line nbdkit filter built here
# (nbdkit's own delay filter takes whole milliseconds only): each read
# sleeps in its server thread, so reads in flight overlap their delays as on
# a fabric; nbdkit runs with -t $SERVER_THREADS threads per connection.
#
# Environment:
#   DLFS_BENCH_DIR   work directory on a real disk (/tmp/dlfs-bench)
#   VOLUME           the volume to read (default: the ImageNet-like volume of
#                    bench/io/run_io_bench.sh, 20,000 files of ~110 KB, 2.2 GB,
#                    generated and packed once)
#   FILES            files of the generated volume (20000; SMALL: 300)
#   QDS              queue depths ("1 4 16 64 128"; SMALL: "1 16 64")
#   CONNS            connections per target ("1 2 4"; SMALL: "1 2")
#   DELAYS_US        added read latencies in µs ("0 50 200"; SMALL: "0 200")
#   REPS             repetitions per configuration, median reported (1)
#   SERVER_THREADS   nbdkit -t (64)
#   DLFS_BUILD_DIR   CMake build directory (<repo>/build)
#   RESULTS_JSON     all runs as JSON ($DLFS_BENCH_DIR/nbd_bench.json)
if [[ ${1-} == -h || ${1-} == --help ]]; then  # the comment above, and nothing else
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  exit 0
fi
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bench_dir=${DLFS_BENCH_DIR:-/tmp/dlfs-bench}
small=${SMALL:-0}
build=${DLFS_BUILD_DIR:-$repo/build}
python=/usr/bin/python3
reps=${REPS:-1}
threads=${SERVER_THREADS:-64}
if [[ $small == 1 ]]; then
  qds=${QDS:-"1 16 64"}
  conns=${CONNS:-"1 2"}
  delays=${DELAYS_US:-"0 200"}
  files_n=${FILES:-300}
else
  qds=${QDS:-"1 4 16 64 128"}
  conns=${CONNS:-"1 2 4"}
  delays=${DELAYS_US:-"0 50 200"}
  files_n=${FILES:-20000}
fi
log() { echo "[nbd-bench] $*" >&2; }

nbdkit=$(command -v nbdkit || true)
[[ -n $nbdkit ]] || { echo "nbdkit not found (apt-get install nbdkit)" >&2; exit 1; }
[[ -f /usr/include/nbdkit-filter.h ]] || {
  echo "nbdkit-filter.h not found (apt-get install nbdkit-plugin-dev)" >&2
  exit 1
}
if [[ ! -x $build/dlfs ]]; then
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" --target dlfs_cli >/dev/null
dlfs=$build/dlfs

mkdir -p "$bench_dir"
work=$(mktemp -d "$bench_dir/nbd-bench.XXXXXX")
servers=()
cleanup() {
  for p in "${servers[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

cc -O2 -fPIC -shared -o "$work/usdelay.so" "$here/usdelay.c"

# --- The volume (generated and packed once) -----------------------------------
if [[ -z ${VOLUME:-} ]]; then
  name=imagenet-like-${files_n}f-100c-110kb-seed0
  if [[ ! -d $bench_dir/$name ]]; then
    log "generating $bench_dir/$name (once)"
    "$python" "$repo/bench/data/make_imagenet_like.py" --files "$files_n" --classes 100 \
      --mean-kb 110 --seed 0 "$bench_dir/$name" >/dev/null
  fi
  if [[ ! -f $bench_dir/$name.dlfs ]]; then
    log "packing $bench_dir/$name.dlfs (once)"
    "$dlfs" pack "$bench_dir/$name" -o "$bench_dir/$name.dlfs" -q
  fi
  VOLUME=$bench_dir/$name.dlfs
fi
log "volume $VOLUME ($(du -h "$VOLUME" | cut -f1))"

# --- Servers: one per transport and latency ----------------------------------
# Not in $(...): nbdkit --exit-with-parent would exit with the subshell.
start_server() {  # transport delay_us -> sets $uri
  local transport=$1 delay=$2 sock port args
  args=(-f --exit-with-parent -r -t "$threads" --log=null -P "$work/$transport-$delay.pid")
  if [[ $transport == unix ]]; then
    sock=$work/$transport-$delay.sock
    args+=(-U "$sock")
  else
    port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    args+=(-i 127.0.0.1 -p "$port")
  fi
  "$nbdkit" "${args[@]}" --filter="$work/usdelay.so" file "$VOLUME" "rdelay-us=$delay" &
  servers+=($!)
  for _ in $(seq 200); do [[ -s $work/$transport-$delay.pid ]] && break; sleep 0.05; done
  [[ -s $work/$transport-$delay.pid ]] || { echo "nbdkit did not start" >&2; exit 1; }
  if [[ $transport == unix ]]; then
    uri="nbd+unix:///?socket=$sock"
  else
    uri="nbd://127.0.0.1:$port/"
  fi
}

runs=$work/runs.jsonl
: >"$runs"
run() {  # label transport delay qd conns target [dlfs args...]
  local label=$1 transport=$2 delay=$3 qd=$4 c=$5 target=$6
  shift 6
  for rep in $(seq "$reps"); do
    "$dlfs" bench "$target" --epochs 1 --drop-cache --cache-budget 0 --queue-depth "$qd" \
      --json "$@" >"$work/run.json"
    "$python" - "$work/run.json" "$label" "$transport" "$delay" "$qd" "$c" "$rep" >>"$runs" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
label, transport, delay, qd, c, rep = sys.argv[2:]
print(json.dumps({"label": label, "transport": transport, "delay_us": int(delay), "qd": int(qd),
                  "connections": int(c), "rep": int(rep), "mb_per_s": j["mb_per_s"],
                  "samples_per_s": j["epochs"][0]["samples_per_s"],
                  "cpu_s_per_gb": j["cpu_s_per_gb"],
                  "in_flight": j["pipeline"]["mean_reads_in_flight"], "engine": j["engine"]}))
EOF
  done
  log "$label $transport +${delay}us qd=$qd conns=$c: $(tail -1 "$runs" | "$python" -c 'import json,sys; r=json.load(sys.stdin); print("%.0f MB/s, %.2f CPU s/GB" % (r["mb_per_s"], r["cpu_s_per_gb"]))')"
}

# The peer: libnbd's own copier reading the whole volume from the same server
# to nowhere (null:), as many requests in flight as dlfs's deepest queue, 128
# KiB each (about a sample): what this server and transport deliver to a
# client with nothing to do but read. Same cold start as dlfs's runs.
nbdcopy_run() {  # transport delay qd
  local transport=$1 delay=$2 qd=$3
  for rep in $(seq "$reps"); do
    sync && echo 3 >/proc/sys/vm/drop_caches
    "$python" - "$uri" "$qd" "$VOLUME" "$transport" "$delay" "$rep" >>"$runs" <<'EOF'
import json, os, resource, subprocess, sys, time
uri, qd, volume, transport, delay, rep = sys.argv[1:]
start = time.monotonic()
subprocess.run(["nbdcopy", f"--requests={qd}", "--connections=1", "--request-size=131072",
                uri, "null:"], check=True)
seconds = time.monotonic() - start
use = resource.getrusage(resource.RUSAGE_CHILDREN)
size = os.path.getsize(volume)
print(json.dumps({"label": "nbdcopy", "transport": transport, "delay_us": int(delay),
                  "qd": int(qd), "connections": 1, "rep": int(rep),
                  "mb_per_s": size / seconds / 1e6,
                  "cpu_s_per_gb": (use.ru_utime + use.ru_stime) / (size / 1e9)}))
EOF
  done
  log "nbdcopy $transport +${delay}us requests=$qd: $(tail -1 "$runs" | "$python" -c 'import json,sys; r=json.load(sys.stdin); print("%.0f MB/s, %.2f CPU s/GB" % (r["mb_per_s"], r["cpu_s_per_gb"]))')"
}

command -v nbdcopy >/dev/null || { echo "nbdcopy not found (apt-get install libnbd-bin)" >&2; exit 1; }
for qd in $qds; do
  run local local 0 "$qd" 0 "$VOLUME" --engine uring
done
max_qd=$(tr ' ' '\n' <<<"$qds" | sort -n | tail -1)
for transport in unix tcp; do
  for delay in $delays; do
    start_server "$transport" "$delay"
    ((delay == 0)) && nbdcopy_run "$transport" "$delay" "$max_qd"
    for qd in $qds; do
      for c in $conns; do
        run nbd "$transport" "$delay" "$qd" "$c" "$uri" --nbd-connections "$c"
      done
    done
  done
done

results=${RESULTS_JSON:-$bench_dir/nbd_bench.json}
"$python" - "$runs" "$results" "$VOLUME" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
json.dump(rows, open(sys.argv[2], "w"), indent=1)
peer = [r for r in rows if r["label"] == "nbdcopy"]
rows = [r for r in rows if r["label"] != "nbdcopy"]
def med(key, field):
    vals = [r[field] for r in rows if (r["transport"], r["delay_us"], r["qd"], r["connections"]) == key]
    return statistics.median(vals) if vals else None
qds = sorted({r["qd"] for r in rows})
conns = sorted({r["connections"] for r in rows if r["transport"] != "local"})
delays = sorted({r["delay_us"] for r in rows if r["transport"] != "local"})
cols = [("local", 0)] + [(t, d) for t in ("unix", "tcp") for d in delays]
def name(t, d): return "local io_uring" if t == "local" else f"{t} +{d}us"
print(f"\nvolume {sys.argv[3]}; one epoch per run, cold page cache; MB/s of samples delivered")
print("\n### Throughput (MB/s) by queue depth, 1 connection (local: io_uring)\n")
print("| QD | " + " | ".join(name(*c) for c in cols) + " |")
print("|---:|" + "---:|" * len(cols))
for qd in qds:
    cells = []
    for t, d in cols:
        v = med((t, d, qd, 0 if t == "local" else min(conns)), "mb_per_s")
        cells.append("–" if v is None else f"{v:.0f}")
    print(f"| {qd} | " + " | ".join(cells) + " |")
print("\n### Connections (MB/s) at each queue depth\n")
print("| transport | QD | " + " | ".join(f"{c} conn" for c in conns) + " |")
print("|---|---:|" + "---:|" * len(conns))
for t in ("unix", "tcp"):
    for d in delays:
        for qd in qds:
            cells = [med((t, d, qd, c), "mb_per_s") for c in conns]
            print(f"| {t} +{d}us | {qd} | " + " | ".join("–" if v is None else f"{v:.0f}" for v in cells) + " |")
print("\n### Ratios and client CPU (best connection count per cell)\n")
def best(t, d, qd, field="mb_per_s"):
    cands = [(med((t, d, qd, c), "mb_per_s"), c) for c in conns]
    cands = [x for x in cands if x[0] is not None]
    if not cands: return None, None
    mb, c = max(cands)
    return mb, med((t, d, qd, c), "cpu_s_per_gb")
print("| transport | QD | MB/s +0us | " + " | ".join(f"+{d}us / +0us" for d in delays if d) +
      " | NBD +0us / local | CPU s/GB NBD | CPU s/GB local | CPU NBD / local |")
print("|---|---:|---:|" + "---:|" * len([d for d in delays if d]) + "---:|---:|---:|---:|")
checks = []
for t in ("unix", "tcp"):
    for qd in qds:
        base, cpu = best(t, 0, qd) if 0 in delays else (None, None)
        loc = med(("local", 0, qd, 0), "mb_per_s")
        loc_cpu = med(("local", 0, qd, 0), "cpu_s_per_gb")
        ratios = []
        for d in delays:
            if d == 0: continue
            mb, _ = best(t, d, qd)
            ratios.append(None if (mb is None or not base) else mb / base)
            if d == max(delays) and qd >= 64 and ratios[-1] is not None:
                checks.append(f"{t}: +{d}us at QD {qd}: {ratios[-1]:.2f}x of +0us (target >= 0.8x): "
                              + ("met" if ratios[-1] >= 0.8 else "missed"))
        f = lambda v, fmt: "–" if v is None else fmt.format(v)
        cpu_ratio = cpu / loc_cpu if cpu and loc_cpu else None
        if qd >= 64 and cpu_ratio is not None:
            checks.append(f"{t}: client CPU at QD {qd}: {cpu:.2f} s/GB vs local {loc_cpu:.2f} s/GB = "
                          f"{cpu_ratio:.2f}x (target <= 2x): " + ("met" if cpu_ratio <= 2 else "missed"))
        print(f"| {t} | {qd} | {f(base, '{:.0f}')} | " + " | ".join(f(r, '{:.2f}') for r in ratios) +
              f" | {f(base / loc if base and loc else None, '{:.2f}')} | {f(cpu, '{:.2f}')} | "
              f"{f(loc_cpu, '{:.2f}')} | {f(cpu_ratio, '{:.2f}')} |")
print("\nLittle's law: at QD q and added latency L, throughput <= q x read size / L until the")
print("server or the link saturates; the +latency/+0us column approaches 1 as QD grows.\n")
for c in checks: print(c)
print("\nThe peer, same servers: nbdcopy (libnbd's copier, 128 KiB requests, 1 connection) "
      "reading the whole volume to null:")
for t in ("unix", "tcp"):
    runs = [r for r in peer if r["transport"] == t]
    if not runs: continue
    qd = runs[0]["qd"]
    mb = statistics.median(r["mb_per_s"] for r in runs)
    cpu = statistics.median(r["cpu_s_per_gb"] for r in runs)
    ours = med((t, 0, qd, min(conns)), "mb_per_s")
    print(f"  {t}: nbdcopy {mb:.0f} MB/s, {cpu:.2f} CPU s/GB; dlfs bench over NBD at QD {qd}, "
          f"1 connection: {ours:.0f} MB/s = {ours / mb:.2f}x nbdcopy")
print(f"\nall runs: {sys.argv[2]}")
EOF
