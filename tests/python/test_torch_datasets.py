"""dlfs.torch with torch.utils.data.DataLoader, workers and ranks."""
import json
import os

import numpy as np
import pytest

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
