import os
import pathlib
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def dlfs_bin():
    """Path of the dlfs CLI: $DLFS_BIN (set by CTest) or build/dlfs."""
    path = os.environ.get("DLFS_BIN") or str(REPO / "build" / "dlfs")
    if not os.access(path, os.X_OK):
        pytest.fail(f"dlfs binary not found at {path}; build first or set DLFS_BIN")
    return path


@pytest.fixture
def run(dlfs_bin):
    """Runs `dlfs ARGS...`, returning the CompletedProcess (bytes output)."""

    def _run(*args, check=None):
        proc = subprocess.run([dlfs_bin, *map(str, args)], capture_output=True, timeout=300)
        if check is not None:
            assert proc.returncode == check, (proc.returncode, proc.stderr.decode())
        return proc

    return _run


@pytest.fixture
def tree(tmp_path):
    """A small ImageFolder-style tree: {relative path: bytes}."""
    files = {
        "cat/001.png": b"\x89PNG cat one",
        "cat/002.png": b"\x89PNG cat two",
        "dog/a/001.png": b"\x89PNG dog nested",
        "dog/002.png": b"",
        "Emu/x.png": os.urandom(3000),
    }
    root = tmp_path / "tree"
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root, files


@pytest.fixture
def volume(tmp_path, tree, run):
    root, files = tree
    vol = tmp_path / "v.dlfs"
    run("pack", root, "-o", vol, "-q", check=0)
    return vol, files
