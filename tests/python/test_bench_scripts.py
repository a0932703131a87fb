"""The benchmark and project scripts as docs/ runs them (issue 41): each is
executable, and `--help` prints its usage and does nothing else — no
benchmark started, no build configured, nothing written in the checkout or
the benchmarks' work directory."""
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p for d in ("bench", "scripts", "examples") for p in (REPO / d).rglob("*")
                 if p.suffix in (".sh", ".py") and p.read_bytes().startswith(b"#!"))


def _tree(root):
    """Every path below `root` with its size and mtime, build directories aside."""
    out = {}
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(("build", ".git"))]
        for n in names:
            st = os.stat(os.path.join(dirpath, n))
            out[os.path.join(dirpath, n)] = (st.st_size, st.st_mtime_ns)
    return out


def test_there_are_scripts():
    assert len(SCRIPTS) > 20 and REPO / "bench/cache/run_cache_bench.py" in SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_script_is_executable_and_help_only_helps(script, tmp_path):
    assert os.access(script, os.X_OK), f"{script.relative_to(REPO)} is not executable"
    before = _tree(REPO / script.relative_to(REPO).parts[0])
    work = tmp_path / "bench"
    env = dict(os.environ, DLFS_BENCH_DIR=str(work), DLFS_BUILD_DIR=str(tmp_path / "no-build"))
    proc = subprocess.run([str(script), "--help"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert len(proc.stdout.strip().splitlines()) >= 2, proc.stdout  # a usage, not a word
    assert _tree(REPO / script.relative_to(REPO).parts[0]) == before
    assert sorted(os.listdir(tmp_path)) == [], os.listdir(tmp_path)


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s.suffix == ".py"],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_python_script_runs_on_debians_python(script):
    # Debian's python3-* packages (numpy, torch, lmdb) and the dlfs module the
    # build makes belong to /usr/bin/python3; `env python3` may find another.
    assert script.read_text().splitlines()[0] == "#!/usr/bin/python3"
