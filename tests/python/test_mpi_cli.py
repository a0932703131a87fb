"""The CLI under mpirun: `dlfs epoch`, `dlfs bench` (collective open, shard-local)
and `dlfs lmdb read`, 4 ranks on two fake nodes. Skipped without mpirun or
when dlfs was built without MPI."""
import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest

from testutil import wait_until

REPO = pathlib.Path(__file__).resolve().parents[2]

MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="mpirun (openmpi-bin) not installed")


@pytest.fixture(scope="module")
def mpi(dlfs_bin):
    """Runs `mpirun -np N dlfs ARGS...` with DLFS_RANKS_PER_NODE=2."""
    probe = subprocess.run([dlfs_bin, "lmdb", "read", "/nonexistent/probe"], capture_output=True,
                           timeout=60)
    if b"needs MPI" in probe.stderr:
        pytest.skip("dlfs built without MPI")

    def _mpi(*args, np=4, check=0, env=None):
        # Open MPI dlcloses its components in MPI_Finalize, so LeakSanitizer
        # (sanitizer builds) cannot attribute what they keep: leak checks off.
        env = dict(os.environ, DLFS_RANKS_PER_NODE="2", ASAN_OPTIONS="detect_leaks=0",
                   **(env or {}))
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
        p = root / f"c{i % 3}" / f"s{i:03d}.png"
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
    # A page of every rank's order: positions 10 .. 29 of each.
    out = mpi("epoch", one, "--seed", 5, "--start", 10, "--count", 20).stdout.decode().split("\n")
    page = [tuple(map(int, line.split("\t"))) for line in out if line]
    assert page == [(r, i) for r in range(4) for i in [i for q, i in rows if q == r][10:30]]
    # Under mpirun the ranks come from MPI: an explicit one is refused, not ignored.
    err = mpi("epoch", one, "--world", 8, check=2).stderr.decode()
    assert "--rank and --world come from mpirun" in err, err


@pytest.mark.parametrize("extra", [[], ["--private-open"], ["--shard-local", "--window", "2"]])
def test_bench_under_mpirun_reads_every_sample(mpi, volumes, extra):
    _, two = volumes
    j = json.loads(mpi("bench", two, "--batch", 16, "--epochs", 2, "--json", *extra).stdout)
    assert j["ranks"] == 4
    assert j["samples"] == 2 * 300  # 300 is a multiple of 4: no padding
    # Rank 0's node-cache plan (empty while undecided) and how many ranks fill.
    assert isinstance(j["cache_plan"], str) and 0 <= j["ranks_filling"] <= 4
    if "--shard-local" in extra:
        assert j["mode"] == "shard-local" and j["remote_samples"] > 0
    # The compact directory (the default) is mapped by every rank from the
    # file: no copy is sent or made, collective open or not (a tree one's
    # node copies: tests/mpi/distributed_mpi_test.cc).
    assert j["directory_window_bytes"] == 0


def test_bench_of_what_mpirun_does_not_run_is_refused(mpi, volumes):
    """A mixture or --decode under mpirun is refused, not read as the first volume alone."""
    one, two = volumes
    err = mpi("bench", one, two, "--epochs", 1, check=2).stderr.decode()
    assert "a mixture of several volumes does not run under mpirun" in err, err
    err = mpi("bench", one, "--decode", "--size", 8, "--epochs", 1, check=2).stderr.decode()
    assert "bench --decode does not run under mpirun" in err, err


def test_bench_flags_that_need_mpirun(run, volumes):
    one, _ = volumes
    for flag in ("--shard-local", "--cluster-cache"):
        err = run("bench", one, flag, check=2).stderr.decode()
        assert "mpirun" in err, err
    err = run("bench", one, "--shard-local", "--cluster-cache", check=2).stderr.decode()
    assert "excludes" in err, err
    # --help says what the code does and docs/deploy.md says (issue 41): target t
    # belongs to node t mod nodes (ShardLocalPlacement), not the other way round.
    help_text = " ".join(run("bench", "--help", check=0).stdout.decode().split())
    assert "node n reads only the targets t with t mod nodes = n" in help_text, help_text
    assert "Target *t* belongs to node *t mod nodes*" in (REPO / "docs/deploy.md").read_text()


def test_bench_cluster_cache_reports_storage_and_peer_bytes(mpi, volumes, tmp_path):
    """Two fake nodes whose caches hold the volume together: the first epoch
    reads it from storage, the third reads nothing there and gets the other
    node's half from it; each node's cache is reported, and removed at the end."""
    one, _ = volumes
    shm = tmp_path / "shm"
    shm.mkdir()
    j = json.loads(mpi("bench", one, "--batch", 16, "--epochs", 3, "--json", "--cluster-cache",
                       "--cache-budget", "16M", env={"DLFS_CACHE_DIR": str(shm)}).stdout)
    assert j["mode"] == "cluster-cache" and j["samples"] == 3 * 300
    first, third = j["epochs"][0], j["epochs"][2]
    data = os.path.getsize(one)
    assert first["storage_bytes"] > 0 and first["peer_bytes"] == 0
    assert third["storage_bytes"] == 0
    assert 0 < third["peer_bytes"] < data
    cluster = j["cluster_cache"]
    assert len(cluster["node_cache_bytes"]) == 2
    assert all(b > 0 for b in cluster["node_cache_bytes"])
    assert sum(cluster["node_cache_bytes"]) <= data
    assert cluster["storage_bytes"] == sum(e["storage_bytes"] for e in j["epochs"])
    assert list(shm.iterdir()) == []


def test_bench_cluster_cache_text_report(mpi, volumes, tmp_path):
    one, _ = volumes
    out = mpi("bench", one, "--batch", 16, "--epochs", 2, "--cluster-cache", "--cache-budget",
              "16M", env={"DLFS_CACHE_DIR": str(tmp_path)}).stdout.decode()
    assert "cluster-cache reading" in out
    assert "2 node caches hold" in out
    assert "MB from peers" in out


def _cache_regions(cache_dir):
    """The node cache regions of fake nodes in `cache_dir` (dlfs-UID-UUID-nodeN)."""
    return [n for n in os.listdir(cache_dir) if re.fullmatch(r"dlfs-\d+-.+-node\d+", n)]


def test_cluster_cache_job_ends_when_a_rank_is_killed(dlfs_bin, mpi, volumes, tmp_path):
    """A rank killed mid-job: the others are waiting for it in an exchange;
    MPI cannot survive that, but the job must end with an error naming the
    rank, not hang."""
    one, _ = volumes
    env = dict(os.environ, DLFS_RANKS_PER_NODE="2", ASAN_OPTIONS="detect_leaks=0",
               DLFS_CACHE_DIR=str(tmp_path))
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", 4, dlfs_bin, "bench", one,
           "--batch", 4, "--epochs", 100000, "--cluster-cache", "--cache-budget", "16M"]
    job = subprocess.Popen([str(c) for c in cmd],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        # The 4 ranks started, and made their loaders: each node's cache
        # region exists (events, never a blocking read of the job's output:
        # it may be buffered). Then they read epochs on until killed.
        def ranks():
            return subprocess.run(["pgrep", "-P", str(job.pid), "-x", os.path.basename(dlfs_bin)],
                                  capture_output=True, text=True).stdout.split()

        wait_until(lambda: len(ranks()) == 4 or job.poll() is not None, 60, "4 ranks",
                   interval=0.2)
        assert len(ranks()) == 4, (ranks(), job.poll())
        wait_until(lambda: len(_cache_regions(tmp_path)) == 2 or job.poll() is not None, 60,
                   "both nodes' cache regions", interval=0.05)
        assert job.poll() is None, "the job ended before a rank was killed"
        rank_pids = ranks()
        assert len(rank_pids) == 4, rank_pids
        os.kill(int(rank_pids[2]), 9)
        _, err = job.communicate(timeout=120)  # TimeoutExpired (a hang) fails the test
    finally:
        job.kill()
        job.wait()
    assert job.returncode != 0
    assert "rank" in err.decode() and "signal 9" in err.decode(), err.decode()


def test_lmdb_read_modes_agree(mpi, tmp_path):
    lmdb = pytest.importorskip("lmdb", reason="python3-lmdb not installed")
    path = tmp_path / "db"
    env = lmdb.open(str(path), map_size=1 << 28)
    with env.begin(write=True) as txn:
        for i in range(640):
            txn.put(b"%08d_x.jpg" % i, os.urandom(100 + (i * 53) % 6000))
    env.close()
    digests = {}
    modes = ["baseline", "lmm", "lmm-dm", "lmm-dio", "lmm-dio-prov", "lmm-dio-prov-coal",
             "lmm-dio-prov-coal-stag"]
    if os.environ.get("DLFS_SANITIZE"):
        # The sanitized build's lmdbio_mpi reads every mode against the baseline; here the
        # CLI's path is what is new, and the first and the last mode take it.
        modes = [modes[0], modes[-1]]
    for mode in modes:
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


def test_a_collective_error_names_the_failing_rank_on_every_rank(mpi, tmp_path):
    # docs/deploy.md: "every rank gets the same error, prefixed with the failing rank";
    # rank 0's own failure had no prefix, and rank 0 prints the job's error (issue 41).
    err = mpi("bench", tmp_path / "missing.dlfs", check=2).stderr.decode()
    assert f"dlfs: rank 0: {tmp_path}/missing.dlfs" in err, err


def test_lmdb_read_offers_only_the_engines_that_read_a_file(run):
    # An LMDB is a local file: --engine nbd was offered and always failed (issue 41).
    help_text = run("lmdb", "read", "--help", check=0).stdout.decode()
    assert "{auto,uring,pread}" in help_text, help_text
    err = run("lmdb", "read", "db", "--engine", "nbd", check=2).stderr.decode()
    assert "nbd not in {auto,uring,pread}" in err, err


def _mpmd(dlfs_bin, contexts):
    """Runs `mpirun CONTEXT : CONTEXT ...` (each a list: mpirun options, then dlfs arguments)
    without DLFS_RANKS_PER_NODE in the environment. mpirun's own --timeout and the
    subprocess timeout both turn a hang into a failure."""
    env = {k: v for k, v in os.environ.items() if k != "DLFS_RANKS_PER_NODE"}
    env["ASAN_OPTIONS"] = "detect_leaks=0"
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "--timeout", "60"]
    for i, (opts, args) in enumerate(contexts):
        cmd += ([":"] if i else []) + [*opts, dlfs_bin, *map(str, args)]
    return subprocess.run(cmd, capture_output=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def small_db(tmp_path_factory):
    lmdb = pytest.importorskip("lmdb", reason="python3-lmdb not installed")
    path = tmp_path_factory.mktemp("lmdb") / "db"
    env = lmdb.open(str(path), map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i in range(200):
            txn.put(b"%08d_x.jpg" % i, os.urandom(100 + (i * 53) % 3000))
    env.close()
    return path


@pytest.mark.parametrize("mode", ["baseline", "lmm-dm", "lmm-dio-prov-coal-stag"])
def test_lmdb_read_ranks_per_node_on_some_ranks_only_fails(mpi, dlfs_bin, small_db, mode):
    # mpirun's -x reaches only the first app context: ranks 0-1 see the
    # variable, ranks 2-3 do not. Every mode must fail, not hang.
    read = ["lmdb", "read", small_db, "--mode", mode, "-b", 8, "-n", 5]
    proc = _mpmd(dlfs_bin, [(["-np", "2", "-x", "DLFS_RANKS_PER_NODE=1"], read),
                            (["-np", "2"], read)])
    err = proc.stderr.decode()
    assert proc.returncode == 2, (proc.returncode, err)
    assert "ranks disagree on DLFS_RANKS_PER_NODE (1 on ranks 0-1; unset or 0 on ranks 2-3)" in err


def test_lmdb_read_options_or_database_that_differ_fail(mpi, dlfs_bin, small_db, tmp_path):
    read = ["lmdb", "read", small_db, "-b", 8, "-n", 5]
    proc = _mpmd(dlfs_bin, [(["-np", "3"], read + ["--mode", "lmm"]),
                            (["-np", "1"], read + ["--mode", "baseline"])])
    assert proc.returncode == 2, proc.stderr.decode()
    assert "ranks disagree on mode (lmm on ranks 0-2; baseline on rank 3)" in proc.stderr.decode()
    # A copy under another path is the same database; a different one is not.
    copy = tmp_path / "copy"
    shutil.copytree(small_db, copy)
    ok = _mpmd(dlfs_bin, [(["-np", "2"], read + ["--json"]),
                          (["-np", "2"], ["lmdb", "read", copy, "-b", 8, "-n", 5])])
    assert ok.returncode == 0, ok.stderr.decode()
    assert json.loads(ok.stdout)["ranks"] == 4
    other = tmp_path / "other"
    shutil.copytree(small_db, other)
    lmdb = pytest.importorskip("lmdb")
    env = lmdb.open(str(other), map_size=1 << 26)
    with env.begin(write=True) as txn:
        txn.put(b"zzz", b"one more record")
    env.close()
    bad = _mpmd(dlfs_bin, [(["-np", "2"], read),
                           (["-np", "2"], ["lmdb", "read", other, "-b", 8, "-n", 5])])
    assert bad.returncode == 2, bad.stderr.decode()
    assert "ranks disagree on the database" in bad.stderr.decode()


NBDKIT = shutil.which("nbdkit") or next(
    (p for p in ("/usr/sbin/nbdkit", "/usr/bin/nbdkit") if os.access(p, os.X_OK)), None)


@pytest.mark.skipif(NBDKIT is None, reason="nbdkit not installed")
@pytest.mark.parametrize("extra", [[], ["--shard-local"]])
def test_bench_under_mpirun_reads_targets_from_an_nbd_server(mpi, volumes, tmp_path, extra):
    """Disaggregated: target 1 served by nbdkit; every rank reads it directly
    (or, shard-local, its node does), checksums verified, in one job."""
    _, two = volumes
    sock, pid = tmp_path / "t1.sock", tmp_path / "t1.pid"
    server = subprocess.Popen([NBDKIT, "-f", "-r", "--log=null", "-U", str(sock), "-P", str(pid),
                               "file", f"{two}.t1"])
    try:
        # Until it listens (it writes its pid file then) or has exited.
        wait_until(lambda: (pid.exists() and pid.stat().st_size > 0) or server.poll() is not None,
                   30, "nbdkit's pid file")
        assert server.poll() is None, "nbdkit exited"
        uri = f"nbd+unix:///?socket={sock}"
        out = mpi("bench", two, "--batch", 16, "--epochs", 1, "--json", "--cache-budget", 0,
                  "--target-map", f"1={uri}", *extra).stdout
        j = json.loads(out)
        assert j["ranks"] == 4 and j["samples"] == 300
        if not extra:
            assert j["engine"].startswith("NBD"), j["engine"]
        # Without the server the same job fails naming the URI.
        server.terminate()
        server.wait(timeout=30)
        failed = mpi("bench", two, "--epochs", 1, "--target-map", f"1={uri}", *extra, check=None)
        assert failed.returncode != 0
        assert str(sock) in failed.stderr.decode()
    finally:
        server.kill()
        server.wait(timeout=30)
