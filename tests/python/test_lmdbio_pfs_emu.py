"""`dlfs lmdb read` under the emulated parallel file system (tools/pfs-emu), as
bench/lmdbio/run_lmdbio_bench.sh runs it: 2 fake nodes of 2 ranks, each node reading
the database through its own view of the mount (mpirun's A : B form, the
variable passed to every app context). Every mode must return the baseline's
bytes, and --counters must report what the file system served. Skipped
without FUSE, mpirun, python3-lmdb or an MPI build of dlfs."""
import json
import os
import shutil
import subprocess

import pytest

from pfsemu import STATS_NAME, PfsEmu

MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="mpirun (openmpi-bin) not installed")

MODES = ["baseline", "lmm", "lmm-dm", "lmm-dio", "lmm-dio-prov", "lmm-dio-prov-coal",
         "lmm-dio-prov-coal-stag"]
BATCH, ITERS = 32, 30


@pytest.fixture(scope="module")
def caffe_like(tmp_path_factory, dlfs_bin):
    """A small Caffe-style database: 800 records, most one overflow page
    (CIFAR-like), every 7th a multi-page value, 1000 puts per commit."""
    lmdb = pytest.importorskip("lmdb", reason="python3-lmdb not installed")
    probe = subprocess.run([dlfs_bin, "lmdb", "read", "/nonexistent/probe"], capture_output=True,
                           timeout=60)
    if b"needs MPI" in probe.stderr:
        pytest.skip("dlfs built without MPI")
    root = tmp_path_factory.mktemp("pfs-lmdb") / "backing"
    path = root / "db"
    path.mkdir(parents=True)
    env = lmdb.open(str(path), map_size=1 << 28)
    with env.begin(write=True) as txn:
        for i in range(800):
            n = 30000 + i if i % 7 == 0 else 3083
            txn.put(b"%08d_img%d.JPEG" % (i, i), i.to_bytes(4, "little") * (n // 4))
    env.close()
    os.remove(path / "lock.mdb")
    return root


def read_on_fake_nodes(dlfs_bin, emu, mode, *extra):
    """`dlfs lmdb read` with 2 fake nodes of 2 ranks, node i through view i."""
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "--timeout", "120"]
    for node in range(2):
        cmd += [":"] if node else []
        cmd += ["-np", "2", "-x", "DLFS_RANKS_PER_NODE=2", dlfs_bin, "lmdb", "read",
                str(emu.view(node) / "db"), "--mode", mode, "-b", str(BATCH), "-n", str(ITERS),
                "--readers-per-node", "2", "--json", *map(str, extra)]
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
    env.pop("DLFS_RANKS_PER_NODE", None)
    proc = subprocess.run(cmd, capture_output=True, timeout=180, env=env)
    assert proc.returncode == 0, (mode, proc.stderr.decode())
    return json.loads(proc.stdout)


def test_every_mode_reads_the_baselines_bytes_through_the_emulator(dlfs_bin, caffe_like,
                                                                   tmp_path):
    with PfsEmu(caffe_like, tmp_path / "mnt", "--nodes", 2, "--latency-us", 300) as emu:
        stats = emu.mountpoint / STATS_NAME
        digests = {}
        for mode in MODES:
            j = read_on_fake_nodes(dlfs_bin, emu, mode, "--counters", stats)
            assert j["ranks"] == 4
            assert mode == "baseline" or "2 node(s)" in j["description"], j["description"]
            assert [r["records"] for r in j["per_rank"]] == [ITERS * BATCH // 4] * 4
            digests[mode] = j["digest"]
            # What grew is a counter; the emulator's settings are said apart as
            # values, not as "+0" counters (issue 41).
            assert j["counters_unchanged"]["latency_us"] == 300, j
            assert j["counters_unchanged"]["nodes"] == 2, j
            assert not set(j["counters"]) & set(j["counters_unchanged"])
            served = dict.fromkeys(j["counters_unchanged"], 0) | j["counters"]
            assert served["read_bytes"] == served["n0_read_bytes"] + served["n1_read_bytes"]
            if mode.startswith("lmm-dio"):
                # Explicit O_DIRECT reads (the default from lmm-dio on) bypass
                # the views' page caches: during the iterations the file
                # system served exactly the bytes the readers asked for, in
                # requests of at most 1 MiB, to both fake nodes.
                assert "O_DIRECT" in j["description"], j["description"]
                assert served["read_bytes"] == j["read_bytes"] > 0, j
                assert served["read_requests"] >= served["read_bytes"] / (1 << 20)
                assert served["n0_read_bytes"] > 0 and served["n1_read_bytes"] > 0
        assert len(set(digests.values())) == 1, digests


def test_counters_file_errors_are_named(dlfs_bin, caffe_like, tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("no counters here\njust words\n")
    with PfsEmu(caffe_like, tmp_path / "mnt", "--nodes", 2) as emu:
        for path, message in ((tmp_path / "missing", "No such file"),
                              (words, "no \"name value\" counter")):
            cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "--timeout", "60", "-np", "2",
                   dlfs_bin, "lmdb", "read", str(emu.view(0) / "db"), "-b", "8", "-n", "2",
                   "--counters", str(path)]
            proc = subprocess.run(cmd, capture_output=True, timeout=120,
                                  env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
            err = proc.stderr.decode()
            assert proc.returncode == 2, err
            assert str(path) in err and message in err, err
