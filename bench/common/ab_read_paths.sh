#!/usr/bin/env bash
# Read-path A/B of two dlfs CLI builds: each reader the read driver serves
# (loader cache off, O_DIRECT loader, the node cache's fill, verify, the
# shard loader under mpirun, the defaults), cold, the builds alternating.
#   bench/common/ab_read_paths.sh OLD_DLFS NEW_DLFS SMALL_VOLUME LARGE_VOLUME [REPS]
# SMALL_VOLUME: e.g. Fashion-MNIST packed (dlfs pack /usr/share/datasets/fashion-mnist);
# LARGE_VOLUME: ~1.6 GB of ~100 KB samples (bench/common/volumes.py). Root: drops caches.
# Prints per case the medians of each build's epoch seconds (wall for verify),
# new/old, and the median of the pairs' ratios (this VM's disk drifts ±30 %).
set -euo pipefail
if (($# < 4)) || [[ $1 == -h || $1 == --help ]]; then
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
  [[ ${1-} == -h || ${1-} == --help ]] && exit 0
  exit 2
fi
old=$1 new=$2 small=$3 large=$4 reps=${5:-5}
cases=(
  "small-defaults-5|bench $small --epochs 5 --json"
  "small-off-3|bench $small --epochs 3 --cache-budget 0 --json"
  "large-off-1|bench $large --epochs 1 --cache-budget 0 --json"
  "large-hold-3|bench $large --epochs 3 --cache-budget 2G --json"
  "large-verify|verify $large"
)
mpi_case="small-mpi2-shard-3|bench $small --epochs 3 --shard-local --cache-budget 0 --json"
command -v mpirun >/dev/null && cases+=("$mpi_case")
run() {  # bin, args...: epoch seconds of bench --json, else wall seconds
  local bin=$1 s e out
  shift
  sync
  echo 3 >/proc/sys/vm/drop_caches
  s=$(date +%s.%N)
  if [[ $1 == bench && $* == *--shard-local* ]]; then
    out=$(mpirun --allow-run-as-root --oversubscribe -np 2 -x DLFS_RANKS_PER_NODE=1 "$bin" "$@" 2>/dev/null)
  else
    out=$("$bin" "$@" 2>/dev/null)
  fi
  e=$(date +%s.%N)
  if [[ $1 == bench ]]; then
    echo "$out" | /usr/bin/python3 -c 'import json, sys; print(sum(e["seconds"] for e in json.load(sys.stdin)["epochs"]))'
  else
    /usr/bin/python3 -c "print($e - $s)"
  fi
}
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((rep = 1; rep <= reps; rep++)); do
  for c in "${cases[@]}"; do
    name=${c%%|*}
    read -r -a args <<<"${c#*|}"
    for side in old new; do
      bin=$old
      [[ $side == new ]] && bin=$new
      echo "$name $side $(run "$bin" "${args[@]}")" | tee -a "$results"
    done
  done
done
/usr/bin/python3 - "$results" <<'PY'
import collections, statistics as st, sys
d = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    name, side, value = line.split()
    d[name][side].append(float(value))
for name, v in d.items():
    o, n = v["old"], v["new"]
    pairs = st.median(y / x for x, y in zip(o, n))
    print(f"{name:20s} old {st.median(o):.3f} new {st.median(n):.3f} "
          f"new/old {st.median(n) / st.median(o):.3f} pairs {pairs:.3f}")
PY
