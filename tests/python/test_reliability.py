"""Hostile inputs through the CLI (issue 13, docs/reliability.md): under a 1 GiB address-space
limit every verb ends with an error naming the file (exit 2), never a signal; a killed pack's
temporary file is removed by the next pack to that path."""
import gzip
import io
import os
import pathlib
import resource
import shutil
import signal
import struct
import subprocess
import tarfile
import time

import pytest

from test_cli import _big_tree
from testutil import interrupt, pack_mid_write

HOSTILE = pathlib.Path(__file__).resolve().parents[1] / "data" / "hostile"
LIMIT = 1 << 30  # bytes of address space for each dlfs run

_CRC32C_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C_TABLE.append(_c)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC32C_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def reseal(sb):
    """A superblock (4096 bytes) with its trailing CRC32C recomputed."""
    sb = bytearray(sb)
    struct.pack_into("<I", sb, 4092, crc32c(bytes(sb[:4092])))
    return bytes(sb)


def run_limited(dlfs_bin, *args):
    """Runs dlfs with RLIMIT_AS = LIMIT; returns the CompletedProcess."""

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

    return subprocess.run([dlfs_bin, *map(str, args)], capture_output=True, timeout=300,
                          preexec_fn=limit)


@pytest.fixture
def limited(dlfs_bin):
    if os.environ.get("DLFS_SANITIZE"):
        pytest.skip("sanitizer runtimes reserve terabytes of address space; "
                    "the limit is tested in the plain build")
    return lambda *args: run_limited(dlfs_bin, *args)


def hostile_volume(tmp_path, run, field_offset, value, fmt="<Q"):
    """A packed volume with one superblock field set to `value`, primary and copy resealed,
    so that only the field itself can give it away."""
    src = tmp_path / "src"
    for i in range(3):
        (src / "c" / f"{i}.bin").parent.mkdir(parents=True, exist_ok=True)
        (src / "c" / f"{i}.bin").write_bytes(bytes([i]) * 100)
    vol = tmp_path / f"v{field_offset}.dlfs"
    run("pack", src, "-o", vol, "-q", "--all-files", check=0)
    data = bytearray(vol.read_bytes())
    sb = bytearray(data[:4096])
    struct.pack_into(fmt, sb, field_offset, value)
    sb = reseal(sb)
    data[:4096] = sb
    data[-4096:] = sb
    vol.write_bytes(bytes(data))
    return vol


def lmdb_with_entries(tmp_path, entries):
    data = bytearray((HOSTILE / "lmdb-entries-2e61" / "data.mdb").read_bytes())
    for meta in (0, 4096):
        struct.pack_into("<Q", data, meta + 16 + 72 + 32, entries)
    d = tmp_path / f"lmdb-{entries}"
    d.mkdir()
    (d / "data.mdb").write_bytes(bytes(data))
    return d


def gzipped_copy(src_dir, dst_dir):
    dst_dir.mkdir()
    for f in src_dir.iterdir():
        (dst_dir / (f.name + ".gz")).write_bytes(gzip.compress(f.read_bytes()))
    return dst_dir


def expect_error(proc, *names):
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 2, (proc.returncode, err)  # a signal would be negative
    for name in names:
        assert str(name) in err, err


def test_hostile_lmdb_under_memory_limit(limited, tmp_path):
    for entries in (1 << 61, 1 << 36):
        db = lmdb_with_entries(tmp_path, entries)
        expect_error(limited("lmdb", "info", db), db / "data.mdb", f"entry count ({entries})")
        out = tmp_path / "out"
        out.mkdir(exist_ok=True)
        expect_error(limited("pack", db, "--from", "lmdb", "-o", out / "v.dlfs"), db / "data.mdb")
        assert list(out.iterdir()) == []  # no temporary file left either


def test_hostile_tar_under_memory_limit(limited, tmp_path):
    tar = HOSTILE / "tar-4g-member.tar"
    expect_error(limited("pack", tar, "-o", tmp_path / "v.dlfs"), tar, "declares 4294967295 bytes")
    tgz = tmp_path / "c.tar.gz"
    tgz.write_bytes(gzip.compress(tar.read_bytes()))
    expect_error(limited("pack", tgz, "-o", tmp_path / "v.dlfs"), tgz, "s/000.jpg")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.tar.gz"]


def test_tar_label_that_would_size_a_huge_class_table_is_refused(run, tmp_path):
    # Found by the tar fuzzer: one .cls saying 1000012602 made pack build a
    # class table of 10^9 entries (minutes, gigabytes) from a 557-byte tar.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in [("s/000.cls", b"1000012602"), ("s/000.jpg", b"x")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    tar = tmp_path / "shard.tar"
    tar.write_bytes(buf.getvalue())
    start = time.monotonic()
    proc = run("pack", tar, "-o", tmp_path / "v.dlfs")
    expect_error(proc, tar, "sample 's/000' has label 1000012602: labels must be below 16777216")
    assert time.monotonic() - start < 60
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard.tar"]


def test_hostile_idx_under_memory_limit(limited, tmp_path):
    src = HOSTILE / "idx-huge"
    expect_error(limited("pack", src, "-o", tmp_path / "v.dlfs"), src / "train-images-idx3-ubyte",
                 "32768x32768")
    gz = gzipped_copy(src, tmp_path / "gz")
    expect_error(limited("pack", gz, "-o", tmp_path / "v.dlfs"),
                 gz / "train-images-idx3-ubyte.gz", "truncated")


# Superblock fields (docs/format.md §2): sample_count @56, dir_count @64,
# class_count @72, data_bytes @80; the directory region entry's length @128+32+16.
@pytest.mark.parametrize("offset,value", [(56, 1 << 40), (64, 1 << 33), (72, 1 << 40),
                                          (80, 1 << 62), (128 + 32 + 16, 1 << 40)])
def test_hostile_volume_under_memory_limit(limited, run, tmp_path, offset, value):
    vol = hostile_volume(tmp_path, run, offset, value)
    for verb in ("info", "verify", "ls"):
        expect_error(limited(verb, vol), vol)


def test_memory_limit_bites(limited):
    """The limit is real: a process that needs more than LIMIT fails under it (so the passes
    above mean bounded memory, not a limit that never applied)."""
    del limited  # only for its skip under sanitizers

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

    proc = subprocess.run(["/usr/bin/python3", "-c", f"bytearray({LIMIT})"], capture_output=True,
                          preexec_fn=limit)
    assert proc.returncode != 0 and b"MemoryError" in proc.stderr


def test_large_idx_image_streams_under_memory_limit(limited, tmp_path):
    """A real 256 MiB image packs under the limit: images are copied in 1 MiB pieces."""
    src = tmp_path / "idx"
    src.mkdir()
    side = 16384
    (src / "train-labels-idx1-ubyte").write_bytes(struct.pack(">II", 0x801, 1) + b"\x01")
    with open(src / "train-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, 1, side, side))
        f.truncate(16 + side * side)  # sparse: real zero bytes to pack, cheap to make
    proc = limited("pack", src, "-o", tmp_path / "v.dlfs", "-q")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "v.dlfs").stat().st_size > side * side


def test_killed_pack_temporary_is_removed_by_the_next(dlfs_bin, run, tmp_path):
    """Issue 13 #9: SIGKILL during pack left v.dlfs.tmp.PID.N forever."""
    src = tmp_path / "src"
    _big_tree(src)
    out = tmp_path / "out"
    out.mkdir()
    vol = out / "v.dlfs"
    run("pack", src, "-o", vol, "-q", check=0)  # an old volume the killed pack replaces
    proc = pack_mid_write([dlfs_bin, "pack", str(src), "-o", str(vol), "-q", "--force"], out)
    interrupt(proc, signal.SIGKILL)
    proc.communicate(timeout=60)
    stale = [p for p in out.iterdir() if ".tmp." in p.name]
    assert len(stale) == 1, list(out.iterdir())
    assert run("info", vol).returncode == 0  # the old volume is intact
    again = run("pack", src, "-o", vol, "-q", "--force", check=0)
    assert sorted(p.name for p in out.iterdir()) == ["v.dlfs"]
    err = again.stderr.decode()
    assert f"removed stale temporary file {stale[0]} (left by process {proc.pid}" in err, err
