#!/usr/bin/env bash
# The distribution benchmark (issue 6), all under mpirun on this host:
#
# A. Collective open vs every rank opening on its own, 8 ranks, a synthetic
#    10,000,000-sample volume (warm page cache: this measures the metadata
#    path, not the disk): open time of the slowest rank, metadata bytes read
#    from storage, and directory memory — measured as the growth of the
#    job's proportional set size (Pss, summed over ranks) across the open.
#    Run with one node (8 ranks) and with 4 fake nodes of 2 ranks.
# B. Shard-local vs local reading of the same epoch, 4 ranks on 2 fake nodes,
#    on the ImageNet-like set packed over 2 targets (one per fake node),
#    cold cache: samples/s and bytes moved over MPI.
#
#   bench/distributed/run_distributed_bench.sh        (as root: B drops the page cache)
#   PARTS=B bench/distributed/run_distributed_bench.sh   (only part B)
#
# Environment: DLFS_BENCH_DIR (/tmp/dlfs-bench), DLFS_BUILD_DIR (<repo>/build),
# REPS (3). Needs the 10M volume (made here with dlfs_directory_bench) and
# the 2-target volume made by bench/distributed/multi_target_bench.py
# ($DLFS_BENCH_DIR/multi-target/t2.dlfs), or TWO_TARGETS=path.
if [[ ${1-} == -h || ${1-} == --help ]]; then  # the comment above, and nothing else
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  exit 0
fi
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bench_dir=${DLFS_BENCH_DIR:-/tmp/dlfs-bench}
build=${DLFS_BUILD_DIR:-$repo/build}
reps=${REPS:-3}
two=${TWO_TARGETS:-$bench_dir/multi-target/t2.dlfs}
big=$bench_dir/dir10m.dlfs
out=${RESULTS:-$bench_dir/distributed_bench.jsonl}
python=/usr/bin/python3
mpirun=(mpirun --allow-run-as-root --oversubscribe)

cmake --build "$build" --target dlfs_cli dlfs_directory_bench >/dev/null
dlfs=$build/dlfs
if [[ ${PARTS:-AB} == *A* && ! -f $big ]]; then  # only part A reads it
  echo "== building the 10M-sample volume (a few minutes)" >&2
  "$build/bench/dlfs_directory_bench" --samples 10000000 --path "$big" --keep --runs 1 \
    --lookups 1000 >/dev/null
fi
[[ ${PARTS:-AB} != *B* || -f $two ]] || {  # only part B reads it
  echo "missing $two: run bench/distributed/multi_target_bench.py first" >&2
  exit 2
}
: >"$out"

record() {  # label json...
  $python -c 'import json,sys; j=json.loads(sys.argv[2]); j["label"]=sys.argv[1]; print(json.dumps(j))' \
    "$1" "$2" >>"$out"
}

for rep in $(seq 1 "$reps"); do
  # A: alternate the two ways of opening, on one node and on 4 fake nodes.
  [[ ${PARTS:-AB} == *A* ]] && cat "$big" >/dev/null  # warm
  for nodes in 1 4; do
    [[ ${PARTS:-AB} == *A* ]] || continue
    for open in collective private; do
      extra=()
      [[ $open == private ]] && extra=(--private-open)
      j=$(DLFS_RANKS_PER_NODE=$((8 / nodes)) "${mpirun[@]}" -np 8 "$dlfs" bench "$big" \
        --epochs 0 --json "${extra[@]}")
      record "open nodes=$nodes $open" "$j"
      echo "rep $rep: open, $nodes node(s), $open" >&2
    done
  done
  # B: local vs shard-local, with and without checksum verification, cold
  # cache, order rotating.
  modes=(local shard-local local-noverify shard-local-noverify shard-local-ahead)
  shift_by=$(((rep - 1) % 5))
  modes=("${modes[@]:shift_by}" "${modes[@]:0:shift_by}")
  for mode in "${modes[@]}"; do
    extra=()
    [[ $mode == shard-local* ]] && extra+=(--shard-local)
    [[ $mode == *-noverify ]] && extra+=(--no-verify)
    [[ $mode == *-ahead ]] && extra+=(--read-ahead)
    j=$(DLFS_RANKS_PER_NODE=2 "${mpirun[@]}" -np 4 "$dlfs" bench "$two" --drop-cache --json \
      "${extra[@]}")
    record "read $mode" "$j"
    echo "rep $rep: read, $mode" >&2
  done
done

$python - "$out" <<'EOF'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    j = json.loads(line)
    runs[j["label"]].append(j)
med = lambda label, key: statistics.median(r[key] for r in runs[label])
if "open nodes=1 collective" in runs:
    print("\n### Collective open vs per-rank open, 8 ranks, 10M samples (median of %d)\n"
          % len(runs["open nodes=1 collective"]))
    d = runs["open nodes=1 collective"][0]["directory_bytes"]
    print(f"Directory region: {d / 1e6:.1f} MB.\n")
    print("| nodes | open | open s (slowest rank) | metadata read from storage | "
          "directory memory (ΔPss, all ranks) | memory / directory |")
    print("|---:|---|---:|---:|---:|---:|")
    for nodes in (1, 4):
        for how in ("collective", "private"):
            l = f"open nodes={nodes} {how}"
            pss = med(l, "open_pss_bytes")
            print(f"| {nodes} | {how} | {med(l, 'open_seconds_max'):.2f} | "
                  f"{med(l, 'metadata_bytes_read') / 1e6:.0f} MB | {pss / 1e6:.0f} MB | {pss / d:.2f}× |")
        c, p = f"open nodes={nodes} collective", f"open nodes={nodes} private"
        print(f"| {nodes} | **ratio** | {med(p, 'open_seconds_max') / med(c, 'open_seconds_max'):.2f}× faster | "
              f"| {med(p, 'open_pss_bytes') / med(c, 'open_pss_bytes'):.2f}× less | |")
print("\n### Shard-local vs local reading, 4 ranks on 2 fake nodes, 2 targets, cold cache "
      "(median of %d)\n" % len(runs["read local"]))
print("| mode | checksums | samples/s | MB over MPI | exchange s (slowest rank) | "
      "of which reading | × local |")
print("|---|---|---:|---:|---:|---:|---:|")
for verify, modes in (("", ("local", "shard-local")), ("-noverify", ("local", "shard-local")),
                      ("", ("shard-local-ahead",))):
    base = med(f"read local{verify}", "samples_per_s")
    for mode in modes:
        l = f"read {mode}{verify}"
        ex = f"{med(l, 'shard_exchange_seconds_max'):.2f}" if mode != "local" else "–"
        io = f"{med(l, 'shard_io_seconds_max'):.2f}" if mode != "local" else "–"
        print(f"| {mode.replace('-ahead', ' --read-ahead')} | {'off' if verify else 'on'} | {med(l, 'samples_per_s'):,.0f} | "
              f"{med(l, 'mpi_bytes_received') / 1e6:,.0f} | {ex} | {io} | "
              f"{med(l, 'samples_per_s') / base:.2f}× |")
EOF
