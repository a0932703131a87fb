#!/usr/bin/python3
"""Golden files of Megatron-LM's sample order, for dlfs's Megatron-compatible mode.

Usage (Debian's /usr/bin/python3 with python3-numpy and python3-torch; g++ and pybind11-dev):
  make_golden.py MEGATRON_DIR OUTDIR [--work DIR] [--only NAME,...]

Runs Megatron-LM's own dataset code, loaded from the checkout MEGATRON_DIR (the only place
Megatron's code comes from; nothing of it is copied here; tests/data/megatron/README.md names
the commit), on generated corpora:
1. Writes the corpora of CORPORA by their rule into WORK/corpus (not stored) and checks that
   Megatron's own IndexedDatasetBuilder writes byte-identical .bin/.idx files.
2. Compiles MEGATRON_DIR/megatron/core/datasets/helpers.cpp into WORK/build, imports
   megatron.core.datasets from the checkout with stand-ins for its import-time blockers
   (load_megatron), and for every configuration of CONFIGS builds the datasets with
   BlendedMegatronDatasetBuilder / GPTDataset / BlendedDataset.
3. Writes OUTDIR/<name>.json: the parameters, the corpora's hashes, and per split the index
   hashes, the (document, offset, length) runs of the first and last samples, and sha256 of
   all windows and of all __getitem__ outputs (README.md, "Format"). The runs are read off
   Megatron's own index arrays and checked against the tokens its __getitem__ path returns.
WORK defaults to a temporary directory, removed at the end. Output is deterministic.
"""

import argparse
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import types
from collections import OrderedDict

import numpy


# ----------------------------------------------------------------------------------------------
# The corpora: document lengths from an LCG, tokens by a formula (regenerated, never stored)
# ----------------------------------------------------------------------------------------------

LCG_A = 6364136223846793005
LCG_C = 1442695040888963407
MASK64 = (1 << 64) - 1
EOD = 0


def make_doc_lengths(n_docs, seed):
    """Document lengths from a 64-bit LCG (Knuth MMIX constants).

    x_0 = seed; x_{k+1} = (A*x_k + C) mod 2^64; u_k = x_{k+1} >> 33 (31 bits); doc k uses u_k:
      r = u % 100; v = u // 100
      r < 3  -> length 0 (empty document)
      r < 5  -> length 300 + v % 1700   (long: 300..1999 tokens)
      else   -> length 1 + v % 80       (short: 1..80 tokens)
    """
    x = seed & MASK64
    out = numpy.empty(n_docs, dtype=numpy.int32)
    for k in range(n_docs):
        x = (LCG_A * x + LCG_C) & MASK64
        u = x >> 33
        r, v = u % 100, u // 100
        if r < 3:
            L = 0
        elif r < 5:
            L = 300 + v % 1700
        else:
            L = 1 + v % 80
        out[k] = L
    return out


def doc_tokens(d, L, variant):
    """Tokens of document d (length L). The last token of every non-empty document is EOD (0).

    int32 : token(d, p) = d * 65536 + p + 1   (p < L-1)  -> doc = t >> 16, pos = (t & 0xffff) - 1
    uint16: token(d, p) = 1 + (d * 251 + p) % 65535      (p < L-1)
    """
    p = numpy.arange(L, dtype=numpy.int64)
    if variant == "int32":
        t = d * 65536 + p + 1
    elif variant == "uint16":
        t = 1 + (d * 251 + p) % 65535
    else:
        raise ValueError(variant)
    if L > 0:
        t[-1] = EOD
    return t


VARIANT_DTYPE = {"int32": (numpy.int32, 4), "uint16": (numpy.uint16, 8)}


def write_corpus(prefix, n_docs, seed, variant):
    """Write prefix.bin / prefix.idx in Megatron's MMIDIDX layout (one sequence per document)."""
    dtype, code = VARIANT_DTYPE[variant]
    lengths = make_doc_lengths(n_docs, seed)
    itemsize = numpy.dtype(dtype).itemsize
    with open(prefix + ".bin", "wb") as f:
        for d in range(n_docs):
            f.write(doc_tokens(d, int(lengths[d]), variant).astype(dtype).tobytes())
    pointers = numpy.zeros(n_docs, dtype=numpy.int64)
    pointers[1:] = numpy.cumsum(lengths.astype(numpy.int64) * itemsize)[:-1]
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", n_docs))  # sequence count
        f.write(struct.pack("<Q", n_docs + 1))  # document count (+1)
        f.write(lengths.astype("<i4").tobytes())
        f.write(pointers.astype("<i8").tobytes())
        f.write(numpy.arange(n_docs + 1, dtype="<i8").tobytes())
    return lengths


CODE_DTYPE = {1: numpy.uint8, 2: numpy.int8, 3: numpy.int16, 4: numpy.int32, 5: numpy.int64,
              6: numpy.float64, 7: numpy.float32, 8: numpy.uint16}


class Corpus:
    """Reader for a Megatron .bin/.idx pair (non-multimodal)."""

    def __init__(self, prefix):
        self.prefix = prefix
        with open(prefix + ".idx", "rb") as f:
            buf = f.read()
        assert buf[:9] == b"MMIDIDX\x00\x00"
        assert struct.unpack_from("<Q", buf, 9)[0] == 1
        self.dtype = CODE_DTYPE[buf[17]]
        nseq, ndoc = struct.unpack_from("<QQ", buf, 18)
        off = 34
        self.sizes = numpy.frombuffer(buf, "<i4", nseq, off).astype(numpy.int32)
        off += 4 * nseq
        self.pointers = numpy.frombuffer(buf, "<i8", nseq, off).astype(numpy.int64)
        self.bin = numpy.fromfile(prefix + ".bin", dtype=numpy.uint8)

    def get(self, i, offset=0, length=None):
        if length is None:
            length = int(self.sizes[i]) - offset
        isz = numpy.dtype(self.dtype).itemsize
        start = int(self.pointers[i]) + offset * isz
        return self.bin[start:start + length * isz].view(self.dtype)


# The corpora: name -> (documents, LCG seed, token type).
CORPORA = {
    # name: (n_docs, lcg seed, variant)
    "A": (2000, 1, "int32"),
    "B": (1500, 2, "uint16"),
    "C": (700, 3, "int32"),
}


# The configurations, one golden file each (what each covers: README.md).
CONFIGS = [
    dict(name="single_seq64_1epoch", blend=(["A"], None), split="969,30,1",
         sizes=[None, None, None], seed=1234, seq_len=64),
    dict(name="single_seq128_3epochs_separate", blend=(["A"], None), split="969,30,1",
         sizes=[2300, 40, 3], seed=7, seq_len=128),
    dict(name="single_seq128_3epochs_joint", blend=(["A"], None), split="969,30,1",
         sizes=[2520, 40, 3], seed=7, seq_len=128),
    dict(name="uint16_seq16_noextra", blend=(["B"], None), split="98,2,0",
         sizes=[12000, 300, None], seed=0, seq_len=16, add_extra_token=False, vocab_size=65536),
    dict(name="single_seq16_seedmax_many_epochs", blend=(["C"], None), split="100,0,0",
         sizes=[11000, None, None], seed=2**32 - 1, seq_len=16),
    dict(name="blend3_seq64", blend=(["A", "B", "C"], [0.5, 0.3, 0.2]), split="969,30,1",
         sizes=[3000, 200, 20], seed=1234, seq_len=64),
    dict(name="blend2_seq128_multiepoch", blend=(["A", "C"], [3.0, 1.0]), split="90,10",
         sizes=[3000, 150, 0], seed=42, seq_len=128),
    dict(name="blend2_doublenorm_ties", blend=(["A", "B"], [0.6, 0.15]), split="969,30,1",
         sizes=[2000, 100, 10], seed=1234, seq_len=64),
    dict(name="blend1_weighted", blend=(["A"], [1.0]), split="969,30,1",
         sizes=[1000, 30, 3], seed=11, seq_len=64),
    dict(name="blend_per_split", blend_per_split=[(["A", "B"], [0.7, 0.3]), (["C"], None), None],
         sizes=[2500, 150, None], seed=99, seq_len=32),
    dict(name="blend_weights_none_sized", blend=(["A", "C"], None), split="969,30,1",
         sizes=[1000, 50, 5], seed=3, seq_len=64),
    dict(name="blend_weights_none_exhaustive", blend=(["B", "C"], None), split="969,30,1",
         sizes=[None, None, None], seed=4, seq_len=64),
    dict(name="valid_partial_eod_flags", blend=(["A"], None), split="80,20",
         sizes=[None, None, None], seed=5, seq_len=64, drop_last_partial_validation=False,
         reset_position_ids=True, reset_attention_mask=True, eod_mask_loss=True,
         create_attention_mask=True),
    dict(name="split_round_half_even", blend=(["C"], None), split="3,5",
         sizes=[None, None, None], seed=12, seq_len=32),
    dict(name="inter_document_masking", blend=(["A"], None), split="969,30,1",
         sizes=[None, None, None], seed=6, seq_len=64, inter_document_masking=True),
    dict(name="inter_document_masking_noextra_partial", blend=(["C"], None), split="80,20",
         sizes=[None, None, None], seed=8, seq_len=32, add_extra_token=False,
         inter_document_masking=True, drop_last_partial_validation=False, eod_mask_loss=True),
]


def ensure_corpora(workdir):
    os.makedirs(workdir, exist_ok=True)
    out = {}
    for name, (n, seed, variant) in CORPORA.items():
        prefix = os.path.join(workdir, f"corpus_{name}_{variant}")
        write_corpus(prefix, n, seed, variant)
        out[name] = prefix
    return out


# ----------------------------------------------------------------------------------------------
# The golden records (README.md, "Format")
# ----------------------------------------------------------------------------------------------

SPLITS = ["train", "valid", "test"]
GOLDEN_FORMAT = "dlfs-megatron-golden/1"
N_FIRST, N_LAST = 40, 2  # samples whose runs are stored
CANON = {"dataset_id": "<i8", "tokens": "<i8", "labels": "<i8", "loss_mask": "<f4",
         "position_ids": "<i8", "attention_mask": "|u1", "cu_seqlens": "<i4", "max_seqlen": "<i8"}


def sha_i8(a):
    return hashlib.sha256(numpy.ascontiguousarray(numpy.asarray(a), dtype="<i8").tobytes()).hexdigest()


def runs_from_indices(document_index, sample_index, shuffle_index, sizes, extra, idx):
    """The (doc, offset, length) parts of sample idx, from the three index arrays (spec §6)."""
    j = int(shuffle_index[idx])
    b, bo = (int(x) for x in sample_index[j])
    e, eo = (int(x) for x in sample_index[j + 1])
    if b == e:
        return [[int(document_index[b]), bo, eo - bo + extra]]
    out = []
    for i in range(b, e + 1):
        d = int(document_index[i])
        off = bo if i == b else 0
        out.append([d, off, int(sizes[d]) - off if i < e else eo + extra])
    return out


def summarize_gpt(g, full=True):
    """g: adapter with corpus_name, doc_range, num_samples, num_epochs, tokens_per_epoch,
    separate_final_epoch, seq, extra, document_index, sample_index, shuffle_index, sizes,
    __len__, text(i) -> int64 window, getitem(i) -> dict of numpy arrays."""
    n = len(g)
    out = {
        "type": "GPTDataset", "corpus": g.corpus_name, "doc_range": list(g.doc_range),
        "num_samples": g.num_samples, "tokens_per_epoch": g.tokens_per_epoch,
        "num_epochs": g.num_epochs, "separate_final_epoch": g.separate_final_epoch, "len": n,
        "dtypes": {"document_index": str(g.document_index.dtype),
                   "sample_index": str(g.sample_index.dtype),
                   "shuffle_index": str(g.shuffle_index.dtype)},
        "sha256": {"document_index": sha_i8(g.document_index),
                   "sample_index": sha_i8(g.sample_index),
                   "shuffle_index": sha_i8(g.shuffle_index)},
    }
    hw = hashlib.sha256()
    for i in range(n):
        t = g.text(i)
        hw.update(numpy.ascontiguousarray(t, dtype="<i8").tobytes())
    out["sha256"]["windows"] = hw.hexdigest()
    if full:
        keys, hg = None, hashlib.sha256()
        for i in range(n):
            d = g.getitem(i)
            keys = list(d.keys())
            for k in keys:
                hg.update(numpy.ascontiguousarray(numpy.asarray(d[k]), dtype=CANON[k]).tobytes())
        out["getitem_keys"] = keys
        out["sha256"]["getitem"] = hg.hexdigest()
        rr = lambda i: runs_from_indices(g.document_index, g.sample_index, g.shuffle_index,
                                         g.sizes, g.extra, i)
        out["first"] = [rr(i) for i in range(min(n, N_FIRST))]
        out["last"] = [rr(i) for i in range(max(0, n - N_LAST), n)]
    return out


def summarize_blend(b, subs):
    """b: adapter with weights, size, dataset_index, dataset_sample_index, __len__,
    text(i), getitem(i); subs: list of GPT adapters."""
    n = len(b)
    out = {"type": "BlendedDataset", "weights": list(b.weights), "size": b.size, "len": n,
           "sha256": {"dataset_index": sha_i8(b.dataset_index),
                      "dataset_sample_index": sha_i8(b.dataset_sample_index)},
           "datasets": [summarize_gpt(g, full=False) for g in subs]}
    hw, hg, keys = hashlib.sha256(), hashlib.sha256(), None
    for i in range(n):
        hw.update(numpy.ascontiguousarray(b.text(i), dtype="<i8").tobytes())
        d = b.getitem(i)
        keys = list(d.keys())
        for k in keys:
            hg.update(numpy.ascontiguousarray(numpy.asarray(d[k]), dtype=CANON[k]).tobytes())
    out["sha256"]["windows"] = hw.hexdigest()
    out["sha256"]["getitem"] = hg.hexdigest()
    out["getitem_keys"] = keys

    def rr(i):
        k = int(b.dataset_index[i])
        g = subs[k]
        return [k, runs_from_indices(g.document_index, g.sample_index, g.shuffle_index, g.sizes,
                                     g.extra, int(b.dataset_sample_index[i]))]

    out["first"] = [rr(i) for i in range(min(n, N_FIRST))]
    out["last"] = [rr(i) for i in range(max(0, n - N_LAST), n)]
    return out


def golden_config_record(cfg):
    keys = ["name", "seed", "seq_len", "split", "blend", "blend_per_split", "sizes",
            "add_extra_token", "drop_last_partial_validation", "reset_position_ids",
            "reset_attention_mask", "eod_mask_loss", "create_attention_mask",
            "inter_document_masking", "surplus", "vocab_size"]
    defaults = dict(add_extra_token=True, drop_last_partial_validation=True,
                    reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
                    create_attention_mask=False, inter_document_masking=False, surplus=0.005,
                    vocab_size=2**32)
    rec = {}
    for k in keys:
        if k in cfg:
            v = cfg[k]
            if k == "blend":
                v = [list(v[0]), v[1]]
            if k == "blend_per_split":
                v = [None if x is None else [list(x[0]), x[1]] for x in v]
            rec[k] = v
        elif k in defaults:
            rec[k] = defaults[k]
    rec["eod"] = EOD
    rec["pad"] = -1
    return rec


def corpus_record(name, prefix):
    n, seed, variant = CORPORA[name]
    h = {}
    for ext in ("bin", "idx"):
        with open(f"{prefix}.{ext}", "rb") as f:
            h[ext] = hashlib.sha256(f.read()).hexdigest()
    return {"n_docs": n, "lcg_seed": seed, "variant": variant,
            "tokens": int(make_doc_lengths(n, seed).astype(numpy.int64).sum()),
            "sha256_bin": h["bin"], "sha256_idx": h["idx"]}


def _corpus_names(cfg):
    if "blend_per_split" in cfg:
        return [n for b in cfg["blend_per_split"] if b is not None for n in b[0]]
    return list(cfg["blend"][0])


def dump_golden(obj):
    """JSON with one sample window per line."""
    def depth(x):
        return 1 + max((depth(y) for y in x), default=0) if isinstance(x, list) else 0

    def enc(x, ind):
        pad = " " * ind
        if isinstance(x, dict):
            items = [f'{pad} {json.dumps(k)}: {enc(v, ind + 1)}' for k, v in x.items()]
            return "{\n" + ",\n".join(items) + "\n" + pad + "}" if items else "{}"
        if isinstance(x, list) and any(isinstance(y, dict) for y in x) or (
                isinstance(x, list) and depth(x) >= 3 and x and isinstance(x[0], list)):
            items = [pad + " " + enc(y, ind + 1) for y in x]
            return "[\n" + ",\n".join(items) + "\n" + pad + "]"
        return json.dumps(x, separators=(",", ":"))

    return enc(obj, 0) + "\n"


# ----------------------------------------------------------------------------------------------
# Loading Megatron's dataset code from the checkout, unmodified (stand-ins for import blockers)
# ----------------------------------------------------------------------------------------------


def _compile_helpers(megatron_dir, build_dir):
    src = os.path.join(megatron_dir, "megatron", "core", "datasets", "helpers.cpp")
    with open(src, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    os.makedirs(build_dir, exist_ok=True)
    out = os.path.join(build_dir, f"helpers_cpp-{digest}{suffix}")
    if not os.path.exists(out):
        inc = sysconfig.get_paths()["include"]
        cmd = ["g++", "-O3", "-Wall", "-shared", "-std=c++17", "-fPIC",
               f"-I{inc}", "-I/usr/include", src, "-o", out + ".tmp"]
        subprocess.run(cmd, check=True)
        os.replace(out + ".tmp", out)
    return out


def _pkg(name, path=None):
    m = types.ModuleType(name)
    if path is not None:
        m.__path__ = [path]
    sys.modules[name] = m
    return m


def load_megatron(megatron_dir, build_dir):
    """Megatron's dataset classes, imported from the checkout `megatron_dir`, unmodified.

    Only import-time blockers are replaced, by modules put into sys.modules first:
      megatron, megatron.core     empty packages whose __path__ points into the checkout, so
                                  megatron/core/__init__.py (tensor_parallel, parallel_state,
                                  DDP, ...) never runs;
      megatron.core.utils         log_single_rank only (the real one probes transformer-engine);
      megatron.core.safe_globals  safe_numpy_load = numpy.load (the real one needs numpy >= 1.25);
      megatron.core.tokenizers    MegatronTokenizerBase = object (type hints only);
      megatron.core.datasets.helpers_cpp
                                  the checkout's helpers.cpp, compiled into `build_dir` with
                                  Megatron's Makefile flags.
    """
    megatron_dir = os.path.abspath(megatron_dir)
    if "megatron" in sys.modules:
        raise RuntimeError("megatron already imported")

    _pkg("megatron", os.path.join(megatron_dir, "megatron"))
    core = _pkg("megatron.core", os.path.join(megatron_dir, "megatron", "core"))

    utils = _pkg("megatron.core.utils")

    def log_single_rank(logger, *args, rank=0, **kwargs):
        logger.log(*args, **kwargs)

    utils.log_single_rank = log_single_rank
    core.utils = utils

    sg = _pkg("megatron.core.safe_globals")
    sg.safe_numpy_load = lambda path, **kw: numpy.load(path, **kw)

    tok = _pkg("megatron.core.tokenizers")

    class MegatronTokenizerBase:  # type-hint stand-in
        pass

    tok.MegatronTokenizerBase = MegatronTokenizerBase

    so = _compile_helpers(megatron_dir, build_dir)
    spec = importlib.util.spec_from_file_location("megatron.core.datasets.helpers_cpp", so)
    # the datasets package itself is real; import it first so the submodule can attach
    import megatron.core.datasets  # noqa: F401
    mod = importlib.util.module_from_spec(spec)
    sys.modules["megatron.core.datasets.helpers_cpp"] = mod
    spec.loader.exec_module(mod)

    from megatron.core.datasets import helpers
    from megatron.core.datasets.blended_dataset import BlendedDataset
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    logging.getLogger("megatron").setLevel(logging.ERROR)
    return types.SimpleNamespace(
        GPTDataset=GPTDataset,
        GPTDatasetConfig=GPTDatasetConfig,
        BlendedDataset=BlendedDataset,
        BlendedMegatronDatasetBuilder=BlendedMegatronDatasetBuilder,
        IndexedDataset=IndexedDataset,
        helpers=helpers,
    )


class StubTokenizer:
    """Minimal tokenizer: GPTDataset needs vocab_size, eod and unique_identifiers."""

    def __init__(self, vocab_size, eod):
        self.vocab_size = vocab_size
        self.eod = eod
        self.unique_identifiers = OrderedDict(
            [("class", "StubTokenizer"), ("vocab_size", vocab_size), ("eod", eod)]
        )

    @property
    def pad(self):
        raise AttributeError("no pad token")  # -> GPTDataset pad id -1


def build_megatron(M, cfg, cache_dir):
    """Build datasets with Megatron's own builder for a config dict (CONFIGS).

    Returns the list of 3 top-level datasets (train, valid, test), each a GPTDataset,
    BlendedDataset or None.
    """
    tokenizer = StubTokenizer(cfg.get("vocab_size", 2**32), cfg.get("eod", 0))
    kw = dict(
        random_seed=cfg["seed"],
        sequence_length=cfg["seq_len"],
        path_to_cache=cache_dir,
        tokenizer=tokenizer,
        reset_position_ids=cfg.get("reset_position_ids", False),
        reset_attention_mask=cfg.get("reset_attention_mask", False),
        eod_mask_loss=cfg.get("eod_mask_loss", False),
        create_attention_mask=cfg.get("create_attention_mask", False),
        add_extra_token_to_sequence=cfg.get("add_extra_token", True),
        drop_last_partial_validation_sequence=cfg.get("drop_last_partial_validation", True),
        inter_document_masking=cfg.get("inter_document_masking", False),
        mid_level_dataset_surplus=cfg.get("surplus", 0.005),
    )
    if "blend_per_split" in cfg:
        kw["blend_per_split"] = [
            None if b is None else (list(b[0]), None if b[1] is None else list(b[1]))
            for b in cfg["blend_per_split"]
        ]
    else:
        b = cfg["blend"]
        kw["blend"] = (list(b[0]), None if b[1] is None else list(b[1]))
        kw["split"] = cfg["split"]
    config = M.GPTDatasetConfig(**kw)
    builder = M.BlendedMegatronDatasetBuilder(
        M.GPTDataset, list(cfg["sizes"]), lambda: True, config
    )
    return builder.build()


# ----------------------------------------------------------------------------------------------
# Megatron's datasets -> golden records
# ----------------------------------------------------------------------------------------------


def t2n(v):
    return v.numpy() if hasattr(v, "numpy") else numpy.asarray(v)


class MegGPT:
    """Adapter over a Megatron GPTDataset for megatron_model.summarize_gpt."""

    def __init__(self, ds, corpus_name, corpus):
        self.ds = ds
        self.corpus_name = corpus_name
        self.corpus = corpus
        idx = numpy.asarray(ds.indices)
        self.doc_range = (int(idx[0]), int(idx[-1]) + 1) if len(idx) else (0, 0)
        assert numpy.array_equal(idx, numpy.arange(*self.doc_range))
        self.num_samples = ds.num_samples
        self.tokens_per_epoch = int(ds._get_num_tokens_per_epoch())
        self.num_epochs = int(ds._get_num_epochs(self.tokens_per_epoch))
        assert len(ds.document_index) == self.num_epochs * len(idx)
        cfg = ds.config
        self.seq = cfg.sequence_length
        self.extra = int(cfg.add_extra_token_to_sequence)
        sep = False
        if self.num_epochs > 1:
            n_sans = ((self.num_epochs - 1) * self.tokens_per_epoch - self.extra) // self.seq
            n_per = (self.tokens_per_epoch - self.extra) // self.seq
            sep = (self.num_samples - n_sans) < int(0.80 * n_per)
        self.separate_final_epoch = sep
        self.document_index = numpy.asarray(ds.document_index)
        self.sample_index = numpy.asarray(ds.sample_index)
        self.shuffle_index = numpy.asarray(ds.shuffle_index)
        self.sizes = numpy.asarray(ds.dataset.sequence_lengths)

    def __len__(self):
        return len(self.ds)

    def text(self, i):
        text, _, lens = self.ds._query_document_sample_shuffle_indices(i)
        runs = runs_from_indices(self.document_index, self.sample_index, self.shuffle_index,
                                    self.sizes, self.extra, i)
        assert [r[2] for r in runs] == [int(x) for x in lens]
        parts = [self.corpus.get(d, o, n).astype(numpy.int64) for d, o, n in runs]
        flat = numpy.concatenate(parts) if parts else numpy.zeros(0, numpy.int64)
        assert numpy.array_equal(text[:len(flat)], flat) and (text[len(flat):] == -1).all()
        return text

    def getitem(self, i):
        return {k: t2n(v) for k, v in self.ds[i].items()}


class MegBlend:
    def __init__(self, b):
        self.b = b
        self.weights, self.size = b.weights, b.size
        self.dataset_index = numpy.asarray(b.dataset_index)
        self.dataset_sample_index = numpy.asarray(b.dataset_sample_index)
        self.subs = None

    def __len__(self):
        return len(self.b)

    def text(self, i):
        k = int(self.dataset_index[i])
        return self.subs[k].text(int(self.dataset_sample_index[i]))

    def getitem(self, i):
        return {k: t2n(v) for k, v in self.b[i].items()}


def megatron_commit(megatron_dir):
    try:
        return subprocess.run(["git", "-C", megatron_dir, "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    except Exception:
        return None


def check_corpus_writer(M, prefix, name, tmpdir):
    """Megatron's IndexedDatasetBuilder must write the same bytes as our writer."""
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    n, seed, variant = CORPORA[name]
    dtype = VARIANT_DTYPE[variant][0]
    lengths = make_doc_lengths(n, seed)
    other = os.path.join(tmpdir, f"megatron_writer_{name}")
    b = IndexedDatasetBuilder(other + ".bin", dtype=dtype)
    for d in range(n):
        b.add_document(torch.from_numpy(doc_tokens(d, int(lengths[d]), variant)),
                       [int(lengths[d])])
    b.finalize(other + ".idx")
    for ext in ("bin", "idx"):
        with open(f"{prefix}.{ext}", "rb") as f1, open(f"{other}.{ext}", "rb") as f2:
            assert f1.read() == f2.read(), f"{name}.{ext}: our writer differs from Megatron's"




def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("megatron_dir", metavar="MEGATRON_DIR",
                    help="a checkout of NVIDIA/Megatron-LM: its dataset code is run from here")
    ap.add_argument("outdir", metavar="OUTDIR", help="where the <name>.json files go")
    ap.add_argument("--work", metavar="DIR",
                    help="corpora, compiled helpers and caches (default: a temporary directory)")
    ap.add_argument("--only", metavar="NAME,...", help="only these configurations")
    args = ap.parse_args()

    work = args.work or tempfile.mkdtemp(prefix="megatron-golden-")
    try:
        run(args.megatron_dir, args.outdir, work, args.only.split(",") if args.only else None)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


def run(megatron_dir, outdir, work, only):
    M = load_megatron(megatron_dir, os.path.join(work, "build"))
    prefixes = ensure_corpora(os.path.join(work, "corpus"))
    corpora = {k: Corpus(p) for k, p in prefixes.items()}
    for k, p in prefixes.items():
        check_corpus_writer(M, p, k, os.path.join(work, "corpus"))
    print("corpora OK (byte-identical to Megatron's IndexedDatasetBuilder)", flush=True)
    by_path = {p: k for k, p in prefixes.items()}
    commit = megatron_commit(megatron_dir)
    os.makedirs(outdir, exist_ok=True)

    for cfg in CONFIGS:
        if only and cfg["name"] not in only:
            continue
        mcfg = dict(cfg)
        if "blend_per_split" in cfg:
            mcfg["blend_per_split"] = [
                None if b is None else ([prefixes[n] for n in b[0]], b[1])
                for b in cfg["blend_per_split"]]
        else:
            mcfg["blend"] = ([prefixes[n] for n in cfg["blend"][0]], cfg["blend"][1])
        cache = os.path.join(work, "cache", cfg["name"])
        shutil.rmtree(cache, ignore_errors=True)
        top = build_megatron(M, mcfg, cache)

        def gpt(ds):
            name = by_path[ds.dataset_path]
            return MegGPT(ds, name, corpora[name])

        splits = {}
        for i, t in enumerate(top):
            sp = SPLITS[i]
            if t is None:
                splits[sp] = None
            elif isinstance(t, M.BlendedDataset):
                b = MegBlend(t)
                b.subs = [gpt(d) for d in t.datasets]
                splits[sp] = summarize_blend(b, b.subs)
            else:
                splits[sp] = summarize_gpt(gpt(t))
        used = sorted(set(_corpus_names(cfg)))
        golden = {
            "format": GOLDEN_FORMAT,
            "config": golden_config_record(cfg),
            "corpora": {k: corpus_record(k, prefixes[k]) for k in used},
            "splits": splits,
            "generator": {"megatron_commit": commit, "numpy": numpy.__version__,
                          "made_with": "tests/data/megatron/make_golden.py (Megatron-LM's own "
                                       "GPTDataset/BlendedDataset)"},
        }
        path = os.path.join(outdir, cfg["name"] + ".json")
        with open(path, "w") as f:
            f.write(dump_golden(golden))
        print(f"wrote {path} ({os.path.getsize(path)} B)", flush=True)


if __name__ == "__main__":
    main()
