"""Executable docs (issue 41): every command block and Python snippet of
README.md, docs/*.md and the benchmarks' pages (bench/README.md,
bench/*/README.md) runs here, on small data, as written — or is marked below
with the reason it cannot, and then at least its flags are checked against the
program's --help. A doc that drifts from the code fails.

How a block is treated, by its fence:
- ```python: run as its own script (warnings are errors) in the file's
  sandbox, after the file's command blocks before it.
- ```sh: each command (continuation lines joined, comments dropped) runs in
  the sandbox with bash and must succeed, after the REWRITES below (each
  says why the command cannot run as written here); commands matching SKIP
  do not run (reason given) and get the static check: every --flag they use
  must appear in the --help of the program they call (dlfs VERB, a script of
  the repository, also behind sudo or /usr/bin/python3, or a benchmark
  program of build/bench/ beside the dlfs under test).
- unlabelled blocks are output or diagrams, except three kinds that are
  checked: a listing of files with their contents in quotes (`src/cat/1.jpg
  "abc"`) is made in the sandbox; a transcript ("$ command" lines, then its
  output) is run and compared; an `xxd` dump is compared byte for byte with
  the volume the transcript made, but for the bytes the doc says differ on
  every run.
- other languages (cpp, cmake) are marked in LANGUAGES with the test that
  covers them.
A new block is picked up by these rules; one that cannot run here fails
until it is marked with a reason.

The sandbox holds what the docs' commands expect, small: `build/dlfs` and
`build/python` (the build under test), `~/data/imagenet/train` (HOME is the
sandbox's home: 60 JPEGs in 3 classes), WebDataset shards in `shards/`,
Fashion-MNIST's IDX files (300 and 60 images), `names.txt`, and a Caffe
LMDB `caffe_train_lmdb`.
"""
import fnmatch
import io
import json
import os
import pathlib
import re
import shlex
import struct
import subprocess
import sys

import numpy as np
import pytest

dlfs = pytest.importorskip("dlfs", reason="Python module not built")

REPO = pathlib.Path(__file__).resolve().parents[2]
DOCS = ([REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
        + [REPO / "bench" / "README.md"] + sorted((REPO / "bench").glob("*/README.md")))

LANGUAGES = {
    "cmake": "tests/packaging builds a consumer with find_package(dlfs) and dlfs::dlfs",
    "cpp": "fragments of a program (no main); the API they name is what the GoogleTest suite "
           "and the MPI programs call",
}

# Commands that cannot run here as written: (file or a glob of files, regex,
# replacement, why).
REWRITES = [
    ("*", r"/usr/share/datasets/fashion-mnist", "fashion-mnist",
     "small IDX files of Fashion-MNIST's layout (300 train, 60 test images)"),
    ("*", r"/(nvme[01])/", r"\1/", "two NVMe devices' mount points: two directories here"),
    ("*", r"/pfs/", "", "a parallel file system: the working directory here"),
    ("*", r"\bmpirun -np (\d+)", "mpirun --allow-run-as-root --oversubscribe -np 4",
     "root and 2 cores here: 4 ranks, oversubscribed"),
    ("*", r"\[(--?[\w-]+)\]", r"\1", "an optional flag in brackets: run with it"),
    ("*", r" --drop-cache\b", "", "never drop the page cache in a test (other jobs share it)"),
    ("README.md", r"out/fashion-mnist-train\.dlfs", "demo-train.dlfs",
     "the demo's PNG volume, small (320 images); scripts/demo.sh takes minutes"),
    ("docs/deploy.md", r" train\.dlfs", " demo-train.dlfs", "a small volume of PNGs"),
    ("docs/lmdbio.md", r"/data/train_lmdb", "caffe_train_lmdb", "a small Caffe LMDB here"),
    ("docs/lmdbio.md", r"--iters 1000", "--iters 10", "fewer iterations on the small LMDB"),
]

# Why the benchmarks' commands (bench/README.md, bench/*/README.md) do not run here.
BENCHMARK = ("a benchmark: minutes to hours, as root, dropping the page cache; its scripts' "
             "--help is checked by test_bench_scripts.py")

# Commands that do not run here: (file or a glob of files, regex, why).
SKIP = [
    ("README.md", r"^scripts/demo\.sh", "minutes: 70,000 PNGs and a training epoch"),
    ("*", r"^scripts/test\.sh", "the test command itself"),
    ("*", r"^scripts/install-deps\.sh", "installs Debian packages"),
    ("*", r"^scripts/fuzz\.sh|FUZZ_\w+=.*scripts/fuzz\.sh",
     "fuzzing for minutes to hours; the test command's stage 3 runs each harness for 5 s"),
    ("*", r"^bench/soak/soak\.sh", "soaks for minutes; test_soak.py runs a short one"),
    ("README.md", r"--target-map 1=/dev/nvme1n1", "needs an NVMe device /dev/nvme1n1"),
    ("README.md", r"^build/dlfs mount ",
     "mounts until unmounted; test_fuse.py mounts, reads and unmounts"),
    ("*", r"^(\(cd build && )?(cmake|ctest|cpack|ninja)\b|cpack -G DEB",
     "builds or installs; tests/packaging installs into a temporary prefix, builds consumers "
     "and the .deb"),
    ("*", r"^python3 -m venv|pip install", "tests/packaging/test_pip.py runs pip in a venv"),
    ("bench/README.md", r".", BENCHMARK),
    ("bench/*/README.md", r".", BENCHMARK),
    ("docs/deploy.md", r"--map-by|--hostfile|^srun |^torchrun |--nnodes",
     "a job over several nodes; test_distributed.py runs train_ddp.py under mpirun, srun's "
     "and torchrun's variables on this host"),
    ("docs/deploy.md", r"^(nbdkit|psktool|nvme|dd) ",
     "storage servers and NVMe-oF devices; nbd_test.cc serves a volume with nbdkit"),
    ("docs/deploy.md", r"s3://|^export AWS_",
     "an S3 server; test_s3.py packs, verifies, benches and reads volumes on a RADOS Gateway"),
    ("docs/deploy.md", r"^dlfs (pack|bench) /(data|shared|staging|dev)/",
     "a cluster's data set, shared file system or devices"),
    ("docs/tokens.md", r"^dlfs pack (data/web_text_document|code\.npy)",
     "a corpus's files; test_tokens_pack.py packs Megatron pairs, .npy and flat token files"),
]

# Python snippets that do not run here: (file, regex on the snippet, why);
# they are still compiled.
SKIP_PYTHON = [
    ("docs/deploy.md", r"s3://",
     "an S3 server; test_s3.py reads volumes on a RADOS Gateway with LoaderDataset"),
    ("docs/deploy.md", r"make_model\(\)",
     "the skeleton of a training script (90 epochs of a model left to the reader); "
     "examples/train_ddp.py is the runnable one, run by the README and test_distributed.py"),
    ("docs/tokens.md", r"model\(|train_iters",
     "the skeleton of a pretraining loop (its model and sizes left to the reader); "
     "examples/train_tiny_gpt.py is the runnable one, run by test_tokens_loader.py"),
]

# Commands that need what this machine or build may lack: (regex, why); each
# is checked by _missing below and skipped (statically checked) without it.
NEEDS = [
    (r"\bmpirun\b|\blmdb read\b", "MPI (openmpi-bin, and dlfs built with MPI)"),
    (r"caffe_train_lmdb", "python3-lmdb, to make the LMDB"),
]


def _missing(what, dlfs_bin, sandbox):
    if what.startswith("MPI"):
        import shutil
        probe = subprocess.run([dlfs_bin, "lmdb", "read", "/nonexistent/probe"],
                               capture_output=True, timeout=60)
        return shutil.which("mpirun") is None or b"needs MPI" in probe.stderr
    return not (sandbox / "caffe_train_lmdb").exists()


# Command blocks that name programs of another commit (none now: the results
# page names commands of the current tree).
STALE_PROGRAMS = {}

# What the docs say, checked against the program: (file, quoted text, check).
CLAIMS = [
    ("docs/architecture.md", '"Needs: --decode"', "bench_help_needs_decode"),
    ("README.md", "`vol[0]` is `test/00000`", "first_sample_is_test"),
    ("README.md", "`help(dlfs.Loader)` documents every option", "loader_help_names_keywords"),
    ("docs/reliability.md", "refuses a label of 2^24 or more", "huge_label_refused"),
]


# ---- the blocks -------------------------------------------------------------------

def _blocks(path):
    text = path.read_text()
    for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.M | re.S):
        yield text[:m.start()].count("\n") + 1, m.group(1), m.group(2)


def _rel(path):
    return str(path.relative_to(REPO))


BLOCKS = [(_rel(p), line, lang, body) for p in DOCS for line, lang, body in _blocks(p)]


def _strip_comment(line):
    """The line without a trailing `# comment` (a # after blanks, outside quotes)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def _commands(body):
    """Logical lines: continuations joined, comments and blank lines dropped."""
    out, cur = [], ""
    for raw in body.splitlines():
        line = _strip_comment(raw)
        if line.endswith("\\"):
            cur += line[:-1].rstrip() + " "
            continue
        cur += line.strip()
        if cur.strip():
            out.append(cur.strip())
        cur = ""
    return out


def _applies(rule_file, doc):
    return fnmatch.fnmatchcase(doc, rule_file)  # "*": every doc


def _rewrite(doc, cmd):
    for rule_file, pattern, repl, _ in REWRITES:
        if _applies(rule_file, doc):
            cmd = re.sub(pattern, repl, cmd)
    return cmd


def _skip(doc, cmd):
    for rule_file, pattern, why in SKIP:
        if _applies(rule_file, doc) and re.search(pattern, cmd):
            return why
    return None


def _is_listing(body):
    lines = [l for l in body.splitlines() if l.strip()]
    return bool(lines) and all(re.match(r'^\S+\s+"[^"]*"', l) for l in lines)


def _is_transcript(body):
    return body.lstrip().startswith("$ ")


def _is_xxd(body):
    lines = [l for l in body.splitlines() if l.strip()]
    return bool(lines) and all(re.match(r"^[0-9a-f]{8}: ", l) for l in lines)


def test_every_block_has_a_rule():
    """Nothing is left out silently: each block is run, made, compared, or marked."""
    assert len(BLOCKS) > 40
    for doc, line, lang, body in BLOCKS:
        if lang in ("python", "sh") or lang in LANGUAGES:
            continue
        assert lang == "", f"{doc}:{line}: a ```{lang} block: add it to LANGUAGES or run it"
        # Unlabelled: output or a diagram, unless it is a command block missing its fence.
        for cmd in body.splitlines():
            assert not re.match(r"^(build/)?dlfs \w+ ", cmd), \
                f"{doc}:{line}: a command in an unlabelled block (fence it as ```sh): {cmd}"


def test_marks_are_not_stale():
    texts = "\n".join(b[3] for b in BLOCKS)
    for program in STALE_PROGRAMS:
        assert program in texts, f"STALE_PROGRAMS names {program}, which no doc has"
    for rule_file, pattern, why in SKIP:
        assert any(_applies(rule_file, doc) and re.search(pattern, c, re.M)
                   for doc, _, lang, body in BLOCKS if lang == "sh"
                   for c in _commands(body)), f"SKIP rule {pattern!r} ({why}) matches nothing"
    for rule_file, pattern, why in SKIP_PYTHON:
        assert any(doc == rule_file and re.search(pattern, body)
                   for doc, _, lang, body in BLOCKS if lang == "python"), \
            f"SKIP_PYTHON rule {pattern!r} ({why}) matches nothing"


# ---- the sandbox ------------------------------------------------------------------

def _jpeg(seed):
    from PIL import Image
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def _make_sandbox(root, dlfs_bin):
    package_root = str(pathlib.Path(dlfs.__file__).resolve().parents[1])
    (root / "bin").mkdir()
    (root / "bin" / "dlfs").symlink_to(os.path.abspath(dlfs_bin))
    (root / "bin" / "python3").symlink_to("/usr/bin/python3")
    (root / "build").mkdir()
    (root / "build" / "dlfs").symlink_to(os.path.abspath(dlfs_bin))
    (root / "build" / "python").symlink_to(package_root)
    (root / "examples").symlink_to(REPO / "examples")
    for d in ("nvme0", "nvme1", "shm", "home"):
        (root / d).mkdir()
    imagenet = root / "home" / "data" / "imagenet" / "train"
    for i in range(60):
        cls = ["n01440764", "n01443537", "n01484850"][i % 3]
        name = "n01440764_10026.JPEG" if i == 0 else f"{cls}_{i:05d}.JPEG"
        (imagenet / cls).mkdir(parents=True, exist_ok=True)
        (imagenet / cls / name).write_bytes(_jpeg(i))
    idx = root / "fashion-mnist"
    idx.mkdir()
    for split, count in [("train", 300), ("t10k", 60)]:
        pixels = np.arange(count * 784, dtype=np.uint32).astype(np.uint8)
        (idx / f"{split}-images-idx3-ubyte").write_bytes(
            struct.pack(">IIII", 0x803, count, 28, 28) + pixels.tobytes())
        (idx / f"{split}-labels-idx1-ubyte").write_bytes(
            struct.pack(">II", 0x801, count) + bytes(i % 10 for i in range(count)))
    import tarfile
    (root / "shards").mkdir()
    with tarfile.open(root / "shards" / "000000.tar", "w") as tar:
        for i in range(8):
            for ext, data in (("jpg", _jpeg(100 + i)), ("cls", str(i % 2).encode())):
                member = tarfile.TarInfo(f"train/{i:06d}.{ext}")
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
    # What scripts/demo.sh makes (out/fashion-mnist-train.dlfs, 28x28 gray PNGs
    # in 10 classes), small: 320 images, 4 ranks' batches of 64 with drop_last.
    from PIL import Image
    png = root / "demo-png"
    for i in range(320):
        (png / str(i % 10)).mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((28, 28), (i * 7) % 256, np.uint8)).save(
            png / str(i % 10) / f"{i:05d}.png")
    dlfs.pack(str(png), str(root / "demo-train.dlfs"))
    (root / "names.txt").write_text("\n".join(
        ["T-shirt", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
         "Ankle boot"]) + "\n")
    try:
        import lmdb  # noqa: F401  (make_caffe_lmdb.py needs python3-lmdb)
        subprocess.run(["/usr/bin/python3", str(REPO / "bench/lmdbio/make_caffe_lmdb.py"),
                        str(root / "caffe_train_lmdb"), "--records", "512", "--shape", "3", "8",
                        "8", "-q"], check=True, capture_output=True)
    except ImportError:
        pass
    env = dict(os.environ, HOME=str(root / "home"), PATH=f"{root / 'bin'}:{os.environ['PATH']}",
               PYTHONPATH=package_root, DLFS_CACHE_DIR=str(root / "shm"),
               DLFS_RANKS_PER_NODE="2", OMPI_MCA_rmaps_base_oversubscribe="1")
    return env


def _run(cmd, cwd, env, timeout=240):
    """bash -c CMD; stdout and stderr as text (bytes that are not UTF-8, such as
    a sample `dlfs cat` writes, replaced)."""
    proc = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True,
                          timeout=timeout)
    proc.stdout = proc.stdout.decode(errors="replace")
    proc.stderr = proc.stderr.decode(errors="replace")
    return proc


# ---- static checks: the flags a command uses exist --------------------------------

_HELP = {}


def _help(argv):
    key = tuple(argv)
    if key not in _HELP:
        proc = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=60,
                              cwd=REPO)
        _HELP[key] = proc.stdout + proc.stderr
    return _HELP[key]


def _program(cmd, dlfs_bin):
    """(argv of the program whose --help names the flags, the arguments), or None."""
    try:
        words = shlex.split(cmd)
    except ValueError:
        return None
    while words and (re.match(r"^\w+=", words[0]) or words[0] == "sudo"):
        words = words[1:]  # VAR=value, sudo
    if words and re.match(r"^(/usr/bin/)?python3?$", words[0]):  # python3 [-W x] SCRIPT
        words = words[1:]
        while words and words[0].startswith("-"):
            if words[0] in ("-m", "-c"):
                return None
            words = words[2:] if words[0] in ("-W", "-X") else words[1:]
    if words[:1] == ["mpirun"]:
        words = words[1:]
        while words and words[0].startswith("-"):
            words = words[2:] if words[0] in ("-np", "-n", "--map-by", "-x") else words[1:]
    if not words:
        return None
    prog = words[0]
    if prog in STALE_PROGRAMS:
        return None
    if prog.endswith("/dlfs") or prog in ("dlfs", "$DLFS"):
        argv = [dlfs_bin]
        rest = words[1:]
        if rest[:1] == ["lmdb"] and len(rest) > 1:
            argv, rest = argv + rest[:2], rest[2:]
        elif rest:
            argv, rest = argv + rest[:1], rest[1:]
        return argv, rest
    m = re.match(r"^(?:\./)?build/bench/([\w-]+)$", prog)
    if m:  # a benchmark program, built beside the dlfs under test (if benchmarks are built)
        binary = pathlib.Path(os.path.abspath(dlfs_bin)).parent / "bench" / m.group(1)
        if not os.access(binary, os.X_OK):
            return None
        argv, rest = [str(binary)], words[1:]
        subcommands = _help(argv).partition("Subcommands:")[2]  # CLI11's, if any
        if rest and re.search(rf"^\s+{re.escape(rest[0])}\s", subcommands, re.M):
            argv, rest = argv + rest[:1], rest[1:]
        return argv, rest
    if re.match(r"^(bench|scripts)/", prog):
        script = REPO / prog
        assert script.exists(), f"{prog}: no such script"
        return [str(script)], words[1:]
    return None


def _check_flags(doc, cmd, dlfs_bin):
    found = _program(cmd, dlfs_bin)
    if found is None:
        return
    argv, rest = found
    help_text = _help(argv)
    for word in rest:
        flag = word.split("=", 1)[0]
        if re.match(r"^--[a-z][\w-]*$", flag):
            assert re.search(rf"(^|[\s,]){re.escape(flag)}\b", help_text), \
                f"{doc}: `{cmd}` uses {flag}, which `{' '.join(argv[-2:])} --help` does not name"


# ---- running a file's blocks --------------------------------------------------------

DOC_FILES = sorted({b[0] for b in BLOCKS})


@pytest.mark.parametrize("doc", DOC_FILES)
def test_doc_runs_as_written(doc, tmp_path, dlfs_bin):
    blocks = [b for b in BLOCKS if b[0] == doc]
    if not any(lang in ("sh", "python") or (lang == "" and _is_transcript(body))
               for _, _, lang, body in blocks):
        pytest.skip(f"{doc} has no command block")
    pytest.importorskip("torch")
    # A doc whose commands are all marked (the benchmarks' pages) needs no sandbox.
    runs = any(lang == "python" or (lang == "" and (_is_transcript(body) or _is_listing(body)))
               or (lang == "sh" and not all(_skip(doc, c) for c in _commands(body)))
               for _, _, lang, body in blocks)
    env = _make_sandbox(tmp_path, dlfs_bin) if runs else None
    made = None  # the file the last transcript's `-o` wrote, for xxd dumps
    for _, line, lang, body in blocks:
        where = f"{doc}:{line}"
        if lang == "sh":
            for cmd in _commands(body):
                lacking = [why for pattern, why in NEEDS
                           if re.search(pattern, cmd) and _missing(why, dlfs_bin, tmp_path)]
                if _skip(doc, cmd) or lacking:
                    _check_flags(where, cmd, dlfs_bin)
                    continue
                run = _rewrite(doc, cmd)
                _check_flags(where, run, dlfs_bin)
                proc = _run(run, tmp_path, env)
                assert proc.returncode == 0, \
                    f"{where}: `{cmd}`\nran as `{run}`: exit {proc.returncode}\n{proc.stderr}"
        elif lang == "python":
            if any(doc == f and re.search(pattern, body) for f, pattern, _ in SKIP_PYTHON):
                compile(body, where, "exec")
                continue
            proc = subprocess.run([sys.executable, "-c", body], cwd=tmp_path,
                                  env=dict(env, PYTHONWARNINGS="error"), capture_output=True,
                                  text=True, timeout=300)
            assert proc.returncode == 0, f"{where}: Python snippet\n{body}\n{proc.stderr}"
        elif lang == "" and _is_listing(body):
            for entry in body.splitlines():
                m = re.match(r'^(\S+)\s+"([^"]*)"', entry)
                if m:
                    path = tmp_path / m.group(1)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(m.group(2).encode().decode("unicode_escape").encode())
        elif lang == "" and _is_transcript(body):
            made = _transcript(where, body, tmp_path, env) or made
        elif lang == "" and _is_xxd(body):
            assert made is not None, f"{where}: an xxd dump before any transcript made a file"
            _compare_dump(where, body, made, doc)


def _transcript(where, body, cwd, env):
    """Runs each "$ command" and compares its output with the lines after it;
    returns the file its last `-o` wrote, if any."""
    made, cmd, expected = None, None, []

    def finish():
        proc = _run(cmd, cwd, env)
        assert proc.returncode == 0, f"{where}: `{cmd}`: {proc.stderr}"
        norm = lambda s: re.sub(r" in \d+\.\d+ s$", " in N s", s, flags=re.M).rstrip("\n")
        assert norm(proc.stdout) == norm("\n".join(expected)), \
            f"{where}: `{cmd}` printed\n{proc.stdout}\nthe doc says\n" + "\n".join(expected)

    for line in body.splitlines():
        if line.startswith("$ "):
            if cmd is not None:
                finish()
            cmd, expected = line[2:], []
            m = re.search(r"-o (\S+)", cmd)
            made = cwd / m.group(1) if m else made
        else:
            expected.append(line)
    if cmd is not None:
        finish()
    return made


# Bytes a doc says differ on every run: (file, sentence saying so, ranges).
VOLATILE = {
    "docs/format.md": ("Bytes\n0x10–0x1F (uuid), 0x30–0x37 (created) and the CRC at 0xFFC differ "
                       "on every run.", [(0x10, 0x20), (0x30, 0x38), (0xFFC, 0x1000)]),
}


def _compare_dump(where, body, path, doc):
    data = path.read_bytes()
    sentence, volatile = VOLATILE.get(doc, ("", []))
    assert not sentence or sentence in (REPO / doc).read_text(), f"{doc}: VOLATILE is stale"
    for line in body.splitlines():
        m = re.match(r"^([0-9a-f]{8}): ((?:[0-9a-f]{2,4} ?)+)", line)
        offset, hexes = int(m.group(1), 16), m.group(2).split()
        want = bytes.fromhex("".join(hexes))
        for k, b in enumerate(want):
            at = offset + k
            if any(lo <= at < hi for lo, hi in volatile):
                continue
            assert at < len(data) and data[at] == b, \
                f"{where}: byte {at:#x} of {path.name} is " \
                f"{data[at] if at < len(data) else None}, the dump says {b} ({line})"


# ---- what the docs claim --------------------------------------------------------------

@pytest.mark.parametrize("doc,quote,check", CLAIMS, ids=[c[2] for c in CLAIMS])
def test_claim(doc, quote, check, dlfs_bin, run, tmp_path):
    text = " ".join((REPO / doc).read_text().split())
    assert " ".join(quote.split()) in text, f"{doc} no longer says {quote}: update CLAIMS"
    if check == "bench_help_needs_decode":
        help_text = run("bench", "--help", check=0).stdout.decode()
        dtype = next(l for l in help_text.splitlines() if l.strip().startswith("--dtype"))
        assert "Needs: --decode" in dtype, dtype
    elif check == "first_sample_is_test":
        env = _make_sandbox(tmp_path, dlfs_bin)
        cmd = "mkdir -p out && build/dlfs pack fashion-mnist -o out/fashion-mnist.dlfs -q"
        assert _run(cmd, tmp_path, env).returncode == 0
        with dlfs.Volume(tmp_path / "out/fashion-mnist.dlfs") as vol:
            assert vol.path(0) == "test/00000"
            assert len(vol.indices("train")) == 300 and vol.path(int(vol.indices("train")[0])) \
                == "train/00000"
    elif check == "loader_help_names_keywords":
        import importlib
        import inspect
        image_loader = importlib.import_module("dlfs.torch").ImageLoader
        for obj in (dlfs.Loader, dlfs.Writer, dlfs.pack, image_loader):
            doc_text = obj.__doc__ or ""
            sig = re.search(r"\((.*?)\)\n", doc_text, re.S) if obj is dlfs.Loader else None
            names = (re.findall(r"(\w+)=", sig.group(1)) if sig else
                     [p for p in inspect.signature(obj).parameters
                      if p not in ("self", "args", "options", "loader_options")])
            if obj is dlfs.pack:
                names = [k for k in dlfs._keywords.parameters(dlfs._dlfs.pack)
                         if k not in ("source", "output", "on_progress")]
            for name in names:
                assert re.search(rf"\b{name}\b", doc_text), f"help({obj.__name__}) lacks {name}"
    elif check == "huge_label_refused":
        import tarfile
        shard = tmp_path / "shard.tar"
        with tarfile.open(shard, "w") as tar:
            for ext, data in (("cls", b"1000012602"), ("bin", b"x")):
                member = tarfile.TarInfo(f"s/000.{ext}")
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
        err = run("pack", shard, "-o", tmp_path / "v.dlfs", check=2).stderr.decode()
        assert "has label 1000012602: labels must be below 16777216" in err, err


# ---- every flag the docs mention exists ---------------------------------------------

# Flags of other programs the docs mention.
OTHER_FLAGS = {
    "--allow-run-as-root", "--oversubscribe", "--map-by", "--mpi", "--mem", "--prefix",
    "--build", "--target", "--test-dir", "--output-on-failure", "--system-site-packages",
    "--no-build-isolation", "--break-system-packages", "--coverage", "--direct", "--ioengine",
    "--rw", "--timeout", "--plot", "--json", "--help", "--version", "--filter", "--durations",
    "--call-graph", "--print-peaks", "--merge-backtraces", "--gtest_filter", "--cpus-per-task",
    "--ntasks-per-node", "--nodes", "--ntasks", "--latency-us", "--bandwidth-mbps",
    "--node-bandwidth-mbps", "--eio", "--fuse-evict",
    "--cflags", "--libs",  # pkg-config
    "--install",  # cmake
    "--iodepth", "--iodepth_batch_submit", "--runtime", "--time_based", "--bs",  # fio
    "--requests", "--connections", "--request-size",  # nbdcopy
    "--json-format",  # gcov
    "--nnodes", "--nproc_per_node", "--rdzv_endpoint",  # torchrun
    "--hostfile",  # mpirun
    "--time",  # sbatch
    "--exit-with-parent", "--tls", "--tls-psk",  # nbdkit
    "--split", "--seq-length", "--mid-level-dataset-surplus", "--train-data-path",  # Megatron-LM
    "--data-path", "--seed",  # Megatron-LM
}


def test_inline_commands_name_real_programs_and_flags(dlfs_bin):
    """A command quoted inline (`bench/x.sh --reps 3`, `dlfs bench --epochs 5`), as the
    results page quotes the command behind each figure: its program exists and names
    every --flag in its --help."""
    checked = 0
    for path in DOCS:
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
        for span in re.findall(r"`([^`\n]+)`", text.replace("\n", " ")):
            cmd = " ".join(span.split())
            if re.match(r"^(\w+=\S*\s+)*(bench/|scripts/|build/dlfs\b|dlfs \w)", cmd):
                first = [w for w in cmd.split() if not re.match(r"^\w+=", w)][0]
                target = REPO / first
                if first.startswith(("bench/", "scripts/")) and not (
                        target.is_file() and os.access(target, os.X_OK)):
                    # A folder or a source file named, e.g. `bench/cache/`: no command.
                    assert first == cmd, f"{_rel(path)}: `{span}` does not run {first}"
                    continue
                _check_flags(_rel(path), cmd, dlfs_bin)
                checked += 1
    assert checked > 20, checked


def test_every_flag_the_docs_name_exists(dlfs_bin):
    """A --flag in README.md or docs/ is one of dlfs's verbs',
    a repository script's, pfs-emu's, or another named program's (OTHER_FLAGS)."""
    verbs = ["pack", "info", "ls", "cat", "verify", "repair", "epoch", "bench", "mount"]
    known = "\n".join(_help([dlfs_bin, v]) for v in verbs)
    known += "\n" + "\n".join(_help([dlfs_bin, "lmdb", v]) for v in ("info", "read"))
    for script in sorted(p for d in ("bench", "scripts", "examples")
                         for p in (REPO / d).rglob("*")
                         if p.suffix in (".sh", ".py") and os.access(p, os.X_OK)):
        known += "\n" + _help([str(script)])
    emu = os.environ.get("PFS_EMU_BIN")
    if emu:
        known += "\n" + _help([emu])
    # The C++ benchmark programs (built with DLFS_BUILD_BENCHMARKS): their flags
    # as their sources spell them.
    for source in sorted((REPO / "bench").rglob("*.cc")):
        known += "\n" + "\n".join(re.findall(r'"(--[a-z][a-z0-9-]*)', source.read_text()))
    names = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]", known)) | OTHER_FLAGS
    missing = {}
    for path in DOCS:
        doc = _rel(path)
        for flag in set(re.findall(r"(?<![\w-])--[a-z][a-z0-9_-]*[a-z0-9]", path.read_text())):
            # GoogleTest's and Google Benchmark's own flags (bench/order) are theirs.
            if flag not in names and not flag.startswith(("--gtest", "--benchmark_")):
                missing.setdefault(flag, []).append(doc)
    assert not missing, f"flags the docs name that no program has: {missing}"
