"""Format v2 through the CLI and Python: WebDataset shards written with Python's
tarfile (several fields per key, keys missing a field, keys split over shards)
pack into one sample per key and read back byte-identical per field, with and
without zstd."""
import contextlib
import errno
import io
import json
import os
import subprocess
import tarfile

import pytest

dlfs = pytest.importorskip("dlfs", reason="Python module not built")


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
    # So are the options of the other importers: refused, not ignored.
    for flag, applies in (("--all-files", "ImageFolder trees"), ("--datum-payload", "LMDB")):
        err = run("pack", tmp_path / "shards", "-o", tmp_path / "w.dlfs", flag,
                  check=2).stderr.decode()
        assert f"{flag} applies to {applies}" in err and "(this is a tar source)" in err, err
    with pytest.raises(ValueError, match=r"all_files=True applies to ImageFolder trees only"):
        dlfs.pack(tmp_path / "shards", tmp_path / "w.dlfs", all_files=True)
    assert not (tmp_path / "w.dlfs").exists()


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


# ---- The FUSE view: one file per (key, field), named as in the tar ----

def _mount(run, vol, mnt):
    """Mounts `vol` at `mnt` (a context manager), or skips without FUSE."""
    from test_fuse import _fuse_unavailable

    reason = _fuse_unavailable(run)
    if reason:
        pytest.skip(reason)
    mnt.mkdir()
    proc = run("mount", vol, mnt)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount here: {proc.stderr.decode().strip()}")
    stack = contextlib.ExitStack()
    stack.callback(subprocess.run, ["fusermount3", "-u", str(mnt)], capture_output=True)
    return stack


def _walk(mnt):
    """{relative path: (st_size, bytes)} of every file below `mnt`."""
    seen = {}
    for dirpath, _, names in os.walk(mnt):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                seen[os.path.relpath(p, mnt)] = (os.path.getsize(p), f.read())
    return seen


@pytest.mark.parametrize("compress", [None, "zstd"])
def test_fuse_lists_the_tar_members_byte_identical(run, tmp_path, compress):
    members = _shards(tmp_path / "shards")
    # A field of several MiB takes several reads: compressed, it is decoded
    # once and served from the kept copy, and partial reads land right.
    big = b"".join(b"line %07d of a long caption\n" % k for k in range(120_000))
    with tarfile.open(tmp_path / "shards" / "d.tar", "w") as tar:
        ti = tarfile.TarInfo("train/nested/000100.txt")
        ti.size = len(big)
        tar.addfile(ti, io.BytesIO(big))
    members["train/nested/000100.txt"] = big
    vol = tmp_path / "v.dlfs"
    args = ["pack", tmp_path / "shards", "-o", vol, "-q"]
    if compress:
        args += ["--compress", compress]
    run(*args, check=0)
    if compress:  # the view really decodes: these fields are stored compressed
        rows = [json.loads(l) for l in run("ls", "-r", "--json", vol, check=0).stdout.splitlines()]
        codecs = {(r["path"], f["name"]): f["codec"] for r in rows for f in r["fields"]}
        assert codecs[("train/nested/000100", "txt")] == "zstd"
        assert codecs[("train/000003", "json")] == "zstd"
    mnt = tmp_path / "mnt"
    with _mount(run, vol, mnt):
        assert _walk(mnt) == {name: (len(data), data) for name, data in members.items()}
        assert sorted(os.listdir(mnt / "train"))[:4] == [
            "000000.cls", "000000.jpg", "000000.json", "000001.cls"]
        with open(mnt / "train" / "nested" / "000100.txt", "rb", buffering=0) as f:
            f.seek(2_500_000)
            assert f.read(100_000) == big[2_500_000:2_600_000]
            f.seek(17)
            assert f.read(5) == big[17:22]
        # What the tar lacks is not there: a missing field, the bare key, "KEY.".
        for name in ("000002.json", "000005.jpg", "000003", "000003.", "000003.png"):
            assert not (mnt / "train" / name).exists(), name
        assert (mnt / "train" / "000003.json").is_file()
        assert os.stat(mnt / "train" / "000003.json").st_size == \
            len(members["train/000003.json"])


def test_fuse_compressed_imagefolder_reads_like_the_tree(run, tree, tmp_path):
    """A compressed ImageFolder volume has one unnamed field per sample: the
    view lists the files as v1 did, with their decoded bytes."""
    root, files = tree
    files = dict(files, **{"cat/003.png": b"\x89PNG " + b"stripes " * 4000})
    (root / "cat" / "003.png").write_bytes(files["cat/003.png"])
    vol = tmp_path / "z.dlfs"
    run("pack", root, "-o", vol, "-q", "--compress", "zstd", check=0)
    rows = [json.loads(l) for l in run("ls", "-r", "--json", vol, check=0).stdout.splitlines()]
    codecs = {r["path"]: [(f["name"], f["codec"]) for f in r["fields"]] for r in rows}
    assert codecs["cat/003.png"] == [("", "zstd")]
    with _mount(run, vol, tmp_path / "mnt"):
        assert _walk(tmp_path / "mnt") == {rel: (len(d), d) for rel, d in files.items()}


def test_fuse_damaged_compressed_field_is_eio_and_logged(dlfs_bin, run, tmp_path):
    from test_fuse import _fuse_unavailable, _wait_mounted

    reason = _fuse_unavailable(run)
    if reason:
        pytest.skip(reason)
    members = _shards(tmp_path / "shards")
    vol = tmp_path / "v.dlfs"
    run("pack", tmp_path / "shards", "-o", vol, "--compress", "zstd", "-q", check=0)
    row = [json.loads(l) for l in run("ls", "-r", "--json", vol, check=0).stdout.splitlines()][7]
    fields = row["fields"]
    assert fields[-1]["name"] == "json" and fields[-1]["codec"] == "zstd"
    start = sum(f["stored"] for f in fields[:-1])
    offset = _sample_offset(vol, row["index"]) + start + fields[-1]["stored"] // 2
    with open(vol, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x10]))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.Popen([dlfs_bin, "mount", "-f", str(vol), str(mnt)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if not _wait_mounted(mnt, proc):
        proc.kill()
        pytest.skip("mount did not come up: " + proc.communicate()[1].decode())
    try:
        with pytest.raises(OSError) as e:
            (mnt / "train" / "000007.json").read_bytes()
        assert e.value.errno == errno.EIO
        # The sample's other fields and other samples still read.
        assert (mnt / "train" / "000007.jpg").read_bytes() == members["train/000007.jpg"]
        assert (mnt / "train" / "000006.json").read_bytes() == members["train/000006.json"]
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        _, err = proc.communicate(timeout=20)
    assert f"v.dlfs: sample {row['index']} 'train/000007' field 'json': checksum mismatch" \
        in err.decode()


@pytest.mark.parametrize("compress", [None, "zstd"])
def test_info_shows_feature_flags_and_the_field_table(run, tmp_path, compress):
    members = _shards(tmp_path / "shards")
    vol = tmp_path / "v.dlfs"
    args = ["pack", tmp_path / "shards", "-o", vol, "-q"]
    if compress:
        args += ["--compress", compress]
    run(*args, check=0)
    info = json.loads(run("info", vol, "--json", check=0).stdout)
    assert info == dlfs.Volume(str(vol)).info()  # one document for both
    assert info["incompat_flags"] == (["fields", "zstd"] if compress else ["fields"])
    assert info["format"] == "v2" and info["format_version"] == 1
    expected = {}
    for name, data in members.items():
        field = name.split(".", 1)[1]
        n, size = expected.get(field, (0, 0))
        expected[field] = (n + 1, size + len(data))
    got = {f["name"]: (f["samples"], f["bytes"]) for f in info["fields"]}
    assert got == expected  # cls: 10 samples, jpg: 9, json: 9
    assert [f["name"] for f in info["fields"]] == ["cls", "jpg", "json"]
    json_field = info["fields"][2]
    if compress:
        assert json_field["compressed"] == 9
        assert json_field["stored_bytes"] < json_field["bytes"]
    else:
        assert all(f["compressed"] == 0 and f["stored_bytes"] == f["bytes"]
                   for f in info["fields"])
    text = run("info", vol, check=0).stdout.decode()
    assert ("features     fields, zstd" if compress else "features     fields") in text
    assert "fields       3" in text
    assert "  jpg        9 samples" in text and "  cls        10 samples" in text


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
