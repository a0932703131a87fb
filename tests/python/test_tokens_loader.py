"""dlfs.torch.TokenDataset over token volumes packed from a Megatron
.bin/.idx pair: windows laid across documents, every token once per epoch,
the same stream on 1, 2 and 3 ranks and any number of workers, resume on
another world size, blends, and corruption caught."""
import json
import os
import struct
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch not installed")
dlfs = pytest.importorskip("dlfs", reason="Python module not built")
import dlfs.torch as dt  # noqa: E402
import torch.utils.data as tud  # noqa: E402

DLFS = os.environ.get("DLFS_BIN", "dlfs")
SHIFT = 12  # token = document << 12 | position: each token tells where it is from


def write_megatron(prefix, lengths):
    """A Megatron indexed dataset (.bin + .idx, uint32 tokens, one sequence
    per document) whose token at position p of document d is d << 12 | p."""
    lengths = np.asarray(lengths, dtype=np.int64)
    assert lengths.max() < (1 << SHIFT)
    tokens = np.concatenate([(d << SHIFT) + np.arange(n, dtype=np.int64)
                             for d, n in enumerate(lengths)]).astype(np.uint32)
    tokens.tofile(f"{prefix}.bin")
    pointers = np.concatenate([[0], np.cumsum(lengths)[:-1] * 4]).astype(np.int64)
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", 4))  # int32 code: the dtype people use past 65,535 ids
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(lengths) + 1))
        f.write(lengths.astype(np.int32).tobytes())
        f.write(pointers.tobytes())
        f.write(np.arange(len(lengths) + 1, dtype=np.int64).tobytes())
    return tokens


def pack(prefix, out):
    subprocess.run([DLFS, "pack", f"{prefix}.idx", "-o", str(out)], check=True,
                   capture_output=True, text=True)
    return str(out)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 300, size=400)
    lengths[[5, 17, 200]] = 0  # empty documents are kept and hold no tokens
    tokens = write_megatron(d / "web", lengths)
    return pack(d / "web", d / "web.dlfs"), lengths, tokens


def epoch_windows(path, epoch=0, **kw):
    kw.setdefault("seq_len", 64)
    kw.setdefault("batch_size", 8)
    ds = dt.TokenDataset(path, **kw)
    ds.set_epoch(epoch)
    return [row for item in ds for row in item["tokens"].numpy().tolist()], ds


def check_window(row, lengths):
    """Runs contiguous within one document: a document's end, whole
    documents, a document's start."""
    for a, b in zip(row, row[1:]):
        da, pa = a >> SHIFT, a & ((1 << SHIFT) - 1)
        db, pb = b >> SHIFT, b & ((1 << SHIFT) - 1)
        if db == da:
            assert pb == pa + 1, (a, b)
        else:
            assert pa == lengths[da] - 1 and pb == 0, (a, b)
            assert db > da and all(lengths[da + 1:db] == 0), (a, b)


def test_one_epoch_reads_every_token_once(corpus):
    path, lengths, tokens = corpus
    rows, ds = epoch_windows(path, shuffle=True, seed=3)
    seq = 64
    windows = (len(tokens) - 1) // seq
    assert ds.windows_per_epoch == windows
    # drop_last=False: the last global batch is filled from the epoch's start
    assert len(rows) == -(-windows // 8) * 8
    for row in rows:
        assert len(row) == seq + 1
        check_window(row, lengths)
    firsts = [t for row in rows[:windows] for t in row[:seq]]
    assert sorted(firsts) == sorted(tokens[:windows * seq].tolist())
    # shuffled: not the corpus order; another epoch, another order
    assert rows[:windows] != sorted(rows[:windows])
    other, _ = epoch_windows(path, epoch=1, shuffle=True, seed=3)
    assert other != rows and sorted(other[:windows]) == sorted(rows[:windows])


def test_cu_seqlens_and_position_ids_follow_documents(corpus):
    path, lengths, _ = corpus
    ds = dt.TokenDataset(path, seq_len=64, batch_size=4, seed=1, position_ids=True)
    item = next(iter(ds))
    toks = item["tokens"].numpy()
    S = 64
    inputs = toks[:, :-1].ravel()
    want = [0] + [i for i in range(1, len(inputs))
                  if i % S == 0 or (inputs[i] >> SHIFT) != (inputs[i - 1] >> SHIFT)] + [len(inputs)]
    assert item["cu_seqlens"].tolist() == want
    pos = item["position_ids"].numpy()
    for r in range(4):
        for i in range(S):
            same_doc_before = i > 0 and (toks[r, i] >> SHIFT) == (toks[r, i - 1] >> SHIFT)
            assert pos[r, i] == (pos[r, i - 1] + 1 if same_doc_before else 0)


def _rank_rows(path, world, **kw):
    return [epoch_windows(path, rank=r, world_size=world, **kw)[0] for r in range(world)]


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_split_the_one_rank_stream(corpus, world):
    path = corpus[0]
    one, _ = epoch_windows(path, seed=5, batch_size=4, world_size=1, rank=0, epoch_windows=0)
    parts = _rank_rows(path, world, seed=5, batch_size=4)
    # Global batch j is batch j of every rank, rank r taking its r-th part.
    interleaved = []
    for j in range(len(parts[0]) // 4):
        for r in range(world):
            interleaved += parts[r][4 * j:4 * j + 4]
    windows = dt.TokenDataset(path, seq_len=64, batch_size=4).windows_per_epoch
    assert interleaved[:windows] == one[:windows]
    assert {tuple(r) for p in parts for r in p} == {tuple(r) for r in one}


def test_workers_keep_the_stream_order(corpus):
    path = corpus[0]
    ds = dt.TokenDataset(path, seq_len=64, batch_size=8, seed=2)
    alone = [r for item in tud.DataLoader(ds, batch_size=None)
             for r in item["tokens"].tolist()]
    two = [r for item in tud.DataLoader(ds, batch_size=None, num_workers=2)
           for r in item["tokens"].tolist()]
    assert two == alone


def test_resume_on_another_world_size_reads_each_window_once(corpus):
    path = corpus[0]
    full, _ = epoch_windows(path, seed=9, batch_size=4)
    windows = dt.TokenDataset(path, seq_len=64, batch_size=4).windows_per_epoch
    # Two ranks read 3 batches each, save; three ranks finish the epoch.
    first = []
    state = None
    for r in range(2):
        ds = dt.TokenDataset(path, seq_len=64, batch_size=4, seed=9, rank=r, world_size=2)
        ds.set_epoch(0)
        it = iter(ds)
        for _ in range(3):
            first += next(it)["tokens"].tolist()
        s = ds.state_dict(batches=3)
        assert state is None or s == state  # every rank saves the same state
        state = s
    assert len(repr(state)) < 1024
    rest = []
    for r in range(3):
        ds = dt.TokenDataset(path, seq_len=64, batch_size=4, seed=9, rank=r, world_size=3)
        ds.load_state_dict(state)
        ds.set_epoch(0)
        rest += [row for item in ds for row in item["tokens"].tolist()]
    got = first + rest
    assert {tuple(r) for r in got} == {tuple(r) for r in full[:windows]}
    # none twice, but for the padding of the last global batch
    assert len(got) - len({tuple(r) for r in got}) < 3 * 4
    # after the restored epoch, the next one starts afresh
    ds.set_epoch(1)
    assert len(ds) == -(-windows // 12)


def test_set_epoch_after_restore_guards_the_rest(corpus):
    path = corpus[0]
    ds = dt.TokenDataset(path, seq_len=64, batch_size=4, seed=1)
    ds.set_epoch(2)
    state = ds.state_dict(batches=2)
    ds2 = dt.TokenDataset(path, seq_len=64, batch_size=4, seed=1)
    ds2.load_state_dict(state)
    with pytest.raises(ValueError, match="discard_restored"):
        ds2.set_epoch(3)
    ds2.set_epoch(3, discard_restored=True)
    assert ds2.epoch == 3
    with pytest.raises(ValueError, match="seq_len"):
        dt.TokenDataset(path, seq_len=32, batch_size=4, seed=1).load_state_dict(state)


def test_blend_follows_weights_and_resumes_with_new_weights(corpus, tmp_path):
    path, lengths, _ = corpus
    write_megatron(tmp_path / "code", np.full(300, 100))
    code = pack(tmp_path / "code", tmp_path / "code.dlfs")
    ds = dt.TokenDataset([(path, 3.0), (code, 1.0)], seq_len=32, batch_size=16, seed=4,
                         epoch_windows=4000)
    sources = np.concatenate([item["sources"].numpy() for item in ds])
    share = (sources == 0).mean()
    assert abs(share - 0.75) < 0.01
    # A source's windows are each read once per pass over it.
    ds = dt.TokenDataset([(path, 3.0), (code, 1.0)], seq_len=32, batch_size=16, seed=4,
                         epoch_windows=800)
    it = iter(ds)
    seen = [next(it) for _ in range(10)]
    state = ds.state_dict(batches=10)
    ds2 = dt.TokenDataset([(path, 1.0), (code, 1.0)], seq_len=32, batch_size=16, seed=4,
                          epoch_windows=800)
    ds2.load_state_dict(state)
    rest = list(ds2)
    rows = [(int(s), tuple(r)) for item in seen + rest
            for s, r in zip(item["sources"].tolist(), item["tokens"].tolist())]
    code_rows = [r for s, r in rows if s == 1]
    assert len(code_rows) == len(set(code_rows))  # 3000 code windows: no pass completed
    later = [int(s) for item in rest for s in item["sources"].tolist()]
    assert abs(np.mean(np.array(later) == 0) - 0.5) < 0.05  # the new weights rule the rest


def test_document_windows_cut_and_pad(corpus):
    path, lengths, _ = corpus
    ds = dt.TokenDataset(path, seq_len=16, batch_size=8, windows="document", pad_id=-1,
                         shuffle=False)
    items = list(ds)
    rows = [r for it in items for r in it["tokens"].tolist()][:len(lengths)]
    lens = [n for it in items for n in it["lengths"].tolist()][:len(lengths)]
    for d, (row, n) in enumerate(zip(rows, lens)):
        assert n == min(lengths[d], 17)
        assert row[:n] == [(d << SHIFT) + p for p in range(n)]
        assert row[n:] == [-1] * (17 - n)


def test_int32_output(corpus):
    path = corpus[0]
    item = next(iter(dt.TokenDataset(path, seq_len=64, batch_size=2, dtype="int32")))
    assert item["tokens"].dtype == torch.int32 and item["tokens"].shape == (2, 65)


def test_damaged_token_bytes_are_an_error_naming_the_chunk(corpus, tmp_path):
    path, _, tokens = corpus
    bad = tmp_path / "bad.dlfs"
    data = open(path, "rb").read()
    bad.write_bytes(data)
    off = data.find(tokens[1000:1008].tobytes())  # token 1000 (tokens tell their place)
    assert off > 0
    with open(bad, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x40]))
    ds = dt.TokenDataset(str(bad), seq_len=64, batch_size=64, shuffle=False)
    with pytest.raises(dlfs.CorruptVolumeError, match="chunk"):
        for _ in ds:
            pass


def test_not_a_token_volume_is_refused_by_name(tmp_path):
    with dlfs.Writer(str(tmp_path / "plain.dlfs")) as w:
        w.add("a", b"abcd", label=0)
    with pytest.raises(ValueError, match="not a token volume"):
        dt.TokenDataset(str(tmp_path / "plain.dlfs"), seq_len=8, batch_size=1)


def test_tiny_gpt_example_learns_and_resumes(tmp_path):
    """examples/train_tiny_gpt.py: the loss falls, and a run stopped and
    resumed goes on (a blend of two token volumes it makes itself)."""
    import sys
    script = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_tiny_gpt.py")
    common = [sys.executable, script, "--data", str(tmp_path), "--seq-len", "32",
              "--batch-size", "8", "--log", "10"]
    env = dict(os.environ)
    first = subprocess.run(common + ["--steps", "30", "--save", str(tmp_path / "ck.pt")],
                           check=True, capture_output=True, text=True, env=env).stdout
    last = first.strip().splitlines()[-1]  # "loss: first 10 steps A, last 10 B (...)"
    a = float(last.split("steps ")[1].split(",")[0])
    b = float(last.split("last 10 ")[1].split(" ")[0])
    assert b < a - 0.5, first
    resumed = subprocess.run(common + ["--steps", "40", "--resume", str(tmp_path / "ck.pt")],
                             check=True, capture_output=True, text=True, env=env).stdout
    assert "resumed at step 30" in resumed and "step    40" in resumed, resumed


RANK_JOB = r"""
import json, sys
import dlfs.torch as dt
kw = {}
if sys.argv[3] == "mpi":
    from mpi4py import MPI
    kw["comm"] = MPI.COMM_WORLD
ds = dt.TokenDataset(sys.argv[1], seq_len=64, batch_size=4, seed=5, **kw)
rows = [r for item in ds for r in item["tokens"].tolist()]
with open(f"{sys.argv[2]}/rank{ds.rank}.json", "w") as f:
    json.dump({"rank": ds.rank, "world": ds.world_size, "rows": rows}, f)
"""


@pytest.mark.parametrize("launch", ["mpirun", "torchrun"])
def test_launchers_split_the_stream_like_explicit_ranks(corpus, tmp_path, launch):
    import shutil
    import sys
    path = corpus[0]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_", "RANK", "WORLD_SIZE",
                                "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    if launch == "mpirun":
        if shutil.which("mpirun") is None or not dlfs._dlfs._mpi_built:
            pytest.skip("mpirun or dlfs's MPI support missing")
        pytest.importorskip("mpi4py", reason="python3-mpi4py not installed")
        subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3",
                        sys.executable, "-c", RANK_JOB, path, str(tmp_path), "mpi"],
                       check=True, env=env, timeout=240, capture_output=True)
    else:
        procs = [subprocess.Popen([sys.executable, "-c", RANK_JOB, path, str(tmp_path), "env"],
                                  env=dict(env, RANK=str(r), WORLD_SIZE="3", LOCAL_RANK=str(r),
                                           LOCAL_WORLD_SIZE="3"))
                 for r in range(3)]
        assert [p.wait(timeout=240) for p in procs] == [0, 0, 0]
    got = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(3)]
    assert [(g["rank"], g["world"]) for g in got] == [(0, 3), (1, 3), (2, 3)]
    for r in range(3):
        want, _ = epoch_windows(path, seed=5, batch_size=4, rank=r, world_size=3)
        assert got[r]["rows"] == want
