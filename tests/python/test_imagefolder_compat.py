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


def test_sample_order_is_torchvisions_for_nested_trees(run, tmp_path):
    """Index i of a packed ImageFolder tree is torchvision's samples[i], for
    any tree: its make_dataset sorts os.walk's directories by path, so a
    class's own files come before its sub-folders' (cat/a, cat/z, cat/sub/b),
    and 'cat-x' is a class after 'cat' though its paths sort before cat/'s."""
    root = tmp_path / "tree"
    files = ["cat/a.jpg", "cat/sub/b.jpg", "cat/z.jpg", "cat/sub/deeper/c.png", "cat/sub-2/d.jpg",
             "cat/sub.x/e.jpg", "cat/Sub/f.jpg", "cat/9/g.jpg", "cat-x/h.jpg", "cat.y/i.jpg",
             "caf\u00e9/j.jpg", "caf\u00e9/\u00e9t\u00e9/k.jpg", "dog/l.jpg", "dog/0/m.jpg",
             "Dog/n.jpg", "dog/a b/o.jpg"]
    for rel in files:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rel.encode())
    ref = datasets.ImageFolder(str(root), loader=lambda p: p)
    theirs = [(os.path.relpath(p, root), label) for p, label in ref.samples]
    for layout in ["compact", "auto"]:
        vol = tmp_path / f"{layout}.dlfs"
        run("pack", root, "-o", vol, "-q", "--layout", layout, check=0)
        rows = [json.loads(l) for l in
                run("ls", vol, "-r", "--json", check=0).stdout.splitlines()]
        ours = sorted((r["index"], r["path"], r["label"]) for r in rows)
        assert [(p, l) for _, p, l in ours] == theirs, layout
        for i, (path, _) in enumerate(theirs):
            assert run("cat", vol, "--index", str(i), check=0).stdout == path.encode()


def test_samples_equal_torchvision_with_files_it_would_not_load(run, tmp_path):
    """A tree as users have them: notes, macOS droppings, a completion
    marker, files at the root. dlfs packs exactly torchvision's samples and
    says what it left out."""
    root = tmp_path / "tree"
    files = ["cat/1.jpg", "cat/2.JPEG", "cat/3.Png", "cat/sub/4.webp", "cat/notes.txt",
             "cat/.DS_Store", "dog/5.tif", "dog/6.tiff", "dog/7.bmp", "dog/8.pgm", "dog/9.ppm",
             "dog/labels.json", "dog/x.gif", "README.md", ".complete", "root.jpg"]
    for rel in files:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(40))
    vol = tmp_path / "v.dlfs"
    out = run("pack", root, "-o", vol, check=0).stdout.decode()

    ref = datasets.ImageFolder(str(root), loader=lambda p: p)
    rows = [json.loads(l) for l in run("ls", vol, "-r", "--json", check=0).stdout.splitlines()]
    assert {r["path"]: r["label"] for r in rows} == \
        {os.path.relpath(p, root): label for p, label in ref.samples}
    assert len(rows) == len(ref) == 9
    assert ("ignored 7 entries that ImageFolder would not load: 4 without an image extension, "
            "3 at the root (no class)") in out, out
    assert "--all-files" in out

    # --all-files: every file, the root's unlabelled.
    out = run("pack", root, "-o", tmp_path / "all.dlfs", "--all-files", check=0).stdout.decode()
    assert out.startswith(f"packed {len(files)} samples")
    assert "ignored" not in out


def test_tree_without_class_directories_is_refused(run, tmp_path):
    root = tmp_path / "flat"
    root.mkdir()
    for i in range(3):
        (root / f"{i}.png").write_bytes(b"x")
    for args in [(), ("--from", "imagefolder")]:
        proc = run("pack", root, "-o", tmp_path / "v.dlfs", *args)
        assert proc.returncode == 2
        assert f"{root}: no class directories" in proc.stderr.decode()
    assert not (tmp_path / "v.dlfs").exists()
    run("pack", root, "-o", tmp_path / "v.dlfs", "--all-files", "-q", check=0)


def _ls(run, vol):
    rows = [json.loads(l) for l in run("ls", vol, "-r", "--json", check=0).stdout.splitlines()]
    return {r["path"]: r["label"] for r in rows}


def _hidden_tree(root):
    """What Jupyter and macOS leave in a data directory."""
    for rel in [".ipynb_checkpoints/cat-checkpoint.png", ".ipynb_checkpoints/Untitled.ipynb",
                "cat/1.png", "cat/.x.png", "cat/._2.jpg", "cat/.DS_Store", "cat/.thumbs/3.jpg",
                "dog/4.png", ".hidden_root.png"]:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(30))


def test_hidden_directories_and_files_as_torchvision(run, tmp_path):
    """torchvision 0.14 (Debian 12) makes a class of .ipynb_checkpoints and
    loads hidden image files: so does dlfs pack by default."""
    root = tmp_path / "tree"
    _hidden_tree(root)
    vol = tmp_path / "v.dlfs"
    out = run("pack", root, "-o", vol, check=0).stdout.decode()
    ref = datasets.ImageFolder(str(root), loader=lambda p: p)
    assert ref.class_to_idx == {".ipynb_checkpoints": 0, "cat": 1, "dog": 2}
    info = json.loads(run("info", vol, "--json", check=0).stdout)
    assert info["class_names"] == ref.classes
    assert _ls(run, vol) == {os.path.relpath(p, root): label for p, label in ref.samples}
    assert "cat/.x.png" in _ls(run, vol)
    # What the summary says ImageFolder would not load, it does not load.
    assert ("ignored 3 entries that ImageFolder would not load: 2 without an image extension, "
            "1 at the root (no class)") in out, out
    assert "skip-hidden" not in out


def test_skip_hidden_is_the_old_behaviour_and_says_labels_differ(run, tmp_path):
    root = tmp_path / "tree"
    _hidden_tree(root)
    vol = tmp_path / "v.dlfs"
    out = run("pack", root, "-o", vol, "--skip-hidden", check=0).stdout.decode()
    info = json.loads(run("info", vol, "--json", check=0).stdout)
    assert info["class_names"] == ["cat", "dog"]
    assert _ls(run, vol) == {"cat/1.png": 0, "dog/4.png": 1}
    # A class's hidden directories are met while its directories are gathered
    # (torchvision's order walks them all first), then its hidden files.
    assert ("--skip-hidden left out 6 hidden entries (e.g. .hidden_root.png, .ipynb_checkpoints, "
            "cat/.thumbs, cat/.DS_Store, cat/._2.jpg): the labels differ from torchvision's "
            "ImageFolder") in out, out
    help_text = run("pack", "--help", check=0).stdout.decode()
    assert "--skip-hidden" in help_text and "labels" in help_text.split("--skip-hidden")[1][:300]


def test_a_class_without_images_is_said_as_torchvision_refuses_it(run, tmp_path):
    root = tmp_path / "tree"
    for rel in [".ipynb_checkpoints/Untitled-checkpoint.ipynb", "cat/1.png", "dog/2.png"]:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match="Found no valid file for the classes "
                                                ".ipynb_checkpoints"):
        datasets.ImageFolder(str(root), loader=lambda p: p)
    out = run("pack", root, "-o", tmp_path / "v.dlfs", check=0).stdout.decode()
    assert ("1 class without a sample: .ipynb_checkpoints (torchvision's ImageFolder refuses such "
            "a tree; --skip-hidden leaves hidden directories out)") in out, out
    out = run("pack", root, "-o", tmp_path / "s.dlfs", "--skip-hidden", check=0).stdout.decode()
    assert "without a sample" not in out


def test_class_names_rename_the_directories_one_for_one_or_are_refused(run, tmp_path):
    """Issue 41: --class-names x,y on 3 directories gave 0=x, 1=y, 2=2, and ten
    names on three directories gave ten classes, without a word."""
    root = tmp_path / "tree"
    for rel in ["cat/1.png", "dog/2.png", "emu/3.png"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"x")
    for names in ("x,y", ",".join(f"n{i}" for i in range(10))):
        err = run("pack", root, "-o", tmp_path / "v.dlfs", "--class-names", names,
                  check=2).stderr.decode()
        count = len(names.split(","))
        assert (f"{root}: --class-names gives {count} names for 3 class directories (cat, dog, "
                "emu); an ImageFolder tree's classes are its directories") in err, err
        assert not (tmp_path / "v.dlfs").exists()
    out = run("pack", root, "-o", tmp_path / "v.dlfs", "--class-names", "Cat,dog,Emu",
              check=0).stdout.decode()
    assert "--class-names renamed 2 class directories: cat -> Cat, emu -> Emu" in out, out
    info = json.loads(run("info", tmp_path / "v.dlfs", "--json", check=0).stdout)
    assert info["class_names"] == ["Cat", "dog", "Emu"]
    assert _ls(run, tmp_path / "v.dlfs") == {"cat/1.png": 0, "dog/2.png": 1, "emu/3.png": 2}
