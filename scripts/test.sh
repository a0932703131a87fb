#!/usr/bin/env bash
# Runs every test: installs dependencies, builds (Release + ASan/UBSan) and
# runs CTest, which runs the GoogleTest suite and the pytest suite.
#   scripts/test.sh            everything
#   DLFS_NO_SANITIZE=1 ...     skip the sanitizer build (faster local runs)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

jobs=$(nproc)
run_suite() {  # build dir, extra cmake args...
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  ctest --test-dir "$dir" -j "$jobs" --output-on-failure
}

echo "== build and test (RelWithDebInfo) =="
run_suite build

if [[ -z "${DLFS_NO_SANITIZE:-}" ]]; then
  echo "== build and test under AddressSanitizer + UBSan =="
  export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp"
  run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DDLFS_SANITIZE=address,undefined \
    -DDLFS_BUILD_BENCHMARKS=OFF -DDLFS_BUILD_PYTHON=OFF
fi
