"""Under a memory limit dlfs is never killed for its own memory (issue 41).

`dlfs bench` and `dlfs.Loader` run in a fresh cgroup v1 memory controller
of a few tens of MB: the batch buffers are held to the plan the warning
states (the same figure in the warning and in the report / stats()), the
node cache takes what is left, and where two buffers of a batch cannot fit,
the run stops before reading with an error naming the option that lowers
it. Skipped where the controller is not writable (not root, cgroup v2 only)
and under sanitizers (their shadow memory does not fit such limits).
"""
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from testutil import wait_until

dlfs = pytest.importorskip("dlfs", reason="Python module not built")

V1 = pathlib.Path("/sys/fs/cgroup/memory")


def _parent_group():
    """This process's own v1 memory cgroup (a child of it stays inside the
    limits this process is under), or the hierarchy's root; None when
    neither is writable."""
    if os.geteuid() != 0 or not (V1 / "cgroup.procs").exists():
        return None
    own = None
    for line in pathlib.Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            own = V1 / path.lstrip("/")
    for parent in (own, V1):
        if parent is not None and os.access(parent, os.W_OK):
            return parent
    return None


pytestmark = [
    pytest.mark.skipif(_parent_group() is None,
                       reason="needs root and a writable cgroup v1 memory controller"),
    pytest.mark.skipif(bool(os.environ.get("DLFS_SANITIZE")),
                       reason="sanitizers' shadow memory does not fit these limits"),
]


class Group:
    """A child memory cgroup limited to `limit` bytes; run() runs a command
    in it and returns (CompletedProcess, oom kills in the group)."""

    def __init__(self, limit):
        self.path = _parent_group() / f"dlfs-test-{os.getpid()}-{limit}"
        self.path.mkdir()
        (self.path / "memory.limit_in_bytes").write_text(str(limit))

    def oom_kills(self):
        for line in (self.path / "memory.oom_control").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def run(self, cmd, env=None):
        script = f'echo $$ > {self.path}/cgroup.procs && exec "$@"'
        proc = subprocess.run(["sh", "-c", script, "sh", *map(str, cmd)], capture_output=True,
                              text=True, timeout=240, env=env)
        return proc, self.oom_kills()

    def remove(self):
        def removed():  # once the last process has left it
            try:
                self.path.rmdir()
                return True
            except OSError:
                return False

        wait_until(removed, 5, f"{self.path} removed", fail=False)


@pytest.fixture
def group():
    made = []

    def make(limit):
        made.append(Group(limit))
        return made[-1]

    yield make
    for g in made:
        g.remove()


@pytest.fixture(scope="module")
def volume(tmp_path_factory):
    """240 samples of ~100 KB with log-normal sizes (24 MB), as
    bench/data/make_imagenet_like.py makes them."""
    path = tmp_path_factory.mktemp("vol") / "v.dlfs"
    rng = np.random.default_rng(41)
    sizes = rng.lognormal(np.log(100_000) - 0.18, 0.6, 240).astype(int) + 1
    with dlfs.Writer(path) as w:
        for i, size in enumerate(sizes):
            w.add(f"c{i % 4}/{i:04d}.bin", rng.integers(0, 256, size, dtype=np.uint8),
                  label=i % 4)
    return path


@pytest.fixture
def env(tmp_path):
    shm = tmp_path / "shm"  # a node cache of the test's own
    shm.mkdir()
    package_root = str(pathlib.Path(dlfs.__file__).resolve().parents[1])
    return dict(os.environ, DLFS_CACHE_DIR=str(shm), PYTHONPATH=package_root)


def mb(n):
    """As dlfs prints bytes (dlfs/memory.h HumanBytes)."""
    return f"{n / 1e6:.1f} MB"


WARNING = re.compile(r"the batch buffers, ([\d.]+ [KMG]?B) \((\d+) of ([\d.]+ [KMG]?B)\), "
                     r"exceed the ([\d.]+ [KMG]?B) they may take, an eighth of the "
                     r"([\d.]+ [KMG]?B) this process may use")


def test_bench_holds_its_buffers_to_the_figure_it_warns_of(group, volume, dlfs_bin, env):
    # Batches of 64 (~7 MB): two buffers exceed an eighth of a 64 MiB limit.
    g = group(64 << 20)
    proc, kills = g.run([dlfs_bin, "bench", volume, "--batch", 64, "--epochs", 2], env=env)
    assert (proc.returncode, kills) == (0, 0), proc.stderr
    warned = WARNING.search(proc.stderr)
    assert warned, proc.stderr
    total, count, slab, share, usable = warned.groups()
    assert count == "2"
    report = re.search(r"batch buffers ([\d.]+ [KMG]?B) \(", proc.stdout)
    assert report and report.group(1) == total, (proc.stderr, proc.stdout)
    # The JSON report: the same bytes, and the node cache from what they leave.
    proc, kills = g.run([dlfs_bin, "bench", volume, "--batch", 64, "--json"], env=env)
    assert (proc.returncode, kills) == (0, 0), proc.stderr
    memory = json.loads(proc.stdout)["memory"]
    assert mb(memory["buffer_pool_bytes"]) == WARNING.search(proc.stderr).group(1)
    assert 0 < memory["cache_budget"] <= (64 << 20) // 4


def test_bench_refuses_before_reading_where_two_buffers_cannot_fit(group, volume, dlfs_bin,
                                                                    env):
    g = group(64 << 20)
    proc, kills = g.run([dlfs_bin, "bench", volume, "--batch", 240], env=env)
    assert (proc.returncode, kills) == (2, 0), proc.stderr
    assert f"dlfs: {volume}: a batch of 240 samples needs a buffer of" in proc.stderr
    assert "a smaller --batch lowers it" in proc.stderr
    assert "epoch 0" not in proc.stdout  # nothing was read


LOADER = """
import sys, warnings
import dlfs
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    try:
        loader = dlfs.Loader(sys.argv[1], int(sys.argv[2]))
    except ValueError as e:
        print("ValueError:", e)
        sys.exit(3)
for w in caught:
    print("warning:", w.message)
for epoch in range(2):
    loader.set_epoch(epoch)
    n = sum(len(b) for b in loader)
print("samples", n, "buffer_pool_bytes", loader.stats()["buffer_pool_bytes"])
"""


def test_python_loader_stats_say_the_figure_it_warns_of(group, volume, env):
    g = group(96 << 20)
    proc, kills = g.run([sys.executable, "-c", LOADER, volume, 64], env=env)
    assert (proc.returncode, kills) == (0, 0), proc.stdout + proc.stderr
    warned = WARNING.search(proc.stdout)
    assert warned, proc.stdout
    pool = int(re.search(r"buffer_pool_bytes (\d+)", proc.stdout).group(1))
    assert mb(pool) == warned.group(1)
    assert "samples 240" in proc.stdout

    proc, kills = group(64 << 20).run([sys.executable, "-c", LOADER, volume, 240], env=env)
    assert (proc.returncode, kills) == (3, 0), proc.stdout + proc.stderr
    assert "a smaller batch_size lowers it" in proc.stdout
