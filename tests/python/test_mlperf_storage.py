"""bench/mlperf/mlperf_storage.py (MLPerf Storage, emulated): AU and throughput by DLIO's rules on
made-up step times, a small run of every workload with both contenders, and the memory cgroup
the contenders run in. The figures are in docs/benchmarks.md."""
import importlib.util
import json
import pathlib
import subprocess
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "mlperf" / "mlperf_storage.py"


def _module():
    spec = importlib.util.spec_from_file_location("mlperf_storage", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_au_and_throughput_follow_dlios_rules():
    m = _module()
    # Four steps of one rank: the first waits 2 s for its batch (excluded),
    # the others load 0.1 s and compute 0.9 s.
    fast_proc, compute = [2.9, 1.0, 1.0, 1.0], [0.9] * 4
    au, tput = m.dlio_epoch_metrics(10.0, 10.0 + sum(fast_proc), fast_proc, compute, batch=8)
    assert au == pytest.approx(100 * 2.7 / 3.0)  # 90 %: the first step is not counted
    assert tput == pytest.approx((4 - 2) * 8 / 3.0)  # DLIO's own step count (n - 2)
    # A slow rank: each step waits 1.1 s for its batch; AU 2.7 / 6 = 45 %.
    slow_proc = [2.9, 2.0, 2.0, 2.0]
    slow = (0.0, sum(slow_proc), slow_proc, compute)
    fast = (0.0, sum(fast_proc), fast_proc, compute)
    # Per epoch: AU is the mean over ranks, throughput the sum; the run: means over epochs.
    r = m.summarize([[fast, fast], [slow, fast]], batch=8, mean_bytes=2**20, threshold=0.70)
    assert r["au_per_epoch"] == pytest.approx([67.5, 90.0])
    assert r["au"] == pytest.approx(78.75)
    assert r["passed"]
    assert r["samples_per_s"] == pytest.approx(((16 / 3 + 16 / 6) + 2 * 16 / 3) / 2, rel=1e-3)
    assert r["mib_per_s"] == pytest.approx(r["samples_per_s"], rel=1e-3)  # 1 MiB samples
    assert not m.summarize([[fast, fast], [slow, fast]], 8, 2**20, threshold=0.80)["passed"]


def test_ranks_split_each_epoch_as_dlios_sampler():
    m = _module()
    order = list(m.epoch_order(10, 3))
    assert sorted(order) == list(range(10)) and order != list(m.epoch_order(10, 4))
    parts = [list(m.rank_slice(order, r, 3)) for r in range(3)]
    assert parts == [order[0:4], order[4:8], order[8:10]]


def _dlfs_python_dir():
    dlfs = pytest.importorskip("dlfs")
    return str(pathlib.Path(dlfs.__file__).resolve().parent.parent)


# Three batches per accelerator of each workload (two of them count), samples scaled down.
SMALL = {
    "resnet50": ["--sample-scale", "0.01", "--dataset-gib", "0.003"],
    "unet3d": ["--sample-scale", "0.0002", "--dataset-gib", "0.0012"],
    "cosmoflow": ["--sample-scale", "0.002", "--dataset-gib", "0.0001"],
}


@pytest.fixture(scope="module")
def small_runs(tmp_path_factory):
    """Each workload's small run: (exit code, stdout, stderr); exit code None when it ran past
    600 s. The runs go side by side, as each mostly sleeps its steps' compute time (one after
    another they took 34 s); their output goes to files, so no pipe fills while another run
    is waited for."""
    pytest.importorskip("torch")
    runs = {}
    for workload in sorted(SMALL):
        work = tmp_path_factory.mktemp(workload)
        args = [sys.executable, str(SCRIPT), "--workload", workload, "--accelerators", "2",
                "--epochs", "2", "--data", str(work), "--unlimited", "--json",
                "--python-dir", _dlfs_python_dir(), *SMALL[workload]]
        with open(work / "out", "w") as out, open(work / "err", "w") as err:
            runs[workload] = (subprocess.Popen(args, stdout=out, stderr=err), work)
    deadline = time.monotonic() + 600
    done = {}
    for workload, (proc, work) in runs.items():
        try:
            returncode = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            returncode = None
        done[workload] = (returncode, (work / "out").read_text(), (work / "err").read_text())
    return done


@pytest.mark.parametrize("workload", sorted(SMALL))
def test_small_run_of_each_workload(workload, small_runs):
    returncode, out, err = small_runs[workload]
    assert returncode == 0, out + err
    results = {r["contender"]: r for r in map(json.loads, out.splitlines())}
    assert set(results) == {"dlfs", "dlio-pytorch"}, out
    for contender, r in results.items():
        assert "error" not in r, r
        assert r["workload"] == workload and r["accelerators"] == 2
        assert r["epochs"] == 2 and len(r["au_per_epoch"]) == 2
        # Every step slept its compute time: AU is positive and cannot pass 100 %.
        assert all(0 < au <= 100 for au in r["au_per_epoch"]), r
        assert r["au"] == pytest.approx(sum(r["au_per_epoch"]) / 2, abs=1e-2)
        assert r["passed"] == (r["au"] >= {"cosmoflow": 70}.get(workload, 90))
        assert r["samples_per_s"] > 0 and r["mib_per_s"] > 0
        assert r["memory_limited"] is False  # --unlimited, and the JSON says so


def test_a_run_inside_its_memory_limit(tmp_path):
    m = _module()
    probe = m.MemoryLimit(1 << 30)
    if not probe.path:
        pytest.skip("no writable memory cgroup here")
    probe.remove()
    args = [sys.executable, str(SCRIPT), "--workload", "cosmoflow", "--accelerators", "1",
            "--epochs", "1", "--data", str(tmp_path), "--json", "--contender", "dlfs",
            "--memory-limit-mib", "512", "--python-dir", _dlfs_python_dir(),
            *SMALL["cosmoflow"]]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    r = json.loads(proc.stdout.splitlines()[-1])
    assert r["memory_limited"] is True and r["memory_limit_bytes"] == 512 << 20
    assert r["memory_within_rules"] is False  # 512 MiB is more than a fifth of this data set
    assert 0 < r["peak_memory_bytes"] <= 512 << 20  # the run was charged to the cgroup


def test_memory_limit_kills_what_allocates_past_it():
    m = _module()
    limit = m.MemoryLimit(64 << 20)
    if not limit.path:
        pytest.skip("no writable memory cgroup here")
    try:
        small = subprocess.run([sys.executable, "-c", "x = b'x' * (8 << 20)"],
                               preexec_fn=limit.enter, timeout=120)
        assert small.returncode == 0
        big = subprocess.run([sys.executable, "-c", "x = b'x' * (256 << 20)"],
                             preexec_fn=limit.enter, timeout=120)
        assert big.returncode == -9  # SIGKILL from the cgroup's OOM killer
        assert limit.oom_kills() >= 1
    finally:
        limit.remove()


def test_too_small_a_data_set_is_refused(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--workload", "resnet50",
                           "--accelerators", "4", "--dataset-gib", "0.003", "--sample-scale",
                           "0.01", "--data", str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "fewer than 3 batches of 400 per accelerator" in proc.stderr, proc.stderr
    assert not any(tmp_path.iterdir())  # nothing generated


def test_search_finds_each_contenders_largest_passing_number_taking_turns():
    m = _module()
    capacity = {"a": 5, "b": 2}
    calls = []

    def fake_run(cfg, dataset_bytes):
        calls.append((cfg["contender"], cfg["accelerators"]))
        return {"contender": cfg["contender"], "accelerators": cfg["accelerators"],
                "passed": cfg["accelerators"] <= capacity[cfg["contender"]]}

    m.run = fake_run
    cfgs = {c: {"contender": c} for c in capacity}
    good, best, runs = m.search(cfgs, 0, largest=64, report=lambda r: None)
    assert good == {"a": 5, "b": 2}
    assert best["a"]["accelerators"] == 5 and best["b"]["accelerators"] == 2
    # Doubling side by side (the first in each turn rotating), then bisection.
    assert calls[:4] == [("a", 1), ("b", 1), ("b", 2), ("a", 2)]
    assert sorted(n for c, n in calls if c == "a") == [1, 2, 4, 5, 6, 8]
    assert sorted(n for c, n in calls if c == "b") == [1, 2, 3, 4]
    # Nothing passes: 0 accelerators, and the 1-accelerator run for comparison.
    capacity["b"] = 0
    good, best, _ = m.search({"b": {"contender": "b"}}, 0, largest=64, report=lambda r: None)
    assert good == {"b": 0} and best["b"]["accelerators"] == 1
