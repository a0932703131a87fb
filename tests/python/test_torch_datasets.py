"""dlfs.torch with torch.utils.data.DataLoader, workers and ranks."""
import json
import os

import numpy as np
import pytest

from testutil import epochs_until, simulate_compute

torch = pytest.importorskip("torch", reason="python3-torch not installed")
dlfs = pytest.importorskip("dlfs", reason="Python module not built")
import dlfs.torch as dt  # noqa: E402
import torch.utils.data as tud  # noqa: E402


@pytest.fixture
def labelled(tmp_path, run):
    root = tmp_path / "tree"
    for i in range(300):
        p = root / f"class{i % 3}" / f"{i:04d}.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(i.to_bytes(2, "little") * (1 + i % 7))
    vol = tmp_path / "v.dlfs"
    run("pack", root, "-o", vol, "-q", check=0)
    return str(vol), root


def _decode(a):
    return int.from_bytes(bytes(a[:2]), "little")


def test_volume_dataset_with_workers_and_distributed_sampler(labelled):
    path, root = labelled
    ds = dt.VolumeDataset(path, transform=_decode)
    assert len(ds) == 300 and ds.classes == ["class0", "class1", "class2"]
    seen = []
    for rank in range(2):
        sampler = tud.DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=1)
        dl = tud.DataLoader(ds, batch_size=16, sampler=sampler, num_workers=2)
        for x, y in dl:
            for value, label in zip(x.tolist(), y.tolist()):
                assert label == value % 3
                seen.append(value)
    assert sorted(seen) == list(range(300))


def test_volume_dataset_subtree(labelled):
    path, _ = labelled
    ds = dt.VolumeDataset(path, transform=_decode, root="class1")
    values = sorted(ds[i][0] for i in range(len(ds)))
    assert values == list(range(1, 300, 3))


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_dataset_splits_across_ranks_and_workers(labelled, workers):
    path, _ = labelled

    def batch_transform(samples, labels):
        return [_decode(s) for s in samples], labels

    seen = []
    for rank in range(2):
        ds = dt.LoaderDataset(path, batch_size=10, seed=4, drop_last=True, rank=rank,
                              world_size=2, batch_transform=batch_transform)
        ds.set_epoch(1)
        for values, labels in tud.DataLoader(ds, batch_size=None, num_workers=workers):
            assert [v % 3 for v in values] == list(labels)
            seen += values
    assert len(seen) == len(set(seen))
    assert len(seen) > 300 - 2 * max(workers, 1) * 10


def test_loader_dataset_reads_rank_from_environment(labelled, monkeypatch):
    path, _ = labelled
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    ds = dt.LoaderDataset(path, batch_size=1000, shuffle=False)
    (samples, labels), = list(ds)
    want = dlfs.Loader(path, 1000, shuffle=False, rank=1, world_size=3).indices
    vol = dlfs.Volume(path)
    assert [bytes(s) for s in samples] == [vol.read(int(i)) for i in want]
    assert isinstance(labels, torch.Tensor)


@pytest.mark.parametrize("workers", [0, 2])
def test_volume_dataset_batched_with_batch_sampler(labelled, workers):
    path, _ = labelled
    ds = dt.VolumeDataset(path)
    sampler = tud.BatchSampler(tud.RandomSampler(ds, generator=torch.Generator().manual_seed(0)),
                               batch_size=32, drop_last=False)
    seen = []
    for samples, labels in tud.DataLoader(ds, sampler=sampler, batch_size=None,
                                          num_workers=workers):
        assert isinstance(labels, torch.Tensor) and len(samples) == len(labels) <= 32
        for s, y in zip(samples, labels.tolist()):
            v = _decode(s)
            assert y == v % 3
            seen.append(v)
    assert sorted(seen) == list(range(300))
    # Positions, not volume indices: a subtree maps them.
    sub = dt.VolumeDataset(path, root="class2", transform=_decode)
    values, labels = sub[[0, 1, 2]]
    assert values == [sub[k][0] for k in range(3)] and labels.tolist() == [2, 2, 2]


def test_loader_dataset_keeps_its_loader_and_stacks_fixed_size_samples(tmp_path, run):
    root = tmp_path / "px"
    for i in range(200):
        p = root / f"c{i % 2}" / f"{i:03d}"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(bytes([i % 256]) * 24)
    run("pack", root, "-o", tmp_path / "px.dlfs", "-q", "--all-files", check=0)
    # A given budget: the default fills only where its measurements predict
    # a gain, which for 4.8 KB goes either way on a loaded machine.
    ds = dt.LoaderDataset(str(tmp_path / "px.dlfs"), batch_size=50, seed=1, cache_budget=1 << 20)
    firsts = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        got = []
        for samples, labels in tud.DataLoader(ds, batch_size=None):
            assert isinstance(samples, torch.Tensor) and samples.shape == (len(labels), 24)
            got += [int(r[0]) for r in samples]
        assert sorted(got) == sorted(i % 256 for i in range(200))
        firsts.append(got)
    assert firsts[0] != firsts[1]  # a new order each epoch
    loader = ds._loader
    assert loader is not None and loader.stats()["cache_bytes"] > 0
    def epoch(e):
        ds.set_epoch(10 + e)
        for _ in tud.DataLoader(ds, batch_size=None):
            simulate_compute()  # as training: the filler runs freely

    epochs_until(lambda: loader.stats()["cache_used_bytes"] >= 200 * 24, epoch,
                 what="every sample in the node cache")
    ds.set_epoch(2)
    before = loader.stats()["io_bytes"]
    assert sum(len(y) for _, y in tud.DataLoader(ds, batch_size=None)) == 200
    assert ds._loader is loader and loader.stats()["io_bytes"] == before  # from memory
    # stack=False: views, one per sample.
    plain = dt.LoaderDataset(str(tmp_path / "px.dlfs"), batch_size=50, stack=False,
                             batch_transform=lambda s, y: (s, y))
    samples, _ = next(iter(plain))
    assert isinstance(samples, list) and len(samples) == 50


@pytest.mark.parametrize("hold", [False, True])
def test_volume_dataset_batches_cross_from_workers_in_shared_memory(labelled, hold):
    """Workers hand batches over in shared memory slots that are reused once
    the main process drops the views; holding more batches than there are
    slots falls back to the ordinary transfer, with the same bytes."""
    path, _ = labelled
    ds = dt.VolumeDataset(path, shared_slots=2)
    sampler = tud.BatchSampler(tud.SequentialSampler(ds), batch_size=8, drop_last=False)
    vol = dlfs.Volume(path)
    before = dt._shared_batches_received
    kept, seen = [], []
    for samples, labels in tud.DataLoader(ds, sampler=sampler, batch_size=None, num_workers=2):
        assert all(isinstance(s, torch.Tensor) and s.dtype == torch.uint8 for s in samples)
        for s, y in zip(samples, labels.tolist()):
            v = _decode(s.numpy())
            assert y == v % 3
            assert bytes(s.numpy()) == vol.read(vol.lookup(f"class{v % 3}/{v:04d}.png"))
            seen.append(v)
        if hold:
            kept.append(samples)
    assert sorted(seen) == list(range(300))
    shared = dt._shared_batches_received - before
    assert shared >= 4  # each worker's first two batches at least
    if not hold:
        assert shared > 10  # slots came free again (without reuse: 4)
    else:
        assert shared < 38  # no free slot: sent the ordinary way
        assert sorted(_decode(s.numpy()) for b in kept for s in b) == list(range(300))


@pytest.mark.parametrize("stack,hold", [("auto", False), ("auto", True), (False, False)])
def test_loader_dataset_batches_cross_from_workers_in_shared_memory(tmp_path, run, stack, hold):
    """With DataLoader workers, LoaderDataset's batches reach the main process
    through the worker's shared memory slots, as the ordinary path would
    make them: one (batch, size) tensor for fixed-size samples (stack), a
    list of tensors otherwise, the labels a tensor; every sample once, its
    bytes intact. Holding more batches than there are slots sends the rest
    the ordinary way, with the same bytes."""
    root = tmp_path / "px"
    for i in range(240):
        p = root / f"c{i % 3}" / f"{i:03d}"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(i.to_bytes(2, "little") * 12)  # 24 bytes, its number twice each
    run("pack", root, "-o", tmp_path / "px.dlfs", "-q", "--all-files", check=0)
    # 6 slots (the default) outlast what the loop and DataLoader's read-ahead
    # (2 batches per worker) hold; 2 do not when the loop keeps its batches.
    ds = dt.LoaderDataset(str(tmp_path / "px.dlfs"), batch_size=10, seed=3, stack=stack,
                          shared_slots=2 if hold else 6)
    before = dt._shared_batches_received
    dl = tud.DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    for epoch in range(2):
        ds.set_epoch(epoch)
        kept, seen = [], []
        for samples, labels in dl:
            assert isinstance(labels, torch.Tensor) and labels.dtype == torch.int64
            if stack == "auto":
                assert isinstance(samples, torch.Tensor) and samples.shape == (len(labels), 24)
                rows = list(samples)
            else:
                assert isinstance(samples, list) and len(samples) == len(labels)
                rows = samples
            for s, y in zip(rows, labels.tolist()):
                assert s.dtype == torch.uint8 and s.shape == (24,)
                v = int.from_bytes(bytes(s[:2].tolist()), "little")
                assert bytes(s.tolist()) == v.to_bytes(2, "little") * 12 and y == v % 3
                seen.append(v)
            if hold:
                kept.append(samples)
        assert sorted(seen) == list(range(240))
        if hold:  # views kept past other batches keep their bytes
            flat = [r for b in kept for r in (list(b) if stack == "auto" else b)]
            assert sorted(int.from_bytes(bytes(r[:2].tolist()), "little") for r in flat) == \
                list(range(240))
    shared = dt._shared_batches_received - before
    assert shared >= 4  # each worker's first two batches at least
    if not hold:
        assert shared == 48  # every batch: slots came free again
    else:
        assert shared < 48  # no free slot: sent the ordinary way


def test_loader_dataset_shared_memory_off_and_transforms_send_batches_the_ordinary_way(
        tmp_path, run):
    root = tmp_path / "px"
    for i in range(40):
        p = root / f"c{i % 2}" / f"{i:03d}"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(bytes([i]) * (1 + i % 5))  # sizes differ
    run("pack", root, "-o", tmp_path / "px.dlfs", "-q", "--all-files", check=0)
    path = str(tmp_path / "px.dlfs")
    before = dt._shared_batches_received
    for ds in (dt.LoaderDataset(path, batch_size=5, shared_memory=False),
               dt.LoaderDataset(path, batch_size=5, transform=lambda s: s)):
        got = [int(s[0]) for samples, _ in tud.DataLoader(ds, batch_size=None, num_workers=2)
               for s in samples]
        assert sorted(got) == list(range(40))
    assert dt._shared_batches_received == before
    # Samples of several sizes: a list through shared memory; stack=True
    # still refuses them, naming the sizes.
    ds = dt.LoaderDataset(path, batch_size=5)
    got = []
    for samples, _ in tud.DataLoader(ds, batch_size=None, num_workers=2):
        assert isinstance(samples, list)
        got += [bytes(s.tolist()) for s in samples]
    assert sorted(got) == sorted(bytes([i]) * (1 + i % 5) for i in range(40))
    assert dt._shared_batches_received > before
    with pytest.raises(ValueError, match="differ in size"):
        for _ in tud.DataLoader(dt.LoaderDataset(path, batch_size=5, stack=True),
                                batch_size=None, num_workers=2):
            pass
