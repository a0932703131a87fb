"""dlfs.Writer: a volume written sample by sample from Python."""
import io
import os
import resource

import numpy as np
import pytest

dlfs = pytest.importorskip("dlfs", reason="Python module not built")
from dlfs._progress import Progress  # noqa: E402


def _entries(d):
    return sorted(os.listdir(d))


def test_samples_labels_and_classes_round_trip(tmp_path):
    path = tmp_path / "w.dlfs"
    arr = np.arange(12, dtype=np.int32).reshape(3, 4)
    with dlfs.Writer(path, class_names=["cat", "dog"]) as w:
        w.add("cat/1.jpg", b"one", label=0)
        w.add("dog/2.jpg", bytearray(b"two"), label="dog")
        w.add("raw/3", arr)                         # raw bytes, C order
        w.add("raw/4", arr[:, ::2])                 # not contiguous: its C-order bytes
        w.add("mv/5", memoryview(b"five")[1:])
        w.add("empty", b"")
        assert len(w) == 6 and not w.closed
    assert w.closed
    with dlfs.Volume(path) as vol:
        assert vol.classes == ["cat", "dog"]
        got = {vol.path(i): (vol.read(i), vol.label(i)) for i in range(len(vol))}
    assert got == {"cat/1.jpg": (b"one", 0), "dog/2.jpg": (b"two", 1),
                   "raw/3": (arr.tobytes(), None), "raw/4": (arr[:, ::2].tobytes(), None),
                   "mv/5": (b"ive", None), "empty": (b"", None)}
    assert _entries(tmp_path) == ["w.dlfs"]


def test_nothing_appears_until_close(tmp_path):
    path = tmp_path / "w.dlfs"
    w = dlfs.Writer(path)
    w.add("a", b"x" * 100000)
    assert not path.exists()
    assert len(_entries(tmp_path)) == 1 and ".tmp." in _entries(tmp_path)[0]
    w.close()
    assert _entries(tmp_path) == ["w.dlfs"]
    w.close()  # again: nothing happens
    with pytest.raises(ValueError, match="closed"):
        w.add("b", b"y")


@pytest.mark.parametrize("targets", [1, 3])
def test_exception_inside_with_leaves_nothing(tmp_path, targets):
    with pytest.raises(RuntimeError, match="boom"):
        with dlfs.Writer(tmp_path / "w.dlfs", targets=targets) as w:
            for i in range(50):
                w.add(f"s/{i}", os.urandom(5000))
            raise RuntimeError("boom")
    assert _entries(tmp_path) == []


@pytest.mark.parametrize("targets", [0, 9])
def test_target_count_outside_1_to_8_is_refused(tmp_path, targets):
    with pytest.raises(ValueError, match=f"1 to 8 targets, not {targets}"):
        dlfs.Writer(tmp_path / "w.dlfs", targets=targets)
    assert _entries(tmp_path) == []


def test_abort_and_dropped_writer_leave_nothing(tmp_path):
    w = dlfs.Writer(tmp_path / "a.dlfs")
    w.add("x", b"1")
    w.abort()
    assert w.closed
    w = dlfs.Writer(tmp_path / "b.dlfs")
    w.add("x", b"1")
    del w
    assert _entries(tmp_path) == []


def test_duplicate_path_is_refused_when_added_naming_the_first(tmp_path):
    path = tmp_path / "w.dlfs"
    with dlfs.Writer(path, layout="tree") as w:
        w.add("k/1.jpg", b"first")
        w.add("k/2.jpg", b"second")
        with pytest.raises(ValueError) as e:
            w.add("k/1.jpg", b"again")
        assert str(path) in str(e.value)
        assert "duplicate sample path 'k/1.jpg' (already added as sample #0)" in str(e.value)
        with pytest.raises(ValueError, match="'k/1.jpg/x' needs directory 'k/1.jpg'"):
            w.add("k/1.jpg/x", b"under a sample")
        with pytest.raises(ValueError, match="'k' is already a directory"):
            w.add("k", b"over a directory")
        w.add("k/3.jpg", b"third")  # the writer goes on
    with dlfs.Volume(path) as vol:
        assert len(vol) == 3 and vol[vol.lookup("k/1.jpg")][0] == b"first"


def test_compact_layout_refuses_duplicates_in_order_when_added_and_the_rest_at_close(tmp_path):
    path = tmp_path / "w.dlfs"
    with dlfs.Writer(path) as w:  # the default: compact
        w.add("k/1.jpg", b"first")
        assert w.layout == "compact"
        with pytest.raises(ValueError, match="duplicate sample path 'k/1.jpg' "
                                             r"\(already added as sample #0\)"):
            w.add("k/1.jpg", b"again")
        with pytest.raises(ValueError, match="'k/1.jpg/x' needs directory 'k/1.jpg'"):
            w.add("k/1.jpg/x", b"under a sample")
        w.add("k/2.jpg", b"second")  # the writer goes on
    with dlfs.Volume(path) as vol:
        assert [vol.path(i) for i in range(len(vol))] == ["k/1.jpg", "k/2.jpg"]
    # Out of order, a duplicate or a path over a directory is found when the
    # directory is written, naming the paths; nothing is left behind.
    for later, message in [("k/1.jpg", "duplicate sample path 'k/1.jpg'"),
                           ("k", "'k' is both a sample and a directory")]:
        out = tmp_path / "late.dlfs"
        w = dlfs.Writer(out)
        w.add("k/2.jpg", b"b")
        w.add("k/1.jpg", b"a")
        w.add(later, b"c")
        with pytest.raises(ValueError, match=message):
            w.close()
        assert not out.exists() and list(tmp_path.glob("late.dlfs*")) == []


def test_bad_input_names_the_sample(tmp_path):
    path = tmp_path / "w.dlfs"
    with dlfs.Writer(path, class_names=["a"]) as w:
        for data, err, text in [
                ({"jpg": "text"}, TypeError, "data is a str"),
                ({1: b""}, TypeError, "field names must be str"),
                ("text", TypeError, "data is a str"),
                (object(), TypeError, "bytes-like or a numpy array, not object")]:
            with pytest.raises(err, match=text) as e:
                w.add("s/1", data)
            assert "'s/1'" in str(e.value) and str(path) in str(e.value)
        for label, err, text in [("b", ValueError, "unknown class 'b'"),
                                 (-2, ValueError, "negative"), (1.5, TypeError, "float"),
                                 (1, ValueError, "label 1 names no class: class_names has 1"),
                                 (2**32, ValueError, "names no class")]:
            with pytest.raises(err, match=text) as e:
                w.add("s/2", b"x", label)
            assert "'s/2'" in str(e.value)
        with pytest.raises(ValueError, match="bad sample path 'a//b'"):
            w.add("a//b", b"x")
        with pytest.raises(TypeError, match="path must be a str"):
            w.add(7, b"x")
    with dlfs.Volume(path) as vol:
        assert len(vol) == 0


def test_a_missing_directory_is_named_not_a_temporary_file(tmp_path):
    for make in (lambda out: dlfs.Writer(out),
                 lambda out: dlfs.pack(tmp_path / "src", out)):
        (tmp_path / "src" / "c").mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / "c" / "1.png").write_bytes(b"x")
        with pytest.raises(FileNotFoundError) as e:
            make(tmp_path / "nodir" / "d.dlfs")
        assert f"{tmp_path}/nodir/d.dlfs: cannot create it: directory {tmp_path}/nodir does " \
            "not exist" in str(e.value)
        assert ".tmp." not in str(e.value)


def test_options_force_alignment_targets(tmp_path):
    path = tmp_path / "w.dlfs"
    path.write_bytes(b"precious")
    with pytest.raises(FileExistsError, match="already exists"):
        dlfs.Writer(path)
    assert path.read_bytes() == b"precious"
    with dlfs.Writer(path, force=True, align=4096, targets=2) as w:
        for i in range(8):
            w.add(f"s/{i}", bytes([i]) * 1000)
    info = dlfs.Volume(path).info()
    assert info["alignment"] == 4096 and len(info["targets"]) == 2 and info["samples"] == 8
    assert sorted(os.listdir(tmp_path)) == ["w.dlfs", "w.dlfs.t1"]
    # One name for it (issue 41): align=, as dlfs.pack and --align; alignment= still works.
    with pytest.raises(ValueError, match="align must be a power of two"):
        dlfs.Writer(tmp_path / "x.dlfs", align=3)
    (tmp_path / "src" / "c").mkdir(parents=True)
    (tmp_path / "src" / "c" / "1.png").write_bytes(b"x")
    with pytest.raises(ValueError, match="align must be a power of two"):
        dlfs.pack(tmp_path / "src", tmp_path / "y.dlfs", align=3)
    with dlfs.Writer(tmp_path / "z.dlfs", alignment=4096) as w:
        w.add("s/0", b"x")
    assert dlfs.Volume(tmp_path / "z.dlfs").info()["alignment"] == 4096
    with pytest.raises(ValueError, match="differ"):
        dlfs.Writer(tmp_path / "z2.dlfs", align=512, alignment=4096)


def test_memory_stays_bounded_while_streaming(tmp_path):
    # 192 MiB through the writer; peak RSS may grow by the 8 MiB write
    # buffer and bookkeeping, not by the data (ru_maxrss is in KiB).
    chunk = np.random.default_rng(0).integers(0, 255, 4 << 20, dtype=np.uint8)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with dlfs.Writer(tmp_path / "big.dlfs") as w:
        for i in range(48):
            w.add(f"s/{i:03d}", chunk)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 64, f"peak RSS grew by {grown_mib:.0f} MiB writing 192 MiB"
    assert os.path.getsize(tmp_path / "big.dlfs") > 192 << 20


def test_progress_plain_line_and_tqdm(tmp_path, capsys):
    out = io.StringIO()
    p = Progress("packing", total=200, use_tqdm=False, file=out)
    p.update_to(50, bytes=5_000_000)
    line = p.line()
    assert line.startswith("packing: 50/200 samples (25.0%), bytes 5.0 MB, ")
    assert "samples/s" in line and "ETA" in line
    p.close()
    assert out.getvalue().endswith("\n")

    with dlfs.Writer(tmp_path / "p.dlfs", progress=True) as w:
        for i in range(20):
            w.add(f"s/{i}", b"x" * 100)
    err = capsys.readouterr().err
    assert "writing" in err and "20" in err

    pytest.importorskip("tqdm", reason="python3-tqdm not installed")
    out = io.StringIO()
    p = Progress("packing", total=10, use_tqdm=True, file=out)
    p.update_to(10)
    p.close()
    assert "10/10" in out.getvalue() and "samples" in out.getvalue()


def test_labels_never_invent_classes_and_cls_fields_label(tmp_path):
    """Issue 49: Writer(class_names=["a", "b"]).add(..., label=7) was accepted
    and the classes became ["a", "b", "2", ..., "7"]; a "cls" field did not
    label its sample (tar packing does); label=True and label=torch.tensor(3)
    were refused."""
    path = tmp_path / "w.dlfs"
    with dlfs.Writer(path, class_names=["a", "b"]) as w:
        with pytest.raises(ValueError, match=r"label 7 names no class: class_names has 2 "
                                             r"\(labels 0..1\)") as e:
            w.add("x/0", b"x", label=7)
        assert "'x/0'" in str(e.value) and str(path) in str(e.value)
        with pytest.raises(ValueError, match="names no class"):
            w.add("x/0", {"jpg": b"x", "cls": b"7"})
        w.add("x/1", {"jpg": b"one", "cls": b"1\n"})          # as a tar's .cls member
        w.add("x/2", {"jpg": b"two", "cls": b"0"}, label="a")  # agreeing
        with pytest.raises(ValueError, match="label=1, but its 'cls' field says 0"):
            w.add("x/3", {"jpg": b"three", "cls": b"0"}, label=1)
        with pytest.raises(ValueError, match="field 'cls' is not a class number: 'cat'"):
            w.add("x/4", {"jpg": b"four", "cls": b"cat"})
        w.add("x/5", b"five", label=True)
        w.add("x/6", b"six", label=np.int64(0))
        torch = pytest.importorskip("torch")
        w.add("x/7", b"seven", label=torch.tensor(1))
        with pytest.raises(TypeError, match="label must be an int"):
            w.add("x/8", b"eight", label=torch.tensor(1.0))
    with dlfs.Volume(path) as vol:
        assert vol.classes == ["a", "b"]
        labels = {vol.path(i): int(vol.labels[i]) for i in range(len(vol))}
        assert labels == {"x/1": 1, "x/2": 0, "x/5": 1, "x/6": 0, "x/7": 1}
        assert vol.read_field(vol.lookup("x/1"), "cls") == b"1\n"  # kept as a field too
    # Without class_names the classes are the labels' numbers, as for tar shards.
    with dlfs.Writer(tmp_path / "n.dlfs") as w:
        w.add("y/0", {"jpg": b"x", "cls": b"2"})
        with pytest.raises(ValueError, match="out of range"):
            w.add("y/1", b"x", 2**32)
    with dlfs.Volume(tmp_path / "n.dlfs") as vol:
        assert vol.classes == ["0", "1", "2"] and int(vol.labels[0]) == 2
    # ImageLoader's labels come from the cls field.
    import dlfs.torch as dt
    img = tmp_path / "img.dlfs"
    with dlfs.Writer(img) as w:
        for i in range(4):
            png = dlfs.encode_png(np.full((8, 8, 3), i, np.uint8))
            w.add(f"s/{i}", {"png": png, "cls": str(i % 2).encode()})
    loader = dt.ImageLoader(str(img), 4, size=8, field="png", shuffle=False, cache_budget=0)
    (_, labels), = list(loader)
    assert labels.tolist() == [0, 1, 0, 1]


def test_a_directory_is_refused_when_the_writer_is_made(tmp_path):
    """Issue 49: Writer("DIR", force=True) failed only at close(), after
    every sample was written."""
    out = tmp_path / "out"
    out.mkdir()
    for force in (False, True):
        with pytest.raises(IsADirectoryError, match="is a directory; a volume is a file"):
            dlfs.Writer(out, force=force)
    assert os.listdir(out) == [] and _entries(tmp_path) == ["out"]
