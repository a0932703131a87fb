#!/usr/bin/env bash
# The I/O benchmark: every row of the read-path table (issue 11; its figures:
# docs/benchmarks.md, "Reading samples") in one command — full shuffled epochs read cold through
# `dlfs bench`, the Python datasets and `dlfs mount`, against the device
# limit (fio) and the peers (one file per sample, PyTorch, LMDB) — then a
# table of medians with the ratios and targets, a JSON file and a plot.
#
#   bench/io/run_io_bench.sh            (as root; from anywhere; ~15 min)
#   SMALL=1 bench/io/run_io_bench.sh    (small data sets, 2 repetitions: ~3 min, for development)
#   SMALL=1 REPS=1 DIAG=0 FIO_RUNTIME=1 bench/io/run_io_bench.sh   (the tiniest end-to-end check: ~2 min)
#
# Data sets (generated and packed once into $DLFS_BENCH_DIR, reused):
# A  ImageNet-like: 20,000 files, log-normal sizes, mean ~110 KB (2.2 GB), 100
#    classes (bench/data/make_imagenet_like.py), packed into <tree>.dlfs and
#    built into <tree>.lmdb (<tree> = imagenet-like-20000f-100c-110kb-seed0).
#      fio 108 KiB     fio --rw=randread --direct=1 --ioengine=io_uring, QD 64,
#                      block size = mean sample size rounded to 4 KiB: the limit
#      dlfs, device    dlfs bench --cache-budget 0: random reads from the device
#                      (one epoch; and epochs 2-3 of a 3-epoch run)
#      dlfs, default   dlfs bench with the node cache (default budget): epochs read
#                      the device and fill the cache; later ones are served from it
#      files 2/8 thr   bench/io/file_reader.cc: open/read/close per file
#      lmdb 2 thr      bench/io/lmdb_bench.cc: mdb_get in random order
# B  Fashion-MNIST: 70,000 samples of 784 B, one file each (bench/data/idx_to_files.py)
#    and packed: fio 4 KiB (batched submission) against dlfs from the device,
#    the node cache through the C++ loader and through LoaderDataset
#    (epochs 2-3 of a 3-epoch run), and the file reader.
# C  6,000 files of ~100 KB (0.6 GB, 20 classes): fio 100 KiB against dlfs;
#    the map-style paths (VolumeDataset per sample and batched, with 2 and 0
#    DataLoader workers) and torchvision's DatasetFolder (ImageFolder's
#    storage path) over the files and over `dlfs mount`, 2 workers each; the
#    file reader over the files and over the mount; and what a DataLoader's
#    worker-to-main transfer costs with no storage at all (IPC ceiling).
#
# Every timed run starts from a cold page cache (sync; echo 3 >
# /proc/sys/vm/drop_caches); each contender runs $REPS times, the order
# rotating between repetitions, and the table shows medians (of each column
# separately) and the range of samples/s. Each repetition starts by reading
# every data set once, so that a host caching a VM's virtual disk treats all
# contenders alike (HOST_WARMUP). 1 MB = 10^6 bytes; CPU s/GB is user+sys CPU
# seconds per 10^9 bytes delivered (Python: the process and its workers).
# `dlfs bench` runs have checksum verification on, as by default.
#
# Environment:
#   DLFS_BENCH_DIR  work directory on a real disk, not tmpfs (/tmp/dlfs-bench)
#   REPS            repetitions per contender (5; SMALL: 2)
#   SMALL=1         small data sets (A 2,000 files, C 1,000; separate names)
#   DLFS_BUILD_DIR  CMake build directory (<repo>/build); built if needed
#   FIO_RUNTIME     seconds per fio run (10; SMALL: 3)
#   DIAG=0          skip the diagnostic runs
#   HOST_WARMUP=0   skip reading every data set once per repetition
#   RESULTS_JSON    where the JSON goes ($DLFS_BENCH_DIR/io_bench.json)
#   PLOT            where the PNG plot goes (<repo>/docs/io_bench.png; SMALL:
#                   $DLFS_BENCH_DIR/io_bench.png)
if [[ ${1-} == -h || ${1-} == --help ]]; then  # the comment above, and nothing else
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  exit 0
fi
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bench_dir=${DLFS_BENCH_DIR:-/tmp/dlfs-bench}
small=${SMALL:-0}
if [[ $small == 1 ]]; then
  reps=${REPS:-2}
  fio_runtime=${FIO_RUNTIME:-3}
  inet_files_n=2000
  c_files_n=1000
else
  reps=${REPS:-5}
  fio_runtime=${FIO_RUNTIME:-10}
  inet_files_n=20000
  c_files_n=6000
fi
build=${DLFS_BUILD_DIR:-$repo/build}
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
command -v fusermount3 >/dev/null || need+=(fuse3)
pkg-config --exists lmdb 2>/dev/null || need+=(liblmdb-dev)
"$python" -c 'import lmdb' 2>/dev/null || need+=(python3-lmdb)
"$python" -c 'import torch' 2>/dev/null || need+=(python3-torch)
"$python" -c 'import torchvision' 2>/dev/null || need+=(python3-torchvision)
"$python" -c 'import matplotlib' 2>/dev/null || need+=(python3-matplotlib)
command -v pkg-config >/dev/null || need+=(pkg-config)
if ((${#need[@]})); then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
[[ -f $fmnist_src/train-images-idx3-ubyte.gz ]] ||
  die "no Fashion-MNIST at $fmnist_src (apt-get install dataset-fashion-mnist)"
[[ -e /dev/fuse ]] || die "no /dev/fuse: the dlfs mount rows need FUSE"

if [[ ! -f $build/build.ninja && ! -f $build/Makefile ]]; then
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$repo" -B "$build" "${gen[@]}" >/dev/null
fi
# Reconfigure when lmdb arrived after the build directory was configured.
[[ -x $build/bench/dlfs_lmdb_bench ]] || cmake -S "$repo" -B "$build" >/dev/null
cmake --build "$build" --target dlfs_cli dlfs_file_reader dlfs_lmdb_bench _dlfs >/dev/null
dlfs=$build/dlfs
file_reader=$build/bench/dlfs_file_reader
report=$here/io_bench_report.py
pyc="$python -W ignore $here/python_contenders.py"
lmdb_bench=$build/bench/dlfs_lmdb_bench
for b in "$dlfs" "$file_reader" "$lmdb_bench"; do [[ -x $b ]] || die "missing $b after building"; done
ls "$build"/python/dlfs/_dlfs*.so >/dev/null 2>&1 || die "the Python module was not built in $build/python"
export DLFS_BUILD_DIR=$build

mkdir -p "$bench_dir"
bench_dir=$(cd "$bench_dir" && pwd)
fs=$(findmnt -n -o FSTYPE --target "$bench_dir" 2>/dev/null || stat -f -c %T "$bench_dir")
[[ $fs != tmpfs && $fs != ramfs ]] || die "$bench_dir is on $fs; set DLFS_BENCH_DIR to a real disk"
runs=$bench_dir/io_bench_runs
rm -rf "$runs"
mkdir -p "$runs"
results_json=${RESULTS_JSON:-$bench_dir/io_bench.json}
if [[ $small == 1 ]]; then plot=${PLOT:-$bench_dir/io_bench.png}; else plot=${PLOT:-$repo/docs/io_bench.png}; fi

# --- Data (generated once, reused) --------------------------------------------
# A tree of bench/data/make_imagenet_like.py, its sorted file list, and its volume.
make_tree() {  # name files classes mean_kb
  local name=$1 files=$2 classes=$3 kb=$4
  if [[ ! -d $bench_dir/$name ]]; then
    log "generating $bench_dir/$name (once)"
    "$python" "$repo/bench/data/make_imagenet_like.py" --files "$files" --classes "$classes" \
      --mean-kb "$kb" --seed 0 "$bench_dir/$name" >/dev/null
  fi
  if [[ ! -s $bench_dir/$name.txt ]]; then
    (cd "$bench_dir" && find "$name" -type f | LC_ALL=C sort) >"$bench_dir/$name.txt.tmp"
    mv "$bench_dir/$name.txt.tmp" "$bench_dir/$name.txt"
  fi
  if [[ ! -f $bench_dir/$name.dlfs ]]; then
    log "packing $bench_dir/$name.dlfs (once)"
    "$dlfs" pack "$bench_dir/$name" -o "$bench_dir/$name.dlfs" -q
  fi
}
tree_name=imagenet-like-${inet_files_n}f-100c-110kb-seed0  # the tree bench/pack/pack_vs_tar.sh uses too
make_tree "$tree_name" "$inet_files_n" 100 110
c_name=imagenet-like-${c_files_n}f-20c-100kb-seed0
make_tree "$c_name" "$c_files_n" 20 100
tree=$bench_dir/$tree_name
inet_list=$bench_dir/$tree_name.txt
inet_vol=$bench_dir/$tree_name.dlfs
c_tree=$bench_dir/$c_name
c_list=$bench_dir/$c_name.txt
c_vol=$bench_dir/$c_name.dlfs
read -r inet_files inet_bytes < <(cd "$bench_dir" && xargs -d '\n' stat -c %s <"$inet_list" |
  awk '{n++; s+=$1} END {printf "%.0f %.0f\n", n, s}')
inet_lmdb=$bench_dir/$tree_name.lmdb
if [[ ! -f $inet_lmdb ]]; then
  log "building $inet_lmdb (once)"
  "$lmdb_bench" build "$tree" "$inet_lmdb.tmp" >/dev/null
  mv "$inet_lmdb.tmp" "$inet_lmdb"
  rm -f "$inet_lmdb.tmp-lock"
fi

fm_tree=$bench_dir/fmnist-files
if [[ ! -d $fm_tree ]]; then
  log "writing Fashion-MNIST as one file per image under $fm_tree (once)"
  "$python" "$repo/bench/data/idx_to_files.py" "$fmnist_src" "$fm_tree" >/dev/null
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
[[ $(samples_in "$c_vol") == "$(wc -l <"$c_list")" ]] || die "$c_vol does not hold the files of $c_tree"
[[ $(samples_in "$fm_vol") == "$fm_files" ]] || die "$fm_vol does not hold the $fm_files files of $fm_tree"

inet_vol_bytes=$(stat -c %s "$inet_vol")
c_vol_bytes=$(stat -c %s "$c_vol")
fm_vol_bytes=$(stat -c %s "$fm_vol")
mean_bytes=$((inet_bytes / inet_files))
fio_bs=$(((mean_bytes + 2048) / 4096 * 4096))
((fio_bs >= 4096)) || fio_bs=4096

# --- Contenders ---------------------------------------------------------------
# "group|name|kind|command": kind is how its output is read (fio; json with
# samples_per_s, mb_per_s, cpu_s_per_gb; json-steady: epochs after the
# first of a dlfs bench run); commands run in $bench_dir.
seed=0
bench_common="--drop-cache --json --seed $seed --engine uring --queue-depth 64 --batch 256"
dlfs_a="$dlfs bench $inet_vol $bench_common"
dlfs_b="$dlfs bench $fm_vol $bench_common"
dlfs_c="$dlfs bench $c_vol $bench_common"
fio_common="--rw=randread --direct=1 --ioengine=io_uring --iodepth=64 --runtime=$fio_runtime --time_based --output-format=json"
contenders=(
  "A|fio, mean sample size (QD 64)|fio|fio --name=limit --filename=$inet_vol --bs=$fio_bs --size=$inet_vol_bytes $fio_common"
  "A|dlfs, device|json|$dlfs_a --epochs 1 --cache-budget 0"
  "A|dlfs, device, epochs 2-3 of 3|json-steady|$dlfs_a --epochs 3 --cache-budget 0"
  "A|dlfs, node cache|json|$dlfs_a --epochs 1"
  "A|dlfs, node cache, epochs 2-3 of 3|json-steady|$dlfs_a --epochs 3"
  "A|dlfs pread, device|json|$dlfs bench $inet_vol --drop-cache --json --seed $seed --engine pread --queue-depth 64 --batch 256 --epochs 1 --cache-budget 0"
  "A|files, 2 threads|json|$file_reader $inet_list --threads 2 --seed $seed"
  "A|files, 8 threads|json|$file_reader $inet_list --threads 8 --seed $seed"
  "A|lmdb, 2 threads|json|$lmdb_bench read $inet_lmdb --threads 2 --seed $seed"
  "B|fio 4 KiB (QD 64, batched submit)|fio|fio --name=limit4k --filename=$fm_vol --bs=4096 --size=$((fm_vol_bytes / 4096 * 4096)) $fio_common --iodepth_batch_submit=16 --iodepth_batch_complete_max=64"
  "B|dlfs, device|json|$dlfs_b --epochs 1 --cache-budget 0"
  "B|dlfs, device, no coalescing|json|$dlfs_b --epochs 1 --cache-budget 0 --no-coalesce"
  "B|dlfs, node cache|json|$dlfs_b --epochs 1"
  "B|dlfs, node cache, epochs 2-3 of 3|json-steady|$dlfs_b --epochs 3"
  "B|LoaderDataset, node cache, epochs 2-3 of 3|json|$pyc loader-dataset $fm_vol --epochs 3 --batch 256"
  "B|files, 2 threads|json|$file_reader $fm_list --threads 2 --seed $seed"
  "B|files, 8 threads|json|$file_reader $fm_list --threads 8 --seed $seed"
  "C|fio 100 KiB (QD 64)|fio|fio --name=limit100k --filename=$c_vol --bs=102400 --size=$((c_vol_bytes / 4096 * 4096)) $fio_common"
  "C|dlfs, device|json|$dlfs_c --epochs 1 --cache-budget 0"
  "C|dlfs, node cache|json|$dlfs_c --epochs 1"
  "C|files, 2 threads|json|$file_reader $c_list --threads 2 --seed $seed"
  "C|files through dlfs mount, 2 threads|json|$pyc file-reader $c_vol --mount --threads 2"
  "C|VolumeDataset per sample, 2 workers|json|$pyc volume-dataset $c_vol --mode per-sample --workers 2"
  "C|VolumeDataset batched, 2 workers|json|$pyc volume-dataset $c_vol --mode batched --workers 2"
  "C|VolumeDataset batched, 0 workers|json|$pyc volume-dataset $c_vol --mode batched --workers 0"
  "C|DatasetFolder over files, 2 workers|json|$pyc dataset-folder $c_tree --workers 2"
  "C|DatasetFolder over dlfs mount, 2 workers|json|$pyc dataset-folder $c_vol --mount --workers 2"
  "C|DataLoader IPC ceiling (no storage), 2 workers|json|$pyc ipc-ceiling --size $((c_vol_bytes / $(wc -l <"$c_list"))) --count $(wc -l <"$c_list") --workers 2"
)
if [[ $diag == 1 ]]; then
  contenders+=(
    "A|diag: dlfs, device, --no-verify|json|$dlfs_a --epochs 1 --cache-budget 0 --no-verify"
    "A|diag: dlfs, device, --queue-depth 128|json|$dlfs bench $inet_vol --drop-cache --json --seed $seed --engine uring --queue-depth 128 --batch 256 --epochs 1 --cache-budget 0"
    "A|diag: dlfs, device, --io-threads 2|json|$dlfs_a --epochs 1 --cache-budget 0 --io-threads 2"
    "A|diag: dlfs, device, --no-coalesce|json|$dlfs_a --epochs 1 --cache-budget 0 --no-coalesce"
    "A|diag: torch DataLoader over files, 2 workers|json|$python $here/torch_files.py $inet_list --workers 2 --batch 256 --seed $seed"
    "B|diag: dlfs, device, --coalesce-gap 65536|json|$dlfs_b --epochs 1 --cache-budget 0 --coalesce-gap 65536"
    "B|diag: dlfs, device, --no-verify|json|$dlfs_b --epochs 1 --cache-budget 0 --no-verify"
  )
fi

# The virtual disk of a VM may be cached by the host, out of our reach: a
# file read recently is served faster than one that was not. So that every
# contender meets the same host state, each repetition first reads all the
# data sets once (HOST_WARMUP=0 skips this: results then depend on history).
warm_virtual_disk() {
  local f
  for f in "$inet_vol" "$inet_lmdb" "$fm_vol" "$c_vol"; do
    dd if="$f" of=/dev/null bs=4M iflag=direct status=none
  done
  local list
  for list in "$inet_list" "$fm_list" "$c_list"; do
    (cd "$bench_dir" && xargs -d '\n' cat <"$list" >/dev/null)
  done
}
drop_caches() {
  sync
  echo 3 >/proc/sys/vm/drop_caches
}

echo "run_io_bench: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, kernel $(uname -r), commit $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "  work dir  $bench_dir on $fs ($(df -h --output=source,size "$bench_dir" | tail -1 | xargs))"
echo "  A         $tree: $inet_files files, $inet_bytes bytes (mean $mean_bytes; fio --bs=$fio_bs)"
echo "  B         $fm_tree: $fm_files files; $fm_vol: $fm_vol_bytes bytes"
echo "  C         $c_tree: $(wc -l <"$c_list") files; $c_vol: $c_vol_bytes bytes"
echo "  tools     $("$dlfs" --version); $(fio --version); torch $("$python" -c 'import torch; print(torch.__version__)'); lmdb $(pkg-config --modversion lmdb)"
echo "  $reps repetitions of ${#contenders[@]} runs, cold page cache before each"

n=${#contenders[@]}
for ((rep = 1; rep <= reps; rep++)); do
  [[ $host_warmup == 1 ]] && warm_virtual_disk
  for ((k = 0; k < n; k++)); do
    idx=$(((k + (rep - 1) * 7) % n))  # rotate the order between repetitions
    IFS='|' read -r group name kind cmd <<<"${contenders[$idx]}"
    out=$runs/$idx.$rep.json
    drop_caches
    # shellcheck disable=SC2086  # the command is a word list by design
    (cd "$bench_dir" && $cmd >"$out" 2>"$runs/$idx.$rep.err") ||
      die "$group/$name failed (rep $rep): $(tail -3 "$runs/$idx.$rep.err")"
    printf '  rep %d  %s %-46s %s\n' "$rep" "$group" "$name" "$("$python" "$report" line "$out" "$kind")"
  done
done

printf '%s\n' "${contenders[@]}" >"$runs/contenders.txt"
"$python" "$report" summary "$runs" "$runs/contenders.txt" "$reps" "$results_json" "$plot"
