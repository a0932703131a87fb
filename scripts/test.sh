#!/usr/bin/env bash
# Runs every test: installs dependencies, then
#   1. builds with gcc (RelWithDebInfo, in build-gcc) and runs CTest there:
#      pytest (CLI, Python module, dlfs.torch, FUSE, the CLI under mpirun), packaging;
#   2. builds once with clang + AddressSanitizer + UBSan (the library and the
#      fuzzers with coverage instrumentation; the benchmarks, to see that they
#      compile), runs CTest there (the GoogleTest suite, the pytest files that
#      reach C++ code the suite does not, the MPI programs), then each
#      libFuzzer harness of the same build for 5 s, two at a time, as a smoke
#      check (scripts/fuzz.sh);
#   3. the tests of concurrent code (engines, loader, node cache, volume reads,
#      stress) under ThreadSanitizer, building only them.
# Prints how long each stage took.
#   scripts/test.sh            everything
#   DLFS_NO_SANITIZE=1 ...     skip stages 2-3, run the GoogleTest suite and MPI programs in stage 1
#   DLFS_FUZZ_SECONDS=N ...    fuzz each harness N s in stage 2 (default 5)
if [[ ${1-} == -h || ${1-} == --help ]]; then  # the comment above, and nothing else
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  exit 0
fi
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

jobs=$(nproc)
times=()
stage() {  # name, command...
  local name=$1 start=$SECONDS
  shift
  echo "== $name =="
  "$@"
  times+=("$(printf '%-40s %5d s' "$name" $((SECONDS - start)))")
}
# ccache (installed by install-deps.sh) makes a second run of this script
# rebuild only what changed; a fresh machine starts with an empty cache.
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# Unity builds (CMake joins each target's sources, 8 to a translation unit):
# a build from scratch, as CI does three times, spends most of its time on
# the headers and templates each file compiles again (the ASan build took
# 311 s file by file, 196 s so). Developers' builds stay file by file.
unity=(-DCMAKE_UNITY_BUILD=ON)
run_suite() {  # build dir, extra cmake args...
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja "${launcher[@]}" "${unity[@]}" "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  ctest --test-dir "$dir" -j "$jobs" --output-on-failure
}
# A failing test or a sanitizer report needs file, line and function names
# only; full debug info (-g) made every build about 30 % slower.
lines_only=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG"
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG")
gcc_g1=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG")
# The sanitized builds run each GoogleTest program as 4 CTest entries of a
# share of its tests each, not a process per test: a sanitizer's start and
# its leak check at exit cost more than most tests (tests/CMakeLists.txt).
shards=(-DDLFS_TEST_SHARDS=4)
tsan_shards=(-DDLFS_TEST_SHARDS=8)  # its longest tests vary more
run_tsan() {
  cmake -S . -B build-tsan -G Ninja "${launcher[@]}" "${unity[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDLFS_SANITIZE=thread "${tsan_shards[@]}" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    -DDLFS_BUILD_BENCHMARKS=OFF -DDLFS_BUILD_PYTHON=OFF >/dev/null
  cmake --build build-tsan -j "$jobs" --target dlfs_tsan_tests
  ctest --test-dir build-tsan -L tsan -j "$jobs" --output-on-failure
}

# The gcc build (the compiler users build with) runs the Python, CLI (also
# under mpirun) and packaging tests; the GoogleTest suite and the MPI
# programs run in the sanitized builds below, not again here (unless they
# are skipped). Its own directory leaves a
# developer's build/ alone.
unit_tests=OFF
[[ -n "${DLFS_NO_SANITIZE:-}" ]] && unit_tests=ON
# The benchmarks are compiled in the ASan build (no test runs them).
stage "build and test (gcc, RelWithDebInfo)" run_suite build-gcc "${gcc_g1[@]}" \
  -DDLFS_UNIT_TESTS=$unit_tests -DDLFS_BUILD_BENCHMARKS=$unit_tests

if [[ -z "${DLFS_NO_SANITIZE:-}" ]]; then
  export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp"
  # One sanitized configuration serves the tests and the fuzzers: building
  # the library a second time for libFuzzer cost ~140 s.
  CC=clang-14 CXX=clang++-14 stage "build and test under ASan + UBSan (clang)" run_suite \
    build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLFS_SANITIZE=address,undefined \
    -DDLFS_BUILD_FUZZERS=ON -DDLFS_BUILD_PYTHON=OFF "${lines_only[@]}" \
    "${shards[@]}"
  FUZZ_DIR=build-asan FUZZ_COMMITTED=0 stage "fuzz smoke (${DLFS_FUZZ_SECONDS:-5} s per harness)" \
    scripts/fuzz.sh "${DLFS_FUZZ_SECONDS:-5}"
  stage "concurrency tests under ThreadSanitizer" run_tsan
fi

echo "== stage times =="
printf '%s\n' "${times[@]}"
