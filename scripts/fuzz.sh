#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/) with clang + ASan/UBSan and runs
# each for SECONDS (default 60), then prints executions per harness.
#   scripts/fuzz.sh [SECONDS] [HARNESS...]      e.g. scripts/fuzz.sh 20 tar idx
#   FUZZ_RUNS=10000000 scripts/fuzz.sh 0        stop each after N executions instead
#   FUZZ_RUNS=10000000 scripts/fuzz.sh 7200     ... or after 2 h, whichever comes first
#   FUZZ_JOBS=N ...                              harnesses run at once (default: cores)
#   FUZZ_CPU=7200 scripts/fuzz.sh 14400          stop each after 2 h of its own CPU time
#                                                (or the wall limit): for a shared machine
#   FUZZ_COMMITTED=0 ...                         without the committed corpus (the test
#                                                command's smoke run: seeds only, 5 s each)
#   FUZZ_MINIMIZE=1 scripts/fuzz.sh 0 [HARNESS...]   no fuzzing: merge what the runs
#                                                found into fuzz/corpus/<harness>.tar.xz, the
#                                                smallest set of inputs with the same coverage
# Each run starts from fuzz/make_seeds.py's seeds and the corpus committed in
# fuzz/corpus/<harness>.tar.xz (the minimized result of the campaigns in
# docs/reliability.md); what it finds grows in build-fuzz/corpus/<harness>
# across runs. Each harness's line ends with its coverage (edges) when it
# started and when it stopped. A crash, leak, timeout or allocation over
# 1 GiB fails the run and leaves the input in build-fuzz/artifacts/<harness>/.
# Exit status 0 only if every harness ran clean. Lower a long run's priority
# (nice) rather than pausing it: libFuzzer's per-input timeout and slow-unit
# report count wall time, so a SIGSTOP shows up as a timeout.
if [[ ${1-} == -h || ${1-} == --help ]]; then  # the comment above, and nothing else
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  exit 0
fi
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
harnesses=("$@")
if ((${#harnesses[@]} == 0)); then
  harnesses=(volume_file volume_metadata volume_resealed lmdb idx tar decode prepare)
fi

if [[ -n "${FUZZ_CPU:-}" && ! "$FUZZ_CPU" =~ ^[0-9]+$ ]]; then
  echo "fuzz.sh: FUZZ_CPU is a number of seconds, not '$FUZZ_CPU'" >&2
  exit 2
fi
scripts/install-deps.sh
dir=${FUZZ_DIR:-build-fuzz}
# A build directory already configured for fuzzing (scripts/test.sh's
# sanitized build, which also has the tests) is used as it is.
if ! grep -qs '^DLFS_BUILD_FUZZERS:BOOL=ON' "$dir/CMakeCache.txt"; then
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDLFS_BUILD_FUZZERS=ON -DDLFS_BUILD_TESTS=OFF -DDLFS_BUILD_BENCHMARKS=OFF \
    -DDLFS_BUILD_PYTHON=OFF >/dev/null
fi
targets=()
for h in "${harnesses[@]}"; do targets+=("fuzz_$h"); done
cmake --build "$dir" -j "$(nproc)" --target "${targets[@]}" dlfs_cli
/usr/bin/python3 fuzz/make_seeds.py "$dir/seeds" "$dir/dlfs" >/dev/null

# A 16 MB quarantine still catches a use after free within one input (each
# input allocates far less) and runs the importers about twice as fast as
# ASan's 256 MB default, which keeps handing out fresh pages.
export ASAN_OPTIONS=quarantine_size_mb=16
limits=(-malloc_limit_mb=1024 -rss_limit_mb=2048 -timeout=30 -print_final_stats=1)
[[ -n "${FUZZ_RUNS:-}" ]] && limits+=(-runs="$FUZZ_RUNS")
if [[ -z "${FUZZ_RUNS:-}" || "$seconds" != 0 ]]; then
  limits+=(-max_total_time="$seconds")
fi

# Writes STOP once the process whose pid is in PIDFILE has used FUZZ_CPU
# seconds of CPU. STOP is libFuzzer's -stop_file, which ends the run as
# -max_total_time does, but only once the file is non-empty.
stop_after_cpu() {  # pidfile stop
  local ticks pid stat
  ticks=$(getconf CLK_TCK)
  # sleep must not hold the script's output open after the run.
  while sleep 10 </dev/null >/dev/null 2>&1; do
    pid=$(cat "$1" 2>/dev/null) || continue
    [[ "$pid" =~ ^[0-9]+$ ]] || continue
    { read -ra stat <"/proc/$pid/stat"; } 2>/dev/null || return 0
    if (((stat[13] + stat[14]) / ticks >= 10#$FUZZ_CPU)); then
      echo "CPU limit of $FUZZ_CPU s reached" >"$2"
      return 0
    fi
  done
}

# The committed corpus of a harness, if it has one, unpacked afresh (read
# only: new inputs go to build-fuzz/corpus/<harness>). It is kept as one
# xz archive per harness: LMDB and volume inputs are mostly zero pages
# (2.5 MB of lmdb inputs are 15 KB packed).
committed() {
  local archive=fuzz/corpus/$1.tar.xz
  [[ -f $archive && ${FUZZ_COMMITTED:-1} != 0 ]] || return 0
  rm -rf "$dir/committed/$1" && mkdir -p "$dir/committed"
  tar -C "$dir/committed" -xJf "$archive" && echo "$dir/committed/$1"
}

if [[ -n "${FUZZ_MINIMIZE:-}" ]]; then
  # -merge=1 into an empty directory keeps the fewest inputs that reach
  # every feature of all the directories after it.
  for h in "${harnesses[@]}"; do
    fresh=$dir/minimized/$h
    rm -rf "$fresh" && mkdir -p "$fresh" "$dir/corpus/$h" "$dir/logs"
    # shellcheck disable=SC2046
    "$dir/fuzz/fuzz_$h" -merge=1 -malloc_limit_mb=1024 -rss_limit_mb=2048 -timeout=30 \
      "$fresh" "$dir/corpus/$h" "$dir/seeds/$h" $(committed "$h") >"$dir/logs/$h.merge.log" 2>&1 ||
      { echo "fuzz: merging $h failed, see $dir/logs/$h.merge.log" >&2; exit 1; }
    mkdir -p fuzz/corpus
    tar -C "$dir/minimized" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - "$h" |
      xz -9 >"fuzz/corpus/$h.tar.xz"
    printf '%-16s %5s inputs, %6s, packed %6s  (%s)\n' "$h" "$(ls "$fresh" | wc -l)" \
      "$(du -sh "$fresh" | cut -f1)" "$(du -h "fuzz/corpus/$h.tar.xz" | cut -f1)" \
      "$(grep -m1 -o 'MERGE-OUTER: .*' "$dir/logs/$h.merge.log" | tail -1)"
  done
  exit 0
fi

run_one() {  # harness
  local h=$1
  mkdir -p "$dir/corpus/$h" "$dir/artifacts/$h" "$dir/logs"
  local log=$dir/logs/$h.log start rc=0 TIMEFORMAT='%0U %0S' extra=() watcher=
  local pidfile=$dir/logs/$h.pid stop=$dir/logs/$h.stop
  rm -f "$pidfile" "$stop"
  if [[ -n "${FUZZ_CPU:-}" ]]; then
    extra=(-stop_file="$stop")
    stop_after_cpu "$pidfile" "$stop" &
    watcher=$!
  fi
  start=$(date +%s)
  # CPU seconds beside the wall time: a long run may share the machine.
  # The shell execs the fuzzer, so `time` and the pid file see the fuzzer.
  # shellcheck disable=SC2046
  { time bash -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$dir/fuzz/fuzz_$h" "$dir/corpus/$h" \
    "$dir/seeds/$h" $(committed "$h") "${limits[@]}" "${extra[@]}" \
    -artifact_prefix="$dir/artifacts/$h/" >"$log" 2>&1; } 2>"$log.cpu" || rc=$?
  [[ -z "$watcher" ]] || kill "$watcher" 2>/dev/null || true
  local execs rate cpu cov0 cov1
  execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log" | tail -1)
  rate=$(awk '/stat::average_exec_per_sec/ {print $2}' "$log" | tail -1)
  cpu=$(awk '{print $1 + $2}' "$log.cpu" 2>/dev/null)
  # Edges covered after loading the corpora, and at the last status line.
  cov0=$(grep -m1 -o 'INITED cov: [0-9]*' "$log" | awk '{print $3}')
  cov1=$(grep -o ' cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  printf '%-16s %8ss %8ss cpu %12s execs %8s/s %6s inputs  cov %s -> %s  %s\n' "$h" \
    "$(($(date +%s) - start))" "${cpu:-?}" "${execs:-?}" "${rate:-?}" "$(ls "$dir/corpus/$h" | wc -l)" \
    "${cov0:-?}" "${cov1:-?}" "$( ((rc == 0)) && echo ok || echo "FAILED (rc $rc, see $log)")"
  return $rc
}

echo "== fuzzing: ${harnesses[*]} ($(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%FT%TZ))"
# Each harness is one single-threaded process: run as many at once as there
# are cores (the smoke stage of scripts/test.sh then takes a fraction of the
# harnesses' total time). Each prints its line when it ends.
jobs=${FUZZ_JOBS:-$(nproc)}
status=0
running=0
for h in "${harnesses[@]}"; do
  if ((running >= jobs)); then
    wait -n || status=1
    running=$((running - 1))
  fi
  run_one "$h" &
  running=$((running + 1))
done
while ((running > 0)); do
  wait -n || status=1
  running=$((running - 1))
done
if ((status != 0)); then
  echo "fuzz: failures; inputs in $dir/artifacts/, logs in $dir/logs/" >&2
  for h in "${harnesses[@]}"; do
    grep -m3 -E "ERROR|SUMMARY|invariant" "$dir/logs/$h.log" 2>/dev/null | sed "s/^/  $h: /" >&2 || true
  done
fi
exit $status
