#!/usr/bin/env bash
# The LMDBIO benchmark: time per iteration of Caffe's LMDB access pattern for
# the stock pattern (baseline) and each LMDBIO mode, at 1, 2, 4 and 8 ranks,
# cold cache, on two Caffe-style databases made here:
#   imagenet  20,000 encoded Datums of ~110 KB (~2.3 GB), batch 64
#   cifar     200,000 raw 3x32x32 Datums (3,072-byte images), batch 256
# Both written by bench/make_caffe_lmdb.py (keys %08d_name, 1000 per commit).
#
#   bench/run_lmdbio_bench.sh        (as root: it drops the page cache)
#
# Every run is `mpirun -np P dlfs lmdb read DB --mode M --drop-cache --json`
# (the last row adds `--engine uring --direct` to the full stack);
# its digest must equal the baseline's for the same P (the run fails if not).
# Modes from lmm-dm on use READERS readers per node (capped at P). Each
# configuration runs REPS times in rotating order; the report shows medians
# and the speedup over the baseline at the same P, plus CPU seconds and
# context switches summed over ranks (getrusage).
#
# Environment:
#   DLFS_BENCH_DIR  work directory on a real disk (/tmp/dlfs-bench)
#   DLFS_BUILD_DIR  CMake build directory (<repo>/build); built if needed
#   REPS            repetitions (3)
#   NPS             rank counts ("1 2 4 8")
#   DBS             databases ("imagenet cifar")
#   READERS         readers per node for lmm-dm and later (2)
#   IMAGENET_ITERS / CIFAR_ITERS   iterations per run (100 / 200)
#   IMAGENET_RECORDS / CIFAR_RECORDS  database sizes (20000 / 200000), for trials
#   RESULTS         JSON lines output ($DLFS_BENCH_DIR/lmdbio_bench.jsonl)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
bench_dir=${DLFS_BENCH_DIR:-/tmp/dlfs-bench}
build=${DLFS_BUILD_DIR:-$repo/build}
reps=${REPS:-3}
nps=${NPS:-1 2 4 8}
dbs=${DBS:-imagenet cifar}
readers=${READERS:-2}
results=${RESULTS:-$bench_dir/lmdbio_bench.jsonl}
python=/usr/bin/python3
# "MODE@direct": MODE with its explicit reads through io_uring with O_DIRECT.
modes=${MODES:-baseline lmm lmm-dm lmm-dio lmm-dio-prov lmm-dio-prov-coal lmm-dio-prov-coal-stag lmm-dio-prov-coal-stag@direct}

if [[ $(id -u) -ne 0 ]]; then
  echo "run_lmdbio_bench.sh: needs root to drop the page cache between runs" >&2
  exit 2
fi
mkdir -p "$bench_dir"
if [[ ! -x $build/dlfs ]]; then
  cmake -S "$repo" -B "$build" -G Ninja >/dev/null
fi
cmake --build "$build" --target dlfs_cli >/dev/null
dlfs=$build/dlfs

db_path() { echo "$bench_dir/$1-caffe.lmdb"; }
make_db() {
  local path
  path=$(db_path "$1")
  [[ -f $path/data.mdb ]] && return
  echo "== making $path" >&2
  case $1 in
    imagenet)
      $python "$here/make_caffe_lmdb.py" "$path" --records "${IMAGENET_RECORDS:-20000}" \
        --encoded-bytes 110000 ;;
    cifar)
      $python "$here/make_caffe_lmdb.py" "$path" --records "${CIFAR_RECORDS:-200000}" \
        --shape 3 32 32 ;;
    *) echo "unknown database $1" >&2; exit 2 ;;
  esac
}
batch_of() { [[ $1 == imagenet ]] && echo 64 || echo 256; }
iters_of() { [[ $1 == imagenet ]] && echo "${IMAGENET_ITERS:-100}" || echo "${CIFAR_ITERS:-200}"; }

for db in $dbs; do make_db "$db"; done
: >"$results"

run_one() {  # db np mode rep
  local db=$1 np=$2 label=$3 rep=$4 out extra=()
  local mode=${label%@direct}
  [[ $label == *@direct ]] && extra=(--engine uring --direct)
  out=$(mpirun --allow-run-as-root --oversubscribe -np "$np" "$dlfs" lmdb read "$(db_path "$db")" \
    --mode "$mode" -b "$(batch_of "$db")" -n "$(iters_of "$db")" --readers-per-node "$readers" \
    --drop-cache --json "${extra[@]}")
  $python -c 'import json,sys; j=json.loads(sys.argv[1]); j.update(db=sys.argv[2], rep=int(sys.argv[3]), mode=sys.argv[4]); print(json.dumps(j))' \
    "$out" "$db" "$rep" "$label" >>"$results"
  $python -c 'import json,sys; j=json.loads(sys.argv[1]); print("%-9s np=%d %-24s %9.2f ms/iter" % (sys.argv[2], j["ranks"], j["mode"], j["ms_per_iter"]), file=sys.stderr)' \
    "$out" "$db"
}

# One untimed run first: the first run after a build or a big file copy pays
# for the kernel reclaiming memory (seconds of system time on this VM), which
# would land on whichever mode happened to run first.
mpirun --allow-run-as-root --oversubscribe -np 2 "$dlfs" lmdb read \
  "$(db_path "$(echo "$dbs" | cut -d' ' -f1)")" --mode lmm-dio -b 64 -n 20 --drop-cache >/dev/null

read -r -a mode_list <<<"$modes"
for rep in $(seq 1 "$reps"); do
  # Rotate the order of modes between repetitions, so drift of the virtual
  # disk does not favour whichever runs first.
  shift_by=$(((rep - 1) % ${#mode_list[@]}))
  order=("${mode_list[@]:shift_by}" "${mode_list[@]:0:shift_by}")
  for db in $dbs; do
    for np in $nps; do
      for mode in "${order[@]}"; do run_one "$db" "$np" "$mode" "$rep"; done
    done
  done
done

$python "$here/lmdbio_bench_report.py" "$results"
