"""Every public read path hands out the bytes that were packed: the same
samples packed raw, with --compress zstd and with --compress zstd --dict
(one unnamed field per sample, stored compressed) read back through every
API and compared with the source files. A volume of several fields is
refused by the plain paths with a message that lists its fields."""
import io
import json
import os
import re
import shutil
import subprocess
import tarfile

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch not installed")
dlfs = pytest.importorskip("dlfs", reason="Python module not built")
import dlfs.torch  # noqa: E402

SIDE = 16  # raw 16x16 gray pixels


def _pixels(i):
    """A compressible image (zstd saves well over 3 %), different per sample."""
    y, x = np.mgrid[0:SIDE, 0:SIDE]
    return ((x * 8 + y * (i % 5) + i) % 256).astype(np.uint8)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """An ImageFolder-style tree of raw pixel files, one incompressible."""
    root = tmp_path_factory.mktemp("src") / "tree"
    files = {}
    for i in range(48):
        rel = f"{'ab'[i % 2]}/{i:03d}.bin"
        data = _pixels(i).tobytes()
        if i == 7:
            data = os.urandom(SIDE * SIDE)  # zstd saves nothing: stored raw
        files[rel] = data
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root, files


@pytest.fixture(scope="module", params=["raw", "zstd", "zstd+dict"])
def packed(request, source, tmp_path_factory, dlfs_bin):
    root, files = source
    vol = tmp_path_factory.mktemp("vol") / f"{request.param.replace('+', '-')}.dlfs"
    args = [dlfs_bin, "pack", str(root), "-o", str(vol), "-q", "--all-files"]
    if request.param != "raw":
        args += ["--compress", "zstd"]
    if request.param == "zstd+dict":
        args += ["--dict"]
    proc = subprocess.run(args, capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    with dlfs.Volume(vol) as v:
        want = [files[v.path(i)] for i in range(len(v))]
        stored = sum(v.extent(i)[2] for i in range(len(v)))
    if request.param != "raw":  # really stored compressed
        assert stored < sum(len(w) for w in want) * 0.8
    return str(vol), want


def test_volume_reads(packed):
    vol, want = packed
    with dlfs.Volume(vol) as v:
        for i, w in enumerate(want):
            assert v[i][0] == w
            assert v.read(i) == w
            assert v.read_array(i).tobytes() == w
            assert v.size(i) == len(w)
        assert [d for d, _ in v[3:9]] == want[3:9]
        batch = v.read_many([5, 0, 7, 5, 47])
        assert [bytes(batch[k]) for k in range(len(batch))] == [want[i] for i in (5, 0, 7, 5, 47)]
        assert v.verify() == []


def test_volume_dataset(packed):
    vol, want = packed
    ds = dlfs.torch.VolumeDataset(vol)
    for i in (0, 7, 20):
        sample, _ = ds[i]
        assert bytes(np.asarray(sample)) == want[int(ds.indices[i])]
    # Batched, in worker processes: the samples travel through shared memory.
    sampler = torch.utils.data.BatchSampler(
        torch.utils.data.SequentialSampler(ds), 10, drop_last=False)
    got = []
    for workers in (0, 2):
        dl = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=None,
                                         num_workers=workers)
        got = []
        for samples, _ in dl:
            got += [bytes(np.asarray(s)) for s in samples]
        assert got == [want[int(i)] for i in ds.indices], workers


def test_loaders(packed):
    vol, want = packed
    for budget in (0, None):  # from the device, and with the node cache
        options = {} if budget is None else {"cache_budget": budget}
        loader = dlfs.Loader(vol, 5, seed=1, **options)
        seen = 0
        for batch in loader:
            for k, i in enumerate(batch.indices.tolist()):
                assert bytes(batch[k]) == want[i]
                seen += 1
        assert seen == len(want)
    ds = dlfs.torch.LoaderDataset(vol, 8, stack=False, seed=2)
    for workers in (0, 2):
        got = []
        for samples, _ in torch.utils.data.DataLoader(ds, batch_size=None,
                                                      num_workers=workers):
            got += [bytes(np.asarray(s)) for s in samples]
        assert sorted(got) == sorted(want), workers


def test_image_loader(packed):
    vol, want = packed
    loader = dlfs.torch.ImageLoader(vol, 6, size=SIDE, format="raw", raw_shape=(SIDE, SIDE),
                                    shuffle=False, return_indices=True)
    seen = 0
    for images, _, indices in loader:
        for img, i in zip(images, indices.tolist()):
            assert img.numpy().tobytes() == want[i]
            seen += 1
    assert seen == len(want)


def test_cli_cat(packed, run):
    vol, want = packed
    for i in (0, 7, 31):
        assert run("cat", vol, "--index", i, check=0).stdout == want[i]


def test_fuse_view(packed, run, tmp_path):
    if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
        pytest.skip("FUSE is not available here")
    vol, want = packed
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = run("mount", vol, mnt)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount here: {proc.stderr.decode().strip()}")
    try:
        with dlfs.Volume(vol) as v:
            for i in (0, 7, 31):
                assert (mnt / v.path(i)).read_bytes() == want[i]
                assert (mnt / v.path(i)).stat().st_size == len(want[i])
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)


@pytest.fixture(scope="module")
def multi_field(tmp_path_factory, dlfs_bin):
    tmp = tmp_path_factory.mktemp("mf")
    shard = tmp / "shards" / "000000.tar"
    shard.parent.mkdir()
    with tarfile.open(shard, "w") as tar:
        for k in range(6):
            for ext, data in (("bin", _pixels(k).tobytes()), ("cls", str(k % 2).encode())):
                member = tarfile.TarInfo(f"train/{k:06d}.{ext}")
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
    vol = tmp / "mf.dlfs"
    subprocess.run([dlfs_bin, "pack", str(shard.parent), "-o", str(vol), "-q"], check=True)
    return str(vol)


def test_info_says_format_v2_for_a_volume_with_v2_features(multi_field, source, run, tmp_path):
    # docs/format.md: format v2 is version 1 with the fields / zstd features (issue 41:
    # info said "dlfs v1" for them).
    text = run("info", multi_field, check=0).stdout.decode()
    assert "format       dlfs v2 (version 1 with fields" in text, text
    assert json.loads(run("info", multi_field, "--json", check=0).stdout)["format"] == "v2"
    run("pack", source[0], "-o", tmp_path / "plain.dlfs", "-q", "--all-files", "--layout",
        "tree", check=0)
    text = run("info", tmp_path / "plain.dlfs", check=0).stdout.decode()
    assert "format       dlfs v1, uuid" in text, text
    plain = json.loads(run("info", tmp_path / "plain.dlfs", "--json", check=0).stdout)
    assert plain["format"] == "v1" and plain["format_version"] == 1
    # The default: the compact directory, format v3.
    run("pack", source[0], "-o", tmp_path / "v3.dlfs", "-q", "--all-files", check=0)
    text = run("info", tmp_path / "v3.dlfs", check=0).stdout.decode()
    assert "format       dlfs v3, uuid" in text and "compact (v3) layout" in text, text


def test_ls_help_names_every_json_key_it_prints(multi_field, run):
    help_text = run("ls", "--help", check=0).stdout.decode()
    named = set(re.findall(r"[a-z_]+", help_text.split("--json", 1)[1]))
    for line in run("ls", multi_field, "-r", "--json", check=0).stdout.splitlines():
        row = json.loads(line)
        assert set(row) <= named, (set(row) - named, help_text)
        for field in row.get("fields", []):
            assert set(field) <= named, (set(field) - named, help_text)
    rows = [json.loads(l) for l in run("ls", multi_field, "--json", check=0).stdout.splitlines()]
    assert all(set(r) <= named for r in rows)  # directories: {path, type}


def test_multi_field_volume_is_refused_naming_its_fields(multi_field, run):
    message = r"several fields \('bin', 'cls'\): name the fields to read"
    with dlfs.Volume(multi_field) as v:
        with pytest.raises(Exception, match=message):
            v[0]
        with pytest.raises(Exception, match=message):
            v.read_many([0, 1])
        assert v.read_field(0, "bin") == _pixels(0).tobytes()
    with pytest.raises(Exception, match=message) as e:
        dlfs.Loader(multi_field, 2)
    assert "name the fields to read (fields=[NAME, ...])" in str(e.value)  # Python's words
    proc = run("bench", multi_field, "--cache-budget", "0")
    # The CLI's words (issue 41: it said "e.g. fields=['bin', 'cls']").
    assert proc.returncode == 2 and b"name the fields to read (--fields NAME,NAME...)" in \
        proc.stderr, proc.stderr
    err = run("cat", multi_field, "--index", 0, check=2).stderr.decode()
    assert re.search(message, err) and "or write one field with --field NAME" in err, err
    assert run("cat", multi_field, "--index", 0, "--field", "bin", check=0).stdout == \
        _pixels(0).tobytes()


def test_writer_compresses(tmp_path):
    samples = {f"x/{i:03d}": _pixels(i).tobytes() for i in range(300)}
    for compress, dictionary in (("zstd", False), ("zstd:19", False), ("zstd", True)):
        path = tmp_path / f"w-{compress.replace(':', '')}-{dictionary}.dlfs"
        with dlfs.Writer(path, compress=compress, dict=dictionary) as w:
            for key, data in samples.items():
                w.add(key, data)
        with dlfs.Volume(path) as v:
            info = v.info()
            assert info["fields"][0]["compressed"] > 0
            assert info["fields"][0]["stored_bytes"] < info["fields"][0]["bytes"]
            assert (info["dictionary_bytes"] > 0) == dictionary
            for i in range(len(v)):
                assert v[i][0] == samples[v.path(i)]
    with pytest.raises(ValueError, match="only zstd"):
        dlfs.Writer(tmp_path / "bad.dlfs", compress="lz4")
    with pytest.raises(ValueError, match="level is 1..22"):
        dlfs.Writer(tmp_path / "bad.dlfs", compress="zstd:99")
    with pytest.raises(ValueError, match="needs zstd"):
        dlfs.Writer(tmp_path / "bad.dlfs", dict=True)
    assert not (tmp_path / "bad.dlfs").exists()
