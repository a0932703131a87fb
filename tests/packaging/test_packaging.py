"""dlfs installs like a library: `cmake --install` into a temporary prefix,
consumer projects built with find_package(dlfs) and with pkg-config, the
.deb from cpack, and `pip install` in a virtual environment.

Run by CTest (tests/CMakeLists.txt) against the build tree in
$DLFS_BUILD_DIR; nothing is installed outside temporary directories.
"""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("DLFS_BUILD_DIR") or REPO / "build")
CONSUMER = pathlib.Path(__file__).resolve().parent / "consumer"


def _run(args, **kwargs):
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600,
                          **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, args))}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _cache(name):
    text = (BUILD / "CMakeCache.txt").read_text()
    match = re.search(rf"^{name}:[A-Z]+=(.*)$", text, re.M)
    return match.group(1) if match else ""


def _version():
    return re.search(r"project\(dlfs VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text())[1]


def _with_mpi():
    return (BUILD / "libdlfs_mpi.a").exists()


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    if not (BUILD / "CMakeCache.txt").exists():
        pytest.fail(f"no CMake build at {BUILD}; set DLFS_BUILD_DIR")
    p = tmp_path_factory.mktemp("prefix")
    _run(["cmake", "--install", BUILD, "--prefix", p, "--strip"])
    return p


def _python_dir(prefix):
    dirs = list(prefix.glob("lib/python3*/*-packages"))
    assert len(dirs) == 1, dirs
    return dirs[0]


def test_install_lays_out_library_headers_config_cli_and_python(prefix, tmp_path):
    libdir = prefix / _cache("CMAKE_INSTALL_LIBDIR")
    for rel in ["libdlfs.a", "cmake/dlfs/dlfsConfig.cmake", "cmake/dlfs/dlfsConfigVersion.cmake",
                "cmake/dlfs/dlfsTargets.cmake", "pkgconfig/dlfs.pc"]:
        assert (libdir / rel).is_file(), rel
    for header in ["volume.h", "builder.h", "loader.h", "version.h", "status.h",
                   "image_prep_options.h"]:
        assert (prefix / "include/dlfs" / header).is_file(), header
    assert not list(prefix.glob("include/dlfs/*.in"))
    # The CLI's reports (library dlfs_report, built with the CLI) are installed
    # with their header; the MPI runs' (dlfs_mpi_report) are not: no header
    # without its library.
    assert (libdir / "libdlfs_report.a").is_file()
    assert (prefix / "include/dlfs_tools/report.h").is_file()
    assert (prefix / "include/dlfs_tools/bench.h").is_file()  # report.h needs it
    assert not (prefix / "include/dlfs_tools/mpi_report.h").exists()
    assert not (libdir / "libdlfs_mpi_report.a").exists()
    assert _run([prefix / "bin/dlfs", "--version"]).strip() == f"dlfs {_version()}"
    # The installed Python package, imported from elsewhere.
    env = dict(os.environ, PYTHONPATH=str(_python_dir(prefix)))
    out = _run([sys.executable, "-c", "import dlfs, dlfs.torch; print(dlfs.__version__, "
                "dlfs.__file__)"], cwd=tmp_path, env=env)
    version, where = out.split()
    assert version == _version() and where.startswith(str(prefix))


def test_cmake_consumer_with_find_package(prefix, tmp_path):
    build = tmp_path / "build"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    _run(["cmake", "-S", CONSUMER, "-B", build, *generator, f"-DCMAKE_PREFIX_PATH={prefix}"])
    _run(["cmake", "--build", build])
    out = _run([build / "consumer", tmp_path / "v.dlfs"])
    assert out.startswith(f"ok dlfs {_version()}: 300 samples read back"), out
    # dlfs::report: the same document as the installed `dlfs info --json`.
    report = _run([build / "consumer_report", "v.dlfs"], cwd=tmp_path)
    info = json.loads(report)
    assert info["samples"] == 300 and info["class_names"] == ["even", "odd"], info
    assert report == _run([prefix / "bin/dlfs", "info", "--json", "v.dlfs"], cwd=tmp_path)
    if _with_mpi():  # dlfs::mpi and MPI's C library, in a C++-only project
        out = _run([build / "consumer_mpi"])
        assert out.startswith("ok dlfs::mpi: rank 0 of 1"), out


def test_find_package_refuses_an_incompatible_version(prefix, tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src/CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(p LANGUAGES CXX)\n"
        "find_package(dlfs 99.0 REQUIRED)\n")
    proc = subprocess.run(["cmake", "-S", tmp_path / "src", "-B", tmp_path / "b",
                           f"-DCMAKE_PREFIX_PATH={prefix}"], capture_output=True, text=True)
    out = proc.stderr + proc.stdout
    assert proc.returncode != 0, out
    assert "dlfsConfig.cmake, version: " + _version() in out, out


@pytest.mark.skipif(not shutil.which("pkg-config"), reason="pkg-config not installed")
def test_pkgconfig_consumer(prefix, tmp_path):
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / _cache("CMAKE_INSTALL_LIBDIR") / "pkgconfig"))
    assert _run(["pkg-config", "--modversion", "dlfs"], env=env).strip() == _version()
    flags = _run(["pkg-config", "--cflags", "--libs", "dlfs"], env=env).split()
    cxx = os.environ.get("CXX") or shutil.which("c++") or "g++"
    exe = tmp_path / "consumer"
    _run([cxx, "-std=c++20", CONSUMER / "main.cc", "-o", exe, *flags])
    out = _run([exe, tmp_path / "v.dlfs"])
    assert out.startswith(f"ok dlfs {_version()}: 300 samples read back"), out


@pytest.mark.skipif(not (shutil.which("dpkg-deb") and shutil.which("dpkg-shlibdeps")),
                    reason="dpkg-deb or dpkg-shlibdeps (dpkg-dev) not installed")
def test_cpack_builds_an_installable_deb(tmp_path):
    _run(["cpack", "--config", BUILD / "CPackConfig.cmake", "-G", "DEB", "-B", tmp_path])
    debs = list(tmp_path.glob("dlfs_*.deb"))
    assert len(debs) == 1 and debs[0].name.startswith(f"dlfs_{_version()}_"), debs
    deb = debs[0]
    files = {line.split()[-1].lstrip(".") for line in _run(["dpkg-deb", "-c", deb]).splitlines()}
    libdir = _cache("CMAKE_INSTALL_LIBDIR")
    want = ["/usr/bin/dlfs", f"/usr/{libdir}/libdlfs.a", "/usr/include/dlfs/volume.h",
            "/usr/include/dlfs/version.h", f"/usr/{libdir}/cmake/dlfs/dlfsConfig.cmake",
            f"/usr/{libdir}/pkgconfig/dlfs.pc"]
    if (BUILD / "python/dlfs").is_dir():
        want += ["/usr/lib/python3/dist-packages/dlfs/__init__.py",
                 "/usr/lib/python3/dist-packages/dlfs/writer.py"]
        assert any(re.fullmatch(r"/usr/lib/python3/dist-packages/dlfs/_dlfs\..*\.so", f)
                   for f in files), sorted(files)
    missing = [f for f in want if f not in files]
    assert not missing, (missing, sorted(files))
    depends = _run(["dpkg-deb", "-f", deb, "Depends"])
    wanted_depends = ["libisal-dev", "liburing-dev", "libc6"]
    if (BUILD / "python/dlfs").is_dir():
        wanted_depends.append("python3-numpy")
    for dep in wanted_depends:
        assert dep in depends, depends
    # Would apt install it here? A simulation: changes nothing on the machine.
    if shutil.which("apt-get"):
        proc = subprocess.run(["apt-get", "install", "-s", "--no-install-recommends", deb],
                              capture_output=True, text=True, timeout=300)
        if "Could not open lock" not in proc.stderr:
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert re.search(r"^Inst dlfs ", proc.stdout, re.M), proc.stdout
