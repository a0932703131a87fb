"""Format v2 through the CLI and Python: WebDataset shards written with Python's
tarfile (several fields per key, keys missing a field, keys split over shards)
pack into one sample per key and read back byte-identical per field, with and
without zstd."""
import io
import json
import tarfile

import pytest

import dlfs


def _shards(root):
    """Writes two shards; returns {member name: bytes} as the tar holds them."""
    root.mkdir()
    members = {}
    layout = {
        "a.tar": [f"{k:06d}" for k in range(0, 6)],
        "b.tar": [f"{k:06d}" for k in range(6, 10)],
    }
    for shard, keys in layout.items():
        with tarfile.open(root / shard, "w") as tar:
            for n, key in enumerate(keys):
                k = int(key)
                fields = {
                    "jpg": bytes([k]) * (300 + k),
                    "cls": str(k % 3).encode(),
                    "json": json.dumps({"id": k, "caption": "a cat on a mat " * 20}).encode(),
                }
                if k == 2:
                    del fields["json"]  # a key missing a field
                if k == 5:
                    del fields["jpg"]
                for field, data in fields.items():
                    # key 4's json sits in the other shard
                    target = tar
                    if k == 4 and field == "json":
                        continue
                    ti = tarfile.TarInfo(f"train/{key}.{field}")
                    ti.size = len(data)
                    target.addfile(ti, io.BytesIO(data))
                    members[f"train/{key}.{field}"] = data
    with tarfile.open(root / "c.tar", "w") as tar:  # the rest of key 4
        data = json.dumps({"id": 4, "caption": "split " * 30}).encode()
        ti = tarfile.TarInfo("train/000004.json")
        ti.size = len(data)
        tar.addfile(ti, io.BytesIO(data))
        members["train/000004.json"] = data
    return members


@pytest.mark.parametrize("compress", [None, "zstd", "zstd:9"])
def test_webdataset_round_trip(run, tmp_path, compress):
    members = _shards(tmp_path / "shards")
    vol = tmp_path / "v.dlfs"
    args = ["pack", tmp_path / "shards", "-o", vol, "-q"]
    if compress:
        args += ["--compress", compress]
    run(*args, check=0)
    v = dlfs.Volume(str(vol))
    assert len(v) == 10  # one sample per key
    assert v.fields == ["cls", "jpg", "json"]
    got = {}
    for i in range(len(v)):
        for name, data in v.read_fields(i).items():
            got[f"{v.path(i)}.{name}"] = data
        assert v.label(i) == int(v.path(i)[-1]) % 3
    assert got == members
    i = v.lookup("train/000003")
    assert v.read_field(i, "json") == members["train/000003.json"]
    with pytest.raises(Exception, match="has no field 'json'"):
        v.read_field(v.lookup("train/000002"), "json")
    # The CLI: ls shows fields, cat --field writes one, verify checks them all.
    rows = [json.loads(l) for l in run("ls", "-r", "--json", vol, check=0).stdout.splitlines()]
    assert [f["name"] for f in rows[0]["fields"]] == ["jpg", "cls", "json"]
    codecs = {f["codec"] for r in rows for f in r["fields"] if f["name"] == "json"}
    assert codecs == ({"zstd"} if compress else {"none"})
    out = run("cat", vol, "train/000007", "--field", "json", check=0).stdout
    assert out == members["train/000007.json"]
    proc = run("cat", vol, "train/000007")
    assert proc.returncode == 2 and b"--field" in proc.stderr
    assert b"0 bad" in run("verify", vol, check=0).stdout


def test_fields_filter_and_labels(run, tmp_path):
    _shards(tmp_path / "shards")
    vol = tmp_path / "v.dlfs"
    run("pack", tmp_path / "shards", "-o", vol, "--fields", "jpg", "-q", check=0)
    v = dlfs.Volume(str(vol))
    assert len(v) == 9  # key 5 has no jpg
    assert v.fields == ["jpg"]
    rows = [json.loads(l) for l in run("ls", "-r", "--json", vol, check=0).stdout.splitlines()]
    assert all(r["label"] == int(r["path"][-1]) % 3 for r in rows)
    # --fields is for tar sources only.
    proc = run("pack", tmp_path / "shards" / "..", "-o", tmp_path / "w.dlfs", "--from",
               "imagefolder", "--fields", "jpg")
    assert proc.returncode == 2 and b"--fields applies to tar shards only" in proc.stderr


def test_damaged_compressed_field_names_sample_and_field(run, tmp_path):
    _shards(tmp_path / "shards")
    vol = tmp_path / "v.dlfs"
    run("pack", tmp_path / "shards", "-o", vol, "--compress", "zstd", "-q", check=0)
    row = [json.loads(l) for l in run("ls", "-r", "--json", vol, check=0).stdout.splitlines()][7]
    v = dlfs.Volume(str(vol))
    # Flip a byte in the middle of sample 7's last field (its zstd json).
    fields = row["fields"]
    assert fields[-1]["name"] == "json" and fields[-1]["codec"] == "zstd"
    start = sum(f["stored"] for f in fields[:-1])
    offset = _sample_offset(vol, row["index"]) + start + fields[-1]["stored"] // 2
    del v
    data = bytearray(vol.read_bytes())
    data[offset] ^= 0x10
    vol.write_bytes(bytes(data))
    proc = run("cat", vol, row["path"], "--field", "json")
    assert proc.returncode == 2
    assert f"sample {row['index']} '{row['path']}' field 'json'".encode() in proc.stderr
    proc = run("verify", vol)
    assert proc.returncode == 1 and b"field 'json'" in proc.stderr


def _sample_offset(vol, index):
    target, offset, _ = dlfs.Volume(str(vol)).extent(index)
    assert target == 0
    return offset


def test_writer_takes_fields(tmp_path):
    vol = tmp_path / "w.dlfs"
    with dlfs.Writer(str(vol), class_names=["cat", "dog"]) as w:
        w.add("s/000", {"jpg": b"\xff\xd8jpeg", "json": b'{"a": 1}'}, label="dog")
        w.add("s/001", {"json": b"{}"})
    v = dlfs.Volume(str(vol))
    assert v.fields == ["jpg", "json"]
    assert v.read_fields(0) == {"jpg": b"\xff\xd8jpeg", "json": b'{"a": 1}'}
    assert list(v.read_fields(0)) == ["jpg", "json"]  # storage order
    assert v.read_fields(1) == {"json": b"{}"}
    assert v.label(0) == 1


def _records(root, n=1500):
    """One shard of many small, similar JSON records (what a dictionary is for)."""
    root.mkdir()
    members = {}
    with tarfile.open(root / "r.tar", "w") as tar:
        for k in range(n):
            animal = "cat" if k % 3 else "dog"
            data = json.dumps({"id": k * 7919 % 100000, "caption": f"a photo of a {animal} on a mat",
                               "width": 200 + k % 50, "height": 300 + k % 70}).encode()
            ti = tarfile.TarInfo(f"r/{k:06d}.json")
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
            members[f"r/{k:06d}.json"] = data
    return members


def _stored(run, vol):
    rows = [json.loads(l) for l in run("ls", "-r", "--json", vol, check=0).stdout.splitlines()]
    return sum(f["stored"] for r in rows for f in r["fields"]), {
        f["codec"] for r in rows for f in r["fields"]}


def test_trained_dictionary_round_trip_and_pays(run, tmp_path):
    members = _records(tmp_path / "shards")
    plain, with_dict = tmp_path / "z.dlfs", tmp_path / "d.dlfs"
    run("pack", tmp_path / "shards", "-o", plain, "--compress", "zstd", "-q", check=0)
    out = run("pack", tmp_path / "shards", "-o", with_dict, "--compress", "zstd:3", "--dict", "-q",
              check=0).stdout
    assert b"zstd dictionary: " in out
    v = dlfs.Volume(str(with_dict))
    got = {f"{v.path(i)}.{name}": data for i in range(len(v))
           for name, data in v.read_fields(i).items()}
    assert got == members
    stored_plain, codecs_plain = _stored(run, plain)
    stored_dict, codecs_dict = _stored(run, with_dict)
    assert "zstd" in codecs_plain and codecs_dict == {"zstd-dict"}
    # The dictionary is used: the fields take well under half the bytes, and
    # the volume, dictionary included, is smaller too.
    assert stored_dict * 2 < stored_plain, (stored_dict, stored_plain)
    assert with_dict.stat().st_size < plain.stat().st_size
    run("verify", with_dict, check=0)


def test_dictionary_options_and_damage(run, tmp_path):
    _records(tmp_path / "shards", n=600)
    vol = tmp_path / "d.dlfs"
    proc = run("pack", tmp_path / "shards", "-o", vol, "--dict")
    assert proc.returncode == 2 and b"--dict needs --compress zstd" in proc.stderr
    # Too little to learn from: a clear error, and no volume left behind.
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    with tarfile.open(tiny / "t.tar", "w") as tar:
        ti = tarfile.TarInfo("k.json")
        ti.size = 2
        tar.addfile(ti, io.BytesIO(b"{}"))
    proc = run("pack", tiny, "-o", tmp_path / "t.dlfs", "--compress", "zstd", "--dict", "-q")
    assert proc.returncode == 2 and b"cannot train a zstd dictionary" in proc.stderr
    assert not (tmp_path / "t.dlfs").exists()
    # A damaged dictionary byte: the volume is refused, by name, and verify
    # says so.
    run("pack", tmp_path / "shards", "-o", vol, "--compress", "zstd", "--dict", "-q", check=0)
    data = bytearray(vol.read_bytes())
    at = data.rfind(b"\x37\xa4\x30\xec")  # the dictionary's magic, in the directory region
    assert at > 0
    data[at + 300] ^= 0x01
    vol.write_bytes(bytes(data))
    proc = run("verify", vol)
    assert proc.returncode != 0
    assert str(vol).encode() in proc.stderr and b"directory checksum mismatch" in proc.stderr
    with pytest.raises(Exception, match="directory checksum mismatch"):
        dlfs.Volume(str(vol))
