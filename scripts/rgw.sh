#!/usr/bin/env bash
# Starts and stops a throwaway single-node Ceph RADOS Gateway (an S3 server on
# 127.0.0.1) for the s3:// tests and bench/s3: one ceph-mon, one ceph-osd
# (BlueStore in a sparse file), one radosgw; no ceph-mgr, no cephx. Config,
# data, logs and PIDs all live under DIR; /etc/ceph and /var/lib/ceph are
# neither read nor written. Up in ~4 s.
#   scripts/rgw.sh start DIR   DIR must be absent or empty. Picks free ports,
#                              creates an S3 user with a random key and the
#                              bucket "dlfs", waits (up to RGW_START_TIMEOUT s,
#                              default 90) until S3 answers, then writes DIR/env
#                              and prints it:
#                                AWS_ENDPOINT_URL=http://127.0.0.1:PORT
#                                AWS_ACCESS_KEY_ID=...  AWS_SECRET_ACCESS_KEY=...
#                                AWS_REGION=us-east-1   DLFS_S3_BUCKET=dlfs
#                              Exit 77 if Ceph is not installed (tests skip);
#                              on any other failure, prints why (the relevant
#                              log's tail), stops what it started, exits 1.
#   scripts/rgw.sh stop DIR    stops the daemons in DIR/pids (TERM, KILL after
#                              10 s); idempotent; leaves DIR for the caller
#   scripts/rgw.sh available   exit 0 if the binaries are installed, else print
#                              the missing Debian packages and exit 1
# In a shell: set -a; . DIR/env; set +a
# Logs: DIR/log/{mon.a,osd.0,client.rgw.a}.{log,out}. The OSD's block file is
# RGW_OSD_SIZE (default 4G, sparse: DIR takes ~50 MB after a test run).
if [[ ${1-} == -h || ${1-} == --help ]]; then  # the comment above, and nothing else
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  exit 0
fi
set -euo pipefail

prog=rgw.sh
die() { echo "$prog: $*" >&2; exit 1; }
usage() { echo "usage: scripts/rgw.sh start DIR | stop DIR | available (see --help)" >&2; exit 2; }

# binary -> Debian package
declare -A PKG=(
  [ceph-mon]=ceph-mon [monmaptool]=ceph-base [ceph-osd]=ceph-osd
  [radosgw]=radosgw [radosgw-admin]=ceph-common [ceph]=ceph-common
  [curl]=curl
)

missing_packages() {  # prints the packages whose binaries are missing
  local b out=()
  for b in "${!PKG[@]}"; do
    command -v "$b" >/dev/null 2>&1 || out+=("${PKG[$b]}")
  done
  ((${#out[@]})) && printf '%s\n' "${out[@]}" | sort -u | tr '\n' ' '
  return 0
}

cmd_available() {
  local m
  m=$(missing_packages)
  if [[ -n $m ]]; then
    echo "$prog: missing; install with: apt-get install --no-install-recommends ${m% }" >&2
    return 1
  fi
}

port_in_use() {  # port: any TCP socket (listening, connected, TIME_WAIT) on it
  grep -q -- "$(printf ':%04X ' "$1")" /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

pick_port() {  # a free port below Linux's ephemeral range (32768-), not in $*
  local p i
  for ((i = 0; i < 200; i++)); do
    p=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000))
    [[ " $* " == *" $p "* ]] && continue
    port_in_use "$p" || { echo "$p"; return 0; }
  done
  die "no free TCP port found"
}

random_string() {  # length, alphabet
  local s
  s=$(LC_ALL=C tr -dc "$2" </dev/urandom | head -c "$1") || true
  echo "$s"
}

# A PID from DIR/pids is still one of this cluster's daemons if it runs (not a
# zombie: PID 1 may reap orphans late) and its command line names our config.
running() {  # pid conf
  local state
  state=$(awk '/^State:/ { print $2 }' "/proc/$1/status" 2>/dev/null) || return 1
  [[ -n $state && $state != Z && $state != X ]] || return 1
  { tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null | grep -qF -- "-c $2 "
}

stop_one() {  # name pid conf: TERM, up to 10 s, then KILL
  local i
  running "$2" "$3" || return 0
  kill -TERM "$2" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    running "$2" "$3" || return 0
    sleep 0.1
  done
  echo "$prog: $1 (pid $2) did not exit within 10 s of SIGTERM; killing it" >&2
  kill -KILL "$2" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    running "$2" "$3" || return 0
    sleep 0.1
  done
  echo "$prog: $1 (pid $2) survived SIGKILL" >&2
  return 1
}

# One at a time, in reverse order of start: radosgw takes ~1 s to exit with the
# OSD up, and hangs (until KILL) if the OSD goes first.
cmd_stop() {
  local dir=$1 names=() pids=() name pid i rc=0
  [[ -f $dir/pids ]] || return 0
  dir=$(cd "$dir" && pwd)
  while read -r name pid; do
    if [[ -n ${pid-} ]]; then
      names=("$name" "${names[@]}")
      pids=("$pid" "${pids[@]}")
    fi
  done <"$dir/pids"
  for i in "${!pids[@]}"; do
    stop_one "${names[$i]}" "${pids[$i]}" "$dir/ceph.conf" || rc=1
  done
  return $rc
}

# --- start ------------------------------------------------------------------

DIR="" CONF="" RGW_PORT="" ACCESS_KEY="" SECRET_KEY="" started=0 TIMEOUT=90 DEADLINE=0

# One attempt runs in a subshell and exits 0 (up), 1 (failed) or 3 (a port we
# chose was taken before the daemon bound it, e.g. by another cluster starting
# at the same time: the caller retries with other ports).
fail() {  # message [log name]: prints the log's tail, stops what we started, exits 1
  local msg=$1 log=${2-} f=$DIR/log/${2-}
  echo "$prog: start failed: $msg" >&2
  if [[ -n $log && -s $f.log ]]; then  # the errors (level -1) in the daemon's log, else its tail
    echo "--- $f.log:" >&2
    { grep -E '^[-0-9T:.+]+ [0-9a-f]+ -1 ' "$f.log" || tail -n 15 "$f.log"; } | tail -n 15 >&2
  fi
  if [[ -n $log && -s $f.out ]]; then
    echo "--- tail of $f.out:" >&2
    tail -n 25 "$f.out" >&2
  fi
  if ((started)); then cmd_stop "$DIR" || true; fi
  exit 1
}

port_taken() {  # daemon name
  echo "$prog: the port chosen for $1 was taken meanwhile; retrying with other ports" >&2
  cmd_stop "$DIR" || true
  exit 3
}

launch() {  # name binary args...: a daemon in the foreground, in the background
  local name=$1
  shift
  setsid "$@" -f -c "$CONF" </dev/null >>"$DIR/log/$name.out" 2>&1 &
  echo "$name $!" >>"$DIR/pids"
  started=1
}

left() {  # seconds left until DEADLINE, at least 1
  local l=$((DEADLINE - SECONDS))
  echo $((l > 0 ? l : 1))
}

pid_of() { awk -v n="$1" '$1 == n { print $2 }' "$DIR/pids"; }

alive() {  # name
  local pid
  pid=$(pid_of "$1")
  [[ -n $pid ]] && running "$pid" "$CONF"
}

listens() {  # name port: the daemon itself listens on 127.0.0.1:port
  local pid inode
  pid=$(pid_of "$1")
  for inode in $(awk -v a="$(printf '0100007F:%04X' "$2")" '$2 == a && $4 == "0A" { print $10 }' /proc/net/tcp); do
    ls -l "/proc/$pid/fd" 2>/dev/null | grep -qF "socket:[$inode]" && return 0
  done
  return 1
}

wait_listen() {  # name port regex-of-bind-failure-in-its-log: until DEADLINE
  local up
  while ! listens "$1" "$2"; do
    up=0
    alive "$1" && up=1  # before reading the log: it may have logged and exited since
    grep -qE -- "$3" "$DIR/log/$1.log" "$DIR/log/$1.out" 2>/dev/null && port_taken "$1"
    ((up)) || fail "$1 exited" "$1"
    ((SECONDS < DEADLINE)) || fail "$1 does not listen on 127.0.0.1:$2 after $TIMEOUT s" "$1"
    sleep 0.1
  done
}

s3() {  # curl args...: a SigV4-signed request
  curl -sS --max-time 10 --aws-sigv4 "aws:amz:us-east-1:s3" --user "$ACCESS_KEY:$SECRET_KEY" \
    -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@"
}

write_conf() {  # mon_port osd_size
  # Unix sockets' paths are limited to 107 bytes: no admin sockets for a deep DIR.
  local asok="$DIR/run/\$name.asok"
  ((${#DIR} + 24 > 107)) && asok=""
  cat >"$CONF" <<EOF
# Written by scripts/rgw.sh: a throwaway single-node cluster for tests.
[global]
fsid = $(cat /proc/sys/kernel/random/uuid)
mon host = [v2:127.0.0.1:$1]
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
ms bind ipv6 = false
# no cephx (radosgw loops on authentication otherwise)
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
ms client mode = crc
ms cluster mode = crc
ms service mode = crc
# all state under DIR
keyring = $DIR/keyring
run dir = $DIR/run
admin socket = $asok
pid file = $DIR/run/\$name.pid
crash dir = $DIR/crash
log file = $DIR/log/\$name.log
log to stderr = false
mon cluster log file = $DIR/log/cluster.log
client mount timeout = 30
# one OSD, no replicas, few PGs, no ceph-mgr
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim allowed = false
mon max pg per osd = 1000
mon data avail warn = 2
mon data avail crit = 1
# the monitor commits map changes every 1 s by default; radosgw's first start
# makes ~20 of them (its pools)
paxos propose interval = 0.05
paxos min wait = 0.01
# clients look for a newer OSD map every 5 s by default: radosgw's first
# requests, sent before the OSD is up, would wait that long
objecter tick interval = 0.5

[mon]
mon data = $DIR/mon

[osd]
osd data = $DIR/osd
osd journal = $DIR/osd/journal
osd objectstore = bluestore
bluestore block create = true
bluestore block size = $2
bluestore block db create = false
bluestore block wal create = false
bluestore fsck on mkfs = false
bluestore fsck on mount = false
# each open/close of the block file waits out one 250 ms poll of the aio
# thread by default; mkfs and mount do that ~10 times
bdev aio poll ms = 20
# small memory: a fixed 256 MiB cache instead of a 4 GiB target
bluestore cache autotune = false
bluestore cache size = 256M
osd memory target = 1G

[client.rgw.a]
rgw data = $DIR/rgw
# without tcp_nodelay, requests on a reused connection stall ~40 ms
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT tcp_nodelay=1
rgw thread pool size = 128
EOF
}

start_attempt() {  # osd_size t0
  local osd_size=$1 t0=$2 mon_port osd_uuid code
  osd_uuid=$(cat /proc/sys/kernel/random/uuid)
  mon_port=$(pick_port)
  RGW_PORT=$(pick_port "$mon_port")
  ACCESS_KEY=$(random_string 20 'A-Z0-9')
  SECRET_KEY=$(random_string 40 'A-Za-z0-9')
  mkdir -p "$DIR"/{mon,osd,rgw,log,run,crash}
  : >"$DIR/pids"
  write_conf "$mon_port" "$osd_size"

  # monitor
  monmaptool --create --fsid "$(awk '$1 == "fsid" { print $3 }' "$CONF")" \
    --addv a "[v2:127.0.0.1:$mon_port]" "$DIR/monmap" >"$DIR/log/monmaptool.out" 2>&1 ||
    fail "monmaptool" monmaptool
  ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" >"$DIR/log/mon.a.out" 2>&1 ||
    fail "ceph-mon --mkfs" mon.a
  launch mon.a ceph-mon -i a

  # OSD: BlueStore's mkfs needs no monitor, so it runs while the monitor starts
  echo "$osd_uuid" >"$DIR/osd/fsid"
  ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" --no-mon-config >"$DIR/log/osd.0.out" 2>&1 ||
    fail "ceph-osd --mkfs" osd.0
  wait_listen mon.a "$mon_port" 'unable to bind to'
  timeout "$(left)" ceph -c "$CONF" osd new "$osd_uuid" 0 >"$DIR/log/ceph-cli.out" 2>&1 ||
    fail "ceph osd new$( (($? == 124)) && echo " timed out after $TIMEOUT s")" ceph-cli
  launch osd.0 ceph-osd -i 0

  # radosgw; the S3 user is created while it starts
  launch client.rgw.a radosgw -n client.rgw.a
  timeout "$(left)" radosgw-admin -c "$CONF" user create --uid dlfs --display-name dlfs \
    --access-key "$ACCESS_KEY" --secret-key "$SECRET_KEY" >"$DIR/log/radosgw-admin.out" 2>&1 ||
    fail "radosgw-admin user create$( (($? == 124)) && echo " timed out after $TIMEOUT s")" radosgw-admin
  wait_listen client.rgw.a "$RGW_PORT" 'failed to bind|Address already in use'

  # S3 answers once the bucket is created (409: an earlier try did it after all)
  while :; do
    alive mon.a || fail "ceph-mon exited" mon.a
    alive osd.0 || fail "ceph-osd exited" osd.0
    alive client.rgw.a || fail "radosgw exited" client.rgw.a
    code=$(s3 -o "$DIR/log/create-bucket.out" -w '%{http_code}' -X PUT "http://127.0.0.1:$RGW_PORT/dlfs" 2>/dev/null) ||
      code=000
    [[ $code == 200 || $code == 409 ]] && break
    ((SECONDS < DEADLINE)) || fail "no S3 answer within $TIMEOUT s (last HTTP status $code)" client.rgw.a
    sleep 0.25
  done
  code=$(s3 -o /dev/null -w '%{http_code}' -I "http://127.0.0.1:$RGW_PORT/dlfs") || code=000
  [[ $code == 200 ]] || fail "bucket dlfs not there after creating it (HEAD: $code)" client.rgw.a

  cat >"$DIR/env" <<EOF
AWS_ENDPOINT_URL=http://127.0.0.1:$RGW_PORT
AWS_ACCESS_KEY_ID=$ACCESS_KEY
AWS_SECRET_ACCESS_KEY=$SECRET_KEY
AWS_REGION=us-east-1
DLFS_S3_BUCKET=dlfs
EOF
  cat "$DIR/env"
  echo "$prog: up in $((SECONDS - t0)) s; stop with: scripts/rgw.sh stop $DIR" >&2
}

cmd_start() {
  local osd_size=${RGW_OSD_SIZE:-4G} m attempt rc t0=$SECONDS
  TIMEOUT=${RGW_START_TIMEOUT:-90}
  DEADLINE=$((t0 + TIMEOUT))
  m=$(missing_packages)
  if [[ -n $m ]]; then
    echo "$prog: Ceph is not installed; skipping (apt-get install --no-install-recommends ${m% })" >&2
    exit 77
  fi
  DIR=$(realpath -m -- "$1")
  [[ ! $DIR =~ [[:space:]\$\;\#] ]] || die "DIR must not contain whitespace, '\$', ';' or '#': $DIR"
  if [[ -e $DIR ]]; then
    [[ -d $DIR ]] || die "$1 exists and is not a directory"
    [[ -z $(ls -A "$DIR") ]] || die "$1 is not empty; refusing to start a cluster there (use a new directory)"
  fi
  mkdir -p "$DIR"
  CONF=$DIR/ceph.conf
  # The attempt runs in the background so that a signal interrupts the wait:
  # then it and its commands are killed and what it started is stopped.
  local child sig=""
  trap 'sig=130' INT
  trap 'sig=143' TERM
  trap 'sig=129' HUP
  for attempt in 1 2 3; do
    (set -e; start_attempt "$osd_size" "$t0") &
    child=$!
    rc=0
    wait "$child" || rc=$?
    if [[ -n $sig ]]; then
      pkill -TERM -P "$child" 2>/dev/null || true
      disown "$child" 2>/dev/null || true
      kill -KILL "$child" 2>/dev/null || true
      echo "$prog: interrupted; stopping what was started" >&2
      cmd_stop "$DIR" || true
      exit "$sig"
    fi
    ((rc == 3)) || exit $rc
    find "$DIR" -mindepth 1 -delete  # DIR was empty: all this is the attempt's
  done
  die "start failed: the chosen ports were taken on every attempt"
}

case ${1-} in
  start) (($# == 2)) || usage; cmd_start "$2" ;;
  stop) (($# == 2)) || usage; cmd_stop "$2" ;;
  available) (($# == 1)) || usage; cmd_available ;;
  *) usage ;;
esac
