"""`dlfs mount`: the read-only FUSE view."""
import errno
import os
import shutil
import signal
import subprocess
import time

import pytest


def _fuse_unavailable(run):
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed (package fuse3)"
    help_text = run("mount", "--help").stdout
    if b"mount" not in help_text:
        return "dlfs built without FUSE"
    return None


@pytest.fixture
def mounted(run, volume, tmp_path):
    reason = _fuse_unavailable(run)
    if reason:
        pytest.skip(reason)
    vol, files = volume
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = run("mount", vol, mnt)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount here: {proc.stderr.decode().strip()}")
    try:
        yield mnt, files
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)


def _wait_mounted(path, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.ismount(path):
            return True
        time.sleep(0.05)
    return False


def test_tree_listing_and_bytes_match_the_source(mounted, tree):
    mnt, files = mounted
    root, _ = tree
    seen = {}
    for dirpath, _, names in os.walk(mnt):
        for n in names:
            p = os.path.join(dirpath, n)
            seen[os.path.relpath(p, mnt)] = (os.path.getsize(p), open(p, "rb").read())
    assert seen == {rel: (len(d), d) for rel, d in files.items()}
    assert sorted(os.listdir(mnt)) == sorted(os.listdir(root))


def test_writes_are_refused_with_erofs(mounted):
    mnt, _ = mounted
    for action in (lambda: open(mnt / "cat" / "new.png", "wb"),
                   lambda: open(mnt / "cat" / "001.png", "r+b"),
                   lambda: os.mkdir(mnt / "newdir"),
                   lambda: os.unlink(mnt / "cat" / "001.png"),
                   lambda: os.rename(mnt / "cat", mnt / "kat")):
        with pytest.raises(OSError) as e:
            action()
        assert e.value.errno == errno.EROFS


def test_imagefolder_works_unchanged(mounted, tree):
    datasets = pytest.importorskip("torchvision.datasets")
    mnt, _ = mounted
    root, _ = tree
    ref = datasets.ImageFolder(str(root), loader=lambda p: open(p, "rb").read())
    ours = datasets.ImageFolder(str(mnt), loader=lambda p: open(p, "rb").read())
    assert ours.class_to_idx == ref.class_to_idx
    assert [(os.path.relpath(p, mnt), t) for p, t in ours.samples] == \
        [(os.path.relpath(p, root), t) for p, t in ref.samples]
    for i in range(len(ref)):
        assert ours[i] == ref[i]


def test_damaged_sample_reads_fail_with_eio(run, volume, tmp_path):
    reason = _fuse_unavailable(run)
    if reason:
        pytest.skip(reason)
    vol, files = volume
    raw = bytearray(vol.read_bytes())
    raw[raw.find(files["Emu/x.png"]) + 5] ^= 0xFF
    vol.write_bytes(bytes(raw))
    mnt = tmp_path / "mnt2"
    mnt.mkdir()
    if run("mount", vol, mnt).returncode != 0:
        pytest.skip("cannot mount here")
    try:
        with pytest.raises(OSError) as e:
            open(mnt / "Emu" / "x.png", "rb").read()
        assert e.value.errno == errno.EIO
        assert open(mnt / "cat" / "001.png", "rb").read() == files["cat/001.png"]
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_foreground_mount_unmounts_on_signal(dlfs_bin, run, volume, tmp_path, sig):
    reason = _fuse_unavailable(run)
    if reason:
        pytest.skip(reason)
    vol, _ = volume
    mnt = tmp_path / "mnt3"
    mnt.mkdir()
    proc = subprocess.Popen([dlfs_bin, "mount", "-f", str(vol), str(mnt)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if not _wait_mounted(mnt):
        proc.kill()
        pytest.skip("mount did not come up: " + proc.communicate()[1].decode())
    assert sorted(os.listdir(mnt)) == ["Emu", "cat", "dog"]
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err.decode()
    assert not os.path.ismount(mnt)


def test_mount_errors(run, volume, tmp_path):
    if _fuse_unavailable(run):
        pytest.skip("no FUSE")
    vol, _ = volume
    proc = run("mount", tmp_path / "missing.dlfs", tmp_path)
    assert proc.returncode == 2 and b"missing.dlfs" in proc.stderr
    proc = run("mount", vol, tmp_path / "no-such-dir")
    assert proc.returncode == 2
