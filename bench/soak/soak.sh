#!/usr/bin/env bash
# Soak: the Python loader and the FUSE mount read a volume for many epochs
# while resident memory and open fds are recorded after each epoch
# (bench/soak/soak.py; docs/reliability.md has a long run's figures).
#   bench/soak/soak.sh --epochs 20                   short: what the test suite runs
#   bench/soak/soak.sh --minutes 60 --csv soak.csv   long: 30 min each part
#   bench/soak/soak.sh --help                        every option
# Uses build/dlfs and build/python (or $DLFS_BIN and $PYTHONPATH).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
dlfs_bin=${DLFS_BIN:-$repo/build/dlfs}
export PYTHONPATH=${PYTHONPATH:-$repo/build/python}
exec /usr/bin/python3 "$repo/bench/soak/soak.py" --dlfs "$dlfs_bin" "$@"
