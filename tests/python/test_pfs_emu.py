"""tools/pfs-emu: the emulated parallel file system used by benchmarks and fault tests."""
import errno
import mmap
import os
import subprocess
import threading
import time

import pytest

from pfsemu import STATS_NAME, PfsEmu, binary

PAGE = 4096


@pytest.fixture
def backing(tmp_path):
    """A small tree: {relative path: bytes}."""
    files = {
        "a.txt": b"hello\n",
        "empty": b"",
        "sub/deeper/f.bin": os.urandom(300_000),
        "sub/g.bin": os.urandom(16 * PAGE),
        "sub/h.bin": os.urandom(PAGE),
    }
    root = tmp_path / "backing"
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root, files


def _tree(root):
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def _pfs_emu(*args):
    path = binary()
    if path is None:
        pytest.skip("pfs-emu is not built")
    return subprocess.run([path, *map(str, args)], capture_output=True, timeout=60)


def test_help_explains_every_option():
    proc = _pfs_emu("--help")
    assert proc.returncode == 0
    text = proc.stdout.decode()
    for option in ("--nodes", "--latency-us", "--bandwidth-mbps", "--node-bandwidth-mbps",
                   "--eio FILE:OFFSET:LENGTH", "--direct-io", "--threads", "-o OPT",
                   "--debug", STATS_NAME, "fusermount3 -u"):
        assert option in text, option


@pytest.mark.parametrize("args, message", [
    (["--latency-us", "-5"], "--latency-us: '-5'"),
    (["--latency-us", "1ms"], "--latency-us: '1ms'"),
    (["--nodes", "0"], "--nodes: '0'"),
    (["--bandwidth-mbps", "fast"], "--bandwidth-mbps: 'fast'"),
    (["--node-bandwidth-mbps", "-1"], "--node-bandwidth-mbps: '-1'"),
    (["--threads", "0"], "--threads: '0'"),
    (["--eio", "missing.bin:0:10"], "cannot stat 'missing.bin'"),
    (["--eio", "a.txt:zero:10"], "OFFSET 'zero'"),
    (["--eio", "a.txt:0:0"], "LENGTH '0'"),
    (["--eio", "a.txt:10"], "expected FILE:OFFSET:LENGTH"),
    (["--eio", "sub:0:1"], "'sub' is not a regular file"),
    (["--frobnicate"], "unknown option '--frobnicate'"),
    (["--nodes"], None),  # missing value (or it eats a positional): any usage error
])
def test_bad_options_are_refused_with_a_clear_message(backing, tmp_path, args, message):
    root, _ = backing
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = _pfs_emu(*args, root, mnt)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert err.startswith("pfs-emu: "), err
    if message:
        assert message in err
    assert not os.path.ismount(mnt)


def test_bad_paths_are_refused(backing, tmp_path):
    root, _ = backing
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cases = [
        ([root], "expected BACKING_DIR and MOUNTPOINT"),
        ([tmp_path / "nope", mnt], "cannot open backing directory"),
        ([root, root / "a.txt"], "is not a directory"),
        ([root, root / "sub"], "inside the backing directory"),
    ]
    for args, message in cases:
        proc = _pfs_emu(*args)
        assert proc.returncode == 2 and message in proc.stderr.decode(), (args, proc.stderr)


def test_every_view_serves_the_backing_tree(backing, tmp_path):
    root, files = backing
    with PfsEmu(root, tmp_path / "mnt", "--nodes", 3) as emu:
        mnt = emu.mountpoint
        assert sorted(os.listdir(mnt)) == ["n0", "n1", "n2"]  # stats file unlisted
        for node in range(3):
            assert _tree(emu.view(node)) == files
        with open(emu.view(2) / "sub/deeper/f.bin", "rb") as f:  # mmap, as LMDB reads
            with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
                assert m[:] == files["sub/deeper/f.bin"]
        assert not os.path.exists(mnt / "n3")
        assert not os.path.exists(mnt / "n01")
        # Distinct inodes per view: each fake node gets its own page cache.
        assert os.stat(emu.view(0) / "a.txt").st_ino != os.stat(emu.view(1) / "a.txt").st_ino
        for action in (lambda: open(emu.view(0) / "new", "wb"),
                       lambda: open(emu.view(1) / "a.txt", "r+b"),
                       lambda: os.mkdir(emu.view(2) / "d"),
                       lambda: os.unlink(emu.view(0) / "a.txt")):
            with pytest.raises(OSError) as e:
                action()
            assert e.value.errno == errno.EROFS
    assert not os.path.ismount(mnt)


def test_counts_per_view_while_mounted_and_at_unmount(backing, tmp_path):
    root, files = backing
    name, data = "sub/deeper/f.bin", files["sub/deeper/f.bin"]
    with PfsEmu(root, tmp_path / "mnt", "--nodes", 2) as emu:
        assert emu.stats()["read_requests"] == 0
        assert (emu.view(0) / name).read_bytes() == data
        first = emu.stats()
        assert first["n0_read_bytes"] == len(data)
        assert first["n0_read_requests"] >= 1
        assert first["n1_read_requests"] == 0
        # Cached in n0's page cache: a second read asks the file system nothing.
        assert (emu.view(0) / name).read_bytes() == data
        assert emu.stats()["n0_read_requests"] == first["n0_read_requests"]
        # n1 is another node: its own cache misses.
        assert (emu.view(1) / name).read_bytes() == data
        live = emu.stats()
        assert live["n1_read_bytes"] == len(data)
        assert live["read_bytes"] == 2 * len(data)
    final = emu.final
    for key in ("read_requests", "read_bytes", "n0_read_bytes", "n1_read_bytes"):
        assert final[key] == live[key], key
    assert final["eio_requests"] == 0
    assert final["nodes"] == 2


def test_eio_ranges_fail_only_the_overlapping_pages(backing, tmp_path):
    root, files = backing
    g, h = files["sub/g.bin"], files["sub/h.bin"]
    bad = {2, 9}  # pages of g overlapping a range
    opts = ["--nodes", 2,
            "--eio", f"sub/g.bin:{2 * PAGE + 100}:50",       # inside page 2
            "--eio", f"{root / 'sub/g.bin'}:{9 * PAGE}:{PAGE}",  # exactly page 9, absolute path
            "--eio", f"sub/g.bin:{len(g) + PAGE}:{PAGE}"]     # past EOF: never read
    with PfsEmu(root, tmp_path / "mnt", *opts) as emu:
        for node in (0, 1):
            fd = os.open(emu.view(node) / "sub/g.bin", os.O_RDONLY)
            try:
                for page in range(16):
                    if page in bad:
                        with pytest.raises(OSError) as e:
                            os.pread(fd, PAGE, page * PAGE)
                        assert e.value.errno == errno.EIO, page
                    else:
                        got = os.pread(fd, PAGE, page * PAGE)
                        assert got == g[page * PAGE:(page + 1) * PAGE], page
                # Unaligned reads inside a good page are fine; any byte of a bad page fails.
                assert os.pread(fd, 10, 4 * PAGE - 10) == g[4 * PAGE - 10:4 * PAGE]
                with pytest.raises(OSError):
                    os.pread(fd, 1, 2 * PAGE)
            finally:
                os.close(fd)
        assert (emu.view(0) / "sub/h.bin").read_bytes() == h  # other files unaffected
        live = emu.stats()
        assert live["n0_eio_requests"] > 0 and live["n1_eio_requests"] > 0
    assert emu.final["eio_requests"] == live["eio_requests"]


@pytest.mark.parametrize("how", ["--direct-io", "O_DIRECT"])
def test_eio_ranges_are_byte_exact_without_the_page_cache(backing, tmp_path, how):
    """--direct-io, or an O_DIRECT open (as dlfs's engine does): requests are the reads made."""
    root, files = backing
    h = files["sub/h.bin"]
    opts = ["--eio", "sub/h.bin:1000:50"] + (["--direct-io"] if how == "--direct-io" else [])
    buf = mmap.mmap(-1, PAGE)  # page-aligned, as O_DIRECT may require
    with PfsEmu(root, tmp_path / "mnt", *opts) as emu:
        flags = os.O_RDONLY | (os.O_DIRECT if how == "O_DIRECT" else 0)
        fd = os.open(emu.view(0) / "sub/h.bin", flags)
        try:
            for offset, size, fails in [(990, 10, False), (999, 1, False), (1000, 1, True),
                                        (1049, 1, True), (1050, 1, False), (950, 100, True),
                                        (950, 50, False), (1050, 3046, False), (0, PAGE, True)]:
                view = memoryview(buf)[:size]
                if fails:
                    with pytest.raises(OSError) as e:
                        os.preadv(fd, [view], offset)
                    assert e.value.errno == errno.EIO, (offset, size)
                else:
                    assert os.preadv(fd, [view], offset) == size
                    assert bytes(view) == h[offset:offset + size], (offset, size)
                view.release()
        finally:
            os.close(fd)
        # No page cache: every read is one request.
        live = emu.stats()
        assert live["read_requests"] == 9
        assert live["eio_requests"] == 4


def _timed_reads(paths):
    """Reads each path in its own thread; returns (wall seconds, {path: bytes})."""
    out = {}

    def read(p):
        out[p] = p.read_bytes()

    threads = [threading.Thread(target=read, args=(p,)) for p in paths]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - start, out


def test_latency_is_charged_per_request_and_requests_overlap(backing, tmp_path):
    root, files = backing
    latency = 0.3
    with PfsEmu(root, tmp_path / "mnt", "--nodes", 4, "--latency-us", int(latency * 1e6)) as emu:
        path = emu.view(0) / "sub/h.bin"
        elapsed, got = _timed_reads([path])
        assert got[path] == files["sub/h.bin"]
        assert elapsed >= latency
        # Four nodes' reads at once: each waits the latency, but not for the others.
        expected = {emu.view(n) / "sub/h.bin": files["sub/h.bin"] for n in (1, 2, 3)}
        expected[emu.view(0) / "a.txt"] = files["a.txt"]
        elapsed, got = _timed_reads(list(expected))
        assert got == expected
        assert elapsed >= latency
        assert elapsed < 3 * latency, "concurrent requests were serialized"
        # A cached read costs nothing.
        start = time.monotonic()
        assert path.read_bytes() == files["sub/h.bin"]
        assert time.monotonic() - start < latency


def test_bandwidth_is_shared_and_per_node(backing, tmp_path):
    root, files = backing
    size = len(files["sub/deeper/f.bin"])  # 300,000 bytes
    # Shared 1.5 MB/s: two nodes reading the file at once move 0.6 MB, >= 0.4 s.
    with PfsEmu(root, tmp_path / "shared", "--nodes", 2, "--bandwidth-mbps", 1.5) as emu:
        elapsed, got = _timed_reads([emu.view(n) / "sub/deeper/f.bin" for n in (0, 1)])
        assert all(v == files["sub/deeper/f.bin"] for v in got.values())
        assert elapsed >= 2 * size / 1.5e6 - 0.005
    # Per-node 0.75 MB/s and no shared limit: each node's 0.3 MB takes >= 0.4 s,
    # but the two nodes' links are independent.
    with PfsEmu(root, tmp_path / "node", "--nodes", 2, "--node-bandwidth-mbps", 0.75) as emu:
        elapsed, got = _timed_reads([emu.view(n) / "sub/deeper/f.bin" for n in (0, 1)])
        assert all(v == files["sub/deeper/f.bin"] for v in got.values())
        one = size / 0.75e6
        assert elapsed >= one - 0.005
        assert elapsed < 1.75 * one, "per-node links were shared"


def test_small_samples_are_mapped_on_a_local_disk_and_filled_first_over_the_network(
        run, tmp_path):
    """Samples far smaller than a block go through the page cache. On a local disk the
    loader copies them out of a mapping; over a FUSE file system (a parallel file system's
    client), where each page fault is a request with its round trip, it reads them with
    io_uring and fills the node cache before the first read (5 epochs of Fashion-MNIST on
    pfs-emu at 4 ms per request: 18 s through a mapping, 1.4 s so)."""
    import json
    src = tmp_path / "src"
    for i in range(600):
        (src / f"c{i % 3}").mkdir(parents=True, exist_ok=True)
        (src / f"c{i % 3}" / f"{i:04d}.bin").write_bytes(os.urandom(600))
    backing = tmp_path / "backing"
    backing.mkdir()
    run("pack", src, "-o", backing / "v.dlfs", "-q", "--all-files", check=0)

    def bench(path):
        proc = run("bench", path, "--epochs", "2", "--json", check=0)
        report = json.loads(proc.stdout)
        assert report["samples"] == 1200, report
        return report["engine"]

    local = bench(backing / "v.dlfs")
    assert local.startswith("mmap"), local
    assert "before the first read" not in local, local
    with PfsEmu(backing, tmp_path / "mnt") as emu:
        remote = bench(emu.view(0) / "v.dlfs")
    assert not remote.startswith("mmap"), remote
    assert "fills the node cache before the first read" in remote, remote
