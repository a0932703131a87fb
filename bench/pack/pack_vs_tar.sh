#!/usr/bin/env bash
# Pack vs tar: how fast `dlfs pack` turns an ImageNet-like tree into a volume,
# against `tar cf` archiving the same tree, side by side in one run.
#
#   bench/pack/pack_vs_tar.sh [REPS]        (default 3; run from anywhere, as root)
#
# Each repetition times both commands from a cold page cache (sync, then
# drop_caches), alternating which goes first. Both are timed two ways from the
# same run: the command alone, and the command plus a `sync` after it. The
# second is the fair one: dlfs pack fsyncs its volume before returning, tar
# leaves its archive in the page cache. Throughput is the tree's file bytes
# (1 MB = 10^6 bytes) over the median time.
#
# Environment:
#   DLFS_BENCH_DIR  work directory, on a real disk, not tmpfs (/tmp/dlfs-bench)
#   DLFS_BIN        dlfs binary (build/dlfs of this repository)
#   FILES CLASSES MEAN_KB SEED   tree shape (20000, 100, 110, 0); the tree is
#                   generated once by bench/data/make_imagenet_like.py and reused
#   KEEP=1          keep the archive and the volume of the last repetition
if [[ ${1-} == -h || ${1-} == --help ]]; then  # the comment above, and nothing else
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  exit 0
fi
set -euo pipefail
command -v bc >/dev/null || { echo "pack_vs_tar.sh: needs bc (apt-get install bc, or scripts/install-deps.sh --bench)" >&2; exit 1; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
reps=${1:-3}
bench_dir=${DLFS_BENCH_DIR:-/tmp/dlfs-bench}
dlfs=${DLFS_BIN:-$repo/build/dlfs}
files=${FILES:-20000}
classes=${CLASSES:-100}
mean_kb=${MEAN_KB:-110}
seed=${SEED:-0}
python=/usr/bin/python3

die() {
  echo "pack_vs_tar: $*" >&2
  exit 2
}

[[ $reps =~ ^[1-9][0-9]*$ ]] || die "REPS must be a positive integer, not '$reps'"
[[ -x $dlfs ]] || die "no dlfs binary at $dlfs (build it, or set DLFS_BIN)"
[[ -w /proc/sys/vm/drop_caches ]] || die "cannot drop the page cache: run as root"
mkdir -p "$bench_dir"
fs=$(findmnt -n -o FSTYPE --target "$bench_dir" 2>/dev/null || stat -f -c %T "$bench_dir")
[[ $fs != tmpfs && $fs != ramfs ]] || die "$bench_dir is on $fs; set DLFS_BENCH_DIR to a real disk"

tree=$bench_dir/imagenet-like-${files}f-${classes}c-${mean_kb}kb-seed${seed}
if [[ ! -d $tree ]]; then
  echo "generating $tree (once; later runs reuse it)"
  "$python" "$repo/bench/data/make_imagenet_like.py" --files "$files" --classes "$classes" \
    --mean-kb "$mean_kb" --seed "$seed" "$tree"
fi
read -r nfiles nbytes < <(find "$tree" -type f -printf '%s\n' |
  awk '{n++; s+=$1} END {printf "%.0f %.0f\n", n, s}')  # mawk's %d stops at 2^31-1
tar_out=$bench_dir/pack_vs_tar.tar
dlfs_out=$bench_dir/pack_vs_tar.dlfs

cleanup() { rm -f "$tar_out" "$dlfs_out" "$dlfs_out".tmp.*; }
trap cleanup EXIT
if [[ ${KEEP:-0} == 1 ]]; then trap - EXIT; fi

drop_caches() {
  sync
  echo 3 >/proc/sys/vm/drop_caches
}
now() { date +%s.%N; }

# run NAME OUTPUT CMD...: removes OUTPUT, then times CMD from a cold cache;
# appends "NAME plain with_sync" to results.
results=()
run() {
  local name=$1 out=$2
  shift 2
  rm -f "$out" "$out".tmp.*
  drop_caches
  local t0 t1 t2
  t0=$(now)
  "$@" >/dev/null  # dlfs prints a one-line summary; tar prints nothing
  t1=$(now)
  sync
  t2=$(now)
  local plain sync_s
  plain=$(echo "$t1 - $t0" | bc -l)
  sync_s=$(echo "$t2 - $t0" | bc -l)
  printf '  rep %d  %-10s %8.2f s  (+ sync %8.2f s)\n' "$rep" "$name" "$plain" "$sync_s"
  results+=("$name $plain $sync_s")
}

echo "pack_vs_tar: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, kernel $(uname -r)"
echo "  tree   $tree: $nfiles files, $nbytes bytes"
echo "  disk   $bench_dir on $fs ($(df -h --output=source,size "$bench_dir" | tail -1 | xargs))"
echo "  tools  $(tar --version | head -1); $("$dlfs" --version)"
echo "  $reps repetitions, cold page cache before each command"

for ((rep = 1; rep <= reps; rep++)); do
  if ((rep % 2)); then
    run tar "$tar_out" tar cf "$tar_out" -C "$tree" .
    run dlfs "$dlfs_out" "$dlfs" pack "$tree" -o "$dlfs_out" --force -q
  else
    run dlfs "$dlfs_out" "$dlfs" pack "$tree" -o "$dlfs_out" --force -q
    run tar "$tar_out" tar cf "$tar_out" -C "$tree" .
  fi
done

# Sanity, untimed: both outputs hold the whole tree.
packed=$("$dlfs" info --json "$dlfs_out" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["samples"])')
[[ $packed == "$nfiles" ]] || die "volume holds $packed samples, the tree $nfiles files"
tar_sz=$(stat -c %s "$tar_out")
((tar_sz >= nbytes)) || die "archive ($tar_sz bytes) smaller than the tree ($nbytes bytes)"
echo "  outputs: archive $tar_sz bytes, volume $(stat -c %s "$dlfs_out") bytes"

# median NAME FIELD (2 = plain, 3 = with sync)
median() {
  printf '%s\n' "${results[@]}" | awk -v n="$1" -v f="$2" '$1 == n {print $f}' | sort -g |
    awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
tar_sync=$(median tar 3)
dlfs_sync=$(median dlfs 3)
tar_plain=$(median tar 2)
dlfs_plain=$(median dlfs 2)
mbs() { echo "$nbytes / 1000000 / $1" | bc -l; }

echo
printf '  %-24s %10s %10s\n' "median of $reps" "seconds" "MB/s"
printf '  %-24s %10.2f %10.1f\n' "tar cf + sync" "$tar_sync" "$(mbs "$tar_sync")"
printf '  %-24s %10.2f %10.1f\n' "dlfs pack + sync" "$dlfs_sync" "$(mbs "$dlfs_sync")"
printf '  %-24s %10.2f %10.1f\n' "tar cf (command only)" "$tar_plain" "$(mbs "$tar_plain")"
printf '  %-24s %10.2f %10.1f\n' "dlfs pack (command only)" "$dlfs_plain" "$(mbs "$dlfs_plain")"
printf '  dlfs/tar throughput: %.2f with sync, %.2f command only\n' \
  "$(echo "$tar_sync / $dlfs_sync" | bc -l)" "$(echo "$tar_plain / $dlfs_plain" | bc -l)"
