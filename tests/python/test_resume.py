"""Resuming mid-epoch: dlfs.Loader and dlfs.torch.LoaderDataset state_dict /
load_state_dict. Each run is a fresh process: one is interrupted after batch k
and saves its state, a new one restores it; together they must be the epoch,
each sample once, in the order of an uninterrupted run."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

dlfs = pytest.importorskip("dlfs", reason="Python module not built")

N = 250  # samples; sample i holds i as 8 little-endian bytes, then zeros to 8 KiB


@pytest.fixture(scope="module")
def numbered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resume")
    root = tmp / "tree"
    for i in range(N):
        p = root / f"c{i % 3}" / f"{i:04d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(i.to_bytes(8, "little") + bytes(8184))
    dlfs.pack(str(root), str(tmp / "v.dlfs"), all_files=True)
    dlfs.pack(str(root), str(tmp / "w.dlfs"), all_files=True)  # the same samples, another volume
    return str(tmp / "v.dlfs"), str(tmp / "w.dlfs")


# Runs scenarios in a fresh interpreter: argv[1] is a JSON list of what to
# build and do; prints a JSON list of results ({"epochs": [[values of each
# batch...] per epoch], ...}, or {"error": traceback}).
SCRIPT = textwrap.dedent("""
    import json, sys, traceback
    import numpy as np
    import dlfs

    def values(samples):
        a = np.asarray(samples)
        return a.reshape(a.shape[0], -1)[:, :8].copy().view("<u8")[:, 0].tolist()

    def make(a):
        if a["kind"] == "loader":
            src = dlfs.Loader(a["path"], a["batch_size"], **a["options"])
            def batches():
                for b in src:
                    yield values(b.stack())
            return src, batches
        import torch.utils.data as tud
        import dlfs.torch as dt
        src = dt.LoaderDataset(a["path"], a["batch_size"], **a["options"])
        dl = tud.DataLoader(src, batch_size=None, num_workers=a["workers"],
                            persistent_workers=a.get("persistent", False))
        def batches():
            for x, _ in dl:
                yield values(x.numpy())
        return src, batches

    def scenario(a):
        out = {"epochs": []}
        if a["mode"] == "first":
            # The reference: an uninterrupted run.
            ref, batches = make(a)
            out["full"] = []
            for e in a["full_epochs"]:
                ref.set_epoch(e)
                out["full"].append(list(batches()))
            out["full_io_bytes"] = ref.stats()["io_bytes"] if a["kind"] == "loader" else 0
            del ref, batches
        src, batches = make(a)
        if a["mode"] == "rest":
            with open(a["state"]) as f:
                src.load_state_dict(json.load(f))
        for e in a["epochs"]:
            src.set_epoch(e)
            got = []
            it = iter(()) if a["mode"] == "first" and a["k"] == 0 else batches()
            for step, b in enumerate(it):
                got.append(b)
                if a["mode"] == "rest" and e == a["epochs"][0] and a["kind"] == "dataset":
                    # The position counts the batches before the restore too.
                    st = src.state_dict(batches=step + 1)
                    assert st["batches"] == a["k"] + step + 1, (st, step)
                if a["mode"] == "first" and len(got) == a["k"]:
                    break
            if hasattr(it, "close"):
                it.close()  # stops the DataLoader's workers
            out["epochs"].append(got)
            if a["mode"] == "first":
                st = src.state_dict(**({"batches": a["k"]} if a.get("pass_batches") else {}))
                with open(a["state"], "w") as f:
                    json.dump(st, f)
                out["state"] = st
                break
        if a["kind"] == "loader":
            out["io_bytes"] = src.stats()["io_bytes"]
        return out

    results = []
    for a in json.loads(sys.argv[1]):
        try:
            results.append(scenario(a))
        except Exception:
            results.append({"error": traceback.format_exc()})
    print(json.dumps(results))
""")

# The scenarios: name -> (k, arguments). Each is interrupted after batch k of
# epoch 3 and resumed over epochs 3 and 4.
LOADER = dict(kind="loader", batch_size=16, options=dict(seed=5, cache_budget=0))
DATASET = dict(kind="dataset", batch_size=8, options=dict(seed=9, cache_budget=0))
SCENARIOS = {
    "loader-7": (7, LOADER),
    "loader-all": (16, LOADER),  # every batch of the epoch
    # num_workers 0 (the dataset counts the batches itself, or is told), 2, 2
    # persistent; k odd and even (with 2 workers the DataLoader's turn is then
    # worker 1's or worker 0's).
    "dataset-0-counted": (3, dict(DATASET, workers=0)),
    "dataset-0-told": (4, dict(DATASET, workers=0, pass_batches=True)),
    "dataset-2": (3, dict(DATASET, workers=2, pass_batches=True)),
    "dataset-2-persistent": (4, dict(DATASET, workers=2, persistent=True, pass_batches=True)),
    "dataset-rank": (5, dict(DATASET, workers=2, pass_batches=True,
                             options=dict(seed=1, rank=1, world_size=2))),
    # Volume order, small read-ahead, to count what the resumed run reads.
    "loader-io": (20, dict(kind="loader", batch_size=10, options=dict(
        shuffle=False, cache_budget=0, prefetch_batches=1, direct_io=False))),
}


def run(scenarios):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(scenarios)],
                          capture_output=True, text=True, timeout=600, env=os.environ)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def resumed(numbered, tmp_path_factory):
    """name -> (first run, resumed run): all scenarios' first runs in one new
    process, then all resumed runs in another."""
    path, _ = numbered
    tmp = tmp_path_factory.mktemp("states")
    names = list(SCENARIOS)
    args = [dict(a, path=path, k=k, state=str(tmp / f"{n}.json"))
            for n, (k, a) in SCENARIOS.items()]
    first = run([dict(a, mode="first", epochs=[3], full_epochs=[3, 4]) for a in args])
    rest = run([dict(a, mode="rest", epochs=[3, 4]) for a in args])
    return {n: (f, r) for n, f, r in zip(names, first, rest)}


def flat(batches):
    return [v for b in batches for v in b]


def check_resume(resumed, name):
    """The first run's k batches and the resumed run's rest are the
    uninterrupted epoch, batch by batch; the next epoch is whole."""
    first, rest = resumed[name]
    assert "error" not in first, first["error"]
    assert "error" not in rest, rest["error"]
    full = first["full"]
    k = SCENARIOS[name][0]
    assert len(first["epochs"][0]) == k
    assert first["epochs"][0] + rest["epochs"][0] == full[0]
    assert rest["epochs"][1] == full[1]
    return first, rest, flat(full[0])


@pytest.mark.parametrize("name", ["loader-7", "loader-all"])
def test_loader_resumes_in_a_new_process(resumed, name):
    first, rest, values = check_resume(resumed, name)
    assert sorted(values) == list(range(N))  # each sample once
    assert (first["state"]["epoch"], first["state"]["batches"]) == (3, SCENARIOS[name][0])


def test_loader_does_not_read_the_skipped_batches(resumed, numbered):
    first, rest, _ = check_resume(resumed, "loader-io")
    # The uninterrupted run read epochs 3 and 4 whole; the resumed one the
    # last fifth of epoch 3 and all of epoch 4: 1.2 epochs, not 2.
    assert first["full_io_bytes"] >= 2 * dlfs.Volume(numbered[0]).info()["bytes"]
    assert rest["io_bytes"] < first["full_io_bytes"] * 0.75, (rest["io_bytes"], first)


@pytest.mark.parametrize("name", ["dataset-0-counted", "dataset-0-told", "dataset-2",
                                  "dataset-2-persistent"])
def test_loader_dataset_resumes_across_workers(resumed, name):
    first, rest, values = check_resume(resumed, name)
    shards = max(SCENARIOS[name][1]["workers"], 1)
    assert len(values) == -(-N // shards) * shards  # padded to a multiple of the shards
    assert set(values) == set(range(N))
    st = first["state"]
    assert (st["epoch"], st["batches"], st["num_workers"]) == (3, SCENARIOS[name][0], shards)


def test_loader_dataset_resumes_a_rank(resumed):
    _, _, values = check_resume(resumed, "dataset-rank")
    assert len(values) == len(set(values)) > N // 2 - 8


def test_loader_refuses_a_state_of_other_options(numbered):
    path, other = numbered
    a = dlfs.Loader(path, 16, seed=5, cache_budget=0)
    a.set_epoch(2)
    it = iter(a)
    next(it), next(it)
    st = a.state_dict()
    assert (st["epoch"], st["batches"], st["seed"]) == (2, 2, 5)
    # (Another world size or batch size is an elastic resume: see below.)
    cases = [(dlfs.Loader(path, 16, seed=6), "seed 5, this loader has seed 6"),
             (dlfs.Loader(path, 16, seed=5, drop_last=True),
              "drop_last off, this loader has drop_last on"),
             (dlfs.Loader(path, 16, seed=5, shuffle=False), "shuffle on, this loader has shuffle off"),
             (dlfs.Loader(other, 16, seed=5), "it was saved with volume"),
             (dlfs.Loader(path, 16, seed=5, indices=list(range(0, N, 2))),
              "sample count 250, this loader has sample count 125")]
    for loader, expect in cases:
        with pytest.raises(ValueError, match="cannot resume") as e:
            loader.load_state_dict(st)
        assert expect in str(e.value)
        assert next(iter(loader)).sequence == 0  # left as it was
    b = dlfs.Loader(path, 16, seed=5)
    with pytest.raises(ValueError, match="'seed' is missing"):
        b.load_state_dict({k: v for k, v in st.items() if k != "seed"})
    with pytest.raises(ValueError, match="unknown key 'num_workers'"):
        b.load_state_dict(dict(st, num_workers=2))
    with pytest.raises(ValueError, match="must be an int"):
        b.load_state_dict(dict(st, epoch=1.5))
    with pytest.raises(ValueError, match="'segments' has a bad value"):
        b.load_state_dict(dict(st, segments="world_size=0,workers=1,batch_size=8,batches=1"))
    with pytest.raises(ValueError, match="batches were handed out of its 16"):
        b.load_state_dict(dict(st, segments="world_size=1,workers=1,batch_size=16,batches=17"))
    with pytest.raises(TypeError):
        b.load_state_dict([1, 2])
    # set_epoch to the restored epoch keeps the position; another raises
    # (test_set_epoch_after_a_mid_epoch_restore), or drops it when told to.
    b.load_state_dict(st)
    b.set_epoch(2)
    assert next(iter(b)).sequence == 2
    b.load_state_dict(st)
    b.set_epoch(3, discard_restored=True)
    assert next(iter(b)).sequence == 0
    assert b.state_dict()["epoch"] == 3
    # An epoch set again after iterating it starts afresh, as state_dict says.
    b.set_epoch(3)
    assert (b.state_dict()["epoch"], b.state_dict()["batches"]) == (3, 0)
    assert next(iter(b)).sequence == 0


def test_loader_dataset_refuses_a_state_of_other_options(numbered):
    torch = pytest.importorskip("torch")
    import dlfs.torch as dt

    path, other = numbered
    ds = dt.LoaderDataset(path, 8, seed=9)
    ds.set_epoch(1)
    it = iter(ds)
    for _ in range(3):
        next(it)
    st = ds.state_dict()
    assert (st["epoch"], st["batches"], st["num_workers"]) == (1, 3, 1)
    for bad, expect in [(dt.LoaderDataset(path, 8, seed=10), "seed 9"),
                        (dt.LoaderDataset(path, 8, seed=9, drop_last=True), "drop_last False"),
                        (dt.LoaderDataset(other, 8, seed=9), "volume_uuid"),
                        (dt.LoaderDataset(path, 8, seed=9, root="c1"), "samples 250")]:
        with pytest.raises(ValueError, match="cannot resume") as e:
            bad.load_state_dict(st)
        assert expect in str(e.value)
    with pytest.raises(ValueError, match="not a LoaderDataset state"):
        ds.load_state_dict(dlfs.Loader(path, 8, seed=9).state_dict())
    with pytest.raises(ValueError, match="epoch of 32"):
        ds.load_state_dict(dict(st, batches=33))
    with pytest.raises(ValueError, match="malformed segments"):
        ds.load_state_dict(dict(st, segments="world_size=2"))
    with pytest.raises(ValueError, match="world_size or batch_size below 1"):
        ds.load_state_dict(dict(st, world_size=0))
    # With workers, the position must be given: they read ahead.
    ds2 = dt.LoaderDataset(path, 8, seed=9)
    next(iter(torch.utils.data.DataLoader(ds2, batch_size=None, num_workers=2)))
    with pytest.raises(ValueError, match="pass batches="):
        ds2.state_dict()
    assert ds2.state_dict(batches=1)["num_workers"] == 2


def test_a_state_of_the_old_order_resumes_at_epoch_boundaries_only(numbered):
    """States saved before the epoch order had versions (no "order": order 1,
    Fisher-Yates) resume at an epoch boundary; mid-epoch they are refused,
    saying how to resume instead."""
    pytest.importorskip("torch")
    import dlfs.torch as dt

    path, _ = numbered
    a = dlfs.Loader(path, 16, seed=5, cache_budget=0)
    a.set_epoch(2)
    it = iter(a)
    next(it), next(it)
    st = a.state_dict()
    assert st["order"] == dlfs._dlfs.ORDER_VERSION == 2
    old = {k: v for k, v in st.items() if k != "order"}
    with pytest.raises(ValueError, match=r"in the middle of epoch 2 \(2 batches handed out\) "
                                         r"with epoch order 1 \(Fisher-Yates") as e:
        dlfs.Loader(path, 16, seed=5).load_state_dict(old)
    assert "with epoch 3 and batches 0 it goes on with the next epoch" in str(e.value)
    with pytest.raises(ValueError, match="epoch order 1"):
        dlfs.Loader(path, 16, seed=5).load_state_dict(dict(old, order=1))
    for boundary in (dict(old, batches=0), dict(old, epoch=3, batches=0),
                     dict(old, batches=len(a))):
        b = dlfs.Loader(path, 16, seed=5)
        b.load_state_dict(boundary)
        assert b.state_dict()["epoch"] == boundary["epoch"]
    b = dlfs.Loader(path, 16, seed=5)
    b.load_state_dict(dict(old, batches=0))
    b.set_epoch(2)
    assert [x.sequence for x in b] == list(range(len(a)))

    ds = dt.LoaderDataset(path, 8, seed=9)
    ds.set_epoch(1)
    it = iter(ds)
    for _ in range(3):
        next(it)
    st = ds.state_dict()
    assert st["order"] == 2
    old = {k: v for k, v in st.items() if k != "order"}
    with pytest.raises(ValueError, match="middle of epoch 1 .* epoch order 1"):
        dt.LoaderDataset(path, 8, seed=9).load_state_dict(old)
    with pytest.raises(ValueError, match="after earlier parts"):
        dt.LoaderDataset(path, 8, seed=9).load_state_dict(
            dict(old, batches=0, segments="world_size=2,workers=1,batch_size=8,batches=3"))
    fresh = dt.LoaderDataset(path, 8, seed=9)
    fresh.load_state_dict(dict(old, batches=0))
    assert sum(1 for _ in fresh) == len(fresh)
    dt.LoaderDataset(path, 8, seed=9).load_state_dict(dict(old, batches=len(ds)))


def test_a_loader_destroyed_in_a_forked_child(numbered):
    """A Loader garbage-collected in a child of fork() (a DataLoader worker
    inherits the parent's objects) leaves the parent's threads and locks
    alone: no hang, no abort."""
    script = textwrap.dedent("""
        import os, sys, dlfs
        for budget in (0, None):  # reading from the device, and with the node cache
            loader = dlfs.Loader(sys.argv[1], 16, cache_budget=budget)
            next(iter(loader))  # the I/O threads run, waiting for work
            pid = os.fork()
            if pid == 0:
                del loader
                os._exit(0)
            _, status = os.waitpid(pid, 0)
            assert status == 0, status
    """)
    proc = subprocess.run([sys.executable, "-c", script, numbered[0]], capture_output=True,
                          text=True, timeout=120, env=os.environ)
    assert proc.returncode == 0, proc.stderr


# --- Elastic resume: a job of W ranks stops after k batches; rank 0's state
# resumes on W' ranks (and other DataLoader workers or batch size).

def _values(samples):
    import numpy as np
    a = np.asarray(samples)
    return a.reshape(a.shape[0], -1)[:, :8].copy().view("<u8")[:, 0].tolist()


def _read(make, world, k=None, state=None, epoch=3, discard_restored=False):
    """Every rank of a job of `world`: its loader (make(rank, world)) loads
    `state` if given and reads `epoch`, stopping after k batches; returns the
    sample values read and rank 0's state."""
    read, saved = [], None
    for r in range(world):
        src, batches = make(r, world)
        if state is not None:
            src.load_state_dict(state)
        if discard_restored:
            src.set_epoch(epoch, discard_restored=True)
        else:
            src.set_epoch(epoch)
        taken = 0
        for b in batches(src):
            read += b
            taken += 1
            if taken == k:
                break
        if r == 0:
            saved = src.state_dict(batches=taken) if hasattr(src, "_position") else \
                src.state_dict()
    return read, saved


def _check_epoch(read, new_shards, new_batch, drop_last):
    """Every sample once (padding aside; drop_last: at most once, fewer than
    a batch per new shard left out)."""
    distinct = set(read)
    if drop_last:
        assert len(read) == len(distinct)
        assert N - len(distinct) < new_shards * new_batch
    else:
        assert distinct == set(range(N))
        assert len(read) - N < 2 * new_shards + 4  # the two parts' padding


def _loader(path, batch, **kw):
    def make(rank, world):
        src = dlfs.Loader(path, batch, rank=rank, world_size=world, cache_budget=0, **kw)
        return src, lambda s: (_values(b.stack()) for b in s)
    return make


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("world,new_world,new_batch", [(3, 2, 16), (3, 4, 16), (3, 6, 8),
                                                       (2, 3, 5)])
def test_loader_resumes_on_another_number_of_ranks(numbered, world, new_world, new_batch,
                                                   shuffle, drop_last):
    path, _ = numbered
    opts = dict(seed=4, shuffle=shuffle, drop_last=drop_last)
    first, state = _read(_loader(path, 16, **opts), world, k=2)
    assert state["batches"] == 2 and state["segments"] == ""
    rest, again = _read(_loader(path, new_batch, **opts), new_world, state=state)
    _check_epoch(first + rest, new_world, new_batch, drop_last)
    assert again["segments"] == f"world_size={world},workers=1,batch_size=16,batches=2"
    # The next epoch is what a fresh job of the new shape reads (the rest of
    # epoch 3 left unread, as said: set_epoch(4) alone refuses to drop it).
    nxt, _ = _read(_loader(path, new_batch, **opts), new_world, state=state, epoch=4,
                   discard_restored=True)
    fresh, _ = _read(_loader(path, new_batch, **opts), new_world, epoch=4)
    assert nxt == fresh


def test_loader_chained_elastic_resumes_and_json(numbered):
    path, _ = numbered
    first, s1 = _read(_loader(path, 16, seed=8), 2, k=3)
    second, s2 = _read(_loader(path, 10, seed=8), 3, k=2, state=json.loads(json.dumps(s1)))
    assert s2["segments"].count("world_size") == 1 and s2["batches"] == 2
    third, _ = _read(_loader(path, 7, seed=8), 5, state=json.loads(json.dumps(s2)))
    _check_epoch(first + second + third, 5, 7, False)


def _dataset(path, batch, workers, **kw):
    import torch.utils.data as tud
    import dlfs.torch as dt

    def make(rank, world):
        ds = dt.LoaderDataset(path, batch, rank=rank, world_size=world, cache_budget=0, **kw)
        dl = tud.DataLoader(ds, batch_size=None, num_workers=workers)
        return ds, lambda s: (_values(x.numpy()) for x, _ in dl)
    return make


@pytest.mark.parametrize("old,new", [((2, 2, 8), (3, 0, 8)), ((2, 0, 8), (1, 2, 16)),
                                     ((1, 2, 8), (2, 1, 8))])
def test_loader_dataset_resumes_with_other_ranks_and_workers(numbered, old, new):
    pytest.importorskip("torch")
    path, _ = numbered
    (w0, k0, b0), (w1, k1, b1) = old, new
    first, state = _read(_dataset(path, b0, k0, seed=2), w0, k=3)
    assert state["batches"] == 3 and state["num_workers"] == max(k0, 1)
    rest, _ = _read(_dataset(path, b1, k1, seed=2), w1, state=state)
    _check_epoch(first + rest, w1 * max(k1, 1), b1, False)


def test_image_loader_state_resumes_elastically(tmp_path):
    pytest.importorskip("torch")
    import dlfs.torch as dt

    root = tmp_path / "raw"
    for i in range(N):
        p = root / f"c{i % 2}" / f"{i:04d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(bytes([i % 256]) * 64)
    path = str(tmp_path / "img.dlfs")
    dlfs.pack(str(root), path, all_files=True)

    def make(batch):
        def m(rank, world):
            src = dt.ImageLoader(path, batch, size=8, format="raw", raw_shape=(8, 8), seed=3,
                                 rank=rank, world_size=world, return_indices=True,
                                 cache_budget=0, decode_threads=1)
            return src, lambda s: (idx.tolist() for _, _, idx in s)
        return m

    first, state = _read(make(16), 2, k=3)
    assert state["batches"] == 3 and state["epoch"] == 3
    rest, _ = _read(make(12), 3, state=state)
    _check_epoch(first + rest, 3, 12, False)
    # The same shape continues the same order.
    src, it = make(16)(0, 2)
    src.set_epoch(3)
    whole = [i for b in it(src) for i in b]
    again, _ = _read(lambda r, w: make(16)(0, 2), 1, state=state)
    assert whole[3 * 16:] == again


@pytest.mark.parametrize("kind", ["loader", "mixture", "image", "dataset"])
def test_set_epoch_after_a_mid_epoch_restore_never_drops_it_silently(numbered, tmp_path, kind):
    """Issue 49: a state taken mid-epoch 5, loaded, then set_epoch(6) (the
    `start = ckpt_epoch + 1` loop) or set_epoch(4) raised nothing and dropped
    the rest of epoch 5. Now it raises naming epoch 5 and the calls that
    finish or drop it, for every loader with load_state_dict."""
    pytest.importorskip("torch")
    import dlfs.torch as dt

    path, _ = numbered
    if kind == "image":
        root = tmp_path / "raw"
        for i in range(64):
            p = root / f"c{i % 2}" / f"{i:04d}.bin"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(bytes([i % 256]) * 64)
        path = str(tmp_path / "img.dlfs")
        dlfs.pack(str(root), path, all_files=True)

    def make():
        if kind == "loader":
            return dlfs.Loader(path, 16, seed=1, cache_budget=0)
        if kind == "mixture":
            return dlfs.Loader([path, path], 16, seed=1, cache_budget=0)
        if kind == "image":
            return dt.ImageLoader(path, 8, size=8, format="raw", raw_shape=(8, 8), seed=1,
                                  cache_budget=0, decode_threads=1)
        return dt.LoaderDataset(path, 16, seed=1, cache_budget=0)

    def batches(loader):
        return sum(1 for _ in loader)

    first = make()
    first.set_epoch(5)
    whole = batches(first)
    first.set_epoch(5)
    it = iter(first)
    next(it), next(it)
    state = first.state_dict() if kind != "dataset" else first.state_dict(batches=2)
    assert (state["epoch"], state["batches"]) == (5, 2)

    for other in (6, 4):
        loader = make()
        loader.load_state_dict(state)
        with pytest.raises(ValueError) as e:
            loader.set_epoch(other)
        message = str(e.value)
        assert "middle of epoch 5" in message and "2 of" in message, message
        assert "set_epoch(5)" in message, message
        assert f"set_epoch({other}, discard_restored=True)" in message, message
        # Refused, nothing changed: the restored epoch still goes on.
        assert batches(loader) == whole - 2
        loader.set_epoch(other)  # iterated since: nothing left to drop
    # The documented loop finishes epoch 5, then goes on.
    loader = make()
    loader.load_state_dict(state)
    counts = []
    for epoch in range(state["epoch"], 7):
        loader.set_epoch(epoch)
        counts.append(batches(loader))
    assert counts == [whole - 2, whole]
    # Dropping it, when said.
    loader = make()
    loader.load_state_dict(state)
    loader.set_epoch(6, discard_restored=True)
    assert batches(loader) == whole
    # A state taken at the end of its epoch has nothing to drop.
    first.set_epoch(5)
    assert batches(first) == whole
    end = first.state_dict() if kind != "dataset" else first.state_dict(batches=whole)
    loader = make()
    loader.load_state_dict(end)
    loader.set_epoch(6)
    assert batches(loader) == whole
