"""`dlfs lmdb info` and `dlfs pack` from an LMDB written by python3-lmdb."""
import json

import pytest

lmdb = pytest.importorskip("lmdb", reason="python3-lmdb not installed")


def _varint(v):
    out = b""
    while True:
        b, v = v & 0x7F, v >> 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def datum(c, h, w, data, label):
    m = b"".join(_varint(f << 3) + _varint(v) for f, v in ((1, c), (2, h), (3, w)))
    m += _varint(4 << 3 | 2) + _varint(len(data)) + data
    return m + _varint(5 << 3) + _varint(label)


@pytest.fixture
def caffe_db(tmp_path):
    path = tmp_path / "train_lmdb"
    env = lmdb.open(str(path), map_size=1 << 30)
    records = {}
    with env.begin(write=True) as txn:
        for i in range(1500):
            # Caffe's convert_imageset keys: "%08d_" + file name (with a '/').
            key = b"%08d_n%02d/img%d.JPEG" % (i, i % 7, i)
            value = datum(3, 24, 24, bytes([i % 251]) * (1728 + i % 3000), i % 7)
            txn.put(key, value)
            records[key] = value
    env.close()
    return path, records


def test_lmdb_info(run, caffe_db):
    path, records = caffe_db
    info = json.loads(run("lmdb", "info", path, "--json", check=0).stdout)
    assert info["entries"] == len(records)
    assert info["value_bytes"] == sum(len(v) for v in records.values())
    assert info["first_datum"]["channels"] == 3 and info["first_datum"]["label"] == 0
    env = lmdb.open(str(path), readonly=True, lock=False)
    stat = env.stat()
    assert (info["depth"], info["leaf_pages"], info["overflow_pages"]) == (
        stat["depth"], stat["leaf_pages"], stat["overflow_pages"])


def test_pack_from_lmdb_keeps_values_and_datum_labels(run, caffe_db, tmp_path):
    path, records = caffe_db
    vol = tmp_path / "c.dlfs"
    run("pack", path, "-o", vol, "-q", check=0)
    rows = [json.loads(l) for l in run("ls", vol, "--json", check=0).stdout.splitlines()]
    keys = sorted(records)
    assert len(rows) == len(keys)
    # Keys contain '/', so samples are named by record index in key order.
    for i in (0, 1, 777, len(keys) - 1):
        assert rows[i]["path"] == "%04d" % i
        assert rows[i]["label"] == i % 7
        assert run("cat", vol, "--index", rows[i]["index"], check=0).stdout == records[keys[i]]
    payload = tmp_path / "p.dlfs"
    run("pack", path, "-o", payload, "--datum-payload", "-q", check=0)
    assert run("cat", payload, "0005", check=0).stdout == bytes([5]) * (1728 + 5)


def test_broken_lmdb_is_named(run, tmp_path):
    bad = tmp_path / "bad_lmdb"
    bad.mkdir()
    (bad / "data.mdb").write_bytes(b"\0" * 8192)
    proc = run("lmdb", "info", bad)
    assert proc.returncode == 2
    assert b"data.mdb" in proc.stderr and b"not a valid LMDB" in proc.stderr
    assert run("pack", bad, "-o", tmp_path / "x.dlfs").returncode == 2
    assert not (tmp_path / "x.dlfs").exists()
