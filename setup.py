"""Builds the dlfs extension module with CMake for `pip install .`.

pyproject.toml holds the package metadata; this file only supplies the
version (from project() in CMakeLists.txt, its one place) and a build_ext
that drives CMake:

- By default it configures build/pip-<python> (a Release build of just the
  library and the module: no CLI, tests, benchmarks or FUSE; MPI when
  libopenmpi-dev and liblmdb-dev are installed, for the loaders' comm= and
  mpirun/srun jobs; ccache when installed) and builds the target _dlfs there. The directory is kept, so a
  second `pip install .` only recompiles what changed. A first build compiles
  the whole library: a few minutes on two cores.
- With DLFS_CMAKE_BUILD_DIR set to an existing CMake build of this tree
  (e.g. build/), it builds _dlfs there and takes that module, without
  reconfiguring it: seconds when it is up to date.
"""
import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def cmake_version():
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        match = re.search(r"project\(\s*dlfs\s+VERSION\s+([0-9][0-9.]*)", f.read())
    if not match:
        sys.exit("setup.py: no project(dlfs VERSION x.y.z) in CMakeLists.txt")
    return match.group(1)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        reuse = os.environ.get("DLFS_CMAKE_BUILD_DIR")
        if reuse:
            build_dir = os.path.abspath(reuse)
            if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
                sys.exit(f"setup.py: DLFS_CMAKE_BUILD_DIR={reuse} is not a CMake build directory")
        else:
            tag = f"py{sys.version_info[0]}{sys.version_info[1]}"
            build_dir = os.path.join(ROOT, "build", f"pip-{tag}")
            if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
                self.configure(build_dir)
        jobs = str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", build_dir, "--target", "_dlfs", "-j", jobs],
                       check=True)
        module = os.path.join(build_dir, "python", "dlfs", "_dlfs" + suffix)
        if not os.path.exists(module):
            sys.exit(f"setup.py: {module} was not built (is {build_dir} configured for this "
                     f"Python, {sys.executable}?)")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(module, dest)

    @staticmethod
    def configure(build_dir):
        args = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                "-DDLFS_BUILD_TESTS=OFF", "-DDLFS_BUILD_BENCHMARKS=OFF", "-DDLFS_BUILD_CLI=OFF",
                "-DDLFS_WITH_MPI=AUTO", "-DDLFS_WITH_FUSE=OFF", "-DDLFS_BUILD_PYTHON=ON",
                f"-DPython_EXECUTABLE={sys.executable}"]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        if shutil.which("ccache"):
            args += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        subprocess.run(args, check=True)


setup(
    version=cmake_version(),
    ext_modules=[CMakeExtension("dlfs._dlfs")],
    cmdclass={"build_ext": CMakeBuild},
    # setuptools' own build directories stay out of CMake's build/.
    options={"build": {"build_base": os.path.join("build", "setuptools")}},
    zip_safe=False,
)
