#!/usr/bin/env bash
# The LMDBIO benchmark, paper-style: time per iteration of Caffe's LMDB
# access pattern for the stock pattern (baseline) and every LMDBIO mode, on
# a local disk and under an emulated parallel file system (tools/pfs-emu),
# with 1, 2 and 4 fake nodes of 2 ranks each, on two Caffe-style databases
# made here by bench/lmdbio/make_caffe_lmdb.py (keys %08d_name, 1000 puts per commit):
#   cifar     60,000 raw 3x32x32 Datums (3,072-byte images), batch 256
#   imagenet  3,000 encoded Datums of ~100 KB, batch 64
#
#   bench/lmdbio/run_lmdbio_bench.sh          (as root: FUSE mounts, dropping caches)
#
# Latency 0 is the local disk, read directly: the fake nodes share one page
# cache. Latency L > 0 mounts pfs-emu with --latency-us L*1000 and a shared
# --bandwidth-mbps 400, and fake node i reads the database through the
# mount's view n<i>/, so each fake node has its own page cache. The job is
#   mpirun -np 2 -x DLFS_RANKS_PER_NODE=2 dlfs lmdb read MNT/n0/DB ... :
#          -np 2 -x DLFS_RANKS_PER_NODE=2 dlfs lmdb read MNT/n1/DB ... : ...
# (-x is repeated in every app context: before the first ':' it reaches the
# first context only.) Every run is cold: the page cache is dropped first;
# then the backing file is read once, outside the mount, so the emulator's
# own reads cost memory speed and the charged latency and bandwidth are the
# file system's only cost. Modes from lmm-dm on use READERS readers per node.
#
# For every run the script records the time per iteration, the requests and
# bytes the file system served during the iterations (`dlfs lmdb read
# --counters MNT/.pfs-emu-stats`) and during the whole run, open included
# (the stats file read before and after), or the disk's read requests and
# bytes (/sys/block/DEV/stat, whole run) for the local disk. Every run's
# digest must equal the baseline's for the same database and node count (the
# report fails if not). Each configuration runs REPS times, the modes in an
# order that rotates between repetitions; the report prints medians, speed-ups
# over the baseline at the same latency and node count, and the counts, and
# draws the speed-ups (bench/lmdbio/lmdbio_bench_report.py). Then
# bench/lmdbio/lmdbio_model.py fits the scaling model of docs/lmdbio.md to the same
# results and prints its fit error and the paper-scale predictions.
#
# Duration: about 30 minutes on a 2-core VM with the defaults (378 runs of
# 3-5 s each with mpirun's start-up, estimated from partial runs);
# CIFAR_ITERS / IMAGENET_ITERS set it.
#
# Environment:
#   DLFS_BENCH_DIR   work directory on a local disk (/tmp/dlfs-lmdbio-bench)
#   DLFS_BUILD_DIR   CMake build directory (<repo>/build); built if needed
#   REPS             repetitions (3)
#   LATENCIES_MS     per-request latencies, ms; 0 is the local disk ("0 1 4")
#   NODES            fake node counts ("1 2 4")
#   RANKS_PER_NODE   ranks per fake node (2)
#   READERS          readers per node from lmm-dm on (2)
#   BANDWIDTH_MBPS   pfs-emu's shared bandwidth, MB/s (400)
#   DBS              databases ("cifar imagenet")
#   MODES            modes (all seven)
#   CIFAR_ITERS / IMAGENET_ITERS        iterations per run (100 / 40)
#   CIFAR_RECORDS / IMAGENET_RECORDS    database sizes (60000 / 3000)
#   RESULTS          JSON lines output ($DLFS_BENCH_DIR/lmdbio_pfs.jsonl)
#   PLOT             the plot (<repo>/docs/lmdbio_speedup.png; "" for none)
if [[ ${1-} == -h || ${1-} == --help ]]; then  # the comment above, and nothing else
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  exit 0
fi
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bench_dir=${DLFS_BENCH_DIR:-/tmp/dlfs-lmdbio-bench}
build=${DLFS_BUILD_DIR:-$repo/build}
reps=${REPS:-3}
latencies=${LATENCIES_MS:-0 1 4}
nodes_list=${NODES:-1 2 4}
rpn=${RANKS_PER_NODE:-2}
readers=${READERS:-2}
bandwidth=${BANDWIDTH_MBPS:-400}
dbs=${DBS:-cifar imagenet}
modes=${MODES:-baseline lmm lmm-dm lmm-dio lmm-dio-prov lmm-dio-prov-coal lmm-dio-prov-coal-stag}
results=${RESULTS:-$bench_dir/lmdbio_pfs.jsonl}
plot=${PLOT-$repo/docs/lmdbio_speedup.png}
python=/usr/bin/python3
backing=$bench_dir/dbs
mnt=$bench_dir/mnt

if [[ $(id -u) -ne 0 ]]; then
  echo "run_lmdbio_bench.sh: needs root (FUSE mounts, dropping the page cache)" >&2
  exit 2
fi
for tool in mpirun fusermount3; do
  command -v $tool >/dev/null || { echo "run_lmdbio_bench.sh: $tool not found" >&2; exit 2; }
done
mkdir -p "$backing" "$mnt"
if [[ ! -f $build/build.ninja && ! -f $build/Makefile ]]; then
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" --target dlfs_cli pfs-emu >/dev/null
dlfs=$build/dlfs
pfs_emu=$build/tools/pfs-emu/pfs-emu

make_db() {
  local path=$backing/$1
  [[ -f $path/data.mdb ]] && return
  echo "== making $path" >&2
  case $1 in
    cifar) $python "$here/make_caffe_lmdb.py" "$path" --records "${CIFAR_RECORDS:-60000}" \
      --shape 3 32 32 ;;
    imagenet) $python "$here/make_caffe_lmdb.py" "$path" --records "${IMAGENET_RECORDS:-3000}" \
      --encoded-bytes 100000 ;;
    *) echo "unknown database $1" >&2; exit 2 ;;
  esac
}
batch_of() { [[ $1 == imagenet ]] && echo 64 || echo 256; }
iters_of() { [[ $1 == imagenet ]] && echo "${IMAGENET_ITERS:-40}" || echo "${CIFAR_ITERS:-100}"; }
for db in $dbs; do make_db "$db"; done

max_nodes=0
for n in $nodes_list; do ((n > max_nodes)) && max_nodes=$n; done

emu_pid=""
unmount() {
  if [[ -n $emu_pid ]]; then
    fusermount3 -u "$mnt" || true
    wait "$emu_pid" || true
    emu_pid=""
  fi
}
trap unmount EXIT

mount_emu() {  # latency_ms
  "$pfs_emu" --nodes "$max_nodes" --latency-us $(($1 * 1000)) --bandwidth-mbps "$bandwidth" \
    "$backing" "$mnt" 2>>"$bench_dir/pfs-emu.log" &
  emu_pid=$!
  for _ in $(seq 100); do
    mountpoint -q "$mnt" && return
    kill -0 "$emu_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "run_lmdbio_bench.sh: pfs-emu did not mount (see $bench_dir/pfs-emu.log)" >&2
  exit 1
}

# "requests bytes": the pfs-emu mount's counters, or the local disk's.
disk_stat=/sys/block/$(lsblk -no PKNAME "$(findmnt -no SOURCE -T "$backing")" 2>/dev/null |
  head -1)/stat
[[ -f $disk_stat ]] || disk_stat=/sys/block/$(basename "$(findmnt -no SOURCE -T "$backing")")/stat
counters() {  # latency_ms
  if (($1 > 0)); then
    awk '$1 == "read_requests" {r = $2} $1 == "read_bytes" {b = $2} END {printf "%.0f %.0f\n", r, b}' \
      "$mnt/.pfs-emu-stats"
  elif [[ -f $disk_stat ]]; then
    awk '{printf "%.0f %.0f\n", $1, $3 * 512}' "$disk_stat"
  else
    echo "0 0"
  fi
}

run_one() {  # latency_ms nodes db mode rep
  local lat=$1 nodes=$2 db=$3 mode=$4 rep=$5 cmd n path before after out load
  local read=(lmdb read --mode "$mode" -b "$(batch_of "$db")" -n "$(iters_of "$db")"
    --readers-per-node "$readers" --json)
  ((lat > 0)) && read+=(--counters "$mnt/.pfs-emu-stats")
  cmd=(mpirun --allow-run-as-root --oversubscribe)
  for ((n = 0; n < nodes; n++)); do
    if ((lat > 0)); then path=$mnt/n$n/$db; else path=$backing/$db; fi
    ((n > 0)) && cmd+=(:)
    cmd+=(-np "$rpn" -x "DLFS_RANKS_PER_NODE=$rpn" "$dlfs" "${read[@]:0:2}" "$path" "${read[@]:2}")
  done
  sync
  echo 3 >/proc/sys/vm/drop_caches
  # pfs-emu's backing file from memory: the emulated costs are the only ones.
  ((lat > 0)) && cat "$backing/$db/data.mdb" >/dev/null
  before=$(counters "$lat")
  load=$(cut -d' ' -f1 /proc/loadavg)
  out=$("${cmd[@]}")
  after=$(counters "$lat")
  $python - "$out" "$db" "$lat" "$nodes" "$rpn" "$bandwidth" "$rep" "$before" "$after" "$load" \
    >>"$results" <<'EOF'
import json, sys
j = json.loads(sys.argv[1])
before, after = [list(map(int, a.split())) for a in sys.argv[8:10]]
j.update(db=sys.argv[2], latency_ms=int(sys.argv[3]), nodes=int(sys.argv[4]),
         ranks_per_node=int(sys.argv[5]), bandwidth_mbps=float(sys.argv[6]), rep=int(sys.argv[7]),
         fs="pfs-emu" if int(sys.argv[3]) > 0 else "local disk",
         run_requests=after[0] - before[0], run_bytes=after[1] - before[1],
         load1_before=float(sys.argv[10]))
print(json.dumps(j))
EOF
  tail -1 "$results" | $python -c 'import json,sys; j=json.loads(sys.stdin.read()); c=j.get("counters",{}); print("%-8s %dms n=%d %-24s %8.2f ms/iter  open %.2f s  %s" % (j["db"], j["latency_ms"], j["nodes"], j["mode"], j["ms_per_iter"], j["setup_s_max"], "%d req %.1f MB" % (c["read_requests"], c["read_bytes"]/1e6) if c else ""), file=sys.stderr)'
}

: >"$results"
start=$(date +%s)
read -r -a mode_list <<<"$modes"
for rep in $(seq 1 "$reps"); do
  shift_by=$(((rep - 1) % ${#mode_list[@]}))
  order=("${mode_list[@]:shift_by}" "${mode_list[@]:0:shift_by}")
  for lat in $latencies; do
    ((lat > 0)) && mount_emu "$lat"
    if ((rep == 1)); then
      # One untimed run per file system: the first run after a mount or a
      # big file copy pays for the kernel reclaiming memory.
      run_one "$lat" 1 "$(echo "$dbs" | cut -d' ' -f1)" lmm-dio 0
    fi
    for nodes in $nodes_list; do
      for db in $dbs; do
        for mode in "${order[@]}"; do run_one "$lat" "$nodes" "$db" "$mode" "$rep"; done
      done
    done
    unmount
  done
done
echo "== $(($(date +%s) - start)) s for the runs; results in $results" >&2

# The warm-up runs (rep 0) are not reported.
$python "$here/lmdbio_bench_report.py" "$results" ${plot:+--plot "$plot"}
# The scaling model of docs/lmdbio.md, fitted to the pfs-emu runs.
for lat in $latencies; do
  if ((lat > 0)); then
    echo
    echo "### Scaling model (bench/lmdbio/lmdbio_model.py)"
    echo
    $python "$here/lmdbio_model.py" "$results"
    break
  fi
done
