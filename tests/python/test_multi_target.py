"""Multi-target volumes through the CLI and Python: pack --targets / --target-path,
--target-map on every verb that opens a volume, and clear errors for missing,
foreign, swapped and truncated targets."""
import json
import os
import shutil
import signal

import pytest

from test_cli import _big_tree
from testutil import interrupt, pack_mid_write

OPENING_VERBS = ["info", "ls", "cat", "verify", "epoch", "bench", "mount"]


@pytest.fixture
def big_tree(tmp_path):
    """About 120 samples of 0..20 KB in three classes: {relative path: bytes}."""
    root = tmp_path / "tree"
    files = {}
    rnd = __import__("random").Random(7)
    for i in range(120):
        rel = f"c{i % 3}/{i:04d}.png"  # any bytes: the importer goes by extension
        files[rel] = os.urandom(rnd.randrange(0, 20000))
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(files[rel])
    return root, files


@pytest.fixture
def volume3(tmp_path, big_tree, run):
    root, files = big_tree
    vol = tmp_path / "v.dlfs"
    out = run("pack", root, "-o", vol, "--targets", 3, "-q", check=0).stdout.decode()
    assert f"3 targets: {vol}, {vol}.t1, {vol}.t2" in out
    return vol, files


def _rows(run, vol, *extra):
    out = run("ls", vol, "-r", "--json", *extra, check=0).stdout
    return [json.loads(line) for line in out.splitlines()]


@pytest.mark.parametrize("verb", OPENING_VERBS)
def test_opening_verbs_document_target_map(run, verb):
    assert b"--target-map" in run(verb, "--help", check=0).stdout


def test_pack_help_documents_targets(run):
    out = run("pack", "--help", check=0).stdout
    assert b"--targets" in out and b"--target-path" in out and b"OUT.t1" in out


def test_three_targets_read_back_exactly(run, volume3):
    vol, files = volume3
    for t in (1, 2):
        assert os.path.exists(f"{vol}.t{t}")
    info = json.loads(run("info", vol, "--json", check=0).stdout)
    assert info["targets"] == [str(vol), f"{vol}.t1", f"{vol}.t2"]
    details = info["target_details"]
    assert [d["index"] for d in details] == [0, 1, 2]
    assert [d["stored_path"] for d in details] == ["", "v.dlfs.t1", "v.dlfs.t2"]
    for t, d in enumerate(details):
        assert d["size"] == os.path.getsize(info["targets"][t])
        assert d["samples"] > 20
    assert sum(d["samples"] for d in details) == len(files)
    assert sum(d["bytes"] for d in details) == info["bytes"] == sum(map(len, files.values()))
    # Greedy balance by the unit placed, a block of the compact directory
    # (32 samples for several targets, of at most 20 KB here): within one.
    sizes = [d["bytes"] for d in details]
    assert max(sizes) - min(sizes) <= 32 * 20000, sizes
    assert all(d["samples"] >= 20 for d in details), details
    text = run("info", vol, check=0).stdout.decode()
    assert "targets      3" in text and f"{vol}.t2:" in text

    for rel, data in files.items():
        assert run("cat", vol, rel, check=0).stdout == data
    assert b"0 bad" in run("verify", vol, check=0).stdout
    assert {r["path"] for r in _rows(run, vol)} == set(files)


def test_epoch_and_bench_match_a_single_target_volume(run, big_tree, volume3, tmp_path):
    root, files = big_tree
    vol3, _ = volume3
    vol1 = tmp_path / "one.dlfs"
    run("pack", root, "-o", vol1, "-q", check=0)
    # Same directory, so the same sample indices in the same epoch order.
    for args in [(), ("--seed", 5, "--epoch", 2), ("--world", 2, "--rank", 1)]:
        assert run("epoch", vol3, *args, check=0).stdout == run("epoch", vol1, *args,
                                                                check=0).stdout
    for engine in ["pread", "uring"]:
        proc = run("bench", vol3, "--engine", engine, "--batch", 16, "--json")
        if proc.returncode != 0 and engine == "uring" and b"unavailable" in proc.stderr:
            continue
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["samples"] == len(files) and out["targets"] == 3
        assert out["payload_bytes"] == sum(map(len, files.values()))


def test_explicit_target_paths(run, big_tree, tmp_path):
    root, files = big_tree
    (tmp_path / "a").mkdir()
    other = tmp_path.parent / (tmp_path.name + "-elsewhere")
    other.mkdir()
    try:
        vol = tmp_path / "v.dlfs"
        run("pack", root, "-o", vol, "--target-path", tmp_path / "a" / "part1",
            "--target-path", other / "part2", "-q", check=0)
        info = json.loads(run("info", vol, "--json", check=0).stdout)
        assert [d["stored_path"] for d in info["target_details"]] == [
            "", "a/part1", str(other / "part2")]
        for rel, data in list(files.items())[::7]:
            assert run("cat", vol, rel, check=0).stdout == data
        # --targets must agree with the paths given.
        proc = run("pack", root, "-o", tmp_path / "w.dlfs", "--targets", 3,
                   "--target-path", tmp_path / "x")
        assert proc.returncode == 2 and b"--target-path" in proc.stderr
        assert not (tmp_path / "w.dlfs").exists() and not (tmp_path / "x").exists()
        for bad in ["0", "9"]:
            assert run("pack", root, "-o", tmp_path / "w.dlfs", "--targets", bad).returncode == 2
    finally:
        shutil.rmtree(other)


def test_missing_target_is_named_and_target_map_finds_it(run, volume3, tmp_path):
    vol, files = volume3
    moved = tmp_path / "moved" / "t2"
    moved.parent.mkdir()
    os.rename(f"{vol}.t2", moved)
    for verb in ["info", "verify", "ls", "epoch", "bench"]:
        proc = run(verb, vol)
        assert proc.returncode == 2, verb
        assert f"{vol}: target 2 ({vol}.t2): No such file".encode() in proc.stderr, proc.stderr
    mapping = ("--target-map", f"2={moved}")
    info = json.loads(run("info", vol, "--json", *mapping, check=0).stdout)
    assert info["targets"][2] == str(moved)
    assert info["target_details"][2]["stored_path"] == "v.dlfs.t2"
    assert b"0 bad" in run("verify", vol, *mapping, check=0).stdout
    for rel, data in files.items():
        assert run("cat", vol, rel, *mapping, check=0).stdout == data
    assert len(run("epoch", vol, *mapping, check=0).stdout.splitlines()) == len(files)
    bench = json.loads(run("bench", vol, "--engine", "pread", "--json", *mapping,
                           check=0).stdout)
    assert bench["samples"] == len(files)
    assert len(_rows(run, vol, *mapping)) == len(files)
    # Bad maps are usage errors naming the problem.
    for bad, says in [("2", b"bad target map entry"), ("x=y", b"bad target map entry"),
                      ("3=/tmp/x", b"names target 3"), ("0=/tmp/x", b"names target 0"),
                      (f"2={moved},2={moved}", b"twice")]:
        proc = run("info", vol, "--target-map", bad)
        assert proc.returncode == 2 and says in proc.stderr, (bad, proc.stderr)


@pytest.mark.parametrize("damage", ["foreign", "swapped", "truncated", "superblock"])
def test_wrong_targets_are_refused_naming_the_file(run, big_tree, volume3, tmp_path, damage):
    vol, _ = volume3
    t1 = f"{vol}.t1"
    if damage == "foreign":
        root, _ = big_tree
        other = tmp_path / "other.dlfs"
        run("pack", root, "-o", other, "--targets", 3, "-q", check=0)
        shutil.copyfile(f"{other}.t1", t1)
        says = b"differs from target 0's"
    elif damage == "swapped":
        os.rename(t1, tmp_path / "x")
        os.rename(f"{vol}.t2", t1)
        os.rename(tmp_path / "x", f"{vol}.t2")
        says = b"is target 2 of the volume, not target 1"
    elif damage == "truncated":
        os.truncate(t1, os.path.getsize(t1) - 4096)
        says = b"truncated"
    else:
        raw = bytearray(open(t1, "rb").read())
        raw[60] ^= 1
        open(t1, "wb").write(raw)
        says = b"checksum mismatch; the superblock copy at the end of the file is intact"
    for verb in ["info", "verify", "ls"]:
        proc = run(verb, vol)
        assert proc.returncode == 2, (verb, proc.stderr)
        assert f"target 1 ({t1})".encode() in proc.stderr, proc.stderr
        assert says in proc.stderr, proc.stderr
    # A target other than 0 is not an entry point.
    proc = run("info", f"{vol}.t2")
    assert proc.returncode == 2 and b"open the volume through its target 0" in proc.stderr


def test_verify_checks_every_target(run, volume3):
    vol, files = volume3
    t2 = f"{vol}.t2"
    raw = bytearray(open(t2, "rb").read())
    raw[-100] ^= 1  # the superblock copy of target 2
    victim = next(rel for rel, data in files.items() if len(data) > 100 and raw.find(data) > 0)
    raw[raw.find(files[victim]) + 50] ^= 0xFF
    open(t2, "wb").write(raw)
    proc = run("verify", vol)
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert f"'{victim}': checksum mismatch" in err
    assert f"target 2 ({t2}): the superblock copy" in err
    assert b"1 bad, superblock copy damaged" in proc.stdout


def test_pack_keeps_the_overwrite_policy_for_every_target(run, big_tree, tmp_path):
    root, _ = big_tree
    vol = tmp_path / "v.dlfs"
    (tmp_path / "v.dlfs.t2").write_bytes(b"my thesis")
    proc = run("pack", root, "-o", vol, "--targets", 3)
    assert proc.returncode == 2
    assert f"{vol}.t2: already exists".encode() in proc.stderr and b"--force" in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["tree", "v.dlfs.t2"]
    assert (tmp_path / "v.dlfs.t2").read_bytes() == b"my thesis"
    run("pack", root, "-o", vol, "--targets", 3, "--force", "-q", check=0)
    assert b"0 bad" in run("verify", vol, check=0).stdout


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_interrupted_multi_target_pack_leaves_no_volume(dlfs_bin, run, tmp_path, sig):
    src = tmp_path / "src"
    _big_tree(src)
    out = tmp_path / "out"
    out.mkdir()
    vol = out / "v.dlfs"
    proc = pack_mid_write([dlfs_bin, "pack", str(src), "-o", str(vol), "--targets", "4", "-q"],
                          out, temporaries=4)
    interrupt(proc, sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    leftovers = sorted(p.name for p in out.iterdir())
    if sig == signal.SIGINT:
        assert leftovers == [], leftovers
        assert b"interrupted" in err
    for name in leftovers:  # SIGKILL leaves temporary files: none is a volume
        assert ".tmp." in name
        assert run("info", out / name).returncode == 2


def test_python_volume_and_loader_with_target_map(volume3, tmp_path):
    dlfs = pytest.importorskip("dlfs", reason="Python module not built (pybind11 missing)")
    vol_path, files = volume3
    moved = tmp_path / "t1-moved"
    os.rename(f"{vol_path}.t1", moved)
    with pytest.raises(FileNotFoundError, match=r"target 1 \(.*v.dlfs.t1\)"):
        dlfs.Volume(str(vol_path))
    vol = dlfs.Volume(str(vol_path), target_map={1: str(moved)})
    info = vol.info()
    assert info["targets"][1] == str(moved)
    assert [d["stored_path"] for d in info["target_details"]] == ["", "v.dlfs.t1", "v.dlfs.t2"]
    for i in range(len(vol)):
        assert vol[i][0] == files[vol.path(i)]
    seen = 0
    for batch in dlfs.Loader(vol, batch_size=16, engine="pread"):
        for k in range(len(batch)):
            assert bytes(batch[k]) == files[vol.path(int(batch.indices[k]))]
            seen += 1
    assert seen == len(files)
