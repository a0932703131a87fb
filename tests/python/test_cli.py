"""The dlfs CLI as a user meets it: outputs, exit codes, error messages."""
import json
import os
import signal
import subprocess

import pytest

from testutil import interrupt, pack_mid_write

VERBS = ["pack", "info", "ls", "cat", "verify", "repair"]


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_help(run, verb):
    proc = run(verb, "--help", check=0)
    assert b"Usage" in proc.stdout or b"usage" in proc.stdout.lower()


def test_usage_errors_exit_2(run):
    assert run().returncode == 2
    assert run("frobnicate").returncode == 2
    assert run("info").returncode == 2  # missing VOL
    assert run("pack", "x", "-o", "y", "--from", "zip").returncode == 2


def test_errors_say_the_flags_not_the_library_fields(run, volume):
    """Issue 41: the CLI said world_size, batch_size, queue_depth, and "A subcommand
    is required" for a mistyped verb."""
    vol, _ = volume
    err = run("frobnicate", check=2).stderr.decode()
    assert err.startswith("dlfs: unknown verb 'frobnicate'; the verbs are pack, info, ls, cat, "
                          "verify, repair, epoch, bench, lmdb"), err
    assert run(check=2).stderr.decode().startswith("dlfs: no verb given; the verbs are pack")
    for args, said in [(("epoch", vol, "--world", 0), "--world must be at least 1"),
                       (("epoch", vol, "--rank", 2, "--world", 2), "is not below --world 2"),
                       (("bench", vol, "--batch", 0), "--batch must be at least 1"),
                       (("bench", vol, "--queue-depth", 0), "--queue-depth must be at least 1"),
                       (("bench", vol, "--io-threads", 65), "--io-threads must be between")]:
        err = run(*args, check=2).stderr.decode()
        assert said in err, (args, err)
        assert not any(f in err for f in ("world_size", "batch_size", "queue_depth",
                                          "io_threads")), err


def test_info_json_fields(run, volume):
    vol, files = volume
    info = json.loads(run("info", vol, "--json", check=0).stdout)
    assert info["samples"] == len(files)
    assert info["bytes"] == sum(len(d) for d in files.values())
    assert info["classes"] == 3
    assert info["class_names"] == ["Emu", "cat", "dog"]
    assert info["format_version"] == 3 and info["layout"] == "compact" and info["names"]
    assert info["targets"] == [str(vol)]
    # The compact directory: 6-10 bytes per sample to locate one, the rest names.
    assert info["sample_metadata_bytes_per_sample"] < 10 + 32 / len(files)
    # No feature flag, no field table.
    assert info["incompat_flags"] == [] and info["fields"] == []
    assert info["dictionary_bytes"] == 0
    text = run("info", vol, check=0).stdout.decode()
    assert "samples      5" in text
    assert "features     none\n" in text and "fields " not in text


def test_ls_json_lines(run, volume):
    vol, files = volume
    top = [json.loads(line) for line in run("ls", vol, "--json", check=0).stdout.splitlines()]
    assert [e["path"] for e in top] == ["Emu", "cat", "dog"]
    assert all(e["type"] == "dir" for e in top)
    rows = [json.loads(l) for l in run("ls", vol, "-r", "--json", check=0).stdout.splitlines()]
    assert {r["path"] for r in rows} == set(files)
    for r in rows:
        assert set(r) >= {"path", "index", "size", "label"}
        assert r["size"] == len(files[r["path"]])
    dog = [json.loads(l) for l in run("ls", vol, "dog", "--json", check=0).stdout.splitlines()]
    assert [e["path"] for e in dog] == ["dog/a", "dog/002.png"]
    assert run("ls", vol, "nope").returncode == 2


def test_cat_returns_exact_bytes(run, volume):
    vol, files = volume
    for rel, data in files.items():
        assert run("cat", vol, rel, check=0).stdout == data
    rows = [json.loads(l) for l in run("ls", vol, "-r", "--json", check=0).stdout.splitlines()]
    for r in rows:
        assert run("cat", vol, "--index", r["index"], check=0).stdout == files[r["path"]]
    missing = run("cat", vol, "cat/999.png")
    assert missing.returncode == 2
    assert b"cat/999.png" in missing.stderr
    assert run("cat", vol, "--index", 99).returncode == 2
    assert run("cat", vol).returncode == 2


def test_output_errors_name_where(run, volume, dlfs_bin, tmp_path):
    vol, files = volume
    out = tmp_path / "sample.png"
    run("cat", vol, "cat/001.png", "-o", out, check=0)
    assert out.read_bytes() == files["cat/001.png"]
    proc = run("cat", vol, "cat/001.png", "-o", tmp_path / "no" / "x.png")
    assert proc.returncode == 2 and b"no/x.png: No such file" in proc.stderr, proc.stderr
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    proc = run("cat", vol, "cat/001.png", "-o", "/dev/full")
    assert proc.returncode == 2 and b"/dev/full: No space left" in proc.stderr, proc.stderr
    # A full stdout (e.g. a redirect to a full disk) is an error too, not exit 0.
    with open("/dev/full", "wb") as full:
        proc = subprocess.run([dlfs_bin, "cat", vol, "cat/001.png"], stdout=full,
                              stderr=subprocess.PIPE, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count(b"stdout: No space left") == 1, proc.stderr
    # So is a report that could not be written.
    for verb in (["info", vol], ["ls", "-r", vol], ["verify", "-q", vol]):
        with open("/dev/full", "wb") as full:
            proc = subprocess.run([dlfs_bin, *map(str, verb)], stdout=full,
                                  stderr=subprocess.PIPE, timeout=60)
        assert proc.returncode == 2 and proc.stderr.count(b"stdout: No space left") == 1, (verb, proc)


def test_verify_names_each_bad_sample(run, volume):
    vol, files = volume
    assert b"0 bad" in run("verify", vol, check=0).stdout
    rows = {json.loads(l)["path"]: json.loads(l) for l in
            run("ls", vol, "-r", "--json", check=0).stdout.splitlines()}
    # Find where each sample's bytes are and damage two of them.
    raw = bytearray(vol.read_bytes())
    for rel in ["cat/001.png", "Emu/x.png"]:
        pos = raw.find(files[rel])
        assert pos > 0
        raw[pos + 2] ^= 0xFF
    vol.write_bytes(bytes(raw))
    proc = run("verify", vol)
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert "'cat/001.png': checksum mismatch" in err
    assert "'Emu/x.png': checksum mismatch" in err
    assert "cat/002.png" not in err
    assert b"2 bad" in proc.stdout
    # Reads check checksums too, unless told not to.
    assert run("cat", vol, "cat/001.png").returncode == 2
    assert run("cat", vol, "cat/001.png", "--no-verify", check=0).stdout != files["cat/001.png"]
    assert run("cat", vol, "cat/002.png", check=0).stdout == files["cat/002.png"]


@pytest.mark.parametrize("damage", ["magic", "superblock", "directory", "truncate", "empty"])
def test_bad_volumes_exit_2_naming_the_file(run, volume, damage):
    vol, _ = volume
    raw = bytearray(vol.read_bytes())
    info = json.loads(run("info", vol, "--json", check=0).stdout)
    if damage == "magic":
        raw[0:8] = b"NOTDLFS!"
    elif damage == "superblock":
        raw[60] ^= 1
    elif damage == "directory":
        raw[raw.find(b"DLDR") + 20] ^= 1  # inside the directory region's header
    elif damage == "truncate":
        raw = raw[: len(raw) // 2]
    elif damage == "empty":
        raw = bytearray()
    vol.write_bytes(bytes(raw))
    for verb in ["info", "ls", "verify"]:
        proc = run(verb, vol)
        assert proc.returncode == 2, (verb, proc.stderr)
        assert str(vol).encode() in proc.stderr
        assert b"Traceback" not in proc.stderr and b"terminate" not in proc.stderr
    assert info["samples"] == 5


def test_pack_refuses_to_overwrite_without_force(run, tree, tmp_path):
    root, _ = tree
    vol = tmp_path / "existing.dlfs"
    vol.write_bytes(b"my thesis")
    proc = run("pack", root, "-o", vol)
    assert proc.returncode == 2
    assert b"already exists" in proc.stderr and b"--force" in proc.stderr
    assert vol.read_bytes() == b"my thesis"
    run("pack", root, "-o", vol, "--force", "-q", check=0)
    assert json.loads(run("info", vol, "--json", check=0).stdout)["samples"] == 5


def test_pack_unreadable_source(run, tree, tmp_path):
    root, _ = tree
    os.symlink("/nonexistent", root / "cat" / "003.png")
    vol = tmp_path / "v.dlfs"
    proc = run("pack", root, "-o", vol)
    assert proc.returncode == 2
    assert b"cat/003.png" in proc.stderr
    assert not vol.exists()
    proc = run("pack", root, "-o", vol, "--skip-unreadable", check=0)
    assert b"skipped 1 unreadable source, e.g." in proc.stdout, proc.stdout
    assert json.loads(run("info", vol, "--json", check=0).stdout)["samples"] == 5


def test_pack_into_a_missing_directory_names_the_output_not_a_temporary(run, tree, tmp_path):
    """Issue 41: README's first Python command packs into out/, which a fresh
    checkout lacks; the error named out/x.dlfs.tmp.PID.0."""
    root, _ = tree
    err = run("pack", root, "-o", tmp_path / "out" / "x.dlfs", check=2).stderr.decode()
    assert f"{tmp_path}/out/x.dlfs: cannot create it: directory {tmp_path}/out does not exist" \
        in err, err
    assert ".tmp." not in err


def test_pack_class_names(run, tmp_path):
    src = tmp_path / "shards"
    src.mkdir()
    import tarfile, io
    with tarfile.open(src / "a.tar", "w") as tar:
        for key, label in [("k0", 0), ("k1", 2)]:
            for ext, data in [(".cls", str(label).encode()), (".bin", key.encode())]:
                ti = tarfile.TarInfo(key + ext)
                ti.size = len(data)
                tar.addfile(ti, io.BytesIO(data))
    names = tmp_path / "names.txt"
    names.write_text("zero\none\ntwo\n")
    vol = tmp_path / "v.dlfs"
    err = run("pack", src, "-o", vol, "--class-names", f"@{tmp_path}/missing.txt",
              check=2).stderr.decode()
    assert f"--class-names: {tmp_path}/missing.txt: No such file" in err, err
    assert not vol.exists()
    run("pack", src, "-o", vol, "--class-names", f"@{names}", "-q", check=0)
    info = json.loads(run("info", vol, "--json", check=0).stdout)
    assert info["class_names"] == ["zero", "one", "two"]
    rows = [json.loads(l) for l in run("ls", vol, "--json", check=0).stdout.splitlines()]
    # One sample per WebDataset key, its members as fields (format v2).
    assert [(r["path"], r["label"], r["class"]) for r in rows] == [
        ("k0", 0, "zero"), ("k1", 2, "two")]
    assert [f["name"] for f in rows[0]["fields"]] == ["cls", "bin"]


def _big_tree(root, files=300, size=1 << 20):
    root.mkdir()
    for c in range(3):
        (root / f"c{c}").mkdir()
    for i in range(files):
        with open(root / f"c{i % 3}" / f"{i:05d}.png", "wb") as f:
            f.truncate(size)  # sparse: cheap to make, real bytes to pack


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_interrupted_pack_leaves_no_volume(dlfs_bin, run, tmp_path, sig):
    src = tmp_path / "src"
    _big_tree(src)
    out = tmp_path / "out"
    out.mkdir()
    vol = out / "v.dlfs"
    proc = pack_mid_write([dlfs_bin, "pack", str(src), "-o", str(vol), "-q"], out)
    interrupt(proc, sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert not vol.exists()
    leftovers = list(out.iterdir())
    if sig == signal.SIGINT:
        assert leftovers == [], leftovers  # cleaned up on the way out
        assert b"interrupted" in err
    for tmp in leftovers:  # SIGKILL leaves the temporary file: not a volume
        assert ".tmp." in tmp.name
        proc = run("info", tmp)
        assert proc.returncode == 2
        assert b"not a dlfs volume" in proc.stderr or b"too small" in proc.stderr


def test_pack_into_a_directory_is_refused_before_reading(run, tmp_path):
    """Issue 49: with --force, everything was packed and then the rename
    failed ("Is a directory"). The source here holds a dangling link, which
    packing would stop at: the refusal comes first."""
    src = tmp_path / "src"
    (src / "c").mkdir(parents=True)
    (src / "c" / "1.png").write_bytes(b"x")
    os.symlink(tmp_path / "nowhere", src / "c" / "2.png")
    out = tmp_path / "out"
    out.mkdir()
    for force in ([], ["--force"]):
        proc = run("pack", src, "-o", out, "-q", *force, check=2)
        err = proc.stderr.decode()
        assert f"{out}: is a directory; a volume is a file" in err, err
        assert "2.png" not in err, err
    assert os.listdir(out) == [] and sorted(os.listdir(tmp_path)) == ["out", "src"]


def test_a_full_disk_names_the_volume_not_its_removed_temporary(dlfs_bin, tmp_path):
    """Issue 49: ENOSPC named the .tmp file, which was removed by then."""
    src = tmp_path / "src"
    (src / "c").mkdir(parents=True)
    for i in range(8):
        (src / "c" / f"{i}.png").write_bytes(os.urandom(64 * 1024))
    small = tmp_path / "small"
    small.mkdir()
    script = (f"mount -t tmpfs -o size=128k none {small} && "
              f"{dlfs_bin} pack {src} -o {small}/v.dlfs -q; echo rc=$?; ls -A {small}")
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, timeout=60)
    if b"rc=" not in proc.stdout:
        pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.decode().strip()}")
    err = proc.stderr.decode()
    assert b"rc=2" in proc.stdout and "No space left on device" in err, (proc.stdout, err)
    assert f"{small}/v.dlfs (being written; its temporary file is removed on failure)" in err, err
    assert ".tmp." not in err, err
    assert proc.stdout.decode().split("rc=2", 1)[1].split() == []  # nothing left behind


def test_info_ls_and_cat_as_a_user_reads_them(run, tmp_path):
    """Issue 49: `info` said "in 1 directories", `ls` had no header, and
    `dlfs cat wds.dlfs sample000003.txt` (the mount's name) found nothing."""
    import io
    import tarfile
    shards = tmp_path / "shards"
    shards.mkdir()
    with tarfile.open(shards / "000000.tar", "w") as tar:
        for i in range(4):
            for ext, data in (("txt", f"text {i}".encode()), ("cls", str(i % 2).encode())):
                member = tarfile.TarInfo(f"sample{i:06d}.{ext}")
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
    vol = tmp_path / "wds.dlfs"
    run("pack", shards, "-o", vol, "-q", check=0)
    info = run("info", vol, check=0).stdout.decode()
    assert "samples      4 in 1 directory\n" in info, info
    lines = run("ls", vol, check=0).stdout.decode().splitlines()
    assert lines[0] == "INDEX\tSIZE\tLABEL\tPATH\tFIELDS", lines
    assert lines[1].split("\t")[3] == "sample000000" and len(lines) == 5
    assert run("ls", vol, "--json", check=0).stdout.decode().startswith("{")
    assert run("cat", vol, "sample000003.txt", check=0).stdout == b"text 3"
    assert run("cat", vol, "sample000003.cls", check=0).stdout == b"1"
    assert run("cat", vol, "sample000003", "--field", "txt", check=0).stdout == b"text 3"
    proc = run("cat", vol, "sample000003.nope", check=2)
    assert b"sample000003.nope" in proc.stderr


def test_repair_restores_a_damaged_superblock_from_its_copy(run, volume, tmp_path):
    """Issue 49: a flipped byte 0 said "not a dlfs volume (bad magic)"
    although the copy at the end was intact; byte 100 said the copy was
    intact but offered no way to repair."""
    vol, files = volume
    original = vol.read_bytes()
    for offset in (0, 100):
        raw = bytearray(original)
        raw[offset] ^= 1
        vol.write_bytes(raw)
        err = run("info", vol, check=2).stderr.decode()
        assert "superblock copy at the end of the file is intact" in err, err
        assert f"`dlfs repair {vol}` rewrites the primary from it" in err, err
        if offset == 0:
            assert "primary superblock is damaged (bad magic)" in err, err
            assert "not a dlfs volume" not in err, err
        dry = run("repair", vol, "--dry-run", check=0).stdout.decode()
        assert "would rewrite the primary superblock" in dry and vol.read_bytes() == raw
        out = run("repair", vol, check=0).stdout.decode()
        assert f"{vol}: rewrote the primary superblock from the intact copy" in out, out
        assert vol.read_bytes() == original
        assert "nothing to repair" in run("repair", vol, check=0).stdout.decode()
    # A damaged copy: verify says so and names the repair, which rewrites it.
    raw = bytearray(original)
    raw[-100] ^= 1
    vol.write_bytes(raw)
    err = run("verify", "-q", vol, check=1).stderr.decode()
    assert "differs from the primary" in err and "dlfs repair" in err, err
    assert "superblock copy at the end" in run("repair", vol, check=0).stdout.decode()
    assert vol.read_bytes() == original
    run("verify", "-q", vol, check=0)
    # Both damaged: nothing to repair from.
    raw[100] ^= 1
    vol.write_bytes(raw)
    assert b"both superblocks are damaged" in run("repair", vol, check=2).stderr
