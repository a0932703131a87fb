"""The node cache across processes: two processes share one region and the
second reads nothing from the device; a filler killed with SIGKILL leaves the
other process correct and the cache directory clean once both are gone; no
shared memory means a warning and an uncached loader; a real memory cgroup
sizes the default budget; LoaderDataset hands torch writable arrays. And the
cache model (bench/cache/cache_model.py): MIN on hand-made traces, and dlfs's
keep-what-fits policy equal to MIN on shuffled epochs."""
import importlib.util
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from testutil import epochs_until, simulate_compute, wait_until

REPO = pathlib.Path(__file__).resolve().parents[2]


def _load_model():
    path = REPO / "bench" / "cache" / "cache_model.py"
    spec = importlib.util.spec_from_file_location("cache_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


model = _load_model()


def test_min_on_hand_made_traces():
    # a b c a b c with room for 2: MIN keeps a and b (c is never reused
    # before them): 2 hits; LRU thrashes: 0; keep-what-fits keeps a, b: 2.
    trace = list("abcabc")
    assert model.min_hits(trace, 2) == (2, 2)
    assert model.lru_hits(trace, 2) == (0, 0)
    assert model.first_fit_hits(trace, 2) == (2, 2)
    # a b a c a b with room for 1: MIN keeps a through (hits at 2 and 4).
    assert model.min_hits(list("abacab"), 1)[0] == 2
    # Reuse of the most recent item: LRU and MIN both hit.
    assert model.min_hits(list("aaab"), 1)[0] == 2
    assert model.lru_hits(list("aaab"), 1)[0] == 2
    # Sizes: one large item does not fit, two small ones do.
    sizes = {"L": 3, "s": 1, "t": 1}
    assert model.min_hits(list("Lstst"), 2, sizes.get) == (2, 2)


@pytest.mark.parametrize("share", [0.25, 0.5, 0.75])
def test_keep_what_fits_equals_min_on_shuffled_epochs(share):
    n = 600
    trace = model.shuffled_epochs(n, 4, seed=3)
    c = int(n * share)
    best = model.min_hits(trace, c)[0]
    ours = model.first_fit_hits(trace, c)[0]
    assert ours == c * 3  # every cached sample hits once per later epoch
    assert best == ours  # and no policy does better
    assert model.lru_hits(trace, c)[0] < ours


dlfs = pytest.importorskip("dlfs", reason="Python module not built")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "shm"
    d.mkdir()
    monkeypatch.setenv("DLFS_CACHE_DIR", str(d))
    return d


@pytest.fixture(scope="module")
def volume(tmp_path_factory):
    path = tmp_path_factory.mktemp("vol") / "v.dlfs"
    with dlfs.Writer(path) as w:
        for i in range(400):
            w.add(f"c{i % 3}/{i:04d}", os.urandom(2000 + (i * 37) % 3000), label=i % 3)
    return str(path)


def _fill(loader, volume_bytes):
    def epoch(e):
        loader.set_epoch(1001 + e)
        for _ in loader:
            simulate_compute()  # as training does: the filler runs freely

    epochs_until(lambda: loader.stats()["cache_used_bytes"] >= volume_bytes, epoch,
                 what=f"filled: {loader.stats()}")


def _check_epoch(loader, vol, epoch):
    loader.set_epoch(epoch)
    seen = 0
    for batch in loader:
        for k, i in enumerate(batch.indices.tolist()):
            assert bytes(batch[k]) == vol.read(i)
            seen += 1
    assert seen == len(vol)


# A second process: fills (or reads) the cache, says so on stdout ("ready"),
# then waits for a line on stdin; or ("spin") reads on until killed, saying
# "spinning" in the middle of its first epoch after "ready".
HOLDER = textwrap.dedent("""
    import sys, dlfs
    from testutil import epochs_until, simulate_compute
    vol = dlfs.Volume(sys.argv[1])
    loader = dlfs.Loader(vol, 16, cache_budget=1 << 30)
    want = vol.info()["bytes"] if sys.argv[2] == "fill" else 0
    read = []  # the epochs read

    def epoch(e):
        loader.set_epoch(e)
        for _ in loader:
            simulate_compute()  # the filler runs freely
        read.append(e)

    # One epoch at least, and on until the cache holds `want` bytes.
    epochs_until(lambda: read and loader.stats()["cache_used_bytes"] >= want, epoch,
                 what="the cache filled")
    print("ready", flush=True)
    if sys.argv[2] == "spin":
        e = len(read)
        while True:
            loader.set_epoch(e)
            for k, _ in enumerate(loader):
                if e == len(read) and k == 1:
                    print("spinning", flush=True)
            e += 1
    sys.stdin.readline()
""")


def _start(volume, mode):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, volume, mode], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.strip() == "ready", line
    return proc


def test_two_processes_share_one_region(volume, cache_dir):
    holder = _start(volume, "fill")
    try:
        with dlfs.Volume(volume) as vol:
            loader = dlfs.Loader(vol, 16, cache_budget=1 << 30)
            before = loader.stats()
            _check_epoch(loader, vol, 5)
            after = loader.stats()
            assert after["io_bytes"] == before["io_bytes"]  # nothing from the device
            assert after["cache_hits"] - before["cache_hits"] >= len(vol)
            assert after["cache_sharers"] == 2
            assert len(list(cache_dir.iterdir())) == 1
            holder.stdin.write("bye\n")
            holder.stdin.flush()
            assert holder.wait(30) == 0
            assert len(list(cache_dir.iterdir())) == 1  # still ours
            del loader
        assert list(cache_dir.iterdir()) == []  # the last user removed it
    finally:
        holder.kill()


def test_killed_filler_leaves_others_correct_and_no_region_behind(volume, cache_dir):
    filler = _start(volume, "spin")
    try:
        line = filler.stdout.readline()  # the event: it is in the middle of an epoch
        assert line.strip() == "spinning", line
        with dlfs.Volume(volume) as vol:
            loader = dlfs.Loader(vol, 16, cache_budget=1 << 30)
            filler.send_signal(signal.SIGKILL)
            filler.wait(30)
            for epoch in range(3):
                _check_epoch(loader, vol, epoch)  # every byte checked against read()
            del loader
        assert list(cache_dir.iterdir()) == []
    finally:
        filler.kill()


def test_stale_region_of_a_killed_job_is_reclaimed(volume, cache_dir):
    filler = _start(volume, "spin")
    filler.send_signal(signal.SIGKILL)
    filler.wait(30)
    assert len(list(cache_dir.iterdir())) == 1  # left behind: nobody could remove it
    with dlfs.Volume(volume) as vol:
        loader = dlfs.Loader(vol, 16, cache_budget=1 << 30)
        _check_epoch(loader, vol, 0)
        del loader
    assert list(cache_dir.iterdir()) == []


def test_no_shared_memory_is_a_warning_not_an_error(volume, tmp_path, monkeypatch):
    monkeypatch.setenv("DLFS_CACHE_DIR", str(tmp_path / "missing"))
    with dlfs.Volume(volume) as vol:
        with pytest.warns(RuntimeWarning, match="cannot create"):
            loader = dlfs.Loader(vol, 16, cache_budget=1 << 30)
        assert loader.stats()["cache_bytes"] == 0
        _check_epoch(loader, vol, 0)


def test_loader_dataset_hands_torch_writable_samples(volume, cache_dir):
    torch = pytest.importorskip("torch")
    import dlfs.torch  # noqa: F401
    with dlfs.Volume(volume) as vol:
        size = vol.info()["bytes"]
        holder = dlfs.Loader(vol, 16, cache_budget=1 << 30)
        _fill(holder, size)
    ds = dlfs.torch.LoaderDataset(volume, 16, stack=False, cache_budget=1 << 30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's "not writable" warning fails the test
        n = 0
        for samples, _ in torch.utils.data.DataLoader(ds, batch_size=None):
            for s in samples:
                s[0] = s[0]  # writable
                n += 1
    assert n == 400
    del holder


def _cgroup_v1_writable():
    root = pathlib.Path("/sys/fs/cgroup/memory")
    return os.geteuid() == 0 and (root / "cgroup.procs").exists() and os.access(root, os.W_OK)


@pytest.mark.skipif(not _cgroup_v1_writable(), reason="needs root and a writable cgroup v1 "
                    "memory controller")
def test_memory_cgroup_sizes_the_default_budget(volume, cache_dir, dlfs_bin):
    import json
    group = pathlib.Path(f"/sys/fs/cgroup/memory/dlfs-test-{os.getpid()}")
    group.mkdir()
    try:
        limit = 96 << 20
        (group / "memory.limit_in_bytes").write_text(str(limit))
        script = f'echo $$ > {group}/cgroup.procs && exec "$@"'
        proc = subprocess.run(["sh", "-c", script, "sh", dlfs_bin, "bench", volume, "--json",
                               "--epochs", "2"], capture_output=True, timeout=120)
        assert proc.returncode == 0, proc.stderr.decode()
        out = json.loads(proc.stdout)
        budget = out["memory"]["cache_budget"]
        assert 0 < budget <= limit // 4
        # A budget larger than the job may use is reduced, and said so.
        proc = subprocess.run(["sh", "-c", script, "sh", dlfs_bin, "bench", volume, "--json",
                               "--cache-budget", "10G"], capture_output=True, timeout=120)
        assert proc.returncode == 0, proc.stderr.decode()
        assert b"reduced to" in proc.stderr and b"memory.limit_in_bytes" in proc.stderr
        assert json.loads(proc.stdout)["memory"]["cache_budget"] <= limit // 2
    finally:
        def removed():  # once the last process has left it
            try:
                group.rmdir()
                return True
            except OSError:
                return False

        wait_until(removed, 5, f"{group} removed", fail=False)


def test_map_style_reads_use_the_node_cache(volume, cache_dir):
    torch = pytest.importorskip("torch")
    import dlfs.torch
    with dlfs.Volume(volume) as vol:
        loader = dlfs.Loader(vol, 16, cache_budget=1 << 30)
        _fill(loader, vol.info()["bytes"])
        every = list(range(len(vol)))
        batch = vol.read_many(every)  # this process's reader attaches to the same region
        for k, i in enumerate(every):
            assert bytes(batch[k]) == vol.read(i)
            assert not batch[k].flags.writeable  # shared bytes: read-only views
        # DataLoader workers: cached samples are copied into the shared slots.
        ds = dlfs.torch.VolumeDataset(volume)
        sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(ds), 50, False)
        got = []
        for samples, _ in torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=None,
                                                      num_workers=2):
            got += [bytes(np.asarray(s)) for s in samples]
        assert got == [vol.read(int(i)) for i in ds.indices]
        del loader


def test_readme_map_style_recipe_gives_writable_samples_with_or_without_the_cache(volume,
                                                                                cache_dir):
    """Issue 41: the README's VolumeDataset + BatchSampler recipe (batch_size=None,
    num_workers=0) handed out read-only arrays, and torch warned, only when
    another process held the node cache: what a user saw depended on other jobs."""
    torch = pytest.importorskip("torch")
    import dlfs.torch

    def samples():
        ds = dlfs.torch.VolumeDataset(volume)
        sampler = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(ds), 64, False)
        out = []
        with warnings.catch_warnings():
            # The DataLoader turns each array into a tensor (default_convert):
            # torch's "not writable" warning fails the test.
            warnings.simplefilter("error")
            for batch, _ in torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=None):
                assert all(isinstance(s, torch.Tensor) for s in batch)
                out += batch
        return out

    assert len(samples()) == 400  # no cache filled yet
    with dlfs.Volume(volume) as vol:
        holder = dlfs.Loader(vol, 16, cache_budget=1 << 30)
        _fill(holder, vol.info()["bytes"])
        assert not vol.read_many([0])[0].flags.writeable  # served from the cache
        assert len(samples()) == 400
        del holder


def test_cache_budget_takes_what_cache_budget_flag_takes(volume, cache_dir):
    with dlfs.Volume(volume) as vol:
        def budget(value):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a budget cut to fit memory
                return dlfs.Loader(vol, 16, cache_budget=value).stats()["cache_bytes"]
        assert budget("1M") == budget(1 << 20) > 0
        assert budget("0") == budget(0) == 0
        assert budget("auto") == budget(None)
        with pytest.raises(ValueError, match="lots"):
            dlfs.Loader(vol, 16, cache_budget="lots")
        for wrong in (-1, True, 1.5):
            with pytest.raises(TypeError, match="cache_budget"):
                dlfs.Loader(vol, 16, cache_budget=wrong)
