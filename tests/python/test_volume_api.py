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
