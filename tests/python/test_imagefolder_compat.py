"""dlfs pack assigns ImageFolder labels exactly as torchvision does."""
import json
import os

import pytest

datasets = pytest.importorskip("torchvision.datasets", reason="python3-torchvision not installed")


def test_labels_equal_torchvision_class_to_idx(run, tmp_path):
    root = tmp_path / "tree"
    # Mixed case, digits, punctuation and non-ASCII names: the sort order is
    # where implementations drift.
    classes = ["n01440764", "Zebra", "apple", "Apple", "_under", "9lives", "caf\u00e9", "b-c", "b_c"]
    for i, c in enumerate(classes):
        for j in range(3):
            p = root / c / (f"sub{j % 2}" if j == 2 else "") / f"img{j}_{i}.png"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(os.urandom(50 + j))
    vol = tmp_path / "v.dlfs"
    run("pack", root, "-o", vol, "-q", check=0)

    ref = datasets.ImageFolder(str(root), loader=lambda p: p)
    info = json.loads(run("info", vol, "--json", check=0).stdout)
    assert info["class_names"] == ref.classes
    assert {c: i for i, c in enumerate(info["class_names"])} == ref.class_to_idx

    rows = [json.loads(l) for l in run("ls", vol, "-r", "--json", check=0).stdout.splitlines()]
    ours = {r["path"]: r["label"] for r in rows}
    theirs = {os.path.relpath(p, root): label for p, label in ref.samples}
    assert ours == theirs
    for path, _ in list(theirs.items())[:5]:
        assert run("cat", vol, path, check=0).stdout == (root / path).read_bytes()
