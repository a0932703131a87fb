"""Every Python snippet in README.md runs as written.

Each ```python block runs as its own script, in a temporary directory that
holds out/fashion-mnist.dlfs as the README makes it (`dlfs pack` of
Fashion-MNIST's IDX files: raw 28x28 samples under train/ and test/), packed
from small IDX files of the same layout, with warnings turned into errors (so,
for example, torch.from_numpy on a sample must not warn that it is
read-only).
"""
import os
import pathlib
import re
import struct
import subprocess
import sys

import numpy as np
import pytest

dlfs = pytest.importorskip("dlfs", reason="Python module not built")

REPO = pathlib.Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"^```python\n(.*?)^```$", (REPO / "README.md").read_text(), re.M | re.S)


def test_readme_has_python_snippets():
    assert len(BLOCKS) >= 2  # the reading side and the Writer


def test_readme_packs_the_volume_its_snippets_read():
    assert "pack /usr/share/datasets/fashion-mnist -o out/fashion-mnist.dlfs" in (
        REPO / "README.md").read_text()


@pytest.fixture
def workdir(tmp_path):
    """Fashion-MNIST's four IDX files, smaller, packed as the README says."""
    idx = tmp_path / "fashion-mnist"
    idx.mkdir()
    for split, count in [("train", 300), ("t10k", 60)]:
        pixels = np.arange(count * 784, dtype=np.uint32).astype(np.uint8)
        (idx / f"{split}-images-idx3-ubyte").write_bytes(
            struct.pack(">IIII", 0x803, count, 28, 28) + pixels.tobytes())
        (idx / f"{split}-labels-idx1-ubyte").write_bytes(
            struct.pack(">II", 0x801, count) + bytes(i % 10 for i in range(count)))
    (tmp_path / "out").mkdir()
    dlfs.pack(str(idx), str(tmp_path / "out/fashion-mnist.dlfs"))
    return tmp_path


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_snippet_runs(workdir, index):
    pytest.importorskip("torch")
    # The dlfs this test imported, wherever it came from (build/python, an install).
    package_root = str(pathlib.Path(dlfs.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONWARNINGS="error", PYTHONPATH=package_root)
    proc = subprocess.run([sys.executable, "-c", BLOCKS[index]], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"README snippet {index}:\n{BLOCKS[index]}\n{proc.stderr}"
