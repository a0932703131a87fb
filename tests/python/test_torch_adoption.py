"""dlfs.torch as PyTorch users expect it: set_epoch reaches persistent
workers, ImageFolder's attributes, no non-writable warning."""
import os
import warnings

import pytest

torch = pytest.importorskip("torch", reason="python3-torch not installed")
dlfs = pytest.importorskip("dlfs", reason="Python module not built")
import dlfs.torch as dt  # noqa: E402
import torch.utils.data as tud  # noqa: E402


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    for i in range(120):
        p = root / f"class{i % 3}" / f"{i:04d}.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(i.to_bytes(2, "little") * (1 + i % 5))
    vol = root.parent / "v.dlfs"
    dlfs.pack(root, vol)
    return str(vol), root


def _ids(samples, labels):  # module level: picklable for spawned workers
    return [int.from_bytes(bytes(s[:2]), "little") for s in samples]


def _epoch_orders(path, epochs, **loader_kwargs):
    ds = dt.LoaderDataset(path, batch_size=8, seed=5, batch_transform=_ids)
    dl = tud.DataLoader(ds, batch_size=None, **loader_kwargs)
    orders = []
    for epoch in epochs:
        ds.set_epoch(epoch)
        orders.append([i for batch in dl for i in batch])
    return orders


# spawn: the shared epoch is pickled to the workers (one worker: each
# spawned one imports torch, seconds apiece).
@pytest.mark.parametrize("context,workers", [("fork", 2), ("spawn", 1)])
def test_set_epoch_reaches_persistent_workers(labelled, context, workers):
    path, _ = labelled
    epochs = [0, 1, 2, 1]
    got = _epoch_orders(path, epochs, num_workers=workers, persistent_workers=True,
                        multiprocessing_context=context)
    # What workers started afresh for each epoch read:
    want = [_epoch_orders(path, [e], num_workers=workers)[0] for e in epochs]
    assert got == want
    assert got[0] != got[1] != got[2] and got[1] == got[3]
    assert sorted(got[1]) == list(range(120))


def test_epoch_is_shared_state(labelled):
    path, _ = labelled
    ds = dt.LoaderDataset(path, batch_size=8)
    assert ds.epoch == 0
    ds.set_epoch(7)
    assert ds.epoch == 7
    with pytest.raises(ValueError):
        ds.set_epoch(-1)


def test_volume_dataset_has_imagefolder_attributes(labelled):
    datasets = pytest.importorskip("torchvision.datasets", reason="torchvision not installed")
    path, root = labelled
    ds = dt.VolumeDataset(path)
    ref = datasets.ImageFolder(str(root), loader=lambda p: p)
    assert ds.classes == ref.classes
    assert ds.class_to_idx == ref.class_to_idx
    # Items in the same order as torchvision's (sorted paths), so targets match.
    assert ds.targets == ref.targets
    assert isinstance(ds.targets, list) and len(ds) == len(ref)
    sub = dt.VolumeDataset(path, root="class1")
    assert sub.targets == [1] * 40


def test_samples_reach_transform_writable_without_warning(labelled):
    path, _ = labelled
    seen = []

    def to_tensor(sample):
        t = torch.from_numpy(sample)  # warns if the array is read-only
        seen.append(sample.flags.writeable)
        return t

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = dt.VolumeDataset(path, transform=to_tensor)
        x, y = ds[5]
        assert isinstance(x, torch.Tensor)
        assert y == int.from_bytes(bytes(x[:2].numpy()), "little") % 3
        lds = dt.LoaderDataset(path, batch_size=16, transform=to_tensor)
        n = sum(len(samples) for samples, _ in lds)
    assert n == 120 and all(seen)


def test_dlfs_torch_public_names_are_its_api():
    """dir(dlfs.torch) shows the API, not the modules it uses (os, np, torch...)."""
    import dlfs.torch_image

    public = {name for name in dir(dt) if not name.startswith("_")}
    assert public == set(dt.__all__)
    assert dt.ImageLoader is dlfs.torch_image.ImageLoader


def test_torch_image_imports_without_dlfs_torch():
    """No import circle: dlfs.torch_image stands on its own (dlfs.torch imports it)."""
    import subprocess
    import sys

    code = ("import sys, dlfs.torch_image; "
            "assert 'dlfs.torch' not in sys.modules, 'dlfs.torch_image imported dlfs.torch'")
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))
