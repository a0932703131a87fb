"""The CLI under mpirun: `dlfs epoch`, `dlfs bench` (collective open, shard-local)
and `dlfs lmdb read`, 4 ranks on two fake nodes. Skipped without mpirun or
when dlfs was built without MPI."""
import json
import os
import shutil
import subprocess

import pytest

MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="mpirun (openmpi-bin) not installed")


@pytest.fixture(scope="module")
def mpi(dlfs_bin):
    """Runs `mpirun -np N dlfs ARGS...` with DLFS_RANKS_PER_NODE=2."""
    probe = subprocess.run([dlfs_bin, "lmdb", "read", "/nonexistent/probe"], capture_output=True,
                           timeout=60)
    if b"needs MPI" in probe.stderr:
        pytest.skip("dlfs built without MPI")

    def _mpi(*args, np=4, check=0):
        # Open MPI dlcloses its components in MPI_Finalize, so LeakSanitizer
        # (sanitizer builds) cannot attribute what they keep: leak checks off.
        env = dict(os.environ, DLFS_RANKS_PER_NODE="2", ASAN_OPTIONS="detect_leaks=0")
        cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(np), dlfs_bin,
               *map(str, args)]
        proc = subprocess.run(cmd, capture_output=True, timeout=300, env=env)
        if check is not None:
            assert proc.returncode == check, (proc.returncode, proc.stderr.decode())
        return proc

    return _mpi


@pytest.fixture(scope="module")
def volumes(tmp_path_factory, dlfs_bin):
    """The same 300 samples packed into one target and into two."""
    root = tmp_path_factory.mktemp("mpi") / "tree"
    for i in range(300):
        p = root / f"c{i % 3}" / f"s{i:03d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(50 + (i * 37) % 5000))
    one, two = root.parent / "one.dlfs", root.parent / "two.dlfs"
    for vol, extra in ((one, []), (two, ["--targets", "2"])):
        subprocess.run([dlfs_bin, "pack", str(root), "-o", str(vol), "-q", *extra], check=True)
    return one, two


def test_epoch_under_mpirun_matches_explicit_ranks(mpi, run, volumes):
    one, _ = volumes
    out = mpi("epoch", one, "--seed", 5).stdout.decode().split("\n")
    rows = [tuple(map(int, line.split("\t"))) for line in out if line]
    for rank in range(4):
        mine = [i for r, i in rows if r == rank]
        alone = run("epoch", one, "--seed", 5, "--rank", rank, "--world", 4, check=0)
        assert mine == [int(x) for x in alone.stdout.split()]
    assert sorted(i for _, i in rows) == list(range(300))


@pytest.mark.parametrize("extra", [[], ["--private-open"], ["--shard-local", "--window", "2"]])
def test_bench_under_mpirun_reads_every_sample(mpi, volumes, extra):
    _, two = volumes
    j = json.loads(mpi("bench", two, "--batch", 16, "--epochs", 2, "--json", *extra).stdout)
    assert j["ranks"] == 4
    assert j["samples"] == 2 * 300  # 300 is a multiple of 4: no padding
    if "--shard-local" in extra:
        assert j["mode"] == "shard-local" and j["remote_samples"] > 0
    if "--private-open" in extra:
        assert j["directory_window_bytes"] == 0
    else:
        # One directory copy per fake node, read from storage once.
        assert j["directory_window_bytes"] == 2 * j["directory_bytes"]


def test_bench_flags_that_need_mpirun(run, volumes):
    one, _ = volumes
    err = run("bench", one, "--shard-local", check=2).stderr.decode()
    assert "mpirun" in err


def test_lmdb_read_modes_agree(mpi, tmp_path):
    lmdb = pytest.importorskip("lmdb", reason="python3-lmdb not installed")
    path = tmp_path / "db"
    env = lmdb.open(str(path), map_size=1 << 28)
    with env.begin(write=True) as txn:
        for i in range(640):
            txn.put(b"%08d_x.jpg" % i, os.urandom(100 + (i * 53) % 6000))
    env.close()
    digests = {}
    for mode in ["baseline", "lmm", "lmm-dm", "lmm-dio", "lmm-dio-prov", "lmm-dio-prov-coal",
                 "lmm-dio-prov-coal-stag"]:
        j = json.loads(mpi("lmdb", "read", path, "--mode", mode, "-b", 32, "-n", 40, "--check",
                           "--readers-per-node", 2, "--json").stdout)
        assert j["check"]["mismatches"] == 0
        # 40 iterations of 32 = 2 epochs of 640: every record exactly twice.
        assert j["check"]["min_reads_per_record"] == j["check"]["max_reads_per_record"] == 2
        assert [r["records"] for r in j["per_rank"]] == [40 * 8] * 4
        digests[mode] = j["digest"]
    assert len(set(digests.values())) == 1, digests


def test_lmdb_read_errors(mpi, tmp_path):
    err = mpi("lmdb", "read", tmp_path / "none", "--mode", "lmm-dio-prov", check=2).stderr.decode()
    assert "none" in err
    bad = mpi("lmdb", "read", tmp_path / "none", "-b", 6, check=2).stderr.decode()
    assert "multiple" in bad
