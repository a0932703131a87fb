#!/usr/bin/env bash
# Installs what dlfs needs to build, test and run its demo on Debian 12.
# Runs apt-get only when something is missing (needs root then).
#   scripts/install-deps.sh           build, tests, demo (and most benchmarks)
#   scripts/install-deps.sh --bench   also what only bench/ uses (bench/run_all.sh
#                                     runs it): bc for the scripts' timings, linux-perf
#                                     for the profiles docs/benchmarks.md quotes,
#                                     python3-boto3 for the peer bench/s3 runs,
#                                     qemu-utils for bench/nbd's qemu-nbd server
if [[ ${1-} == -h || ${1-} == --help ]]; then  # the comment above, and nothing else
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  exit 0
fi
set -euo pipefail
bench=0
case ${1-} in
  "") ;;
  --bench) bench=1 ;;
  *) echo "install-deps.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
esac

PACKAGES=(
  # build
  build-essential cmake ninja-build pkg-config git ccache
  # libraries
  libisal-dev libarchive-dev zlib1g-dev libcli11-dev nlohmann-json3-dev liburing-dev liblmdb-dev
  # image decoding (src/decode): libjpeg-turbo (TurboJPEG and libjpeg APIs), libspng
  libturbojpeg0-dev libjpeg62-turbo-dev libspng-dev
  # per-field compression (format v2)
  libzstd-dev
  # MPI (LMDBIO reader, distribution): Debian's OpenMPI; mpi4py for the Python
  # loaders' comm= (its C API header) and the distributed tests
  libopenmpi-dev openmpi-bin python3-mpi4py
  # Python bindings (built for Debian's /usr/bin/python3) and the FUSE view
  pybind11-dev python3-dev python3-numpy python3-torch libfuse3-dev fuse3
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev python3 python3-pytest python3-torchvision python3-lmdb
  # the benchmark plots (bench/io/run_io_bench.sh, bench/lmdbio/run_lmdbio_bench.sh)
  python3-matplotlib
  # the device's limit the I/O benchmarks compare with (bench/io/run_io_bench.sh)
  fio
  # fuzzing (scripts/fuzz.sh): clang and libFuzzer
  clang-14 libfuzzer-14-dev
  python3-pil  # the decode tests compare with PIL
  python3-tqdm  # progress bars in Python (optional at run time; the tests cover both paths)
  # packaging tests: pip install in a venv (offline), the .deb
  python3-pip python3-setuptools python3-wheel python3-venv dpkg-dev
  # NBD targets (libnbd client), the NBD server the tests and benchmark start,
  # and nbdkit's filter header (the benchmark's microsecond delay filter)
  libnbd-dev libnbd-bin nbdkit nbdkit-plugin-dev
  # s3:// targets: libcurl (SigV4 signing, its multi interface)
  libcurl4-openssl-dev
  # the S3 server the s3:// tests and bench/s3 start (scripts/rgw.sh): Ceph's
  # RADOS Gateway, one monitor, one OSD (they pull in ceph-base, ceph-common);
  # curl >= 7.75 (--aws-sigv4) creates its bucket
  radosgw ceph-mon ceph-osd curl
  # the built-in default data set
  dataset-fashion-mnist
)

# What only the benchmarks use (bench/README.md): arithmetic in the shell
# timings (pack_vs_tar.sh, ab_cli.sh), the profiles the results quote,
# boto3 (the peer bench/s3 compares with) and qemu-nbd (a third-party NBD
# server for bench/nbd/small_samples.py --server qemu-nbd).
BENCH_PACKAGES=(bc linux-perf python3-boto3 qemu-utils)
((bench)) && PACKAGES+=("${BENCH_PACKAGES[@]}")

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "installing: ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
