"""dlfs.pack takes what `dlfs pack` takes: compress, dict, fields, targets and
target_paths, class names as "a,b,c" — parsed by the same library code, with
the same errors in the keywords' terms."""
import io
import json
import re
import tarfile

import pytest

dlfs = pytest.importorskip("dlfs", reason="Python module not built")


def _shards(root, keys=40):
    """One shard of `keys` samples with jpg, cls and a compressible json."""
    root.mkdir()
    members = {}
    with tarfile.open(root / "a.tar", "w") as tar:
        for k in range(keys):
            for field, data in {
                "jpg": bytes([k % 256]) * (200 + k),
                "cls": str(k % 3).encode(),
                "json": json.dumps({"id": k, "caption": "a cat on a mat " * 20}).encode(),
            }.items():
                ti = tarfile.TarInfo(f"train/{k:06d}.{field}")
                ti.size = len(data)
                tar.addfile(ti, io.BytesIO(data))
                members[f"train/{k:06d}.{field}"] = data
    return members


def _read_all(vol):
    v = dlfs.Volume(str(vol))
    return {f"{v.path(i)}.{name}": data
            for i in range(len(v)) for name, data in v.read_fields(i).items()}


@pytest.mark.parametrize("compress", ["zstd", "zstd:19"])
def test_compressed_pack_reads_back_byte_exact(run, tmp_path, compress):
    members = _shards(tmp_path / "shards")
    vol = tmp_path / "v.dlfs"
    stats = dlfs.pack(tmp_path / "shards", vol, compress=compress)
    assert stats["samples"] == 40
    assert _read_all(vol) == members
    # Stored compressed, as `dlfs pack --compress` stores it.
    rows = [json.loads(l) for l in run("ls", "-r", "--json", vol, check=0).stdout.splitlines()]
    assert {f["codec"] for r in rows for f in r["fields"] if f["name"] == "json"} == {"zstd"}
    assert b"0 bad" in run("verify", vol, check=0).stdout


def test_trained_dictionary_fields_and_targets(tmp_path):
    members = _shards(tmp_path / "shards")
    vol = tmp_path / "v.dlfs"
    stats = dlfs.pack(tmp_path / "shards", vol, compress="zstd", dict=True, fields="jpg,cls",
                      targets=2, class_names="zero,one,two")
    assert stats["dictionary_bytes"] > 0
    v = dlfs.Volume(str(vol))
    assert v.fields == ["cls", "jpg"]
    assert len(v.info()["targets"]) == 2 and (tmp_path / "v.dlfs.t1").exists()
    assert v.info()["class_names"] == ["zero", "one", "two"]
    kept = {k: d for k, d in members.items() if not k.endswith(".json")}
    assert _read_all(vol) == kept
    # target_paths alone implies the count.
    other = tmp_path / "elsewhere.t1"
    dlfs.pack(tmp_path / "shards", tmp_path / "w.dlfs", fields=["jpg"], target_paths=[other])
    assert other.exists() and len(dlfs.Volume(str(tmp_path / "w.dlfs")).info()["targets"]) == 2


@pytest.mark.parametrize("spec, message", [
    ("gzip", "compression 'gzip': only zstd[:LEVEL] (or none) is supported"),
    ("zstd:0", "compression 'zstd:0': the zstd level is 1..22"),
    ("zstd:fast", "compression 'zstd:fast': the zstd level is 1..22"),
])
def test_bad_compress_spec_is_refused_clearly(tmp_path, run, spec, message):
    _shards(tmp_path / "shards", keys=2)
    with pytest.raises(ValueError) as e:
        dlfs.pack(tmp_path / "shards", tmp_path / "v.dlfs", compress=spec)
    assert message in str(e.value)
    assert not (tmp_path / "v.dlfs").exists()
    # The CLI names its flag.
    err = run("pack", tmp_path / "shards", "-o", tmp_path / "v.dlfs", "--compress", spec,
              check=2).stderr.decode()
    assert message.replace("compression '", "--compress '") in err, err
    assert not (tmp_path / "v.dlfs").exists()


def test_option_errors_name_the_keywords(tmp_path):
    _shards(tmp_path / "shards", keys=2)
    vol = tmp_path / "v.dlfs"
    with pytest.raises(ValueError, match="trained dictionary needs zstd"):
        dlfs.pack(tmp_path / "shards", vol, dict=True)
    with pytest.raises(ValueError, match="3 targets need 2 target_paths"):
        dlfs.pack(tmp_path / "shards", vol, targets=3, target_paths=[tmp_path / "x"])
    dlfs.pack(tmp_path / "shards", vol)
    with pytest.raises(FileExistsError, match=r"already exists \(pass force=True to replace it\)"):
        dlfs.pack(tmp_path / "shards", vol)
    dlfs.pack(tmp_path / "shards", vol, force=True)


def _cli_flags(run):
    """The long flags `dlfs pack --help` lists, e.g. "--max-side"."""
    text = run("pack", "--help").stdout.decode()
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", text)) - {"--help", "--output", "--quiet"}


def test_every_flag_of_dlfs_pack_is_a_keyword_of_dlfs_pack(run):
    # Both come from one table; the keyword is the flag's name in Python's
    # words, but for the three named differently since dlfs.pack first took them.
    renamed = {"--from": "source_kind", "--target-path": "target_paths"}
    params = dlfs._keywords.parameters(dlfs._dlfs.pack)
    flags = _cli_flags(run)
    assert len(flags) >= 25, flags
    for flag in flags:
        keyword = renamed.get(flag, flag[2:].replace("-", "_"))
        assert keyword in params, f"{flag} has no keyword {keyword} in dlfs.pack"
    assert "--layout" in flags and "--eod" in flags


def test_token_and_layout_keywords_pack(tmp_path):
    # lengths=, eod= and token_dtype= are in dlfs.pack's docstring; they
    # were once refused as unknown keywords.
    np = pytest.importorskip("numpy")
    np.save(tmp_path / "t.npy", np.arange(10, dtype=np.int32))
    (tmp_path / "lengths.txt").write_text("4\n6\n")
    stats = dlfs.pack(tmp_path / "t.npy", tmp_path / "a.dlfs", "tokens",
                      lengths=str(tmp_path / "lengths.txt"), token_dtype="uint32")
    assert stats["tokens"] == 10 and stats["samples"] == 2 and stats["token_width"] == 4
    stats = dlfs.pack(tmp_path / "t.npy", tmp_path / "b.dlfs", source_kind="tokens", eod=3)
    assert stats["samples"] == 2  # cut after the 3: [0..3], [4..9]


def test_layout_keyword_and_ranges(tmp_path):
    _shards(tmp_path / "shards", keys=3)
    (tmp_path / "images" / "c").mkdir(parents=True)
    (tmp_path / "images" / "c" / "1.png").write_bytes(b"x")
    for layout in ("tree", "compact"):
        dlfs.pack(tmp_path / "images", tmp_path / f"{layout}.dlfs", layout=layout)
        assert dlfs.Volume(str(tmp_path / f"{layout}.dlfs")).info()["layout"] == layout
    # The CLI's ranges hold for the keywords too.
    for keyword, value, message in [("targets", 0, "targets is 1..8 (or None), not 0"),
                                    ("max_side", 0, "max_side is 1..1048576 (or None), not 0"),
                                    ("jpeg_quality", 101, "jpeg_quality is 1..100")]:
        with pytest.raises(ValueError, match=re.escape(message)):
            dlfs.pack(tmp_path / "shards", tmp_path / "x.dlfs", **{keyword: value})
    with pytest.raises(TypeError, match="class_names takes a list of names"):
        dlfs.pack(tmp_path / "shards", tmp_path / "x.dlfs", class_names=3)
    with pytest.raises(TypeError, match="at most 8 positional arguments"):
        dlfs.pack(tmp_path / "shards", tmp_path / "x.dlfs", "tar", False, 1, False, None, False, 0)
    assert not (tmp_path / "x.dlfs").exists()
