#!/usr/bin/python3
"""Writes the hostile-input fixtures in this directory (committed; rerun to
regenerate them). Each is the smallest input that reproduced a crash or an
unbounded allocation found by fuzzing (docs/reliability.md, issue 13):

  lmdb-entries-2e61/data.mdb  a valid 3-record LMDB whose meta pages claim
                              2^61 entries (an 8-byte edit)
  tar-4g-member.tar           1 KiB tar whose first header claims a member of
                              4 GiB - 1 bytes
  idx-huge/                   IDX images header claiming 1 x 32768 x 32768
                              (34-byte file), with a matching 1-label file
"""
import os
import pathlib
import struct
import tempfile

import lmdb

HERE = pathlib.Path(__file__).resolve().parent

# Offsets in an LMDB meta page (liblmdb 0.9, x86-64): page header 16 bytes,
# then MDB_meta; the main DB's MDB_db record starts at 16 + 72 and its
# md_entries at +32.
META_MAIN_ENTRIES = 16 + 72 + 32


def lmdb_fixture():
    with tempfile.TemporaryDirectory() as tmp:
        env = lmdb.open(tmp, map_size=1 << 20, subdir=True)
        with env.begin(write=True) as txn:
            for i in range(3):
                txn.put(b"%08d" % i, b"value %d" % i)
        env.close()
        data = bytearray((pathlib.Path(tmp) / "data.mdb").read_bytes())
    page = struct.unpack_from("<I", data, 16 + 24)[0]  # free DB md_pad = page size
    # The newer meta page (larger mm_txnid) describes the tree.
    newer = max((0, page), key=lambda m: struct.unpack_from("<Q", data, m + 16 + 128)[0])
    used = (struct.unpack_from("<Q", data, newer + 16 + 120)[0] + 1) * page  # mm_last_pg
    data = data[:used]
    for meta in (0, page):
        struct.pack_into("<Q", data, meta + META_MAIN_ENTRIES, 1 << 61)
    out = HERE / "lmdb-entries-2e61"
    out.mkdir(exist_ok=True)
    (out / "data.mdb").write_bytes(bytes(data))


def tar_header(name, size):
    h = bytearray(512)
    h[0 : len(name)] = name.encode()
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"00000000000\0"
    h[156:157] = b"0"
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def tar_fixture():
    data = tar_header("s/000.jpg", 0xFFFFFFFF) + b"x" * 512
    (HERE / "tar-4g-member.tar").write_bytes(data)


def idx_fixture():
    out = HERE / "idx-huge"
    out.mkdir(exist_ok=True)
    images = struct.pack(">BBBBIII", 0, 0, 8, 3, 1, 32768, 32768) + b"\0" * 18
    labels = struct.pack(">BBBBI", 0, 0, 8, 1, 1) + b"\x01"
    (out / "train-images-idx3-ubyte").write_bytes(images)
    (out / "train-labels-idx1-ubyte").write_bytes(labels)


if __name__ == "__main__":
    lmdb_fixture()
    tar_fixture()
    idx_fixture()
