"""Faults at the file-system level (issue 13, docs/reliability.md): volumes and sources served by
tools/pfs-emu with byte ranges that fail with EIO. `verify`, `cat`, the Python loader and every
pack source name exactly what could not be read and go on where they can; nothing healthy is
reported bad and no wrong byte is handed out."""
import gc
import os
import re
import struct

import pytest

from pfsemu import PfsEmu

PAGE = 4096
N = 16  # samples of the test volume, one page each


@pytest.fixture
def aligned_volume(tmp_path, run):
    """A volume of N one-page samples, page-aligned: {path: (bytes, offset in the file)}.
    With one sample per page, a failing page fails exactly one sample even through the page
    cache (which reads and fails whole pages)."""
    src = tmp_path / "src"
    files = {}
    for i in range(N):
        rel = f"c{i % 2}/{i:02d}.bin"
        files[rel] = os.urandom(PAGE)
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(files[rel])
    backing = tmp_path / "backing"
    backing.mkdir()
    run("pack", src, "-o", backing / "v.dlfs", "--align", PAGE, "-q", "--all-files", check=0)
    image = (backing / "v.dlfs").read_bytes()
    where = {rel: (data, image.index(data)) for rel, data in files.items()}
    assert all(off % PAGE == 0 for _, off in where.values())
    return backing, where


def eio_args(name, ranges):
    args = []
    for offset, length in ranges:
        args += ["--eio", f"{name}:{offset}:{length}"]
    return args


def bad_samples(stderr):
    """Paths of the samples `dlfs verify` reported as bad."""
    return sorted(re.findall(r"sample \d+ '([^']+)'", stderr))


def test_verify_names_exactly_the_unreadable_samples(run, aligned_volume, tmp_path):
    """Issue 13 #4: one bad range made verify report 10 samples, healthy ones included, with
    messages naming none of them."""
    backing, where = aligned_volume
    lost = ["c0/04.bin", "c1/11.bin"]
    ranges = [(where[lost[0]][1] + 100, 10), (where[lost[1]][1] + PAGE - 1, 1)]
    with PfsEmu(backing, tmp_path / "mnt", *eio_args("v.dlfs", ranges)) as emu:
        vol = emu.view(0) / "v.dlfs"
        proc = run("verify", vol)
        stats = emu.stats()
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert bad_samples(err) == lost, err
    for line in err.splitlines():
        assert "Input/output error" in line and str(vol) in line, line
    assert f"{N} samples" in proc.stdout.decode() and "2 bad" in proc.stdout.decode()
    assert stats["eio_requests"] > 0  # the faults really were served


def test_cat_fails_on_the_bad_sample_only(run, aligned_volume, tmp_path):
    backing, where = aligned_volume
    bad = "c1/05.bin"
    with PfsEmu(backing, tmp_path / "mnt", *eio_args("v.dlfs", [(where[bad][1], 1)])) as emu:
        vol = emu.view(0) / "v.dlfs"
        proc = run("cat", vol, bad)
        assert proc.returncode == 2
        err = proc.stderr.decode()
        assert "Input/output error" in err and str(vol) in err, err
        assert proc.stdout == b""  # no partial bytes
        for rel, (data, _) in where.items():
            if rel != bad:
                assert run("cat", vol, rel, check=0).stdout == data, rel


def test_python_loader_fails_the_batch_holding_the_bad_sample_and_goes_on(
        aligned_volume, tmp_path):
    dlfs = pytest.importorskip("dlfs")
    backing, where = aligned_volume
    bad = "c0/08.bin"
    with PfsEmu(backing, tmp_path / "mnt", *eio_args("v.dlfs", [(where[bad][1] + 5, 1)])) as emu:
        vol = dlfs.Volume(str(emu.view(0) / "v.dlfs"))
        bad_index = vol.lookup(bad)
        for engine in ("pread", "uring"):
            try:
                loader = dlfs.Loader(vol, batch_size=4, shuffle=False, engine=engine,
                                     coalesce=False)
            except (OSError, ValueError, RuntimeError):
                if engine == "uring":
                    continue  # io_uring unavailable here
                raise
            good, errors = [], []
            it = iter(loader)
            while True:
                try:
                    batch = next(it)
                except StopIteration:
                    break
                except OSError as e:
                    errors.append(str(e))
                    continue
                for view, index in zip(batch.samples, batch.indices):
                    good.append(int(index))
                    assert bytes(view) == vol[int(index)][0], (engine, index)
            assert len(errors) == 1, (engine, errors)
            assert "Input/output error" in errors[0] and "sample" in errors[0], errors
            assert f"sample {bad_index}" in errors[0], errors
            assert bad_index not in good
            assert len(good) == N - 4  # one batch of 4 lost, every other sample delivered
            del it, loader, batch, view
        # Close the volume's files before unmounting. An io_uring ring drops
        # its registered files asynchronously: the unmount waits for that.
        del vol
        gc.collect()


def _image_folder(root, n=6):
    files = {}
    for i in range(n):
        rel = f"k{i % 2}/{i}.bin"
        files[rel] = os.urandom(3 * PAGE)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(files[rel])
    return files


def test_pack_from_imagefolder_names_the_unreadable_file(run, tmp_path):
    backing = tmp_path / "backing"
    files = _image_folder(backing / "tree")
    with PfsEmu(backing, tmp_path / "mnt", "--eio", f"tree/k1/3.bin:{PAGE}:1") as emu:
        src = emu.view(0) / "tree"
        proc = run("pack", src, "-o", tmp_path / "v.dlfs", "--all-files")
        err = proc.stderr.decode()
        assert proc.returncode == 2 and f"{src}/k1/3.bin" in err and "Input/output error" in err
        assert not (tmp_path / "v.dlfs").exists()
        proc = run("pack", src, "-o", tmp_path / "v.dlfs", "--skip-unreadable", "--all-files",
                   check=0)
        out = proc.stdout.decode()
        assert "skipped 1 unreadable source, e.g." in out and "k1/3.bin" in out, out
    for rel, data in files.items():
        if rel != "k1/3.bin":
            assert run("cat", tmp_path / "v.dlfs", rel, check=0).stdout == data
    assert run("cat", tmp_path / "v.dlfs", "k1/3.bin").returncode == 2  # not a partial sample


def test_pack_from_tar_idx_and_lmdb_names_the_unreadable_file(run, tmp_path):
    import io
    import tarfile

    backing = tmp_path / "backing"
    backing.mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for i in range(8):
            data = os.urandom(2 * PAGE)
            info = tarfile.TarInfo(f"s/{i:03d}.jpg")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    (backing / "shard.tar").write_bytes(buf.getvalue())
    idx = backing / "idx"
    idx.mkdir()
    (idx / "train-images-idx3-ubyte").write_bytes(
        struct.pack(">IIII", 0x803, 100, 28, 28) + os.urandom(100 * 784))
    (idx / "train-labels-idx1-ubyte").write_bytes(struct.pack(">II", 0x801, 100) + bytes(100))
    lmdb = pytest.importorskip("lmdb")
    env = lmdb.open(str(backing / "db"), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i in range(50):
            txn.put(b"%04d" % i, os.urandom(3000))
    env.close()
    faults = ["--eio", f"shard.tar:{5 * PAGE}:1",
              "--eio", f"idx/train-images-idx3-ubyte:{10 * PAGE}:1",
              "--eio", f"db/data.mdb:{3 * PAGE}:1"]
    with PfsEmu(backing, tmp_path / "mnt", *faults) as emu:
        view = emu.view(0)
        for source, name in ((view / "shard.tar", view / "shard.tar"),
                             (view / "idx", view / "idx" / "train-images-idx3-ubyte"),
                             (view / "db", view / "db" / "data.mdb")):
            proc = run("pack", source, "-o", tmp_path / "v.dlfs")
            err = proc.stderr.decode()
            assert proc.returncode == 2, (source, err)
            assert str(name) in err, err
            assert not (tmp_path / "v.dlfs").exists()
            assert [p.name for p in tmp_path.iterdir() if ".tmp." in p.name] == []
