"""Every Python snippet in README.md runs as written.

Each ```python block runs as its own script, in a temporary directory that
holds a small stand-in for the demo's out/fashion-mnist.dlfs (raw 28x28
samples under train/ and test/), with warnings turned into errors (so, for
example, torch.from_numpy on a sample must not warn that it is read-only).
"""
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

dlfs = pytest.importorskip("dlfs", reason="Python module not built")

REPO = pathlib.Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"^```python\n(.*?)^```$", (REPO / "README.md").read_text(), re.M | re.S)


def test_readme_has_python_snippets():
    assert len(BLOCKS) >= 2  # the reading side and the Writer


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "out").mkdir()
    names = ["T-shirt", "Trouser", "Pullover"]
    with dlfs.Writer(tmp_path / "out/fashion-mnist.dlfs", class_names=names) as w:
        for split, count in [("train", 300), ("test", 60)]:
            for i in range(count):
                pixels = np.full((28, 28), i % 256, dtype=np.uint8)
                w.add(f"{split}/{names[i % 3]}/{i:05d}", pixels, label=i % 3)
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
