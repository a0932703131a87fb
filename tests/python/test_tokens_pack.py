"""Token volumes (docs/format.md §10.11): `dlfs pack` of Megatron-LM indexed
datasets and raw token files, dlfs.Writer's documents, and the Volume's token
accessors."""
import json
import os
import struct

import numpy as np
import pytest

dlfs = pytest.importorskip("dlfs", reason="Python module not built")

# Megatron's DType codes (megatron/core/datasets/indexed_dataset.py).
CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5, np.float64: 6,
         np.float32: 7, np.uint16: 8}


def write_megatron(prefix, tokens, lengths, dtype, modes=None, code=None, version=1,
                   pointers=None, bin_bytes=None):
    """A Megatron-layout pair prefix.bin / prefix.idx as Megatron's
    IndexedDatasetBuilder writes it: each sequence's tokens back to back in the
    .bin; in the .idx the header, int32 sequence lengths, int64 byte pointers,
    int64 document indices (one document per sequence here) and, multimodal,
    int8 sequence modes."""
    prefix = str(prefix)
    tokens = np.asarray(tokens)
    lengths = np.asarray(lengths, dtype=np.int32)
    itemsize = np.dtype(dtype).itemsize
    if pointers is None:
        pointers = np.zeros(len(lengths), dtype=np.int64)
        if len(lengths):
            pointers[1:] = np.cumsum(lengths[:-1].astype(np.int64)) * itemsize
    with open(prefix + ".bin", "wb") as f:
        f.write(tokens.astype(dtype).tobytes() if bin_bytes is None else bin_bytes)
    document_indices = np.arange(len(lengths) + 1, dtype=np.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", version))
        f.write(struct.pack("<B", CODES[dtype] if code is None else code))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(document_indices)))
        f.write(lengths.tobytes())
        f.write(np.asarray(pointers, dtype=np.int64).tobytes())
        f.write(document_indices.tobytes())
        if modes is not None:
            f.write(np.asarray(modes, dtype=np.int8).tobytes())
    return prefix


def corpus(n, seed=1, max_len=300):
    """Random lengths (some empty) and uint32 tokens that encode their document
    and their position in it: token = doc << 12 | position."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, max_len, n)
    lengths[rng.random(n) < 0.1] = 0
    doc = np.repeat(np.arange(n, dtype=np.int64), lengths)
    starts = np.concatenate([[0], np.cumsum(lengths)])[:-1]
    pos = np.arange(lengths.sum(), dtype=np.int64) - np.repeat(starts, lengths)
    return (doc << 12 | pos), lengths


def check_volume(vol, tokens, lengths):
    """Every accessor against the corpus: document starts, the document of
    random tokens, windows of tokens across documents."""
    starts = np.concatenate([[0], np.cumsum(lengths)])
    assert len(vol) == len(lengths)
    assert vol.token_count == len(tokens) == starts[-1]
    for d in range(len(lengths)):
        assert vol.document_start(d) == starts[d], d
    assert vol.document_start(len(lengths)) == vol.token_count
    rng = np.random.default_rng(5)
    for t in rng.integers(0, len(tokens), 300):
        d = vol.document_at(int(t))
        assert starts[d] <= t < starts[d + 1], (t, d)
    for first in rng.integers(0, len(tokens), 50):
        count = int(min(rng.integers(0, 20000), len(tokens) - first))
        window = vol.read_tokens(int(first), count)
        assert window.dtype == (np.uint16 if vol.token_width == 2 else np.uint32)
        assert np.array_equal(window, tokens[first:first + count]), (first, count)
    assert np.array_equal(vol.read_tokens(0, vol.token_count), tokens)


def test_megatron_sequences_become_documents(tmp_path, run):
    tokens, lengths = corpus(3000)
    assert tokens.max() > 65535  # so the scan chooses uint32
    prefix = write_megatron(tmp_path / "ds", tokens, lengths, np.int32)
    out = run("pack", prefix, "-o", tmp_path / "t.dlfs", check=0).stdout.decode()
    assert f"packed 3000 documents ({len(tokens)} uint32 tokens" in out
    assert "from megatron source" in out
    info = json.loads(run("info", "--json", tmp_path / "t.dlfs", check=0).stdout)
    assert info["token_width"] == 4 and info["token_count"] == len(tokens)
    text = run("info", tmp_path / "t.dlfs", check=0).stdout.decode()
    assert f"tokens       {len(tokens)} uint32 tokens in 3000 documents" in text
    with dlfs.Volume(tmp_path / "t.dlfs") as vol:
        assert vol.token_width == 4
        assert vol.info()["token_count"] == len(tokens)
        check_volume(vol, tokens.astype(np.uint32), lengths)
        assert vol.label(0) is None
        # A document is also a sample: its bytes are its tokens.
        d = int(np.flatnonzero(lengths)[7])
        assert np.array_equal(np.frombuffer(vol[d][0], dtype="<u4"),
                              tokens[vol.document_start(d):vol.document_start(d + 1)])
        assert vol.verify() == []
    verify = run("verify", tmp_path / "t.dlfs", check=0).stdout.decode()
    assert "0 bad; " in verify and "token chunks, 0 bad" in verify


def test_the_source_is_the_prefix_or_either_file(tmp_path, run):
    tokens, lengths = corpus(50, seed=2)
    tokens &= 0xFFF  # fits uint16
    prefix = write_megatron(tmp_path / "ds", tokens, lengths, np.uint16)
    for k, source in enumerate([prefix, prefix + ".bin", prefix + ".idx"]):
        out = tmp_path / f"t{k}.dlfs"
        run("pack", source, "-o", out, "-q", check=0)
        with dlfs.Volume(out) as vol:
            assert vol.token_width == 2
            check_volume(vol, tokens.astype(np.uint16), lengths)
    run("pack", "--from", "megatron", prefix, "-o", tmp_path / "x.dlfs", "-q", check=0)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.uint16, np.int32, np.int64])
def test_every_integer_dtype(tmp_path, run, dtype):
    rng = np.random.default_rng(3)
    high = min(np.iinfo(dtype).max, 60000) + 1
    lengths = rng.integers(0, 50, 200)
    tokens = rng.integers(0, high, lengths.sum())
    prefix = write_megatron(tmp_path / "ds", tokens, lengths, dtype)
    run("pack", prefix, "-o", tmp_path / "t.dlfs", "-q", check=0)
    with dlfs.Volume(tmp_path / "t.dlfs") as vol:
        # Every id fits uint16: the dtype says so, or (int32, int64) the scan.
        assert vol.token_width == 2
        check_volume(vol, tokens.astype(np.uint16), lengths)
    # --token-dtype uint32 stores them wider, without a scan.
    run("pack", prefix, "-o", tmp_path / "w.dlfs", "-q", "--token-dtype", "uint32", check=0)
    with dlfs.Volume(tmp_path / "w.dlfs") as vol:
        assert vol.token_width == 4
        check_volume(vol, tokens.astype(np.uint32), lengths)


def test_ids_that_are_no_token_ids_are_refused(tmp_path, run):
    lengths = np.array([3, 4, 2])
    cases = [
        (np.int16, [1, 2, 3, 4, -5, 6, 7, 8, 9], "token 4 (byte 8) is -5"),
        (np.int64, [1, 2, 3, 4, 5, 6, 2**32, 8, 9], "token 6 (byte 48) is 4294967296"),
        (np.int32, [1, 2, 3, 4, 5, 6, 7, -1, 9], "token 7 (byte 28) is -1"),
    ]
    for dtype, values, said in cases:
        prefix = write_megatron(tmp_path / "ds", values, lengths, dtype)
        err = run("pack", prefix, "-o", tmp_path / "t.dlfs", check=2).stderr.decode()
        assert "ds.bin" in err and said in err, err
        assert not (tmp_path / "t.dlfs").exists()
    # An id over 65535 with --token-dtype uint16: the conversion names it.
    prefix = write_megatron(tmp_path / "ds", [1, 2, 3, 70000, 5, 6, 7, 8, 9], lengths, np.int32)
    err = run("pack", prefix, "-o", tmp_path / "t.dlfs", "--token-dtype", "uint16",
              check=2).stderr.decode()
    assert "token 3 (byte 12) is 70000, not a uint16 token id" in err, err
    for dtype, name in [(np.float32, "float32"), (np.float64, "float64")]:
        prefix = write_megatron(tmp_path / "ds", np.arange(9), lengths, dtype)
        err = run("pack", prefix, "-o", tmp_path / "t.dlfs", check=2).stderr.decode()
        assert f"ds.idx: {name} tokens are not token ids" in err, err


def test_bad_megatron_files_are_named(tmp_path, run):
    tokens = np.arange(20, dtype=np.uint16)
    lengths = [5, 0, 10, 5]
    out = tmp_path / "t.dlfs"

    def refused(said, **kw):
        prefix = write_megatron(tmp_path / "ds", tokens, lengths, np.uint16, **kw)
        err = run("pack", prefix, "-o", out, check=2).stderr.decode()
        assert said in err, err
        assert not out.exists()
        return err

    refused("ds.idx: Megatron index version 2", version=2)
    refused("ds.idx: unknown dtype code 9", code=9)
    refused("ds.idx: sequence 1 starts at byte 12 of", pointers=[0, 12, 12, 30])
    refused("not where sequence 0 ends (10)", pointers=[0, 12, 12, 30])
    refused("ds.bin: truncated", bin_bytes=tokens.tobytes()[:-2])
    refused("ds.bin: 42 bytes, but the 4 sequences of", bin_bytes=tokens.tobytes() + b"xy")
    # The header: bad magic; counts that the file's size cannot hold or
    # that disagree with it.
    prefix = write_megatron(tmp_path / "ds", tokens, lengths, np.uint16)
    idx = bytearray(open(prefix + ".idx", "rb").read())
    for patch, said in [((0, b"XXIDIDX"), "bad magic"),
                        ((18, struct.pack("<Q", 10**12)), "its header claims 1000000000000"),
                        ((18, struct.pack("<Q", 3)), "(or "),
                        ((26, struct.pack("<Q", 4)), "document indices take")]:
        bad = bytearray(idx)
        bad[patch[0]:patch[0] + len(patch[1])] = patch[1]
        open(prefix + ".idx", "wb").write(bad)
        err = run("pack", prefix, "-o", out, check=2).stderr.decode()
        assert "ds.idx" in err and said in err, (said, err)
    # A negative length.
    write_megatron(tmp_path / "ds", tokens, [5, -1, 10, 5], np.uint16,
                   pointers=[0, 10, 10, 30])
    err = run("pack", prefix, "-o", out, check=2).stderr.decode()
    assert "ds.idx: sequence 1 has length -1" in err, err


def test_empty_documents_and_an_empty_corpus(tmp_path, run):
    tokens = np.arange(6, dtype=np.uint16)
    lengths = [0, 0, 3, 0, 3, 0]
    prefix = write_megatron(tmp_path / "ds", tokens, lengths, np.uint16)
    run("pack", prefix, "-o", tmp_path / "t.dlfs", "-q", check=0)
    with dlfs.Volume(tmp_path / "t.dlfs") as vol:
        assert len(vol) == 6 and vol.token_count == 6
        assert [vol.document_start(d) for d in range(7)] == [0, 0, 0, 3, 3, 6, 6]
        assert [vol.document_at(t) for t in range(6)] == [2, 2, 2, 4, 4, 4]
        assert vol[0][0] == b"" and vol[5][0] == b""
    prefix = write_megatron(tmp_path / "none", [], [], np.uint16)
    run("pack", prefix, "-o", tmp_path / "e.dlfs", "-q", check=0)
    with dlfs.Volume(tmp_path / "e.dlfs") as vol:
        assert len(vol) == 0 and vol.token_count == 0 and vol.token_width == 2
        assert vol.read_tokens(0, 0).size == 0
        with pytest.raises(IndexError):
            vol.document_at(0)


def test_multimodal_modes_become_labels(tmp_path, run):
    tokens = np.arange(30, dtype=np.int32)
    lengths = [10, 5, 5, 10]
    modes = [0, 1, 0, 1]  # preprocess_mmdata: text, then the image's bytes
    prefix = write_megatron(tmp_path / "mm", tokens, lengths, np.int32, modes=modes)
    run("pack", prefix, "-o", tmp_path / "t.dlfs", "-q", check=0)
    with dlfs.Volume(tmp_path / "t.dlfs") as vol:
        assert [vol.label(i) for i in range(4)] == modes
        assert vol.classes == ["0", "1"]
        check_volume(vol, tokens.astype(np.uint16), np.array(lengths))
    write_megatron(tmp_path / "mm", tokens, lengths, np.int32, modes=[0, -1, 0, 1])
    err = run("pack", prefix, "-o", tmp_path / "u.dlfs", check=2).stderr.decode()
    assert "mm.idx: sequence 1 has mode -1" in err, err


def test_offsets_past_two_to_the_32_in_a_sparse_corpus(tmp_path, run):
    """More than 2^32 tokens (8 GiB of uint16): two sequences of 2^31 - 1
    zeros, holes in a sparse .bin (and in the volume, whose writer leaves pages
    of zeros as holes), then sequences of real tokens past byte 2^33."""
    big = 2**31 - 1
    tail = np.arange(1, 3001, dtype=np.uint16)
    lengths = np.array([big, big, 2, 1000, 1998], dtype=np.int32)
    prefix = str(tmp_path / "big")
    bin_path = prefix + ".bin"
    with open(bin_path, "wb") as f:
        f.truncate(2 * big * 2)
        f.seek(2 * big * 2)
        f.write(tail.tobytes())
    pointers = np.concatenate([[0], np.cumsum(lengths[:-1].astype(np.int64)) * 2])
    idx = prefix + ".idx"
    with open(idx, "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(lengths), len(lengths) + 1))
        f.write(lengths.tobytes() + pointers.tobytes() +
                np.arange(len(lengths) + 1, dtype=np.int64).tobytes())
    vol_path = tmp_path / "big.dlfs"
    run("pack", prefix, "-o", vol_path, "-q", check=0)
    total = 2 * big + 3000
    assert total > 2**32
    assert os.stat(vol_path).st_size > 2 * big * 2
    assert os.stat(vol_path).st_blocks * 512 < 64 << 20  # the zeros are holes
    with dlfs.Volume(vol_path) as vol:
        assert vol.token_count == total and vol.token_width == 2
        assert [vol.document_start(d) for d in range(6)] == [0, big, 2 * big, 2 * big + 2,
                                                             2 * big + 1002, total]
        assert vol.document_at(2**31) == 1
        assert vol.document_at(2**32 - 3) == 1
        assert vol.document_at(2**32 - 2) == 2
        assert vol.document_at(2**32 + 5) == 3
        assert vol.document_at(total - 1) == 4
        window = vol.read_tokens(2 * big - 10, 3010)
        assert not window[:10].any()
        assert np.array_equal(window[10:], tail)
        assert np.array_equal(vol.read_tokens(2**32 + 100, 7), tail[102:109])
        data, _ = vol[3]
        assert np.array_equal(np.frombuffer(data, dtype="<u2"), tail[2:1002])


def test_npy_tokens_cut_by_lengths(tmp_path, run):
    tokens, lengths = corpus(500, seed=4)
    tokens &= 0xFFFF  # int64 values that fit uint16: the scan says so
    np.save(tmp_path / "tokens.npy", tokens)
    np.save(tmp_path / "lengths.npy", lengths.astype(np.int32))
    (tmp_path / "lengths.txt").write_text("".join(f"{n}\r\n" for n in lengths))
    for lengths_file in ["lengths.npy", "lengths.txt"]:
        out = tmp_path / f"{lengths_file}.dlfs"
        run("pack", tmp_path / "tokens.npy", "-o", out, "--lengths", tmp_path / lengths_file,
            "-q", check=0)
        with dlfs.Volume(out) as vol:
            assert vol.token_width == 2
            check_volume(vol, tokens.astype(np.uint16), lengths)
    # Lengths that do not sum to the token count, or are not lengths.
    short = lengths.copy()
    short[np.flatnonzero(short)[0]] -= 1
    np.save(tmp_path / "short.npy", short)
    err = run("pack", tmp_path / "tokens.npy", "-o", tmp_path / "x.dlfs", "--lengths",
              tmp_path / "short.npy", check=2).stderr.decode()
    assert f"short.npy: the lengths sum to {short.sum()} tokens, but" in err, err
    assert f"holds {len(tokens)}" in err
    (tmp_path / "long.txt").write_text("\n".join(str(n) for n in lengths) + "\n5\n")
    err = run("pack", tmp_path / "tokens.npy", "-o", tmp_path / "x.dlfs", "--lengths",
              tmp_path / "long.txt", check=2).stderr.decode()
    assert "long.txt: the lengths sum past the" in err, err
    (tmp_path / "bad.txt").write_text("3\n-4\n")
    err = run("pack", tmp_path / "tokens.npy", "-o", tmp_path / "x.dlfs", "--lengths",
              tmp_path / "bad.txt", check=2).stderr.decode()
    assert "bad.txt: line 2: '-' in a document length" in err, err
    assert not (tmp_path / "x.dlfs").exists()
    # A .npy of floats, of two dimensions.
    np.save(tmp_path / "f.npy", np.zeros(4, dtype=np.float32))
    err = run("pack", tmp_path / "f.npy", "-o", tmp_path / "x.dlfs", "--lengths",
              tmp_path / "lengths.txt", check=2).stderr.decode()
    assert "f.npy: float32 tokens are not token ids" in err, err
    np.save(tmp_path / "m.npy", np.zeros((2, 2), dtype=np.uint16))
    err = run("pack", tmp_path / "m.npy", "-o", tmp_path / "x.dlfs", "--eod", 0,
              check=2).stderr.decode()
    assert "m.npy: an array of shape (2, 2); token ids are a 1-D array" in err, err


def test_flat_tokens_cut_at_end_of_document(tmp_path, run):
    eod = 7
    docs = [[1, 2, eod], [eod], [3, 4, 5, 6, eod], [8, 9]]  # the last has no EOD
    flat = np.concatenate(docs).astype(np.uint32)
    flat.tofile(tmp_path / "tokens.bin")
    out = tmp_path / "t.dlfs"
    run("pack", "--from", "tokens", tmp_path / "tokens.bin", "-o", out, "--token-dtype",
        "uint32", "--eod", eod, "-q", check=0)
    with dlfs.Volume(out) as vol:
        assert vol.token_width == 4 and len(vol) == 4
        check_volume(vol, flat, np.array([len(d) for d in docs]))
    # Documents longer than the importer's pieces, across them.
    rng = np.random.default_rng(9)
    many = rng.integers(0, 1000, 9_000_000).astype(np.uint16)
    many[rng.integers(0, many.size, 300)] = 0
    many[1_000_000:5_500_000] = 1  # one document of 4.5M tokens
    many.tofile(tmp_path / "many.bin")
    run("pack", "--from", "tokens", tmp_path / "many.bin", "-o", tmp_path / "m.dlfs",
        "--token-dtype", "uint16", "--eod", 0, "-q", check=0)
    bounds = np.concatenate([[0], np.flatnonzero(many == 0) + 1])
    if bounds[-1] != many.size:
        bounds = np.append(bounds, many.size)  # the last document, without an EOD
    lengths = np.diff(bounds)
    with dlfs.Volume(tmp_path / "m.dlfs") as vol:
        assert len(vol) == len(lengths)
        starts = np.concatenate([[0], np.cumsum(lengths)])
        for d in range(0, len(lengths), 7):
            assert vol.document_start(d) == starts[d]
        assert np.array_equal(vol.read_tokens(0, vol.token_count), many)
    # What the flags need.
    for args, said in [
            ([], "a flat binary file of tokens needs --token-dtype"),
            (["--token-dtype", "uint16"], "tokens need --lengths (a file of document lengths)"),
            (["--token-dtype", "uint16", "--eod", "1", "--lengths", tmp_path / "x"],
             "give --lengths or --eod, not both"),
            (["--token-dtype", "uint16", "--eod", "70000"],
             "end-of-document id 70000 is not a uint16 token id")]:
        err = run("pack", "--from", "tokens", tmp_path / "tokens.bin", "-o",
                  tmp_path / "x.dlfs", *args, check=2).stderr.decode()
        assert said in err, (args, err)
    err = run("pack", "--from", "tokens", tmp_path / "tokens.bin", "-o", tmp_path / "x.dlfs",
              "--token-dtype", "int32", "--eod", "1", check=2).stderr.decode()
    assert "--token-dtype" in err, err


def test_token_flags_belong_to_token_sources(tmp_path, run, tree):
    root, _ = tree
    for args, said in [(["--token-dtype", "uint16"], "--token-dtype applies"),
                       (["--eod", "3"], "--eod applies"),
                       (["--lengths", "x.npy"], "--lengths applies")]:
        err = run("pack", root, "-o", tmp_path / "x.dlfs", *args, check=2).stderr.decode()
        assert said in err, err
    prefix = write_megatron(tmp_path / "ds", [1, 2], [2], np.uint16)
    err = run("pack", prefix, "-o", tmp_path / "x.dlfs", "--eod", "3", check=2).stderr.decode()
    assert "--eod applies to tokens sources only (this is a megatron source)" in err, err
    err = run("pack", prefix, "-o", tmp_path / "x.dlfs", "--layout", "tree",
              check=2).stderr.decode()
    assert "a token volume needs the compact directory layout" in err, err


def test_pack_help_explains_token_inputs(run):
    text = run("pack", "--help", check=0).stdout.decode()
    for needle in ["--token-dtype", "--lengths", "--eod", "Megatron-LM", "megatron", "tokens",
                   ".npy"]:
        assert needle in text, needle


def test_damaged_tokens_are_found_by_their_chunk(tmp_path, run):
    tokens, lengths = corpus(400, seed=6)
    prefix = write_megatron(tmp_path / "ds", tokens, lengths, np.int64)
    vol_path = tmp_path / "t.dlfs"
    run("pack", prefix, "-o", vol_path, "-q", check=0)
    with dlfs.Volume(vol_path) as vol:
        token = len(tokens) // 2
        at = 4096 + token * vol.token_width  # the token stream starts at byte 4096
    with open(vol_path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x40]))
    chunk = (token * 4) // 4096
    with dlfs.Volume(vol_path) as vol:
        with pytest.raises(dlfs.CorruptVolumeError, match=f"t.dlfs: token chunk {chunk} "):
            vol.read_tokens(token - 3, 10)
        assert np.array_equal(vol.read_tokens(0, 100), tokens[:100])
        damaged = vol.read_tokens(token - 3, 10, verify=False)
        assert not np.array_equal(damaged, tokens[token - 3:token + 7])
        problems = vol.verify()
        assert any(f"token chunk {chunk}" in p for p in problems), problems
    proc = run("verify", vol_path, check=1)
    assert f"token chunk {chunk}" in proc.stderr.decode()
    assert "1 bad" in proc.stdout.decode()


def test_writer_writes_documents(tmp_path):
    path = tmp_path / "w.dlfs"
    tokens, lengths = corpus(1000, seed=8)
    tokens &= 0xFFFF
    with dlfs.Writer(path, tokens="uint16") as w:
        assert w.token_dtype == np.uint16
        split = int(np.searchsorted(np.cumsum(lengths), len(tokens) // 2))
        head = int(lengths[:split].sum())
        w.write_documents(tokens[:head], lengths[:split])  # int64 values, converted
        for d in range(split, split + 3):  # one at a time, as int32 and uint16
            s = int(lengths[:d].sum())
            w.write_document(tokens[s:s + lengths[d]].astype(np.int32))
        s = int(lengths[:split + 3].sum())
        w.write_documents(tokens[s:].astype(np.uint16), lengths[split + 3:].astype(np.int32))
        w.write_document([])  # an empty document
        with pytest.raises(ValueError, match=r"write_documents: token 5 is 70000, outside "
                                             r"uint16 \(0\.\.65535\)"):
            w.write_documents(np.array([1, 2, 3, 4, 5, 70000, 7]), [7])
        with pytest.raises(ValueError, match="token 1 is -3"):
            w.write_document(np.array([4, -3]))
        with pytest.raises(ValueError, match="the lengths sum to 5 tokens, not the 7 given"):
            w.write_documents(np.arange(7), [2, 3])
        with pytest.raises(TypeError, match="float32 tokens are not token ids"):
            w.write_documents(np.zeros(3, dtype=np.float32), [3])
        with pytest.raises(TypeError, match="1-D"):
            w.write_documents(np.zeros((2, 2), dtype=np.uint16), [4])
    with dlfs.Volume(path) as vol:
        assert len(vol) == 1001 and vol.token_width == 2
        check_volume(vol, tokens.astype(np.uint16), np.append(lengths, 0))
    with pytest.raises(ValueError, match="token ids are \"uint16\" or \"uint32\""):
        dlfs.Writer(tmp_path / "x.dlfs", tokens="uint8")
    with pytest.raises(ValueError, match=r"a token volume \(tokens=\) needs the compact"):
        dlfs.Writer(tmp_path / "x.dlfs", tokens="uint32", layout="tree")
    with pytest.raises(ValueError, match="align must be 1"):
        dlfs.Writer(tmp_path / "x.dlfs", tokens="uint32", align=4096)
    with dlfs.Writer(tmp_path / "plain.dlfs") as w:
        with pytest.raises(ValueError, match="not a token volume"):
            w.write_document([1, 2])
        w.add("a", b"xy")
    with dlfs.Volume(tmp_path / "plain.dlfs") as vol:
        assert vol.token_width == 0 and vol.token_count == 0
        with pytest.raises(ValueError, match="not a token volume"):
            vol.read_tokens(0, 1)
