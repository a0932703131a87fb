#!/usr/bin/env bash
# MLPerf Storage, emulated (issue 23; docs/benchmarks.md "MLPerf Storage"):
# for each workload, the largest number of simulated H100s that dlfs and
# DLIO's PyTorch pattern each keep at the workload's AU threshold, in a
# memory cgroup of a fifth of the data set, and fio's limit on the same
# files. Writes one JSON line per run to $OUT (default
# /tmp/dlfs-mlperf-storage/results.jsonl) and prints a table.
#
#   bench/mlperf/run_mlperf_storage.sh                 (as root, with fio installed; ~1-2 h)
#   WORKLOADS=resnet50 EPOCHS=2 bench/mlperf/run_mlperf_storage.sh   (~20 min)
#
# Environment: WORKLOADS (resnet50 cosmoflow unet3d), ACCELERATOR (h100),
# EPOCHS (5), DATA (/tmp/dlfs-mlperf-storage), GIB_resnet50 / GIB_cosmoflow /
# GIB_unet3d (data set sizes: 4, 4, 16), FIO_SECONDS (20).
if [[ ${1-} == -h || ${1-} == --help ]]; then  # the comment above, and nothing else
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  exit 0
fi
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $(id -u) == 0 ]] || { echo "run_mlperf_storage: needs root (cgroups, drop_caches)" >&2; exit 1; }
DATA=${DATA:-/tmp/dlfs-mlperf-storage}
OUT=${OUT:-$DATA/results.jsonl}
EPOCHS=${EPOCHS:-5}
ACCELERATOR=${ACCELERATOR:-h100}
FIO_SECONDS=${FIO_SECONDS:-20}
declare -A GIB=([resnet50]=${GIB_resnet50:-4} [cosmoflow]=${GIB_cosmoflow:-4} [unet3d]=${GIB_unet3d:-16})
mkdir -p "$DATA"
: > "$OUT"
for w in ${WORKLOADS:-resnet50 cosmoflow unet3d}; do
  echo "== $w (${GIB[$w]} GiB, $EPOCHS epochs, $ACCELERATOR)" >&2
  /usr/bin/python3 bench/mlperf/mlperf_storage.py --workload "$w" --accelerator "$ACCELERATOR" \
    --dataset-gib "${GIB[$w]}" --epochs "$EPOCHS" --data "$DATA" --search \
    --fio "$FIO_SECONDS" --json | tee -a "$OUT" >&2
done
/usr/bin/python3 - "$OUT" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'workload':10s} {'contender':13s} {'accel':>5s} {'AU %':>6s} {'samples/s':>10s} "
      f"{'MiB/s':>8s} {'peak MiB':>8s}")
for r in rows:
    if r.get("search"):
        peak = r.get("peak_memory_bytes") or 0
        print(f"{r['workload']:10s} {r['contender']:13s} {r['accelerators']:5d} "
              f"{r.get('au', 0):6.2f} {r.get('samples_per_s', 0):10.1f} "
              f"{r.get('mib_per_s', 0):8.1f} {peak / 2**20:8.0f}")
    elif r.get("contender") == "fio":
        print(f"{r['workload']:10s} {'fio limit':13s} {r['accelerators_at_threshold']:5.1f} "
              f"{'':6s} {'':10s} {r['mib_per_s']:8.1f}")
EOF
