#!/usr/bin/env bash
# Default-path A/B of two dlfs CLI builds: pack (Fashion-MNIST's IDX files),
# verify and info of VOLUME with the page cache warm, and a cold two-epoch
# `dlfs bench` with default options; the builds alternate, REPS times.
#   bench/common/ab_cli.sh OLD_DLFS NEW_DLFS VOLUME [REPS]     (root: drops caches)
# Build each side alike, e.g. a worktree of the old commit and this tree with
#   cmake -S . -B build-rel -G Ninja -DCMAKE_BUILD_TYPE=Release -DDLFS_BUILD_TESTS=OFF \
#     -DDLFS_BUILD_BENCHMARKS=OFF -DDLFS_BUILD_PYTHON=OFF && cmake --build build-rel --target dlfs_cli
# Prints one line per run; compare medians (this VM's disk drifts ±30 %).
set -euo pipefail
if (($# < 3)) || [[ $1 == -h || $1 == --help ]]; then
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
  [[ ${1-} == -h || ${1-} == --help ]] && exit 0
  exit 2
fi
command -v bc >/dev/null || { echo "ab_cli.sh: needs bc (apt-get install bc, or scripts/install-deps.sh --bench)" >&2; exit 1; }
old=$1 new=$2 vol=$3 reps=${4:-5}
src=/usr/share/datasets/fashion-mnist
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
seconds() {  # command...: wall seconds, or FAILED
  local s e
  s=$(date +%s.%N)
  "$@" >/dev/null 2>&1 || { echo FAILED; return; }
  e=$(date +%s.%N)
  echo "$e - $s" | bc
}
for ((rep = 1; rep <= reps; rep++)); do
  for side in old new; do
    bin=$old
    [[ $side == new ]] && bin=$new
    rm -f "$out/p.dlfs"
    pack=$(seconds "$bin" pack "$src" -o "$out/p.dlfs")
    verify=$(seconds "$bin" verify "$vol")
    info=$(seconds "$bin" info "$vol")
    rm -f /dev/shm/dlfs-"$(id -u)"-*
    sync
    echo 3 >/proc/sys/vm/drop_caches
    bench=$("$bin" bench "$vol" --epochs 2 --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
print(" ".join(str(round(e["samples_per_s"])) for e in d["epochs"]))')
    echo "$side rep$rep pack_s=$pack verify_s=$verify info_s=$info bench_samples_per_s=$bench"
  done
done
