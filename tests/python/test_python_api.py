"""The Python module: dlfs.Volume, dlfs.Loader, zero-copy batches, errors."""
import gc
import random
import subprocess

import numpy as np
import pytest

from testutil import epochs_until, simulate_compute

dlfs = pytest.importorskip("dlfs", reason="Python module not built (pybind11 missing)")


def test_volume_reads_what_was_packed(volume):
    vol_path, files = volume
    vol = dlfs.Volume(str(vol_path))
    assert len(vol) == len(files)
    assert vol.classes == ["Emu", "cat", "dog"]
    info = vol.info()
    assert info["samples"] == len(files) and info["format_version"] == 3  # compact (v3)
    for i in range(len(vol)):
        data, label = vol[i]
        assert data == files[vol.path(i)]
        assert label == vol.label(i)
        assert vol.lookup(vol.path(i)) == i
        assert vol.size(i) == len(data)
    assert vol[-1][0] == files[vol.path(len(vol) - 1)]
    assert vol.label(vol.lookup("cat/001.png")) == 1
    assert sorted(vol.path(int(i)) for i in vol.indices("dog")) == ["dog/002.png", "dog/a/001.png"]
    assert list(vol.labels) == [vol.label(i) for i in range(len(vol))]


def test_info_is_the_document_the_cli_prints(volume, run):
    import json

    vol_path, _ = volume
    cli = json.loads(run("info", vol_path, "--json", check=0).stdout)
    assert dlfs.Volume(str(vol_path)).info() == cli


def test_errors_map_to_python_exceptions(volume, tmp_path):
    vol_path, _ = volume
    vol = dlfs.Volume(str(vol_path))
    with pytest.raises(FileNotFoundError, match="missing.dlfs"):
        dlfs.Volume(str(tmp_path / "missing.dlfs"))
    junk = tmp_path / "junk.dlfs"
    junk.write_bytes(b"\0" * 20000)
    with pytest.raises(dlfs.CorruptVolumeError, match="junk.dlfs: not a dlfs volume"):
        dlfs.Volume(str(junk))
    with pytest.raises(KeyError):
        vol.lookup("cat/nope.png")
    with pytest.raises(IndexError):
        vol[len(vol)]
    with pytest.raises(ValueError, match="batch_size"):
        dlfs.Loader(vol, batch_size=0)
    with pytest.raises(ValueError, match="rank 2"):
        dlfs.Loader(vol, batch_size=2, rank=2, world_size=2)
    with pytest.raises(ValueError, match="engine"):
        dlfs.Loader(vol, batch_size=2, engine="spdk")
    with pytest.raises(FileExistsError):
        dlfs.pack(str(tmp_path / "tree"), str(vol_path))
    with pytest.raises(ValueError, match="inside the source directory"):
        dlfs.pack(str(tmp_path), str(tmp_path / "new.dlfs"))


def test_damaged_sample_raises_naming_it(volume):
    vol_path, files = volume
    raw = bytearray(vol_path.read_bytes())
    pos = raw.find(files["Emu/x.png"])
    raw[pos + 100] ^= 0xFF
    vol_path.write_bytes(bytes(raw))
    vol = dlfs.Volume(str(vol_path))
    with pytest.raises(dlfs.CorruptVolumeError, match="'Emu/x.png': checksum mismatch"):
        vol[vol.lookup("Emu/x.png")]
    with pytest.raises(dlfs.CorruptVolumeError, match="Emu/x.png"):
        for _ in dlfs.Loader(vol, batch_size=2):
            pass
    assert len(vol.verify()) == 1


@pytest.fixture
def many(tmp_path, run):
    """A 2,000-sample volume; sample bytes encode their path."""
    root = tmp_path / "many"
    for i in range(2000):
        p = root / f"k{i % 5}" / f"{i:05d}"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(p.name.encode() * (1 + i % 300))
    vol = tmp_path / "many.dlfs"
    run("pack", root, "-o", vol, "-q", "--all-files", check=0)  # names without extension
    return dlfs.Volume(str(vol))


@pytest.mark.parametrize("world,drop_last", [(1, False), (3, True), (4, False)])
def test_every_sample_once_per_epoch_across_ranks(many, world, drop_last):
    for epoch in (0, 1):
        seen = []
        for rank in range(world):
            loader = dlfs.Loader(many, batch_size=64, seed=5, rank=rank, world_size=world,
                                 drop_last=drop_last)
            loader.set_epoch(epoch)
            got = []
            for batch in loader:
                assert len(batch) <= 64
                for i, view in zip(batch.indices, batch.samples):
                    name = many.path(int(i)).split("/")[1].encode()
                    assert bytes(view[: len(name)]) == name
                got += list(batch.indices)
            assert got == list(loader.indices)
            seen += got
        if drop_last:
            assert len(seen) == len(set(seen)) > 2000 - world * 64
        else:
            assert set(seen) == set(range(2000))


def test_order_depends_on_seed_and_epoch_only(many):
    def order(seed, epoch):
        loader = dlfs.Loader(many, batch_size=100, seed=seed)
        loader.set_epoch(epoch)
        return [int(i) for b in loader for i in b.indices]

    assert order(1, 0) == order(1, 0)
    assert order(1, 0) != order(1, 1)
    assert order(1, 0) != order(2, 0)
    assert sorted(order(1, 3)) == list(range(2000))


def test_views_outlive_the_loader_and_their_batch(many):
    """Zero-copy views must keep their buffer alive: hold random views from
    many batches while the loader recycles buffers, then check every byte."""
    rng = random.Random(0)
    kept = []
    # From the device every epoch (no node cache), so batch buffers recycle.
    loader = dlfs.Loader(many, batch_size=50, seed=3, prefetch_batches=2, cache_budget=0)
    for epoch in range(3):
        loader.set_epoch(epoch)
        for batch in loader:
            i = rng.randrange(len(batch))
            kept.append((int(batch.indices[i]), batch[i]))
            del batch
            gc.collect()
    del loader
    gc.collect()
    for index, view in kept:
        assert view.flags.writeable and not view.flags.owndata  # the batch's own buffer
        assert bytes(view) == many.read(index)


def test_subset_reads_only_those_samples(many):
    subset = many.indices("k3")
    loader = dlfs.Loader(many, batch_size=32, indices=subset)
    got = sorted(int(i) for b in loader for i in b.indices)
    assert got == sorted(int(i) for i in subset)
    assert all(many.path(i).startswith("k3/") for i in got)


def test_samples_under_a_directory_are_a_range_when_contiguous(tmp_path):
    """A root= split holds nothing per sample when its samples are one run
    (Volume.samples_under gives a range), and its list where they are not;
    both read the same samples in the same order, and name the subset alike
    in state_dict (as a list of those indices always did)."""
    path = str(tmp_path / "s.dlfs")
    with dlfs.Writer(path, layout="tree") as w:
        # The tree layout orders samples breadth first: a's own sample, then
        # b's, then a/s's (the compact one keeps the order added): a's subtree
        # is samples 0 and 2, b's is sample 1, c's (leaves only) 3 .. 5.
        for name in ["a/1", "a/s/2", "b/3", "c/x/4", "c/x/5", "c/y/6"]:
            w.add(name, name.encode())
    vol = dlfs.Volume(path)
    assert vol.samples_under("c") == range(3, 6)
    assert vol.samples_under("b") == range(1, 2)
    assert vol.samples_under("") == range(0, 6)
    a = vol.samples_under("a")
    assert isinstance(a, np.ndarray) and a.tolist() == [0, 2] == vol.indices("a").tolist()
    for under in ("a", "c"):
        subset = vol.samples_under(under)
        as_list = [int(i) for i in subset]
        runs = [dlfs.Loader(vol, 2, seed=3, indices=x, cache_budget=0) for x in (subset, as_list)]
        orders = [[int(i) for b in r for i in b.indices] for r in runs]
        assert orders[0] == orders[1] and sorted(orders[0]) == as_list
        assert runs[0].state_dict() == runs[1].state_dict()
        assert runs[0].state_dict()["subset_crc"] == dlfs._dlfs._subset_crc(as_list)
    with pytest.raises(ValueError, match="starts at 0"):
        dlfs.Loader(vol, 2, indices=range(-1, 3))
    with pytest.raises(ValueError, match="out of range"):
        dlfs.Loader(vol, 2, indices=range(4, 9))
    assert len(dlfs.Loader(vol, 2, indices=range(2, 2))) == 0  # an empty range reads nothing


def test_read_many_returns_the_samples_asked_for(many):
    rng = random.Random(1)
    want = [rng.randrange(len(many)) for _ in range(300)] + [0, 0, -1]
    batch = many.read_many(want)
    assert len(batch) == len(want)
    for k, i in enumerate(want):
        assert bytes(batch[k]) == many.read(i)
        assert batch.labels[k] == many.label(i)
    assert list(batch.indices) == [i % len(many) for i in want]
    with pytest.raises(IndexError):
        many.read_many([1, len(many)])


def test_read_many_names_a_damaged_sample(volume):
    vol_path, files = volume
    raw = bytearray(vol_path.read_bytes())
    raw[raw.find(files["Emu/x.png"]) + 7] ^= 0x01
    vol_path.write_bytes(bytes(raw))
    vol = dlfs.Volume(str(vol_path))
    x = vol.lookup("Emu/x.png")
    with pytest.raises(dlfs.CorruptVolumeError, match="'Emu/x.png': checksum mismatch"):
        vol.read_many([0, x])
    assert bytes(vol.read_many([x], verify=False)[0]) != files["Emu/x.png"]


def test_batch_stack_copies_fixed_size_samples(tmp_path, run):
    root = tmp_path / "fixed"
    for i in range(100):
        p = root / f"c{i % 2}" / f"{i:03d}"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(bytes([i]) * 16)
    run("pack", root, "-o", tmp_path / "f.dlfs", "-q", "--all-files", check=0)
    vol = dlfs.Volume(str(tmp_path / "f.dlfs"))
    batch = vol.read_many([5, 7, 5])
    arr = batch.stack()
    assert arr.shape == (3, 16) and arr.dtype == np.uint8
    assert [bytes(r) for r in arr] == [bytes(batch[i]) for i in range(3)]
    arr[0, 0] = 99  # a copy: writable, the batch is untouched
    assert batch[0][0] != 99
    odd = tmp_path / "odd"
    (odd / "a").mkdir(parents=True)
    (odd / "a" / "1").write_bytes(b"x")
    (odd / "a" / "2").write_bytes(b"yy")
    run("pack", odd, "-o", tmp_path / "o.dlfs", "-q", "--all-files", check=0)
    with pytest.raises(ValueError, match="differ in size"):
        dlfs.Volume(str(tmp_path / "o.dlfs")).read_many([0, 1]).stack()


def test_loader_has_a_node_cache_by_default(many):
    assert "node cache" in dlfs.Loader(many, batch_size=128).engine_description


# A given budget, not the default: the default fills only where its
# measurements predict a gain, which for this tiny volume (saves 0.00 s for
# 0.00 s) goes either way on a loaded machine.
@pytest.mark.parametrize("budget", [0, "64M"])
def test_loader_node_cache_serves_the_same_bytes(many, budget):
    loader = dlfs.Loader(many, batch_size=128, seed=2, cache_budget=budget)
    assert ("node cache" in loader.engine_description) == (budget != 0)
    total = many.info()["bytes"]
    # A requested cache is full by the first epoch's end; a few more at most.
    def epoch(e):
        loader.set_epoch(100 + e)
        for batch in loader:
            for i, view in zip(batch.indices, batch.samples):
                assert bytes(view) == many.read(int(i))
            simulate_compute()  # as training: the filler runs freely

    if budget != 0:
        epochs_until(lambda: loader.stats()["cache_used_bytes"] >= total, epoch,
                     what="the node cache full")
    loader.set_epoch(3)
    before = loader.stats()["io_bytes"]
    for batch in loader:
        for i, view in zip(batch.indices, batch.samples):
            assert bytes(view) == many.read(int(i))
            # Bytes shared through the node cache are read-only.
            assert view.flags.writeable == (budget == 0)
    read = loader.stats()["io_bytes"] - before
    if budget != 0:
        assert read == 0  # served from memory
    else:
        assert read > 0
    s = loader.stats()
    assert s["cache_bytes"] > 0 if budget != 0 else s["buffer_pool_bytes"] > 0
    # A budget that holds the volume is filled before the loader's first
    # read, which it then never makes.
    assert s["mean_reads_in_flight"] > 0 if budget == 0 else s["io_bytes"] == 0


def test_pack_reports_removed_temporaries(tree, tmp_path):
    """dlfs.pack's stats list the temporaries of killed earlier packs it removed (issue 13 #9)."""
    root, files = tree
    child = subprocess.Popen(["/bin/true"])
    child.wait()  # a process id that is certainly not running
    out = tmp_path / "out"
    out.mkdir()
    stale = out / f"v.dlfs.tmp.{child.pid}.0"
    stale.write_bytes(b"x" * 1234)
    stats = dlfs.pack(str(root), str(out / "v.dlfs"))
    assert stats["samples"] == len(files)
    assert stats["removed_temporaries"] == [f"{stale} (left by process {child.pid}, 1234 bytes)"]
    assert sorted(p.name for p in out.iterdir()) == ["v.dlfs"]
    stats = dlfs.pack(str(root), str(out / "v.dlfs"), force=True)
    assert stats["removed_temporaries"] == []


def test_shared_slot_numbers_out_of_range_are_refused(volume):
    # The DataLoader workers' shared batch memory takes slot numbers from
    # Python: one past the end must raise, not address memory outside it.
    from dlfs import _dlfs

    vol_path, _ = volume
    slots = _dlfs._SharedSlots(2, 4096)
    with pytest.raises(IndexError, match="slot 2 out of range"):
        slots.release(2)
    with pytest.raises(IndexError, match="slot 7 out of range"):
        slots.read(dlfs.Volume(str(vol_path)), 7, [0])
    slot = slots.acquire(1.0)
    assert slot in (0, 1)
    slots.release(slot)


def test_misspelt_keywords_are_named_with_a_suggestion_when_made(volume, tmp_path):
    """Issue 49: misspelt keywords printed pybind11's signature dump (with
    keywords never passed) and did not name the bad one; LoaderDataset took
    them and failed at its first iteration, inside a DataLoader worker."""
    path = str(volume[0])
    cases = [
        (lambda: dlfs.Loader(path, 8, shufle=False), TypeError,
         "dlfs.Loader() got an unexpected keyword argument 'shufle' (did you mean 'shuffle'?)"),
        (lambda: dlfs.Volume(path, verfy=False), TypeError,
         "dlfs.Volume() got an unexpected keyword argument 'verfy'; its keywords are comm, "
         "directory, node_name, path, shard_local, target_map"),
        (lambda: dlfs.Volume(path, node_nam="x"), TypeError, "(did you mean 'node_name'?)"),
        (lambda: dlfs.Loader(path, -1), ValueError, "dlfs.Loader(): batch_size=-1: must be >= 1"),
        (lambda: dlfs.Loader(path, batch_size=-1), ValueError, "batch_size=-1: must be >= 1"),
        (lambda: dlfs.Loader(path, 8, seed="x"), TypeError, "seed='x': takes an int, not str"),
        (lambda: dlfs.Loader(path, 8, engine=3), TypeError, "engine=3: takes a str, not int"),
        (lambda: dlfs.Writer(tmp_path / "w.dlfs", clas_names=["a"]), TypeError,
         "dlfs.Writer() got an unexpected keyword argument 'clas_names' "
         "(did you mean 'class_names'?)"),
    ]
    torch = pytest.importorskip("torch")
    import dlfs.torch as dt
    cases += [
        (lambda: dt.LoaderDataset(path, 8, shufle=False), TypeError,
         "dlfs.torch.LoaderDataset() got an unexpected keyword argument 'shufle' "
         "(did you mean 'shuffle'?)"),
        (lambda: dt.LoaderDataset(path, 8, queue_dept=4), TypeError, "(did you mean 'queue_depth'?)"),
        (lambda: dt.LoaderDataset(path, -1), ValueError, "batch_size=-1: must be >= 1"),
        (lambda: dt.VolumeDataset(path, tranform=None), TypeError,
         "(did you mean 'transform'?)"),
        (lambda: dt.ImageLoader(path, 8, size=8, fields=["png"]), TypeError,
         "dlfs.torch.ImageLoader() got an unexpected keyword argument 'fields' "
         "(did you mean 'field'?)"),
    ]
    for make, kind, text in cases:
        with pytest.raises(kind) as e:
            make()
        assert text in str(e.value), str(e.value)
        assert "incompatible" not in str(e.value) and "Invoked with" not in str(e.value)
    # Keywords that exist still work, by name and by position.
    assert len(dlfs.Loader(path, 2, False, seed=1)) == 3
    assert len(dlfs.Volume(path, directory="private")) == 5
    assert len(dt.LoaderDataset(path, 2, queue_depth=4, cache_budget=0)) == 3


def test_image_loader_on_a_multi_field_volume_names_the_keyword_it_takes(tmp_path):
    """Issue 49: the message said fields=[NAME, ...], which ImageLoader
    refuses; it takes field=NAME."""
    pytest.importorskip("torch")
    import dlfs.torch as dt
    path = tmp_path / "f.dlfs"
    with dlfs.Writer(path) as w:
        for i in range(4):
            w.add(f"s/{i}", {"png": dlfs.encode_png(np.zeros((4, 4, 3), np.uint8)),
                             "json": b"{}"})
    for make in (lambda **k: dt.ImageLoader(str(path), 2, size=4, cache_budget=0, **k),
                 lambda **k: dlfs._dlfs.ImageLoader(str(path), 2, pipeline=dlfs.ImagePipeline(4),
                                                    cache_budget=0, **k)):
        with pytest.raises(NotImplementedError) as e:
            make()
        assert "(field=NAME)" in str(e.value) and "fields=" not in str(e.value), str(e.value)
        assert len(make(field="png")) == 2  # following it works
    with pytest.raises(NotImplementedError, match=r"\(fields=\[NAME, \.\.\.\]\)"):
        dlfs.Loader(str(path), 2)
