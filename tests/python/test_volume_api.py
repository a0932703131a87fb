"""dlfs.Volume as a context manager, slicing, writable reads; dlfs.pack
with progress and what it ignored; the version."""
import io
import pathlib
import re
import sys

import numpy as np
import pytest

dlfs = pytest.importorskip("dlfs", reason="Python module not built")

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_version_comes_from_cmake_project():
    text = (REPO / "CMakeLists.txt").read_text()
    want = re.search(r"project\(dlfs\s+VERSION\s+([0-9.]+)", text).group(1)
    assert dlfs.__version__ == want


def test_volume_is_a_context_manager(volume):
    path, files = volume
    with dlfs.Volume(pathlib.Path(path)) as vol:  # any path-like
        assert not vol.closed
        first = vol[0]
    assert vol.closed
    assert len(vol) == len(files) and vol.path(0)  # the directory stays usable
    for read in (lambda: vol[0], lambda: vol.read(1), lambda: vol.read_array(0),
                 lambda: vol[0:2], vol.verify):
        with pytest.raises(ValueError, match="is closed"):
            read()
    vol.close()  # again: nothing happens
    # A loader made before close keeps reading (it opens the files itself).
    vol2 = dlfs.Volume(str(path))
    loader = dlfs.Loader(vol2, batch_size=2, shuffle=False)
    vol2.close()
    assert sum(len(b) for b in loader) == len(files)
    assert first[0] == files[dlfs.Volume(str(path)).path(0)]


def test_slicing_and_bad_keys(volume):
    path, files = volume
    vol = dlfs.Volume(str(path))
    whole = [vol[i] for i in range(len(vol))]
    assert vol[:] == whole
    assert vol[1:4] == whole[1:4]
    assert vol[::-2] == whole[::-2]
    assert vol[-2:] == whole[-2:]
    assert vol[10:20] == []
    assert vol[np.int64(1)] == whole[1]
    for key, name in [("cat/001.png", "str"), (1.0, "float"), ([0, 1], "list")]:
        with pytest.raises(TypeError, match=f"integers or slices, not {name}"):
            vol[key]
    with pytest.raises(IndexError):
        vol[len(vol)]


def test_read_array_is_writable_and_exact(volume):
    path, files = volume
    vol = dlfs.Volume(str(path))
    for i in range(len(vol)):
        a = vol.read_array(i)
        assert a.dtype == np.uint8 and a.flags.writeable and a.flags.owndata
        assert a.tobytes() == files[vol.path(i)]
    a[...] = 0  # its own memory: the volume is not affected
    assert vol.read_array(len(vol) - 1).tobytes() == files[vol.path(len(vol) - 1)]


def _tree_with_junk(root):
    for rel in ["a/1.png", "a/2.JPG", "b/3.webp", "a/notes.txt", "a/.DS_Store", "README.md"]:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rel.encode() * 100)


def test_pack_reports_what_imagefolder_would_not_load(tmp_path):
    _tree_with_junk(tmp_path / "t")
    stats = dlfs.pack(tmp_path / "t", tmp_path / "v.dlfs")
    assert stats["samples"] == 3 and stats["ignored"] == 3
    assert stats["ignored_examples"] == ["README.md", "a/.DS_Store", "a/notes.txt"]
    stats = dlfs.pack(tmp_path / "t", tmp_path / "all.dlfs", all_files=True)
    assert stats["samples"] == 6 and stats["ignored"] == 0


def test_pack_progress(tmp_path, capsys, monkeypatch):
    _tree_with_junk(tmp_path / "t")
    import dlfs._progress as progress
    monkeypatch.setattr(progress, "_tqdm", None)  # the plain line
    dlfs.pack(tmp_path / "t", tmp_path / "v.dlfs", progress=True)
    err = capsys.readouterr().err
    assert "packing: 3/3 samples (100.0%)" in err, err


def test_pack_stops_on_an_exception_from_progress(tmp_path):
    _tree_with_junk(tmp_path / "t")

    def fail(p):
        raise RuntimeError(f"stop at {p['samples']} of {p['total_samples']}")

    with pytest.raises(RuntimeError, match="stop at 1 of 3"):
        dlfs._dlfs.pack(str(tmp_path / "t"), str(tmp_path / "v.dlfs"), on_progress=fail)
    assert not (tmp_path / "v.dlfs").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]


def test_api_seams_name_the_volume_and_take_one_vocabulary(tmp_path):
    """Issue 41: errors that did not name the volume, pybind11's argument dumps,
    and options spelled differently from the CLI."""
    torch = pytest.importorskip("torch")
    import dlfs.torch
    path = tmp_path / "v.dlfs"
    with dlfs.Writer(path, align=512) as w:
        for i in range(4):
            w.add(f"train/{i:05d}", bytes([i]) * 784, label=i % 2)
    vol = dlfs.Volume(path)
    with pytest.raises(KeyError, match=f"{path}: no sample or directory 'train/zzz'"):
        vol.lookup("train/zzz")
    with pytest.raises(KeyError, match=f"{path}: no sample or directory 'nope'"):
        vol.indices("nope")
    with pytest.raises(KeyError, match=f"{path}: no sample or directory 'nope'"):
        dlfs.torch.VolumeDataset(path, root="nope")
    with pytest.raises(ValueError, match=f"{path}: 'train/00001' is a sample, not a directory"):
        vol.indices("train/00001")
    with pytest.raises(IndexError, match=rf"{path}: sample index 9 out of range \(the volume "
                                         r"has 4 samples\)"):
        vol[9]
    with pytest.raises(IndexError, match=f"{path}: item 7 out of range"):
        dlfs.torch.VolumeDataset(path)[7]
    # dlfs.pack: an unknown keyword or a wrong type is a TypeError naming it.
    src = tmp_path / "src" / "c"
    src.mkdir(parents=True)
    (src / "1.png").write_bytes(b"x")
    with pytest.raises(TypeError, match="unexpected keyword argument 'aling' "
                                        r"\(did you mean 'align'\?\)"):
        dlfs.pack(src.parent, tmp_path / "p.dlfs", aling=512)
    with pytest.raises(TypeError, match="targets='2': takes an int, not str"):
        dlfs.pack(src.parent, tmp_path / "p.dlfs", targets="2")
    assert dlfs.pack(src.parent, tmp_path / "p.dlfs", "imagefolder", align=512)["samples"] == 1
    # raw_shape takes the CLI's form too, as cache_budget does.
    pixels = bytes(range(256)) * 3 + bytes(16)
    assert dlfs.decode_image(pixels, raw_shape="28x28").shape == (28, 28, 1)
    assert dlfs.decode_image(pixels, raw_shape=(28, 28)).shape == (28, 28, 1)
    with pytest.raises(ValueError, match="raw_shape: a raw shape is HxW or HxWxC"):
        dlfs.decode_image(pixels, raw_shape="28y28")
    loader = dlfs.torch.ImageLoader(path, 2, size=28, raw_shape="28x28", shuffle=False)
    images, labels = next(iter(loader))
    assert tuple(images.shape) == (2, 28, 28, 1) and labels.tolist() == [0, 1]
