"""TokenDataset(order="megatron") end to end: the corpora of the golden
files written as Megatron .bin/.idx pairs, packed with `dlfs pack`, read
through dlfs.torch.TokenDataset; every window of every split must hash to
what Megatron-LM's own GPTDataset/BlendedDataset gave
(tests/data/megatron: made by make_golden.py from Megatron's code)."""
import hashlib
import importlib.util
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="python3-torch not installed")
dlfs = pytest.importorskip("dlfs", reason="Python module not built")
import dlfs.torch as dt  # noqa: E402

DLFS = os.environ.get("DLFS_BIN", "dlfs")
GOLDEN = Path(__file__).resolve().parents[1] / "data" / "megatron"
SPLITS = ("train", "valid", "test")


def _golden_module():
    spec = importlib.util.spec_from_file_location("make_golden", GOLDEN / "make_golden.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # no Megatron needed: only the corpus rule is used
    return mod


@pytest.fixture(scope="module")
def volumes(tmp_path_factory):
    mg = _golden_module()
    d = tmp_path_factory.mktemp("megatron")
    out = {}
    for name, (n, seed, variant) in mg.CORPORA.items():
        prefix = str(d / name)
        mg.write_corpus(prefix, n, seed, variant)
        subprocess.run([DLFS, "pack", prefix, "-o", f"{prefix}.dlfs"], check=True,
                       capture_output=True, text=True)
        out[name] = f"{prefix}.dlfs"
    return out


def _cases():
    for path in sorted(GOLDEN.glob("*.json")):
        cfg = json.loads(path.read_text())["config"]
        for i, split in enumerate(SPLITS):
            yield pytest.param(path.name, i, id=f"{path.stem}-{split}")


@pytest.mark.parametrize("golden,split_index", list(_cases()))
def test_windows_match_megatron(volumes, golden, split_index):
    g = json.loads((GOLDEN / golden).read_text())
    cfg, want = g["config"], g["splits"][SPLITS[split_index]]
    if want is None:
        pytest.skip("Megatron builds no dataset for this split")
    if not cfg.get("add_extra_token", True):
        pytest.skip("windows of seq_len tokens (add_extra_token off) are not TokenDataset's")
    split = cfg.get("split")
    split_name = SPLITS[split_index]
    if "blend_per_split" in cfg and cfg["blend_per_split"] is not None:
        names, weights = cfg["blend_per_split"][split_index]
        split, split_name = "1", "train"  # each split reads its corpora whole
    else:
        names, weights = cfg["blend"]
    vols = [(volumes[n], w) for n, w in zip(names, weights)] if weights else \
        [volumes[n] for n in names]
    if len(vols) == 1 and not weights:
        vols = vols[0]
    size = cfg["sizes"][split_index]
    ds = dt.TokenDataset(vols, seq_len=cfg["seq_len"], batch_size=1, seed=cfg["seed"],
                         order="megatron", split=split, split_name=split_name,
                         num_samples=size or 0, pad_id=-1,
                         drop_last_partial=split_index != 1 or
                         cfg.get("drop_last_partial_validation", True))
    assert ds.windows_per_epoch == want["len"]
    h = hashlib.sha256()
    count = 0
    for item in ds:
        h.update(np.ascontiguousarray(item["tokens"].numpy(), dtype="<i8").tobytes())
        count += 1
    assert count == want["len"]
    assert h.hexdigest() == want["sha256"]["windows"]


def test_megatron_order_refuses_what_megatron_cannot_do(volumes):
    with pytest.raises(ValueError, match="num_samples"):
        dt.TokenDataset([(volumes["A"], 1.0), (volumes["B"], 1.0)], seq_len=64, batch_size=1,
                        order="megatron")
    with pytest.raises(ValueError, match="order"):
        dt.TokenDataset(volumes["A"], seq_len=64, batch_size=1, order="nemo")
