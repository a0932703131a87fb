"""dlfs pack and verify show total, percentage, rate and ETA on a terminal."""
import os
import pty
import re
import subprocess

import pytest


def _run_on_terminal(args):
    """Runs args with stderr on a pseudo-terminal; returns (rc, stderr text)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    proc.wait(timeout=300)
    return proc.returncode, b"".join(chunks).decode(errors="replace")


@pytest.fixture
def tree_2000(tmp_path):
    root = tmp_path / "tree"
    for c in range(4):
        (root / f"c{c}").mkdir(parents=True)
    for i in range(2000):
        (root / f"c{i % 4}" / f"{i:05d}.png").write_bytes(bytes([i % 256]) * 300)
    (root / "c0" / "notes.txt").write_bytes(b"ignored")
    return root


def test_pack_and_verify_progress_on_a_terminal(dlfs_bin, tmp_path, tree_2000):
    vol = tmp_path / "v.dlfs"
    rc, err = _run_on_terminal([dlfs_bin, "pack", str(tree_2000), "-o", str(vol)])
    assert rc == 0, err
    # Counted first: the total is there from the first line; the last says 100%.
    lines = [l for l in re.split(r"[\r\n]", err) if "packed" in l]
    assert lines, err
    assert re.search(r"packed \d+ of 2000 samples \(\d+\.\d%\), .*samples/s", lines[0]), lines[0]
    assert any("of 2000 samples (100.0%)" in l for l in lines), lines
    assert any("ETA" in l for l in lines), lines

    rc, err = _run_on_terminal([dlfs_bin, "verify", str(vol)])
    assert rc == 0, err
    assert re.search(r"verified \d+ of 2000 samples \(\d+\.\d%\), .*samples/s", err), err


def test_no_progress_without_a_terminal(run, tmp_path, tree_2000):
    proc = run("pack", tree_2000, "-o", tmp_path / "v.dlfs", check=0)
    assert b"\r" not in proc.stderr and proc.stderr == b""
    proc = run("verify", tmp_path / "v.dlfs", check=0)
    assert proc.stderr == b""
