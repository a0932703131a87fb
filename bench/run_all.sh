#!/usr/bin/env bash
# Runs every benchmark behind docs/benchmarks.md on this machine, one after
# the other, and keeps what each prints (its tables, ratios and verdicts).
#
#   bench/run_all.sh                   every benchmark as the results page ran it
#                                      (as root, on a quiet machine: ~5 h, the sum
#                                      of the scripts' own durations)
#   bench/run_all.sh --quick           each one's small configuration: checks that
#                                      the whole chain runs here (15 min on 2 cores,
#                                      beside fuzzers at nice 19);
#                                      its figures are not measurements
#   bench/run_all.sh [--quick] NAME... only these (names: bench/run_all.sh --list)
#   bench/run_all.sh --list            the names, with the command each runs
#
# First it installs what the benchmarks use (scripts/install-deps.sh --bench),
# builds build/ (RelWithDebInfo, as measured) and checks each benchmark's
# tools, naming the Debian package that brings a missing one. Then each
# benchmark's output goes to RESULTS/NAME.log (RESULTS: $DLFS_BENCH_DIR/
# results/<UTC time>-<commit>[-quick], DLFS_BENCH_DIR defaulting to
# /tmp/dlfs-bench) and a last table says how long each took and whether it
# ran clean. Plots are redrawn in docs/ by full runs only. A benchmark that
# fails does not stop the others; the exit status is 1 if any failed.
if [[ ${1-} == -h || ${1-} == --help ]]; then  # the comment above, and nothing else
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  exit 0
fi
set -uo pipefail
cd "$(dirname "$0")/.."

# name | tools it needs (tool:package) | full command | quick command
BENCHES=(
  "directory|:|build/bench/dlfs_directory_bench --cold|build/bench/dlfs_directory_bench --cold --samples 1000000 --runs 2"
  "order|:|build/bench/dlfs_order_bench|build/bench/dlfs_order_bench --benchmark_min_time=0.01 --benchmark_filter=-BM_FisherYates/100000000"
  "scale|:|bench/scale/scale_bench.py --dir \$DLFS_BENCH_DIR --tree 1e7,1e8 --epoch|bench/scale/scale_bench.py --dir \$DLFS_BENCH_DIR --sizes 1e6 --tree 1e6 --runs 1"
  "tokens|:|bench/tokens/token_bench.py --dir \$DLFS_BENCH_DIR/tokens \${MEGATRON_DIR:+--megatron \$MEGATRON_DIR} && build/bench/dlfs_blend_bench|bench/tokens/token_bench.py --dir \$DLFS_BENCH_DIR/tokens --docs 20000 --windows 2000 --sources 50 --runs 1"
  "pack|bc:bc tar:tar|bench/pack/pack_vs_tar.sh 3|FILES=2000 bench/pack/pack_vs_tar.sh 1"
  "io|fio:fio fusermount3:fuse3|REPS=5 bench/io/run_io_bench.sh|SMALL=1 REPS=1 DIAG=0 FIO_RUNTIME=1 bench/io/run_io_bench.sh"
  "cache-fill|mpirun:openmpi-bin|bench/cache/run_fill_bench.py --plot docs/cache_fill.png|bench/cache/run_fill_bench.py --reps 1 --big-samples 2000"
  "node-cache|mpirun:openmpi-bin|bench/cache/run_cache_bench.py|bench/cache/run_cache_bench.py --samples 2000 --reps 1 --epochs 2"
  "cluster-cache|mpirun:openmpi-bin fusermount3:fuse3|bench/cache/run_cluster_cache_bench.py --plot docs/cluster_cache.png|bench/cache/run_cluster_cache_bench.py --samples 768 --latencies 4 --nodes 4 --reps 1 --epochs 2"
  "scaling|mpirun:openmpi-bin|bench/distributed/scaling_bench.py --plot docs/scaling.png|bench/distributed/scaling_bench.py --samples 2000 --ranks 1 2 --reps 1 --epochs 2"
  "python-job|mpirun:openmpi-bin|bench/distributed/python_job_bench.py|bench/distributed/python_job_bench.py --reps 1 --epochs 2"
  "multi-target|:|REPS=5 bench/distributed/multi_target_bench.py|REPS=1 QUIET_CPU_S=1e9 bench/distributed/multi_target_bench.py"
  "distribution|mpirun:openmpi-bin|bench/distributed/run_distributed_bench.sh|REPS=1 PARTS=B bench/distributed/run_distributed_bench.sh"
  "lmdbio|mpirun:openmpi-bin fusermount3:fuse3|bench/lmdbio/run_lmdbio_bench.sh|REPS=1 LATENCIES_MS='0 1' NODES='1 2' CIFAR_RECORDS=3000 IMAGENET_RECORDS=200 CIFAR_ITERS=5 IMAGENET_ITERS=3 PLOT='' bench/lmdbio/run_lmdbio_bench.sh"
  "decode|:|/usr/bin/python3 bench/decode/decode_bench.py|/usr/bin/python3 bench/decode/decode_bench.py --dir \$DLFS_BENCH_DIR/decode-tiny --jpegs 200 --fmnist 1000 --reps 1 --batch 32"
  "prep|:|/usr/bin/python3 bench/decode/prep_bench.py --images 5000 --reps 3|/usr/bin/python3 bench/decode/prep_bench.py --images 200 --reps 1 --dir \$DLFS_BENCH_DIR/prep-smoke"
  "nbd|nbdkit:nbdkit nbdcopy:libnbd-bin|bench/nbd/run_nbd_bench.sh|SMALL=1 bench/nbd/run_nbd_bench.sh"
  "s3|radosgw:radosgw curl:curl|bench/s3/s3_bench.py --reps 5|bench/s3/s3_bench.py --samples 300 --reps 1"
  "fields|:|bench/fields/run_fields_bench.sh|SMALL=1 bench/fields/run_fields_bench.sh"
  "mixture|:|bench/mixture/run_mixture_bench.py --reps 7|bench/mixture/run_mixture_bench.py --reps 1 --na 14000 --nb 6000 --dir \$DLFS_BENCH_DIR/mixture-quick"
  "mlperf|fio:fio|EPOCHS=3 bench/mlperf/run_mlperf_storage.sh|WORKLOADS=resnet50 EPOCHS=1 GIB_resnet50=1 FIO_SECONDS=2 bench/mlperf/run_mlperf_storage.sh"
)

quick=0
list=0
only=()
for a in "$@"; do
  case $a in
    --quick) quick=1 ;;
    --list) list=1 ;;
    -*) echo "run_all.sh: unknown option $a (see --help)" >&2; exit 2 ;;
    *) only+=("$a") ;;
  esac
done

field() { local IFS='|'; read -ra f <<<"$1"; echo "${f[$2]}"; }
selected=()
for b in "${BENCHES[@]}"; do
  name=$(field "$b" 0)
  if ((list)); then
    printf '%-14s %s\n%-14s quick: %s\n' "$name" "$(field "$b" 2)" "" "$(field "$b" 3)"
    continue
  fi
  if ((${#only[@]} == 0)) || [[ " ${only[*]} " == *" $name "* ]]; then selected+=("$b"); fi
done
((list)) && exit 0
for n in "${only[@]}"; do
  [[ " $(for b in "${BENCHES[@]}"; do field "$b" 0; done | tr '\n' ' ') " == *" $n "* ]] ||
    { echo "run_all.sh: no benchmark named '$n' (see --list)" >&2; exit 2; }
done
if [[ $(id -u) -ne 0 ]]; then
  echo "run_all.sh: run as root: the benchmarks drop the page cache, mount FUSE file systems" \
    "and make memory cgroups" >&2
  exit 2
fi

scripts/install-deps.sh --bench || exit 1
missing=()
for b in "${selected[@]}"; do
  for need in $(field "$b" 1); do
    tool=${need%%:*} package=${need#*:}
    [[ -z $tool ]] && continue
    command -v "$tool" >/dev/null || missing+=("$(field "$b" 0) needs $tool (apt-get install $package)")
  done
done
if ((${#missing[@]})); then
  printf 'run_all.sh: %s\n' "${missing[@]}" >&2
  exit 1
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
  cmake --build build -j "$(nproc)" >/dev/null || { echo "run_all.sh: the build failed" >&2; exit 1; }

export DLFS_BENCH_DIR=${DLFS_BENCH_DIR:-/tmp/dlfs-bench}
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit+="-dirty"
results=$DLFS_BENCH_DIR/results/$(date -u +%Y%m%dT%H%M%SZ)-$commit$( ((quick)) && echo -quick)
mkdir -p "$results"
{
  echo "commit $commit, $(date -u +%FT%TZ), $(nproc) cores, $(uname -r)"
  grep -m1 'model name' /proc/cpuinfo
  free -g | sed -n 2p
  df -h "$DLFS_BENCH_DIR" | tail -1
} | tee "$results/machine.txt"

status=0
summary=()
for b in "${selected[@]}"; do
  name=$(field "$b" 0)
  cmd=$(field "$b" $((quick ? 3 : 2)))
  echo "== $name: $cmd"
  start=$(date +%s)
  if bash -c "$cmd" 2>&1 | tee "$results/$name.log"; then rc=0; else rc=1; status=1; fi
  took=$(($(date +%s) - start))
  summary+=("$(printf '%-14s %6.1f min  %s' "$name" "$(bc -l <<<"$took / 60")" \
    "$( ((rc == 0)) && echo ok || echo "FAILED (see $results/$name.log)")")")
done
{
  echo "== run_all.sh$( ((quick)) && echo ' --quick'): $commit, results in $results"
  printf '%s\n' "${summary[@]}"
} | tee "$results/summary.txt"
exit $status
