"""Distributed training from Python: the loaders under mpirun (4 ranks on two
fake nodes, DLFS_RANKS_PER_NODE=2) and under torchrun's variables (4
processes started here, no MPI), each a real DDP training of a small model
(tests/python/distributed_job.py): every sample read exactly once per epoch
across the job, in the C++ loader's order, the loss going down, one
directory copy per node, shard-local reading and the cluster cache, an
elastic resume from 4 ranks to 2, bounded memory on a 1M-sample volume, and
a failing rank ending the whole job. Skipped without mpirun or without MPI
in the module."""
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

dlfs = pytest.importorskip("dlfs")
pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "distributed_job.py")
MPIRUN = shutil.which("mpirun")
SAMPLES = 512
pytestmark = [
    pytest.mark.skipif(MPIRUN is None, reason="mpirun (openmpi-bin) not installed"),
    pytest.mark.skipif(not dlfs._dlfs._mpi_built, reason="dlfs built without MPI"),
]


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_", "RANK", "WORLD_SIZE",
                                "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_"))}
    shm = tmp_path / "shm"
    shm.mkdir(exist_ok=True)
    env.update(DLFS_RANKS_PER_NODE="2", DLFS_CACHE_DIR=str(shm), OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **extra)
    return env


def mpirun(tmp_path, *args, np=4, timeout=240):
    """The job under `mpirun -np N`; (returncode, stderr, seconds, reports by rank)."""
    out = tmp_path / f"out-{time.monotonic_ns()}"
    out.mkdir()
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(np), sys.executable,
           JOB, "--out", str(out), *map(str, args)]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, timeout=timeout, env=_env(tmp_path))
    return proc.returncode, proc.stderr.decode(), time.monotonic() - start, _reports(out)


def torchrun_style(tmp_path, *args, n=4, timeout=240):
    """The job as n processes with torchrun's variables (no MPI)."""
    out = tmp_path / f"out-{time.monotonic_ns()}"
    out.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(n):
        env = _env(tmp_path, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(n), GROUP_RANK="0", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, JOB, "--out", str(out), *map(str, args)],
                                      env=env, stderr=subprocess.PIPE))
    errors = [p.communicate(timeout=timeout)[1].decode() for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    return _reports(out)


def _reports(out):
    reports = {}
    for name in os.listdir(out):
        if name.startswith("rank") and name.endswith(".json"):
            with open(out / name) as f:
                r = json.load(f)
            reports[r["rank"]] = r
    return reports


@pytest.fixture(scope="module")
def volumes(tmp_path_factory, dlfs_bin):
    """512 16x16 PNGs in 4 classes (a bright band per class), each holding its
    sample index in its first two pixels; packed into one target and two."""
    from PIL import Image

    root = tmp_path_factory.mktemp("dist") / "img"
    rng = np.random.default_rng(0)
    for i in range(SAMPLES):
        c = i % 4
        img = rng.integers(0, 60, (16, 16)).astype(np.uint8)
        img[4 * c:4 * c + 4, :] += 150
        img[0, 0], img[0, 1] = i & 255, i >> 8
        (root / f"c{c}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(img, "L").save(root / f"c{c}" / f"{i:04d}.png")
    one, two = root.parent / "one.dlfs", root.parent / "two.dlfs"
    # The tree layout, whose directory is read and shared in a node region
    # (a compact one is mapped from the file: test_a_compact_directory_...).
    subprocess.run([dlfs_bin, "pack", str(root), "-o", str(one), "-q", "--layout", "tree"],
                   check=True)
    subprocess.run([dlfs_bin, "pack", str(root), "-o", str(two), "-q", "--targets", "2",
                    "--layout", "tree"],
                   check=True)
    # The sample index each image holds, by volume index (packing sorts by path).
    vol = dlfs.Volume(str(one))
    held = {}
    for v in range(len(vol)):
        pixels = dlfs.decode_image(np.frombuffer(vol.read(v), np.uint8), color="gray")
        held[v] = int(pixels[0, 0, 0]) + 256 * int(pixels[0, 1, 0])
    return one, two, held


def cpp_order(run, volume, seed, epoch, rank, world):
    """What the C++ loader reads on `rank`: `dlfs epoch`."""
    out = run("epoch", volume, "--seed", seed, "--epoch", epoch, "--rank", rank, "--world",
              world, check=0)
    return [int(x) for x in out.stdout.split()]


def check_every_sample_once(reports, held, key, epochs):
    for e in range(epochs):
        read = [i for r in reports.values() for i in r["epochs"][e][key]]
        if key == "images":  # volume indices; the dataset's bytes name the sample held
            read = [held[i] for i in read]
        assert sorted(read) == list(range(SAMPLES)), (key, e)


def test_ddp_under_mpirun(tmp_path, volumes, run):
    one, _, held = volumes
    rc, err, _, reports = mpirun(tmp_path, "--volume", one, "--train", "--comm", "mpi4py")
    assert rc == 0, err
    assert sorted(reports) == [0, 1, 2, 3]
    for r in reports.values():
        assert r["launcher"] == "mpi" and r["mpi"] and r["world"] == 4
        assert r["directory_notes"] == []
        # One directory copy per fake node (and the dataset's, through
        # comm=MPI.COMM_WORLD, is the same one).
        assert len(r["dir_regions"]) == 2
        assert [n[-6:] for n in r["dir_regions"]] == ["-node0", "-node1"]
    check_every_sample_once(reports, held, "images", 2)
    check_every_sample_once(reports, held, "dataset", 2)
    for rank, r in reports.items():
        for e in range(2):
            want = cpp_order(run, one, 5, e, rank, 4)
            assert r["epochs"][e]["images"] == want
            assert r["epochs"][e]["dataset"] == [held[i] for i in want]
    # Both loaders train the same replicated model: the job's loss goes down.
    loss = [np.mean([r["epochs"][e][k] for r in reports.values()])
            for e in range(2) for k in ("image_loss", "dataset_loss")]
    assert loss[-1] < loss[0] * 0.8, loss


@pytest.mark.parametrize("mode", ["shard_local", "cluster_cache"])
def test_shard_local_and_cluster_cache_read_the_same_samples(tmp_path, volumes, run, mode):
    one, two, held = volumes
    rc, err, _, reports = mpirun(tmp_path, "--volume", two if mode == "shard_local" else one,
                                 "--mode", mode, "--epochs", 3)
    assert rc == 0, err
    for rank, r in reports.items():
        for e in range(3):
            want = cpp_order(run, one, 5, e, rank, 4)
            assert r["epochs"][e]["images"] == want, (mode, rank, e)
            assert r["epochs"][e]["dataset"] == [held[i] for i in want]
    stats = [[r["epochs"][e]["image_stats"] for r in reports.values()] for e in range(3)]
    data_bytes = dlfs.Volume(str(one)).info()["bytes"]
    if mode == "shard_local":
        # Node 1 holds no target of the first: every sample it reads comes from node 0.
        assert sum(s["peer_bytes"] for s in stats[0]) > 0
    else:
        # The nodes' caches hold the volume after the first epoch: the third
        # reads at most 5 % of it from storage.
        assert sum(s["storage_bytes"] for s in stats[2]) <= 0.05 * data_bytes, stats[2]
        assert sum(s["cache_bytes"] + s["peer_bytes"] for s in stats[2]) > 0


def test_elastic_resume_from_4_ranks_to_2(tmp_path, volumes):
    one, _, held = volumes
    rc, err, _, first = mpirun(tmp_path, "--volume", one, "--epochs", 1, "--stop-after", 2)
    assert rc == 0, err
    state = next(tmp_path.glob("out-*/state.json"))
    rc, err, _, rest = mpirun(tmp_path, "--volume", one, "--epochs", 1, "--resume", state, np=2)
    assert rc == 0, err
    before = [i for r in first.values() for i in r["epochs"][0]["dataset"]]
    after = [i for r in rest.values() for i in r["epochs"][0]["dataset"]]
    assert len(before) == 4 * 2 * 32
    assert sorted(before + after) == list(range(SAMPLES))  # 512: no padding either time


def test_torchrun_style_job_shares_one_directory_per_node(tmp_path, volumes, run):
    one, _, held = volumes
    # A 1M-sample volume (38 MB directory) for the memory figure.
    idx = _million_sample_idx(tmp_path)
    big = tmp_path / "big.dlfs"
    run("pack", idx, "-o", big, "-q", "--layout", "tree", check=0)
    directory = dlfs.Volume(str(big)).info()["directory_bytes"]

    # Rank 0 lists the regions late: the others (node 1 too) must not let go
    # of theirs before every rank has listed them.
    reports = torchrun_style(tmp_path, "--volume", one, "--train", "--memory-volume", big,
                             "--late-rank", 0)
    for r in reports.values():
        assert r["launcher"] == "torchrun" and not r["mpi"]
        # No process fell back to a copy of its own (the note says why)...
        assert r["memory"]["notes"] == [] and r["directory_notes"] == [], \
            (r["rank"], r["memory"]["notes"], r["directory_notes"])
        # ...and every rank, listing while every rank held its datasets,
        # finds one region per fake node.
        assert len(r["memory"]["dir_regions"]) == 2 and len(r["dir_regions"]) == 2, \
            (r["rank"], r["memory"]["dir_regions"], r["dir_regions"])
    check_every_sample_once(reports, held, "images", 2)
    check_every_sample_once(reports, held, "dataset", 2)
    for rank, r in reports.items():
        assert r["epochs"][1]["images"] == cpp_order(run, one, 5, 1, rank, 4)
    # Each process used to hold the directory twice (dataset and loader):
    # 7.7x its size for 4 ranks. Now the node keeps one copy.
    private = sum(r["memory"]["private"] for r in reports.values())
    print(f"4 ranks: {private / 1e6:.1f} MB private, "
          f"{sum(r['memory']['pss'] for r in reports.values()) / 1e6:.1f} MB PSS; "
          f"directory {directory / 1e6:.1f} MB")
    assert private <= 1.5 * directory, (private, directory)


def _million_sample_idx(tmp_path):
    """An IDX split of 1,000,000 4-byte samples (a sizeable directory)."""
    idx = tmp_path / "idx"
    idx.mkdir()
    n = 1_000_000
    with open(idx / "train-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 2, 2) + bytes(4 * n))
    with open(idx / "train-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + (np.arange(n) % 10).astype(np.uint8).tobytes())
    return idx


@pytest.mark.parametrize("launch", ["mpirun", "torchrun"])
def test_a_compact_directory_is_mapped_by_every_rank_not_copied(tmp_path, volumes, run, launch):
    """Format v3's directory is used in place through a read-only mapping of
    the volume file: every rank of a node shares the page cache's one copy,
    with no node region to make, name or remove, and no rank holds a copy
    of its own (issue 47)."""
    one, _, _ = volumes
    idx = _million_sample_idx(tmp_path)
    big = tmp_path / "big.dlfs"
    run("pack", idx, "-o", big, "-q", check=0)  # the default: compact
    info = dlfs.Volume(str(big)).info()
    assert info["layout"] == "compact"
    args = ("--volume", one, "--memory-volume", big, "--epochs", 1)
    if launch == "mpirun":
        rc, err, _, reports = mpirun(tmp_path, *args)
        assert rc == 0, err
    else:
        reports = torchrun_style(tmp_path, *args)
    assert sorted(reports) == [0, 1, 2, 3]
    for r in reports.values():
        # Listed while every rank held a LoaderDataset of `big` (and before
        # `one`, a tree volume with its node regions, was opened).
        assert r["memory"]["notes"] == [] and r["memory"]["dir_regions"] == []
    # The mapping's pages are the page cache's: not private to any rank
    # (in the tree layout each node held a 38 MB copy of this directory).
    private = sum(r["memory"]["private"] for r in reports.values())
    assert private <= 0.25 * info["directory_bytes"], (private, info["directory_bytes"])


def test_a_rank_with_a_bad_path_fails_the_whole_job(tmp_path, volumes):
    one, _, _ = volumes
    rc, err, seconds, _ = mpirun(tmp_path, "--volume", one, "--fail", "bad-path", timeout=120)
    assert rc != 0 and seconds < 60
    assert "one.dlfs.missing" in err and "rank 1" in err, err


def test_an_exception_on_one_rank_aborts_the_job(tmp_path, volumes):
    one, _, _ = volumes
    rc, err, seconds, _ = mpirun(tmp_path, "--volume", one, "--fail", "exception", timeout=120)
    assert rc != 0 and seconds < 60
    assert "rank 1 stopped with RuntimeError: a bug in the training loop" in err, err
    assert "aborting the MPI job" in err


def test_without_mpi4py_the_module_works_and_comm_says_what_to_install(tmp_path, volumes):
    one, _, _ = volumes
    code = (
        "import sys; sys.modules['mpi4py'] = None\n"  # as if python3-mpi4py were not installed
        "import dlfs\n"
        f"l = dlfs.Loader({str(one)!r}, 64)\n"
        "assert sum(len(b) for b in l) == 512 and l.job.launcher == 'none'\n"
        "try:\n"
        f"    dlfs.Loader({str(one)!r}, 64, comm=object())\n"
        "except ImportError as e:\n"
        "    assert 'python3-mpi4py' in str(e), e\n"
        "else:\n"
        "    raise AssertionError('comm= without mpi4py did not raise')\n")
    subprocess.run([sys.executable, "-c", code], check=True, env=_env(tmp_path))


def test_every_rank_raises_what_one_process_would(tmp_path, volumes):
    """Issue 49: under mpirun a missing volume raised FileNotFoundError on
    rank 0 and KeyError on rank 1, so `except FileNotFoundError` crashed
    rank 1. Every error of the collective open and of the loaders'
    construction is now of one type on every rank: the one a single process
    raises."""
    one, _, _ = volumes
    job = os.path.join(HERE, "mpi_errors_job.py")
    alone = tmp_path / "alone"
    alone.mkdir()
    env = _env(tmp_path)
    subprocess.run([sys.executable, job, str(alone), str(one)], check=True, env=env, timeout=120)
    expected = _reports(alone)[0]["errors"]
    assert expected["loader-missing"] == "FileNotFoundError", expected
    assert expected["loader-garbage"] == "CorruptVolumeError", expected
    assert expected["loader-misspelt"] == "TypeError", expected
    assert all(expected[k] for k in expected), expected  # each case fails
    out = tmp_path / "mpi"
    out.mkdir()
    proc = subprocess.run([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2",
                           sys.executable, job, str(out), str(one)],
                          capture_output=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    reports = _reports(out)
    assert sorted(reports) == [0, 1]
    for rank in (0, 1):
        assert reports[rank]["errors"] == expected, (rank, reports[rank]["errors"])


def test_train_ddp_dataset_loader_reports_what_it_read(tmp_path, volumes):
    """Issue 49: examples/train_ddp.py --loader dataset always printed "read
    0.0 MB from storage, 0.0 MB from node caches"; its docstring's
    `torchrun --nproc-per-node` is refused by Debian's torchrun."""
    one, _, _ = volumes
    example = os.path.join(HERE, "..", "..", "examples", "train_ddp.py")
    assert "--nproc-per-node" not in open(example).read()
    proc = subprocess.run([sys.executable, example, str(one), "--loader", "dataset",
                           "--epochs", "1", "--size", "16", "--batch", "32"],
                          capture_output=True, timeout=240, env=_env(tmp_path))
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr.decode()
    line = [l for l in out.splitlines() if l.startswith("epoch 0:")][0]
    stored, cached = (float(x) for x in
                      re.search(r"read ([\d.]+) MB from storage, ([\d.]+) MB from node caches",
                                line).groups())
    assert stored + cached > 0, line
    proc = subprocess.run([sys.executable, example, str(one), "--loader", "dataset",
                           "--epochs", "1", "--size", "16", "--batch", "32", "--workers", "2"],
                          capture_output=True, timeout=240, env=_env(tmp_path))
    assert proc.returncode == 0, proc.stderr.decode()
    assert "counted by each DataLoader worker" in proc.stdout.decode()
