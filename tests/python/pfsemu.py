"""Runs tools/pfs-emu (the emulated parallel file system) from tests.

    with PfsEmu(backing, mnt, "--nodes", 2, "--eio", "v.dlfs:4096:10") as emu:
        data = (emu.view(1) / "v.dlfs").read_bytes()
        live = emu.stats()        # counters while mounted
    emu.final                     # counters printed at unmount

Starting skips the test (pytest.skip) when FUSE is unavailable here: no
/dev/fuse, no fusermount3, pfs-emu not built, or the mount itself refused by
the environment. Anything else that goes wrong fails the test.
"""
import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest

from testutil import wait_until

REPO = pathlib.Path(__file__).resolve().parents[2]
STATS_NAME = ".pfs-emu-stats"


def binary():
    """Path of pfs-emu: $PFS_EMU_BIN (set by CTest) or build/tools/pfs-emu/pfs-emu; None if unbuilt."""
    path = os.environ.get("PFS_EMU_BIN")
    if path:
        if not os.access(path, os.X_OK):
            pytest.fail(f"PFS_EMU_BIN={path} is not an executable")
        return path
    path = REPO / "build" / "tools" / "pfs-emu" / "pfs-emu"
    return str(path) if os.access(path, os.X_OK) else None


def unavailable_reason():
    """Why pfs-emu cannot be mounted here, or None."""
    if binary() is None:
        return "pfs-emu is not built (libfuse3 missing at configure time?); set PFS_EMU_BIN"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed (package fuse3)"
    return None


def parse_stats(text):
    """The "name value" lines of pfs-emu's stats as {name: int or float}."""
    stats = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2 or line.startswith("#"):
            continue
        name, value = parts
        try:
            stats[name] = int(value)
        except ValueError:
            try:
                stats[name] = float(value)
            except ValueError:
                continue
    return stats


class PfsEmu:
    """One pfs-emu process serving BACKING at MOUNTPOINT (a context manager)."""

    def __init__(self, backing, mountpoint, *options):
        self.backing = pathlib.Path(backing)
        self.mountpoint = pathlib.Path(mountpoint)
        self.options = [str(o) for o in options]
        self.proc = None
        self.final = None  # stats printed at unmount
        self.stderr = ""

    def start(self, timeout=30):
        reason = unavailable_reason()
        if reason:
            pytest.skip(reason)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        # stderr to a file: a pipe nobody reads could fill up and stall the process.
        self._log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [binary(), *self.options, str(self.backing), str(self.mountpoint)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log)
        # Until it is mounted or has exited (the events), with a deadline.
        wait_until(lambda: os.path.ismount(self.mountpoint) or self.proc.poll() is not None,
                   timeout, fail=False)
        if not os.path.ismount(self.mountpoint):
            if self.proc.poll() is not None:
                err = self._read_log()
                if "fuse:" in err or "fusermount" in err:
                    pytest.skip(f"cannot mount FUSE here: {err.strip()}")
                pytest.fail(f"pfs-emu exited with {self.proc.returncode} before mounting: {err}")
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"pfs-emu did not mount within {timeout} s: {self._read_log()}")
        return self

    def view(self, node=0):
        """The backing tree as fake node NODE sees it."""
        return self.mountpoint / f"n{node}"

    def stats(self):
        """The counters now, read from the mount's stats file."""
        return parse_stats((self.mountpoint / STATS_NAME).read_text())

    def unmount(self, timeout=30):
        """Unmounts with fusermount3 -u; returns the stats printed at unmount."""
        if self.proc is None or self.final is not None:
            return self.final
        # A file still open on the mount makes fusermount3 -u fail ("busy"):
        # an io_uring ring, for one, drops its registered files
        # asynchronously after it is closed. Retried until none is (the
        # event), with a deadline; the last answer is the one checked.
        def unmount_unless_busy():
            um = subprocess.run(["fusermount3", "-u", str(self.mountpoint)], capture_output=True,
                                timeout=timeout)
            return None if um.returncode != 0 and b"busy" in um.stderr.lower() else um

        um = wait_until(unmount_unless_busy, timeout, interval=0.05, fail=False) or subprocess.run(
            ["fusermount3", "-u", str(self.mountpoint)], capture_output=True, timeout=timeout)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"pfs-emu still running after fusermount3 -u: {um.stderr.decode()}")
        self.stderr = self._read_log()
        self._log.close()
        assert um.returncode == 0, f"fusermount3 -u failed: {um.stderr.decode()}"
        assert rc == 0, f"pfs-emu exited with {rc}: {self.stderr}"
        assert not os.path.ismount(self.mountpoint)
        self.final = parse_stats(self.stderr)
        return self.final

    def _read_log(self):
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.unmount()
        elif self.proc is not None and self.proc.poll() is None:
            # Already failing: clean up without masking the first error.
            subprocess.run(["fusermount3", "-u", str(self.mountpoint)], capture_output=True)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return False
