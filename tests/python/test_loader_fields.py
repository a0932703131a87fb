"""The loader's fields (format v2) from Python: dlfs.Loader(fields=...),
VolumeDataset / LoaderDataset(fields=...) tuples from WebDataset tar shards
written with tarfile, and `dlfs bench --fields`."""
import io
import json
import os
import tarfile

import pytest

torch = pytest.importorskip("torch", reason="python3-torch not installed")
dlfs = pytest.importorskip("dlfs", reason="Python module not built")
import dlfs.torch  # noqa: E402

KEYS = [f"train/{k:06d}" for k in range(10)] + ["val/000000"]


def _b(x):
    """Bytes of a field as a DataLoader hands it on (numpy view or tensor)."""
    return x.numpy().tobytes() if isinstance(x, torch.Tensor) else bytes(x)


def _pack(run, tmp_path, compress="zstd"):
    """Shards of keys with jpg (random: stays raw), cls and json (compresses:
    zstd); val/000000 has no jpg. Returns (volume path, {member: bytes})."""
    root = tmp_path / "shards"
    root.mkdir()
    members = {}
    for shard, keys in (("a.tar", KEYS[:6]), ("b.tar", KEYS[6:])):
        with tarfile.open(root / shard, "w") as tar:
            for key in keys:
                k = int(key[-6:])
                fields = {"jpg": os.urandom(200 + 31 * k), "cls": str(k % 3).encode(),
                          "json": json.dumps({"id": key, "caption": "a cat on a mat " * 30}).encode()}
                if key.startswith("val/"):
                    del fields["jpg"]
                for field, data in fields.items():
                    ti = tarfile.TarInfo(f"{key}.{field}")
                    ti.size = len(data)
                    tar.addfile(ti, io.BytesIO(data))
                    members[f"{key}.{field}"] = data
    vol = tmp_path / "v.dlfs"
    args = ["pack", root, "-o", vol, "-q"]
    if compress:
        args += ["--compress", compress]
    run(*args, check=0)
    return str(vol), members


@pytest.mark.parametrize("cache_budget", [0, None])
def test_loader_fields_in_order_and_zero_copy(run, tmp_path, cache_budget):
    vol, members = _pack(run, tmp_path)
    v = dlfs.Volume(vol)
    train = v.indices("train")
    loader = dlfs.Loader(v, 4, seed=3, indices=train.tolist(), fields=["json", "cls"],
                         cache_budget=cache_budget)
    loader.set_epoch(1)
    seen = []
    for batch in loader:
        assert batch.field_count == 2
        jsons, clss = batch.fields
        assert len(jsons) == len(clss) == len(batch)
        for i, index in enumerate(batch.indices):
            path = v.path(int(index))
            assert bytes(jsons[i]) == members[f"{path}.json"]
            assert bytes(clss[i]) == members[f"{path}.cls"]
            assert bytes(batch.field(i, 1)) == members[f"{path}.cls"]
            assert bytes(batch[i]) == members[f"{path}.json"]  # batch[i] is field 0
        seen += batch.indices.tolist()
    assert seen == loader.indices.tolist()  # the sampler's order


def test_loader_missing_and_unknown_fields(run, tmp_path):
    vol, _ = _pack(run, tmp_path)
    with pytest.raises(ValueError, match="has no field 'txt'; its fields: 'cls', 'jpg', 'json'"):
        dlfs.Loader(vol, 2, fields=["jpg", "txt"])
    with pytest.raises(Exception, match="name the fields to read"):
        dlfs.Loader(vol, 2)
    loader = dlfs.Loader(vol, 1, shuffle=False, fields=["cls", "jpg"], cache_budget=0)
    it = iter(loader)
    good = 0
    for _ in range(len(KEYS)):
        try:
            next(it)
            good += 1
        except KeyError as e:
            assert "sample 10 'val/000000' has no field 'jpg'" in str(e)
    assert good == len(KEYS) - 1  # loading went on after the error


def test_volume_dataset_fields_tuple(run, tmp_path):
    vol, members = _pack(run, tmp_path)
    ds = dlfs.torch.VolumeDataset(vol, fields=("json", "cls"))
    for i in range(len(ds)):
        path = KEYS[i]
        assert ds[i] == (members[f"{path}.json"], members[f"{path}.cls"])
    assert ds[[0, 3]] == ([members[f"{KEYS[0]}.json"], members[f"{KEYS[3]}.json"]],
                          [members[f"{KEYS[0]}.cls"], members[f"{KEYS[3]}.cls"]])
    jpg = dlfs.torch.VolumeDataset(vol, fields=("jpg",), transform=lambda t: len(t[0]))
    assert jpg[2] == len(members[f"{KEYS[2]}.jpg"])
    with pytest.raises(KeyError, match="has no field 'jpg'"):
        jpg[10]
    with pytest.raises(ValueError, match="its fields: 'cls', 'jpg', 'json'"):
        dlfs.torch.VolumeDataset(vol, fields=("txt",))
    # Through a DataLoader with workers: the tuples survive collation.
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    got = [tuple(item) for item in dl]
    assert got == [(members[f"{p}.json"], members[f"{p}.cls"]) for p in KEYS]


def test_loader_dataset_fields_tuple(run, tmp_path):
    vol, members = _pack(run, tmp_path)
    ds = dlfs.torch.LoaderDataset(vol, 3, seed=5, root="train", fields=("cls", "json"))
    items = list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0))
    assert len(items) == len(ds)
    pairs = []
    for clss, jsons in items:
        assert len(clss) == len(jsons)
        pairs += [(_b(c), _b(j)) for c, j in zip(clss, jsons)]
    want = [(members[f"{p}.cls"], members[f"{p}.json"]) for p in KEYS[:10]]
    assert sorted(pairs) == sorted(want)
    with pytest.raises(ValueError, match="transform"):
        dlfs.torch.LoaderDataset(vol, 3, fields=("cls",), transform=lambda s: s)


def test_bench_reads_fields(run, tmp_path):
    vol, _ = _pack(run, tmp_path)
    proc = run("bench", vol, "--cache-budget", "0")
    assert proc.returncode == 2 and b"name the fields to read" in proc.stderr
    out = json.loads(run("bench", vol, "--fields", "json,cls", "--batch", "4", "--json",
                         "--cache-budget", "0", check=0).stdout)
    assert out["fields"] == ["json", "cls"]
    assert out["samples"] == len(KEYS)
    v = dlfs.Volume(vol)
    decoded = sum(len(v.read_field(i, f)) for i in range(len(v)) for f in ("json", "cls"))
    assert out["payload_bytes"] == decoded  # decompressed bytes
    assert b"--fields" in run("bench", "--help", check=0).stdout


def test_image_loader_decodes_one_field(tmp_path):
    np = pytest.importorskip("numpy")
    root = tmp_path / "shards"
    root.mkdir()
    rng = np.random.default_rng(1)
    pixels = {}
    with tarfile.open(root / "a.tar", "w") as tar:
        for k in range(6):
            img = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
            pixels[k] = img
            for ext, data in (("png", dlfs.encode_png(img)), ("cls", str(k % 2).encode())):
                ti = tarfile.TarInfo(f"{k:06d}.{ext}")
                ti.size = len(data)
                tar.addfile(ti, io.BytesIO(data))
    vol = str(tmp_path / "v.dlfs")
    dlfs.pack(str(root), vol)
    loader = dlfs.torch.ImageLoader(vol, 3, size=8, shuffle=False, field="png",
                                    return_indices=True)
    seen = 0
    for images, labels, indices in loader:
        for img, label, index in zip(images, labels, indices):
            assert (img.numpy() == pixels[int(index)]).all()  # 8x8 stays 8x8: exact
            assert int(label) == int(index) % 2
            seen += 1
    assert seen == 6
    with pytest.raises(Exception, match="name the fields to read"):
        dlfs.torch.ImageLoader(vol, 3, size=8)
