"""Weighted mixtures: dlfs.Loader([a, b], weights=...). The interleaving is a
pure function of (seed, epoch) with the weights' shares, split across ranks
like one volume's epoch, resumable (also elastically); bad weights and
states of another mixture are refused."""
import json
import math

import pytest
from image_fixtures import flat_png_volume

dlfs = pytest.importorskip("dlfs", reason="Python module not built")

SIZES = {"a": 3000, "b": 800}
BASE = {"a": 0, "b": 100000}  # sample i of volume v holds BASE[v] + i


@pytest.fixture(scope="module")
def volumes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mixture")
    paths = []
    for name, n in SIZES.items():
        path = tmp / f"{name}.dlfs"
        with dlfs.Writer(path) as w:
            for i in range(n):
                w.add(f"x/{i:05d}", (BASE[name] + i).to_bytes(8, "little") + bytes(504),
                      label=i % 3)
        paths.append(str(path))
    return paths


def mix(volumes, batch=100, **kw):
    kw.setdefault("weights", [0.7, 0.3])
    kw.setdefault("seed", 1)
    return dlfs.Loader(volumes, batch, cache_budget=0, **kw)


def epoch(loader, e=0, stop=None):
    """[(source, index)] read, checking each sample's bytes against its source."""
    loader.set_epoch(e)
    got = []
    for step, b in enumerate(loader):
        for s, i, sample in zip(b.sources.tolist(), b.indices.tolist(), b.samples):
            value = int.from_bytes(bytes(sample[:8]), "little")
            assert value == BASE["ab"[s]] + i, (s, i, value)
            got.append((s, i))
        if step + 1 == stop:
            break
    return got


def test_shares_determinism_and_each_sample_once(volumes):
    m = mix(volumes)
    assert len(m) == math.ceil(2666 / 100)  # 800 / 0.3: as long as b lasts
    first = epoch(m)
    assert first == epoch(mix(volumes))  # a pure function of (seed, epoch)
    assert first != epoch(m, 1) and first != epoch(mix(volumes, seed=2))
    sources = [s for s, _ in first]
    assert (sources.count(0), sources.count(1)) == (1866, 800)
    for s in (0, 1):
        picked = [i for src, i in first if src == s]
        assert len(picked) == len(set(picked))  # no sample twice in an epoch
    # Every window of 1,000 positions: the share within binomial tolerance.
    sd = math.sqrt(1000 * 0.3 * 0.7)
    for start in range(0, len(sources) - 1000, 250):
        assert abs(sum(sources[start:start + 1000]) - 300) < 4 * sd


def test_ranks_split_the_epoch(volumes):
    whole = epoch(mix(volumes))
    parts = [epoch(mix(volumes, rank=r, world_size=3)) for r in range(3)]
    assert set(p for part in parts for p in part) == set(whole)
    assert sum(len(p) for p in parts) - len(whole) < 3  # padding


def test_resume_equals_the_uninterrupted_run_and_elastic_resume(volumes):
    whole = epoch(mix(volumes), 2)
    m = mix(volumes)
    head = epoch(m, 2, stop=9)
    state = json.loads(json.dumps(m.state_dict()))
    r = mix(volumes)
    r.load_state_dict(state)
    assert head + epoch(r, 2) == whole
    # Two ranks stop after 5 batches; three ranks read the rest.
    first, saved = [], None
    for rank in range(2):
        loader = mix(volumes, rank=rank, world_size=2)
        first += epoch(loader, 2, stop=5)
        saved = saved or loader.state_dict()
    rest = []
    for rank in range(3):
        loader = mix(volumes, 64, rank=rank, world_size=3)
        loader.load_state_dict(saved)
        rest += epoch(loader, 2)
    assert set(first + rest) == set(whole)
    assert len(first + rest) - len(whole) < 3


def test_cycle_and_epoch_samples(volumes):
    with pytest.raises(ValueError, match="b.dlfs has 800 samples, fewer than its share 1500") as e:
        mix(volumes, weights=[1, 1], epoch_samples=3000)
    # In Python's words (issue 41: it said "let it cycle").
    assert "pass cycle=True to let it start over, or ask for fewer samples per epoch " \
        "(epoch_samples)" in str(e.value)
    m = mix(volumes, weights=[1, 1], epoch_samples=3000, cycle=True)
    got = epoch(m)
    b = [i for s, i in got if s == 1]
    assert len(b) == 1500 and set(b) == set(range(800))  # b went round about twice


def test_cli_says_its_flags(volumes, run):
    err = run("bench", *volumes, "--weights", "1,1", "--epoch-samples", 3000,
              check=2).stderr.decode()
    assert "use --cycle to let it start over, or ask for fewer samples per epoch " \
        "(--epoch-samples)" in err, err


def test_bad_weights_and_foreign_states_are_refused(volumes):
    for weights, expect in [([0.5, -1], "is not a finite number >= 0"),
                            ([0, 0], "weights are all 0"),
                            ([1], "needs as many weights, not 1"),
                            ([1, float("nan")], "not a finite number")]:
        with pytest.raises(ValueError, match=expect):
            mix(volumes, weights=weights)
    with pytest.raises(ValueError, match="apply to a list of volumes"):
        dlfs.Loader(volumes[0], 10, weights=[1])
    m = mix(volumes)
    epoch(m, 0, stop=2)
    state = m.state_dict()
    for other in (mix(volumes, weights=[0.6, 0.4]), mix(volumes[::-1]),
                  dlfs.Loader(volumes[0], 100)):
        with pytest.raises(ValueError, match="cannot resume from this state: it was saved "
                                             "with volume mixture"):
            other.load_state_dict(state)


def test_loader_dataset_reads_a_mixture_across_workers_and_resumes(volumes):
    torch = pytest.importorskip("torch")
    import dlfs.torch as dt

    def values(x):
        a = x.numpy()
        return a[:, :8].copy().view("<u8")[:, 0].tolist()

    def make():
        return dt.LoaderDataset(volumes, 50, seed=3, weights=[0.7, 0.3], cache_budget=0)

    whole = [v for x, _ in torch.utils.data.DataLoader(make(), batch_size=None, num_workers=2)
             for v in values(x)]
    assert len(whole) == len(set(whole)) == 2666  # two workers, 1,333 samples each
    assert sum(v >= BASE["b"] for v in whole) == 800
    ds = make()
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    head = []
    for step, (x, _) in enumerate(dl):
        head += values(x)
        if step == 6:
            state = ds.state_dict(batches=step + 1)
            break
    again = make()
    again.load_state_dict(state)
    rest = [v for x, _ in torch.utils.data.DataLoader(again, batch_size=None, num_workers=2)
            for v in values(x)]
    assert head + rest == whole


def test_image_loader_decodes_a_mixture(tmp_path):
    pytest.importorskip("torch")
    import dlfs.torch as dt

    paths = []
    for name, n, value in (("x", 60, 10), ("y", 30, 200)):
        paths.append(str(flat_png_volume(tmp_path / f"{name}.dlfs", n, value)))
    loader = dt.ImageLoader(paths, 16, size=8, weights=[2, 1], return_indices=True,
                            return_sources=True, decode_threads=1, cache_budget=0)
    loader.set_epoch(0)
    seen = []
    for images, labels, indices, sources in loader:
        for img, s in zip(images, sources.tolist()):
            assert int(img.flatten()[0]) == (10, 200)[s]  # decoded from its own volume
        seen += list(zip(sources.tolist(), indices.tolist()))
    assert len(seen) == len(set(seen)) == 90
    state = loader.state_dict()
    assert "mixture[" in state["volume_uuid"]
