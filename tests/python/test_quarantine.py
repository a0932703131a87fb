"""Quarantine: skip_bad_samples on dlfs.Loader, LoaderDataset and ImageLoader
leaves damaged samples out of their batch, lists them, carries them in the
state, and fails past max_bad_samples; `dlfs verify --json` lists the same
records ahead of training."""
import json

import numpy as np
import pytest

dlfs = pytest.importorskip("dlfs", reason="Python module not built")

N = 120
# Sample i of the volume is NAMES[i] (packing sorts paths).
NAMES = sorted(f"c{n % 2}/{n:04d}.png" for n in range(N))
BAD = (7, 50)  # sample indices given checksum damage
UNDECODABLE = NAMES.index("c0/0090.png")


@pytest.fixture
def damaged(tmp_path):
    """A volume of N gray 8x8 PNGs whose samples BAD have a flipped byte, and
    whose c0/0090.png is truncated (stored, checksummed, undecodable)."""
    root = tmp_path / "tree"
    for i in range(N):
        p = root / f"c{i % 2}" / f"{i:04d}.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        png = dlfs.encode_png(np.full((8, 8), i % 256, dtype=np.uint8))
        p.write_bytes(png[:20] if i == 90 else png)
    path = tmp_path / "v.dlfs"
    dlfs.pack(str(root), str(path))
    vol = dlfs.Volume(str(path))
    data = bytearray(path.read_bytes())
    for i in BAD:
        data[vol.extent(i)[1] + 30] ^= 0x10
    path.write_bytes(bytes(data))
    return str(path)


def _epoch(loader, epoch=0):
    loader.set_epoch(epoch)
    return [i for b in loader for i in b.indices.tolist()]


def test_loader_leaves_bad_samples_out_and_resumes_the_same(damaged):
    loader = dlfs.Loader(damaged, 16, shuffle=False, skip_bad_samples=True, cache_budget=0,
                         direct_io=False)
    got = _epoch(loader)
    assert got == [i for i in range(N) if i not in BAD]
    q = loader.quarantine()
    assert [r["index"] for r in q] == list(BAD)
    assert all(r["volume"] == damaged and "checksum mismatch" in r["reason"] for r in q)
    assert q[0]["path"] == NAMES[7]
    state = loader.state_dict()
    assert state["quarantine"] == "7,50"
    # A resumed loader leaves them out without meeting them again.
    again = dlfs.Loader(damaged, 16, shuffle=False, cache_budget=0, direct_io=False)
    again.load_state_dict(json.loads(json.dumps(state)))
    assert _epoch(again, 1) == got
    # Without skip_bad_samples the batch fails, naming the sample.
    strict = dlfs.Loader(damaged, 16, shuffle=False, cache_budget=0, direct_io=False)
    strict.set_epoch(0)
    with pytest.raises(dlfs.CorruptVolumeError, match=f"sample 7 '{NAMES[7]}'"):
        list(strict)


def test_past_the_budget_every_batch_raises(damaged):
    loader = dlfs.Loader(damaged, 16, shuffle=False, skip_bad_samples=True, max_bad_samples=1,
                         cache_budget=0, direct_io=False)
    loader.set_epoch(0)
    it = iter(loader)
    for _ in range(3):  # batches 0-2: sample 7 left out, within the budget
        next(it)
    with pytest.raises(dlfs.CorruptVolumeError, match="more than max_bad_samples=1"):
        next(it)
    with pytest.raises(dlfs.CorruptVolumeError, match="sample 50"):
        next(it)


def test_verify_json_lists_what_a_loader_takes(damaged, run):
    proc = run("verify", "--json", "-q", damaged)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    records = report["bad_samples"]
    assert [r["index"] for r in records] == list(BAD)
    assert records[1]["path"] == NAMES[50] and "checksum" in records[1]["reason"]
    loader = dlfs.Loader(damaged, 16, shuffle=False, quarantine=records, cache_budget=0,
                         direct_io=False)
    assert _epoch(loader) == [i for i in range(N) if i not in BAD]  # nothing raised
    assert run("verify", "--json", "-q", damaged).stdout  # still JSON on stdout


def test_quarantine_takes_the_document_verify_writes(damaged, run, tmp_path):
    """Issue 41: README's `quarantine=json.load(open("bad.json"))` raised pybind11's
    "Unable to cast Python instance to C++ type"."""
    (tmp_path / "bad.json").write_bytes(run("verify", "--json", "-q", damaged).stdout)
    with open(tmp_path / "bad.json") as f:
        doc = json.load(f)
    for options in ({"skip_bad_samples": True}, {}):  # listed ones are left out either way
        loader = dlfs.Loader(damaged, 16, shuffle=False, quarantine=doc, cache_budget=0,
                             direct_io=False, **options)
        assert _epoch(loader) == [i for i in range(N) if i not in BAD]
        assert [r["index"] for r in loader.quarantine()] == list(BAD)
    for wrong, what in (({"samples_checked": 3}, 'without "bad_samples"'),
                        ("7,50", "got '7,50'"), ([{"path": "x"}], 'without "index"'),
                        ([-1], "got the item -1"), (7, "got 7")):
        with pytest.raises(ValueError, match="quarantine: expected sample indices") as e:
            dlfs.Loader(damaged, 16, quarantine=wrong, cache_budget=0)
        assert what in str(e.value)


def test_image_loader_quarantines_unreadable_and_undecodable(damaged):
    pytest.importorskip("torch")
    import dlfs.torch as dt

    loader = dt.ImageLoader(damaged, 16, size=8, shuffle=False, skip_bad_samples=True,
                            return_indices=True, cache_budget=0, direct_io=False,
                            decode_threads=1)
    loader.set_epoch(0)
    seen = [i for _, _, idx in loader for i in idx.tolist()]
    assert seen == [i for i in range(N) if i not in BAD and i != UNDECODABLE]
    q = loader.quarantine()
    assert sorted(r["index"] for r in q) == sorted([*BAD, UNDECODABLE])
    assert any(r["index"] == UNDECODABLE and r["path"] == NAMES[UNDECODABLE] for r in q)
    state = loader.state_dict()
    assert state["quarantine"] == "7,50"  # the undecodable one fails the same way each time


def test_loader_dataset_gathers_the_workers_quarantine(damaged):
    torch = pytest.importorskip("torch")
    import dlfs.torch as dt

    ds = dt.LoaderDataset(damaged, 8, shuffle=False, skip_bad_samples=True, cache_budget=0,
                          direct_io=False)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    seen = [v for x, _ in dl for v in range(len(x))]
    assert len(seen) == N - len(BAD)
    assert [r["index"] for r in ds.quarantine()] == list(BAD)
    state = ds.state_dict(batches=0)
    assert state["quarantine"] == "7,50"
    fresh = dt.LoaderDataset(damaged, 8, shuffle=False, cache_budget=0, direct_io=False)
    fresh.load_state_dict(state)
    dl = torch.utils.data.DataLoader(fresh, batch_size=None, num_workers=0)
    assert sum(len(x) for x, _ in dl) == N - len(BAD)  # left out, no error
    with pytest.raises(ValueError, match="malformed quarantine"):
        fresh.load_state_dict(dict(state, quarantine="7,x"))
