#!/usr/bin/env bash
# The I/O benchmark: full shuffled epochs read through `dlfs bench`, against
# the device limit (fio) and the peers (one file per sample with POSIX reads
# and with PyTorch's DataLoader, LMDB), all cold-cache, in one run.
#
#   bench/run_io_bench.sh          (as root; run from anywhere)
#
# A. ImageNet-like: 20,000 files, log-normal sizes, mean ~110 KB (~2.2 GB) in
#    100 class directories (bench/make_imagenet_like.py), packed with
#    `dlfs pack` into imagenet.dlfs and built into imagenet.lmdb.
#      fio          random 4 KiB-multiple reads of the mean sample size,
#                   io_uring, O_DIRECT, iodepth 64: the device limit
#      dlfs uring   dlfs bench --engine uring --queue-depth 64 --batch 256
#      dlfs pread   the same with --engine pread
#      files 2t/8t  bench/file_reader.cc: open/read/close per file, 2 or 8 threads
#      torch 2w     bench/torch_files.py: DataLoader, 2 workers, raw bytes
#      lmdb 2t      bench/lmdb_bench.cc: mdb_get in random order, 2 threads
#    plus diagnostics of dlfs (epochs 2-3 of a 3-epoch run, --no-verify,
#    --io-threads 2, --queue-depth 128, --batch 1024, coalescing off, gap
#    1 MiB) and of the file reader with inodes and dentries cached (only the
#    page cache dropped).
# B. Fashion-MNIST: all 70,000 images of 784 B, as one file each
#    (bench/idx_to_files.py) and packed (`dlfs pack`): the file reader (2 and
#    8 threads) against dlfs bench with coalescing (default gap), without,
#    and with each gap of $GAPS; fio at 4 KiB (batched submission, else fio's
#    own CPU is the limit) for the device's IOPS limit.
#
# Every timed run starts from a cold page cache (sync; echo 3 >
# /proc/sys/vm/drop_caches); each contender runs $REPS times, the order
# rotating between repetitions, and the table shows medians (of each column
# separately). Each repetition starts by reading every data set once, so that
# a host caching a VM's virtual disk treats all contenders alike (HOST_WARMUP). 1 MB = 10^6 bytes; CPU s/GB is user+sys CPU seconds per 10^9
# bytes delivered (for torch: the main process and its workers).
#
# Environment:
#   DLFS_BENCH_DIR  work directory on a real disk, not tmpfs (/tmp/dlfs-bench);
#                   data sets are generated/packed there once and reused
#   REPS            repetitions per contender (3)
#   DLFS_BUILD_DIR  CMake build directory (<repo>/build); built if needed
#   FIO_RUNTIME     seconds per fio run (15)
#   GAPS            --coalesce-gap values tried on Fashion-MNIST
#                   ("0 4096 16384 65536 262144 1048576")
#   DIAG=0          skip the diagnostic runs
#   HOST_WARMUP=0   skip reading every data set once per repetition (see
#                   warm_virtual_disk below: for VMs whose disk the host caches)
#   RESULTS_JSON    where the JSON goes ($DLFS_BENCH_DIR/io_bench.json)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
bench_dir=${DLFS_BENCH_DIR:-/tmp/dlfs-bench}
reps=${REPS:-3}
build=${DLFS_BUILD_DIR:-$repo/build}
fio_runtime=${FIO_RUNTIME:-15}
gaps=${GAPS:-0 4096 16384 65536 262144 1048576}
diag=${DIAG:-1}
host_warmup=${HOST_WARMUP:-1}
python=/usr/bin/python3  # Debian's python3-torch belongs to this interpreter
fmnist_src=/usr/share/datasets/fashion-mnist

die() {
  echo "run_io_bench: $*" >&2
  exit 2
}
log() { echo "run_io_bench: $*" >&2; }

[[ $reps =~ ^[1-9][0-9]*$ ]] || die "REPS must be a positive integer, not '$reps'"
[[ $fio_runtime =~ ^[1-9][0-9]*$ ]] || die "FIO_RUNTIME must be a positive integer"
[[ $(id -u) == 0 && -w /proc/sys/vm/drop_caches ]] ||
  die "needs root: it drops the page cache before every timed run (and may apt-get install)"

# --- Tools: install what is missing, build the benchmark targets -------------
need=()
command -v fio >/dev/null || need+=(fio)
pkg-config --exists lmdb 2>/dev/null || need+=(liblmdb-dev)
"$python" -c 'import lmdb' 2>/dev/null || need+=(python3-lmdb)
"$python" -c 'import torch' 2>/dev/null || need+=(python3-torch)
command -v pkg-config >/dev/null || need+=(pkg-config)
if ((${#need[@]})); then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq fio liblmdb-dev python3-lmdb python3-torch pkg-config >/dev/null
fi
[[ -f $fmnist_src/train-images-idx3-ubyte.gz ]] ||
  die "no Fashion-MNIST at $fmnist_src (apt-get install dataset-fashion-mnist)"

if [[ ! -f $build/build.ninja && ! -f $build/Makefile ]]; then
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$repo" -B "$build" "${gen[@]}" >/dev/null
fi
# Reconfigure when lmdb arrived after the build directory was configured.
[[ -x $build/bench/dlfs_lmdb_bench ]] || cmake -S "$repo" -B "$build" >/dev/null
cmake --build "$build" --target dlfs_cli dlfs_file_reader dlfs_lmdb_bench >/dev/null
dlfs=$build/dlfs
file_reader=$build/bench/dlfs_file_reader
report=$here/io_bench_report.py
lmdb_bench=$build/bench/dlfs_lmdb_bench
for b in "$dlfs" "$file_reader" "$lmdb_bench"; do [[ -x $b ]] || die "missing $b after building"; done

mkdir -p "$bench_dir"
bench_dir=$(cd "$bench_dir" && pwd)
fs=$(findmnt -n -o FSTYPE --target "$bench_dir" 2>/dev/null || stat -f -c %T "$bench_dir")
[[ $fs != tmpfs && $fs != ramfs ]] || die "$bench_dir is on $fs; set DLFS_BENCH_DIR to a real disk"
runs=$bench_dir/io_bench_runs
rm -rf "$runs"
mkdir -p "$runs"
results_json=${RESULTS_JSON:-$bench_dir/io_bench.json}

# --- Data (generated once, reused) --------------------------------------------
tree_name=imagenet-like-20000f-100c-110kb-seed0  # the tree bench/pack_vs_tar.sh uses too
tree=$bench_dir/$tree_name
if [[ ! -d $tree ]]; then
  log "generating $tree (once)"
  "$python" "$here/make_imagenet_like.py" --files 20000 --classes 100 --mean-kb 110 --seed 0 "$tree"
fi
inet_list=$bench_dir/imagenet-files.txt
if [[ ! -s $inet_list ]]; then
  (cd "$bench_dir" && find "$tree_name" -type f | LC_ALL=C sort) >"$inet_list.tmp"
  mv "$inet_list.tmp" "$inet_list"
fi
read -r inet_files inet_bytes < <(cd "$bench_dir" && xargs -d '\n' stat -c %s <"$inet_list" |
  awk '{n++; s+=$1} END {printf "%.0f %.0f\n", n, s}')
inet_vol=$bench_dir/imagenet.dlfs
if [[ ! -f $inet_vol ]]; then
  log "packing $inet_vol (once)"
  "$dlfs" pack "$tree" -o "$inet_vol" -q
fi
inet_lmdb=$bench_dir/imagenet.lmdb
if [[ ! -f $inet_lmdb ]]; then
  log "building $inet_lmdb (once)"
  "$lmdb_bench" build "$tree" "$inet_lmdb.tmp" >/dev/null
  mv "$inet_lmdb.tmp" "$inet_lmdb"
  rm -f "$inet_lmdb.tmp-lock"
fi

fm_tree=$bench_dir/fmnist-files
if [[ ! -d $fm_tree ]]; then
  log "writing Fashion-MNIST as one file per image under $fm_tree (once)"
  "$python" "$here/idx_to_files.py" "$fmnist_src" "$fm_tree" >/dev/null
fi
fm_list=$bench_dir/fmnist-files.txt
if [[ ! -s $fm_list ]]; then
  (cd "$bench_dir" && find fmnist-files -type f | LC_ALL=C sort) >"$fm_list.tmp"
  mv "$fm_list.tmp" "$fm_list"
fi
fm_files=$(wc -l <"$fm_list")
fm_vol=$bench_dir/fmnist.dlfs
if [[ ! -f $fm_vol ]]; then
  log "packing $fm_vol (once)"
  "$dlfs" pack "$fmnist_src" -o "$fm_vol" -q
fi

samples_in() { "$dlfs" info --json "$1" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["samples"])'; }
[[ $(samples_in "$inet_vol") == "$inet_files" ]] || die "$inet_vol does not hold the $inet_files files of $tree"
[[ $(samples_in "$fm_vol") == "$fm_files" ]] || die "$fm_vol does not hold the $fm_files files of $fm_tree"

inet_vol_bytes=$(stat -c %s "$inet_vol")
fm_vol_bytes=$(stat -c %s "$fm_vol")
mean_bytes=$((inet_bytes / inet_files))
fio_bs=$(((mean_bytes + 2048) / 4096 * 4096))
((fio_bs >= 4096)) || fio_bs=4096

# --- Contenders ---------------------------------------------------------------
# "group|name|kind|command": kind is how its output is read (fio, or JSON with
# samples_per_s, mb_per_s, cpu_s_per_gb); commands run in $bench_dir.
seed=0
dlfs_a="$dlfs bench $inet_vol --drop-cache --json --seed $seed"
dlfs_b="$dlfs bench $fm_vol --epochs 1 --drop-cache --json --seed $seed --engine uring --queue-depth 64"
fio_common="--rw=randread --direct=1 --ioengine=io_uring --iodepth=64 --runtime=$fio_runtime --time_based --output-format=json"
contenders=(
  "A|fio limit|fio|fio --name=limit --filename=$inet_vol --bs=$fio_bs --size=$inet_vol_bytes $fio_common"
  "A|dlfs uring|json|$dlfs_a --epochs 1 --engine uring --queue-depth 64 --batch 256"
  "A|dlfs pread|json|$dlfs_a --epochs 1 --engine pread --queue-depth 64 --batch 256"
  "A|files 2 threads|json|$file_reader $inet_list --threads 2 --seed $seed"
  "A|files 8 threads|json|$file_reader $inet_list --threads 8 --seed $seed"
  "A|torch DataLoader 2 workers|json|$python $here/torch_files.py $inet_list --workers 2 --batch 256 --seed $seed"
  "A|lmdb 2 threads|json|$lmdb_bench read $inet_lmdb --threads 2 --seed $seed"
  "B|fio 4 KiB limit|fio|fio --name=limit4k --filename=$fm_vol --bs=4096 --size=$((fm_vol_bytes / 4096 * 4096)) $fio_common --iodepth_batch_submit=16 --iodepth_batch_complete_max=64"
  "B|files 2 threads|json|$file_reader $fm_list --threads 2 --seed $seed"
  "B|files 8 threads|json|$file_reader $fm_list --threads 8 --seed $seed"
  "B|dlfs uring, coalescing (default gap)|json|$dlfs_b --batch 256"
  "B|dlfs uring, no coalescing|json|$dlfs_b --batch 256 --no-coalesce"
)
for gap in $gaps; do
  contenders+=("B|dlfs uring, gap $gap|json|$dlfs_b --batch 256 --coalesce-gap $gap")
done
if [[ $diag == 1 ]]; then
  contenders+=(
    "A|diag: dlfs uring, epochs 2-3 of 3|json-steady|$dlfs_a --engine uring --queue-depth 64 --batch 256 --epochs 3"
    "A|diag: dlfs uring --no-verify, epochs 2-3 of 3|json-steady|$dlfs_a --engine uring --queue-depth 64 --batch 256 --epochs 3 --no-verify"
    "A|diag: dlfs uring --no-verify|json|$dlfs_a --epochs 1 --engine uring --queue-depth 64 --batch 256 --no-verify"
    "A|diag: dlfs uring --io-threads 2|json|$dlfs_a --epochs 1 --engine uring --queue-depth 64 --batch 256 --io-threads 2"
    "A|diag: dlfs uring --queue-depth 128|json|$dlfs_a --epochs 1 --engine uring --queue-depth 128 --batch 256"
    "A|diag: dlfs uring --batch 1024|json|$dlfs_a --epochs 1 --engine uring --queue-depth 64 --batch 1024"
    "A|diag: dlfs uring --no-coalesce|json|$dlfs_a --epochs 1 --engine uring --queue-depth 64 --batch 256 --no-coalesce"
    "A|diag: dlfs uring gap 1048576|json|$dlfs_a --epochs 1 --engine uring --queue-depth 64 --batch 256 --coalesce-gap 1048576"
    "A|diag: files 2 threads, inodes cached|json-warm|$file_reader $inet_list --threads 2 --seed $seed"
    "B|diag: dlfs uring --batch 1024|json|$dlfs_b --batch 1024"
    "B|diag: dlfs uring --no-verify|json|$dlfs_b --batch 256 --no-verify"
  )
fi

# The virtual disk of a VM may be cached by the host, out of our reach: a
# file read recently is served faster than one that was not. So that every
# contender meets the same host state, each repetition first reads all the
# data sets once (HOST_WARMUP=0 skips this: results then depend on history).
warm_virtual_disk() {
  local f
  for f in "$inet_vol" "$inet_lmdb" "$fm_vol"; do
    dd if="$f" of=/dev/null bs=4M iflag=direct status=none
  done
  (cd "$bench_dir" && xargs -d '\n' cat <"$inet_list" >/dev/null)
  (cd "$bench_dir" && xargs -d '\n' cat <"$fm_list" >/dev/null)
}
drop_caches() {
  sync
  echo 3 >/proc/sys/vm/drop_caches
}
# Page cache only: dentries and inodes stay (they were just loaded by a stat
# of every file), so opens need no metadata reads — the warm-metadata case.
drop_page_cache_keep_inodes() {
  (cd "$bench_dir" && xargs -d '\n' stat -c %s <"$inet_list" >/dev/null)
  sync
  echo 1 >/proc/sys/vm/drop_caches
}

echo "run_io_bench: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, kernel $(uname -r)"
echo "  work dir  $bench_dir on $fs ($(df -h --output=source,size "$bench_dir" | tail -1 | xargs))"
echo "  A         $tree: $inet_files files, $inet_bytes bytes (mean $mean_bytes; fio --bs=$fio_bs)"
echo "  B         $fm_tree: $fm_files files; $fm_vol: $fm_vol_bytes bytes"
echo "  tools     $("$dlfs" --version); $(fio --version); torch $("$python" -c 'import torch; print(torch.__version__)'); lmdb $(pkg-config --modversion lmdb)"
echo "  $reps repetitions of ${#contenders[@]} runs, cold page cache before each"

n=${#contenders[@]}
for ((rep = 1; rep <= reps; rep++)); do
  [[ $host_warmup == 1 ]] && warm_virtual_disk
  for ((k = 0; k < n; k++)); do
    idx=$(((k + (rep - 1) * 7) % n))  # rotate the order between repetitions
    IFS='|' read -r group name kind cmd <<<"${contenders[$idx]}"
    out=$runs/$idx.$rep.json
    if [[ $kind == json-warm ]]; then drop_page_cache_keep_inodes; else drop_caches; fi
    # shellcheck disable=SC2086  # the command is a word list by design
    (cd "$bench_dir" && $cmd >"$out" 2>"$runs/$idx.$rep.err") ||
      die "$group/$name failed (rep $rep): $(tail -3 "$runs/$idx.$rep.err")"
    printf '  rep %d  %s %-40s %s\n' "$rep" "$group" "$name" "$("$python" "$report" line "$out" "$kind")"
  done
done

printf '%s\n' "${contenders[@]}" >"$runs/contenders.txt"
"$python" "$report" summary "$runs" "$runs/contenders.txt" "$reps" "$results_json"
