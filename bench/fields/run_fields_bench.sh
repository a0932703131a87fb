#!/usr/bin/env bash
# The fields benchmark (issue 15; its figures: docs/benchmarks.md "Smaller questions"):
# bytes on disk and samples/s of format v2 volumes, measured side by side in
# one run:
#   A  Fashion-MNIST's raw pixels (784-byte "pix" fields, from Debian's
#      dataset-fashion-mnist) and
#   B  a tokenised-text-like set (200-2000 uint16 Zipf-drawn token ids per
#      "tok" field),
#      each packed raw, with --compress zstd and with --compress zstd --dict;
#   C  real JPEGs (bench/data/make_photo_jpegs.py), packed as a v1 volume from the
#      ImageFolder tree and as a v2 volume from WebDataset shards (fields jpg
#      and cls, stored raw): what v2's metadata costs a JPEG set (target:
#      < 2 % samples/s).
# Every set is generated under a temporary directory and packed from
# WebDataset tar shards (bench/fields/make_fields_data.py), so every field has a
# name and `dlfs bench VOL --fields NAME` reads it through the loader,
# decompressing zstd fields in Next() (on the caller's thread, off the I/O threads).
#
# Each repetition runs every volume once cold and once warm, in an order
# that rotates between repetitions; the tables show medians:
#   cold  page cache dropped (echo 3 > /proc/sys/vm/drop_caches), one
#         shuffled epoch, cache budget 0: every sample read from the device
#         (O_DIRECT) and decoded;
#   warm  eight shuffled epochs with a node cache of 1 GB (--cache-budget 1G,
#         filled before the first read; a budget given, so the figure
#         does not depend on the defaults' rule); the median samples/s of
#         epochs 3-8: data in memory, the cost left is the loader (the
#         node cache holds zstd fields decoded when they all fit, as here:
#         decompressed once, by the fill). Not epoch 2: it still hands out the batches epoch 1
#         read ahead from storage before the cache was full, each checked
#         against its CRC32C (about half of 1,500 JPEGs' 154 MB here), so it
#         measures a CRC pass whose size depends on timing (0.08-15 M
#         samples/s for the same volume).
#
#   bench/fields/run_fields_bench.sh           (as root; ~10-20 min)
#   SMALL=1 bench/fields/run_fields_bench.sh   (12,000 images, 3,000 token arrays,
#                                        300 JPEGs: ~2 min)
#
# Environment:
#   DLFS_BENCH_DIR   where the temporary work directory goes (/tmp/dlfs-bench)
#   FM_SAMPLES       Fashion-MNIST images (all 60000; SMALL: 12000)
#   TOK_SAMPLES      token arrays (20000; SMALL: 3000)
#   JPEG_FILES       JPEGs (3000; SMALL: 300)
#   LEVEL            zstd level (3)
#   REPS             repetitions, medians reported (3; SMALL: 1)
#   DLFS_BUILD_DIR   CMake build directory (<repo>/build)
#   RESULTS_JSON     all runs as JSON lines ($DLFS_BENCH_DIR/fields_bench.jsonl)
#   KEEP=1           keep the work directory
if [[ ${1-} == -h || ${1-} == --help ]]; then  # the comment above, and nothing else
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  exit 0
fi
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bench_dir=${DLFS_BENCH_DIR:-/tmp/dlfs-bench}
small=${SMALL:-0}
build=${DLFS_BUILD_DIR:-$repo/build}
python=/usr/bin/python3
level=${LEVEL:-3}
if [[ $small == 1 ]]; then
  fm_n=${FM_SAMPLES:-12000}
  tok_n=${TOK_SAMPLES:-3000}
  jpeg_n=${JPEG_FILES:-300}
  reps=${REPS:-1}
else
  fm_n=${FM_SAMPLES:-60000}
  tok_n=${TOK_SAMPLES:-20000}
  jpeg_n=${JPEG_FILES:-3000}
  reps=${REPS:-3}
fi
results=${RESULTS_JSON:-$bench_dir/fields_bench.jsonl}
log() { echo "[fields-bench] $*" >&2; }
die() {
  echo "run_fields_bench: $*" >&2
  exit 1
}

[[ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]] ||
  die "Fashion-MNIST not found (apt-get install dataset-fashion-mnist)"
if [[ ! -x $build/dlfs ]]; then
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" --target dlfs_cli >/dev/null
dlfs=$build/dlfs
# Throughput needs `dlfs bench --fields` (reading fields through the loader);
# without it the script reports bytes on disk only.
can_bench=1
bench_help=$("$dlfs" bench --help 2>&1 || true)  # not a pipe into grep -q: pipefail would see SIGPIPE
grep -q -- "--fields" <<<"$bench_help" || can_bench=0
cold_ok=1
[[ $(id -u) == 0 && -w /proc/sys/vm/drop_caches ]] || cold_ok=0

mkdir -p "$bench_dir"
work=$(mktemp -d "$bench_dir/fields-bench.XXXXXX")
cleanup() { [[ ${KEEP:-0} == 1 ]] || rm -rf "$work"; }
trap cleanup EXIT

echo "run_fields_bench: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, kernel $(uname -r), commit $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "  reproduce: $( ((small)) && echo "SMALL=1 ")FM_SAMPLES=$fm_n TOK_SAMPLES=$tok_n JPEG_FILES=$jpeg_n LEVEL=$level REPS=$reps bench/fields/run_fields_bench.sh"
echo "  work dir  $work"

# --- Data and volumes -----------------------------------------------------------
log "generating the sets"
"$python" "$here/make_fields_data.py" fashion-mnist "$work/fm" --limit "$fm_n"
"$python" "$here/make_fields_data.py" tokens "$work/tok" --samples "$tok_n"
"$python" "$repo/bench/data/make_photo_jpegs.py" --files "$jpeg_n" --classes 10 "$work/jpeg-tree" \
  >/dev/null
"$python" "$here/make_fields_data.py" jpeg-tar "$work/jpeg-tree" "$work/jpeg-tar"

# name|shards or tree|pack options|field to read
volumes=(
  "fm-raw|fm||pix"
  "fm-zstd|fm|--compress zstd:$level|pix"
  "fm-dict|fm|--compress zstd:$level --dict|pix"
  "tok-raw|tok||tok"
  "tok-zstd|tok|--compress zstd:$level|tok"
  "tok-dict|tok|--compress zstd:$level --dict|tok"
  "jpeg-v1|jpeg-tree||"
  "jpeg-v2|jpeg-tar||jpg"
)
export DLFS=$dlfs
: >"$work/sizes.jsonl"
for v in "${volumes[@]}"; do
  IFS='|' read -r name src opts field <<<"$v"
  log "packing $name"
  # shellcheck disable=SC2086  # options are a word list by design
  "$dlfs" pack "$work/$src" -o "$work/$name.dlfs" -q $opts >"$work/$name.pack.txt"
  # Source bytes: the fields' (or files') own bytes, without tar headers.
  "$python" - "$work/$name.dlfs" "$name" "$field" >>"$work/sizes.jsonl" <<'EOF'
import json, os, subprocess, sys
vol, name, field = sys.argv[1:]
rows = [json.loads(l) for l in subprocess.run(
    [os.environ["DLFS"], "ls", "-r", "--json", vol], check=True,
    capture_output=True).stdout.splitlines()]
if field:
    fs = [f for r in rows for f in r["fields"] if f["name"] == field]
    decoded, stored = sum(f["size"] for f in fs), sum(f["stored"] for f in fs)
    codecs = sorted({f["codec"] for f in fs})
else:
    decoded = stored = sum(r["size"] for r in rows)
    codecs = ["v1"]
print(json.dumps({"name": name, "samples": len(rows), "file_bytes": os.path.getsize(vol),
                  "field_decoded": decoded, "field_stored": stored, "codecs": codecs}))
EOF
done

# --- Reading --------------------------------------------------------------------
: >"$results"
drop_caches() {
  sync
  echo 3 >/proc/sys/vm/drop_caches
}
run() {  # name field mode rep
  local name=$1 field=$2 mode=$3 rep=$4 args=()
  [[ -n $field ]] && args+=(--fields "$field")
  if [[ $mode == cold ]]; then
    drop_caches
    args+=(--epochs 1 --drop-cache --cache-budget 0)
  else
    args+=(--epochs 8 --cache-budget 1G)
  fi
  "$dlfs" bench "$work/$name.dlfs" "${args[@]}" --json >"$work/run.json" 2>"$work/run.err" ||
    die "$name $mode failed: $(tail -3 "$work/run.err")"
  "$python" - "$work/run.json" "$name" "$mode" "$rep" >>"$results" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
name, mode, rep = sys.argv[2:]
# Warm: the median of epochs 3 on (epoch 1 filled the node cache; epoch 2
# hands out what epoch 1 read ahead from storage).
import statistics
es = j["epochs"][2:] if mode == "warm" else j["epochs"][-1:]
def med(key):
    return statistics.median(e[key] for e in es)
print(json.dumps({"name": name, "mode": mode, "rep": int(rep),
                  "samples_per_s": med("samples_per_s"), "mb_per_s": med("mb_per_s"),
                  "cpu_s_per_gb": med("cpu_s_per_gb")}))
EOF
  log "rep $rep $name $mode: $(tail -1 "$results" | "$python" -c 'import json,sys; r=json.load(sys.stdin); print("%.0f samples/s" % r["samples_per_s"])')"
}

if ((can_bench && cold_ok)); then
  n=${#volumes[@]}
  for ((rep = 1; rep <= reps; rep++)); do
    for ((k = 0; k < n; k++)); do
      IFS='|' read -r name _ _ field <<<"${volumes[$(((k + (rep - 1) * 3) % n))]}"
      run "$name" "$field" cold "$rep"
      run "$name" "$field" warm "$rep"
    done
  done
elif ((!can_bench)); then
  log "this dlfs bench has no --fields: bytes on disk only"
else
  log "not root (cannot drop the page cache): bytes on disk only"
fi

# --- Report ---------------------------------------------------------------------
"$python" - "$work/sizes.jsonl" "$results" "$reps" <<'EOF'
import json, statistics, sys
sizes = {r["name"]: r for r in map(json.loads, open(sys.argv[1]))}
runs = [json.loads(l) for l in open(sys.argv[2])]
reps = int(sys.argv[3])
def med(name, mode):
    v = [r["samples_per_s"] for r in runs if r["name"] == name and r["mode"] == mode]
    return statistics.median(v) if v else None
def fmt(x, spec):
    return format(x, spec) if x is not None else "-"
def ratio(a, b):
    return a / b if a is not None and b else None
print()
print("| set | volume | codecs | field bytes | stored | on disk | vs raw | "
      "cold samples/s | vs raw | warm samples/s | vs raw |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for set_, label in (("fm", "Fashion-MNIST pixels"), ("tok", "token ids"), ("jpeg", "JPEG")):
    base = "jpeg-v1" if set_ == "jpeg" else f"{set_}-raw"
    for name in (n for n in sizes if n.startswith(set_ + "-")):
        s, b = sizes[name], sizes[base]
        print(f"| {label} | {name} | {','.join(s['codecs'])} | {s['field_decoded']:,} | "
              f"{s['field_stored']:,} | {s['file_bytes']:,} | "
              f"{s['file_bytes'] / b['file_bytes']:.3f} | "
              f"{fmt(med(name, 'cold'), ',.0f')} | "
              f"{fmt(ratio(med(name, 'cold'), med(base, 'cold')), '.3f')} | "
              f"{fmt(med(name, 'warm'), ',.0f')} | "
              f"{fmt(ratio(med(name, 'warm'), med(base, 'warm')), '.3f')} |")
print()
print(f"Medians of {reps} repetitions (- : not measured); 'vs raw' is the ratio to the raw volume "
      "of the same set (JPEG: to the v1 volume). Field bytes: the read field's decoded bytes; "
      "stored: as stored; on disk: the volume file.")
for mode in ("cold", "warm"):
    r = ratio(med("jpeg-v2", mode), med("jpeg-v1", mode))
    if r is not None:
        loss = (1 - r) * 100
        print(f"JPEG v2 vs v1, {mode}: {r:.3f} ({loss:+.1f} % loss; target < 2 %: "
              f"{'met' if loss < 2 else 'missed'})")
EOF
echo "runs: $results"
