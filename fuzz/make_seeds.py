#!/usr/bin/python3
"""Writes the seed corpora of the fuzz harnesses (fuzz/*_fuzzer.cc).

  fuzz/make_seeds.py OUT_DIR DLFS_BIN

OUT_DIR/<harness>/ gets a few small valid inputs each (volumes packed by
DLFS_BIN, LMDB files written with python3-lmdb, IDX pairs, tar shards with
labels, hard links and special members), plus the committed regression
inputs of fuzz/regressions/<harness>/ and tests/data/hostile/. Nothing is
random: the same inputs every run.
"""
import gzip
import io
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile

import lmdb

REPO = pathlib.Path(__file__).resolve().parents[1]
HARNESSES = ["volume_file", "volume_metadata", "volume_resealed", "lmdb", "idx", "tar"]


def write(out, harness, name, data):
    (out / harness).mkdir(parents=True, exist_ok=True)
    (out / harness / name).write_bytes(data)


def pack(dlfs, tmp, files, *args):
    src = tmp / "src"
    shutil.rmtree(src, ignore_errors=True)
    for rel, data in files.items():
        p = src / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    vol = tmp / "v.dlfs"
    if vol.exists():
        vol.unlink()
    # --all-files: the seeds' samples are not images, which ImageFolder would skip.
    subprocess.run([dlfs, "pack", str(src), "-o", str(vol), "-q", "--all-files", *args],
                   check=True, capture_output=True)
    return vol.read_bytes()


def metadata_input(volume, reseal):
    """Flag byte, the superblock, then the directory region it names."""
    sb = volume[:4096]
    region_count = struct.unpack_from("<I", sb, 100)[0]
    for r in range(min(region_count, 16)):
        kind, _target, offset, length = struct.unpack_from("<IIQQ", sb, 128 + 32 * r)
        if kind == 2:
            return bytes([1 if reseal else 0]) + sb + volume[offset:offset + length]
    raise SystemExit("no directory region in a packed volume")


def volumes(out, dlfs, tmp):
    sets = {
        "classes": ({"cat/1.png": b"cat one", "cat/2.png": b"cat two", "dog/x/3.png": b"dog",
                     "root.txt": b"no label"}, []),
        "empty-sample": ({"a/empty": b"", "a/b": b"b"}, []),
        "aligned": ({"k/%02d" % i: bytes([i]) * (i * 7) for i in range(6)}, ["--align", "512"]),
        "flat": ({"%03d" % i: b"x" * i for i in range(20)}, []),
    }
    for name, (files, args) in sets.items():
        vol = pack(dlfs, tmp, files, *args)
        write(out, "volume_file", name, vol)
        write(out, "volume_resealed", name, vol)
        write(out, "volume_metadata", name + "-sealed", metadata_input(vol, False))
        write(out, "volume_metadata", name + "-reseal", metadata_input(vol, True))


def datum(label, data, channels=3, height=2, width=2, encoded=False):
    def varint(v):
        b = bytearray()
        while True:
            byte = v & 0x7F
            v >>= 7
            b.append(byte | (0x80 if v else 0))
            if not v:
                return bytes(b)

    def field(num, wire):
        return varint(num << 3 | wire)

    m = field(1, 0) + varint(channels) + field(2, 0) + varint(height) + field(3, 0) + varint(width)
    m += field(4, 2) + varint(len(data)) + data + field(5, 0) + varint(label)
    if encoded:
        m += field(7, 0) + varint(1)
    return m


def lmdbs(out, tmp):
    cases = {
        "datums": [(b"%08d_img.jpg" % i, datum(i % 10, bytes([i]) * 12)) for i in range(40)],
        "overflow": [(b"big%d" % i, datum(1, b"j" * (5000 + i), encoded=True)) for i in range(3)],
        "plain-keys": [(b"key%03d" % i, b"value %d" % i) for i in range(300)],
        "empty": [],
    }
    for name, records in cases.items():
        d = tmp / ("lmdb-" + name)
        shutil.rmtree(d, ignore_errors=True)
        env = lmdb.open(str(d), map_size=1 << 24)
        with env.begin(write=True) as txn:
            for k, v in records:
                txn.put(k, v)
        env.close()
        data = (d / "data.mdb").read_bytes()
        page = struct.unpack_from("<I", data, 16 + 24)[0]
        newer = max((0, page), key=lambda m: struct.unpack_from("<Q", data, m + 16 + 128)[0])
        last = struct.unpack_from("<Q", data, newer + 16 + 120)[0]
        write(out, "lmdb", name, data[:(last + 1) * page])
    write(out, "lmdb", "datum", datum(7, b"abcdef"))


def idx_input(images, labels, flags=0):
    return bytes([flags]) + struct.pack("<H", len(labels)) + labels + images


def idxs(out):
    def pair(n, rows, cols):
        images = struct.pack(">IIII", 0x803, n, rows, cols) + bytes(
            (i * 7 + j) & 0xFF for i in range(n) for j in range(rows * cols))
        labels = struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n))
        return images, labels

    images, labels = pair(5, 3, 4)
    write(out, "idx", "plain", idx_input(images, labels))
    write(out, "idx", "gzip", idx_input(gzip.compress(images, mtime=0),
                                        gzip.compress(labels, mtime=0), 3))
    write(out, "idx", "gzip-in-harness", idx_input(images, labels, 4))
    images, labels = pair(1, 28, 28)
    write(out, "idx", "mnist-one", idx_input(images, labels))


def tar_bytes(members, fmt=tarfile.GNU_FORMAT, mode="w"):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=fmt) as t:
        for m in members:
            name, data = m[0], m[1]
            info = tarfile.TarInfo(name)
            info.mtime = 0
            kind = m[2] if len(m) > 2 else tarfile.REGTYPE
            info.type = kind
            if kind in (tarfile.LNKTYPE, tarfile.SYMTYPE):
                info.linkname = m[3]
            if kind == tarfile.REGTYPE:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
            else:
                t.addfile(info)
    return buf.getvalue()


def tars(out):
    wds = [("s/000.cls", b"3\n"), ("s/000.jpg", b"jpeg-0"), ("s/001.jpg", b"jpeg-1"),
           ("s/001.cls", b" 7 "), ("s/001.json", b"{}"), ("s/002.seg.png", b"png")]
    write(out, "tar", "webdataset", tar_bytes(wds))
    write(out, "tar", "pax", tar_bytes(wds, tarfile.PAX_FORMAT))
    write(out, "tar", "ustar-gz", gzip.compress(tar_bytes(wds, tarfile.USTAR_FORMAT), mtime=0))
    write(out, "tar", "links", tar_bytes([
        ("d", b"", tarfile.DIRTYPE),
        ("d/a.jpg", b"bytes of a"), ("d/a.cls", b"5"),
        ("d/b.jpg", b"", tarfile.LNKTYPE, "d/a.jpg"),
        ("d/b.cls", b"", tarfile.LNKTYPE, "d/a.cls"),
        ("d/c.jpg", b"", tarfile.LNKTYPE, "d/b.jpg"),
        ("d/l.jpg", b"", tarfile.SYMTYPE, "a.jpg"),
        ("d/p.fifo", b"", tarfile.FIFOTYPE),
    ]))
    write(out, "tar", "big-member", tar_bytes([("x/0.bin", bytes(range(256)) * 40)]))


def regressions(out):
    for harness in HARNESSES:
        src = REPO / "fuzz" / "regressions" / harness
        if src.is_dir():
            for f in sorted(src.iterdir()):
                write(out, harness, "regression-" + f.name, f.read_bytes())
    hostile = REPO / "tests" / "data" / "hostile"
    write(out, "lmdb", "hostile-entries", (hostile / "lmdb-entries-2e61" / "data.mdb").read_bytes())
    write(out, "tar", "hostile-4g", (hostile / "tar-4g-member.tar").read_bytes())
    write(out, "idx", "hostile-huge",
          idx_input((hostile / "idx-huge" / "train-images-idx3-ubyte").read_bytes(),
                    (hostile / "idx-huge" / "train-labels-idx1-ubyte").read_bytes()))


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    out, dlfs = pathlib.Path(sys.argv[1]), sys.argv[2]
    for harness in HARNESSES:
        shutil.rmtree(out / harness, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        volumes(out, dlfs, tmp)
        lmdbs(out, tmp)
    idxs(out)
    tars(out)
    regressions(out)
    for harness in HARNESSES:
        n = len(list((out / harness).iterdir()))
        print(f"{harness}: {n} seeds in {out / harness}")


if __name__ == "__main__":
    main()
