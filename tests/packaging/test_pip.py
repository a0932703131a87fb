"""`pip install --no-build-isolation .` in a virtual environment made with
--system-site-packages (Debian's pip, setuptools, wheel, numpy, torch),
offline; then `import dlfs` works from any directory.

The source tree is copied to a temporary directory first, so the test
writes nothing into the checkout. setup.py is pointed at the CTest build
($DLFS_BUILD_DIR) so the module is not compiled a second time; with
DLFS_TEST_PIP_FROM_SCRATCH=1 it configures and compiles its own build
instead (minutes on two cores).
"""
import os
import pathlib
import re
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("DLFS_BUILD_DIR") or REPO / "build")
SKIP_DIRS = {".git", "out", "__pycache__", ".cache"}


def _run(args, **kwargs):
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=1800,
                          **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, args))}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _copy_source(dest):
    def ignore(directory, names):
        top = pathlib.Path(directory) == REPO  # build trees: build/, build-asan/, ...
        return [n for n in names if n in SKIP_DIRS or n.endswith(".egg-info")
                or (top and n.startswith("build"))]
    shutil.copytree(REPO, dest, ignore=ignore)


def _missing_python_tools():
    """What pip install in a venv needs from Debian (python3-venv, -pip,
    -setuptools, -wheel), or "" when all is there."""
    # Looked up, not imported: importing pip before setuptools trips setuptools' distutils hack.
    code = ("import importlib.util as u; print(' '.join(m for m in "
            "['ensurepip', 'pip', 'setuptools', 'wheel'] if u.find_spec(m) is None))")
    proc = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else proc.stderr.strip()


def test_pip_install_in_a_venv(tmp_path):
    if not (BUILD / "python" / "dlfs").is_dir():
        pytest.skip(f"no Python module in the build at {BUILD}")
    if not shutil.which("cmake"):
        pytest.skip("cmake not on PATH")
    missing = _missing_python_tools()
    if missing:
        pytest.skip(f"python3-venv/pip/setuptools/wheel missing: {missing}")
    src = tmp_path / "src"
    _copy_source(src)
    venv = tmp_path / "venv"
    _run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv])
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if os.environ.get("DLFS_TEST_PIP_FROM_SCRATCH"):
        env.pop("DLFS_CMAKE_BUILD_DIR", None)
    else:
        env["DLFS_CMAKE_BUILD_DIR"] = str(BUILD)
    _run([venv / "bin/pip", "install", "--no-build-isolation", "--no-index", "--no-deps", src],
         env=env, cwd=tmp_path)
    # Imported from an unrelated directory, from the venv.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = _run([venv / "bin/python", "-c",
                "import dlfs, dlfs.torch; print(dlfs.__version__); print(dlfs.__file__)"],
               env=env, cwd=elsewhere)
    version, where = out.split()
    want = re.search(r"project\(dlfs VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text())[1]
    assert version == want
    assert where.startswith(str(venv)), where
    meta = _run([venv / "bin/pip", "show", "dlfs"], env=env, cwd=elsewhere)
    assert f"Version: {want}" in meta
    # And it works: a volume written and read back by the installed package.
    _run([venv / "bin/python", "-c",
          "import dlfs\n"
          "with dlfs.Writer('v.dlfs') as w: w.add('a/b', b'xyz', 3)\n"
          "with dlfs.Volume('v.dlfs') as v: assert v[0] == (b'xyz', 3)\n"],
         env=env, cwd=elsewhere)
