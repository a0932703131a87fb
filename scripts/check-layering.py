#!/usr/bin/python3
"""Checks that the code's layers only look down (issue 37).

  scripts/check-layering.py [--root DIR] [--graph]

Reads every `#include "..."` of src/, include/dlfs/, apps/ and python/ and
fails (exit 1), naming file:line, when:
- a module includes a module of a higher layer (LAYERS in this script: a
  module may include its own layer and the layers below it); a public header
  (include/dlfs/X.h) counts as part of the module PUBLIC_HEADERS gives it;
- the modules' includes form a cycle (A includes B includes ... A), even
  within one layer;
- a public header includes anything of src/, or apps/ or python/ does (they
  use only the public headers);
- a module of src/ includes a header of a module in INTERFACES other than
  that module's named interface (src/loader/source_kit.h);
- docs/architecture.md's list of the layers differs from LAYERS (the doc cannot
  drift), a src/ directory or public header is not classified, or an entry
  of ALLOWED no longer occurs (the list cannot go stale).
Known exceptions are listed in ALLOWED, each with its reason. Prints one
summary line when all is well. Reads files only; writes nothing.
--root checks another checkout; --graph also prints which modules each
module includes.
"""
import argparse
import collections
import pathlib
import re
import sys

# The layers, lowest first. A module is a directory of src/ (or apps, or
# python); a module may include its own layer's modules and those of the
# layers below, never one above. docs/architecture.md shows this order in its
# paragraph starting with DOC_MARKER; this script fails when the two differ.
LAYERS = [
    ("common",),                # Status, CRC32C, POSIX helpers, clock, shm regions, launch
    ("nbd", "s3"),              # one libnbd connection with deadlines; S3 requests (libcurl)
    ("io",),                    # IoEngine and its backends, Target: reading and writing targets
    ("lmdb",),                  # the data.mdb parser (record map), Caffe's Datum (core library)
    ("format",),                # the on-disk format in code: superblock, directory codec, zstd
    ("directory",),             # SampleDirectory: lookups over a validated directory region
    ("volume",),                # Volume::Open, Read, Verify, Summary, the node's directory copy
    ("cache",),                 # the node cache, its fill, the memory it may use
    ("loader", "tokens"),       # Sampler, batch planning and reads, Loader, MixtureSource;
                                # token corpora (the Megatron-compatible order)
    ("decode",),                # ImagePipeline, DecodeStage, pack-time image preparation
    ("builder", "measure"),     # VolumeBuilder (uses decode's preparation); RunEpochs, bench
    ("mpi",),                   # topology, collective open, ShardLoader, bench jobs (dlfs_mpi)
    ("lmdbio",),                # the LMDBIO reader and RunLmdbRead (dlfs_mpi, uses mpi)
    ("pack", "fuse"),           # importers behind Pack() (builder, LMDB); the FUSE mount
    ("report", "mpi_report"),   # dlfs_report: the text and JSON the CLI prints; dlfs_mpi_report
    ("apps", "python"),         # the CLI and the Python module: public headers only
]
SCRIPT = "scripts/check-layering.py"
DOC = "docs/architecture.md"
DOC_MARKER = "Layers, lowest first:"

# The module each public header belongs to: the one that implements it, or
# (noted) the lowest one whose code needs its declarations.
PUBLIC_HEADERS = {
    "status.h": "common",
    "enum_names.h": "common",
    # The descriptor of an option in the front ends' option tables.
    "launch.h": "common",
    "nbd.h": "nbd",
    "s3.h": "s3",
    "io_engine.h": "io",
    "target_kind.h": "io",
    # The directory's types (SampleInfo, FieldInfo, SampleDirectory::Expected):
    # what src/format's codec decodes into and checks against. SampleDirectory's
    # code (src/directory) sits above the codec it calls.
    "directory.h": "format",
    # ImagePrepOptions and its enums (ColorMode, ResizeFilter, ...): what the
    # images section records (format.md §4.9) and directory.h's VolumeImages
    # holds; decode's dlfs/image_prep.h and dlfs/decode.h include it.
    "image_prep_options.h": "format",
    "volume.h": "volume",
    "verify.h": "volume",
    "summary.h": "volume",
    # The record of an unreadable sample: made by verify, and by the loader's
    # quarantine (which takes what verify reports).
    "bad_sample.h": "volume",
    "memory.h": "cache",
    "batch.h": "loader",
    "batch_source.h": "loader",
    "sampler.h": "loader",
    "loader.h": "loader",
    "mixture.h": "loader",
    "tokens.h": "tokens",
    "sample_reader.h": "loader",
    "decode.h": "decode",
    "decode_stage.h": "decode",
    "image_prep.h": "decode",
    "sample_image.h": "decode",
    "file_view.h": "decode",
    "builder.h": "builder",
    "mpi.h": "mpi",
    "distributed.h": "mpi",
    "shard_options.h": "mpi",  # ShardLoader's options, MPI-free so non-MPI code can hold them
    "lmdb.h": "lmdb",
    "lmdbio.h": "lmdbio",
    "lmdbio_options.h": "lmdbio",
    "pack.h": "pack",
    "mount.h": "fuse",
}

# The same for the tools' interface (tools/include/dlfs_tools/): what the CLI and
# the benchmarks call beyond the users' API — the measuring runs and their
# reports. A public header never includes one.
TOOLS_HEADERS = {
    "bench.h": "measure",
    "bench_volumes.h": "measure",
    "lmdb_read.h": "lmdbio",
    "report.h": "report",
    "bench_job.h": "mpi",
    "mpi_report.h": "mpi_report",
    # The front ends' options, each declared once (the CLI's flags and the
    # Python keywords are made from them).
    "option_table.h": "common",
    "decode_option_table.h": "decode",
    "pack_option_table.h": "pack",
    "loader_option_table.h": "mpi",  # LoaderConfig holds ShardLoaderOptions too
    "lmdb_option_table.h": "lmdbio",
}

# Known exceptions: (including file, the include as written, why it is
# allowed for now). The script fails when one no longer occurs or no longer
# breaks a rule: remove it then.
ALLOWED = [
    # None at present. The last one, include/dlfs/directory.h including
    # dlfs/image_prep.h (and through it decode.h and the loader's batch.h),
    # went when ImagePrepOptions moved to dlfs/image_prep_options.h (issue 37).
]

# Modules whose internals the other modules of src/ reach through one named
# header only (issue 51): the rest of the module is its own to change.
INTERFACES = {
    "loader": "src/loader/source_kit.h",  # for the other batch sources (mpi, decode)
}

ORDER = " → ".join(", ".join(g) for g in LAYERS)
SOURCES = ("src", "include/dlfs", "tools/include/dlfs_tools", "apps", "python")
SUFFIXES = {".h", ".hpp", ".cc", ".cpp", ".c"}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def module_of(rel):
    """The module of a repository-relative path, or None (not checked)."""
    parts = rel.split("/")
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    if parts[0] == "include" and len(parts) == 3 and parts[1] == "dlfs":
        return PUBLIC_HEADERS.get(parts[2])
    if parts[:3] == ["tools", "include", "dlfs_tools"] and len(parts) == 4:
        return TOOLS_HEADERS.get(parts[3])
    if parts[0] in ("apps", "python"):
        return parts[0]
    return None


def includes(path):
    """(line number, include as written) of a file's quoted includes, those inside
    block comments aside."""
    out = []
    in_comment = False
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if in_comment:
            end = line.find("*/")
            if end < 0:
                continue
            line, in_comment = line[end + 2:], False
        m = INCLUDE.match(line)
        if m:
            out.append((number, m.group(1)))
        # Does a block comment stay open? Literals ("dir/*") and // comments aside.
        code = re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'', '""', line)
        code = re.sub(r"/\*.*?\*/", " ", code).split("//")[0]
        in_comment = "/*" in code
    return out


def resolve(root, rel, written):
    """The repository-relative file an include names, as the build finds it (the
    including file's directory, then include/, then src/), or None: a system,
    third-party or generated header (dlfs/version.h)."""
    for base in (pathlib.PurePosixPath(rel).parent, "include", "tools/include", "src"):
        candidate = pathlib.PurePosixPath(base) / written
        if (root / candidate).is_file():
            return str(candidate)
    return None


def doc_layers(root):
    """The layers as docs/architecture.md lists them, or None: the paragraph that
    starts with DOC_MARKER, layers separated by →, a layer's modules by commas."""
    lines = (root / DOC).read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith(DOC_MARKER):
            paragraph = [line[len(DOC_MARKER):]]
            for more in lines[i + 1:]:
                if not more.strip():
                    break
                paragraph.append(more)
            groups = " ".join(paragraph).split("→")
            return [tuple(m.strip(" `.") for m in g.split(",")) for g in groups]
    return None


def doc_line():
    return DOC_MARKER + " " + " → ".join(", ".join(f"`{m}`" for m in g) for g in LAYERS)


def find_cycles(graph):
    """One cycle per strongly connected component of the module graph (Tarjan's
    algorithm), the shortest through its first module: enough to name what to break."""
    index, low, stack, on_stack, sccs = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                sccs.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = []
    for scc in sccs:
        # A shortest cycle through the component's first module (breadth first).
        start, members = scc[0], set(scc)
        parent, queue, found = {start: None}, [start], None
        while queue and not found:
            v = queue.pop(0)
            for w in sorted(graph[v] & members):
                if w == start:
                    found = v
                    break
                if w not in parent:
                    parent[w] = v
                    queue.append(w)
        path = [start]
        while found != start:
            path.insert(1, found)
            found = parent[found]
        cycles.append(path + [start])
    return cycles


def check(root, show_graph):
    problems = []
    layer = {m: i for i, group in enumerate(LAYERS) for m in group}

    # Every module and public header classified, and nothing classified that is gone.
    modules = {p.name for p in (root / "src").iterdir() if p.is_dir()} | {"apps", "python"}
    for m in sorted(modules - set(layer)):
        problems.append(f"src/{m}/: not in LAYERS: give it a layer in {SCRIPT}")
    for m in sorted(set(layer) - modules):
        problems.append(f"LAYERS names {m}, which is not a directory of src/: remove it")
    headers = {p.name for p in (root / "include/dlfs").glob("*.h")}
    for h in sorted(headers - set(PUBLIC_HEADERS)):
        problems.append(f"include/dlfs/{h}: not in PUBLIC_HEADERS: give it a module")
    for h in sorted(set(PUBLIC_HEADERS) - headers):
        problems.append(f"PUBLIC_HEADERS names {h}, which is not in include/dlfs/: remove it")
    tools = {p.name for p in (root / "tools/include/dlfs_tools").glob("*.h")}
    for h in sorted(tools - set(TOOLS_HEADERS)):
        problems.append(f"tools/include/dlfs_tools/{h}: not in TOOLS_HEADERS: give it a module")
    for h in sorted(set(TOOLS_HEADERS) - tools):
        problems.append(f"TOOLS_HEADERS names {h}, which is not in tools/include/dlfs_tools/")
    for h, m in sorted({**PUBLIC_HEADERS, **TOOLS_HEADERS}.items()):
        if m not in layer:
            problems.append(f"PUBLIC_HEADERS gives {h} the module {m}, which is not in LAYERS")

    # The doc shows the same order.
    listed = doc_layers(root)
    if listed is None:
        problems.append(f"{DOC}: no line starting with '{DOC_MARKER}'; add:\n  {doc_line()}")
    elif listed != [tuple(g) for g in LAYERS]:
        problems.append(f"{DOC}: the paragraph starting with '{DOC_MARKER}' differs from LAYERS; "
                        f"it should read:\n  {doc_line()}")

    allowed = {(f, inc): why for f, inc, why in ALLOWED}
    used = set()
    graph = collections.defaultdict(set)
    where = {}  # (from, to) module edge -> its first include, for the cycle report
    files = sorted(p for d in SOURCES if (root / d).is_dir() for p in (root / d).rglob("*")
                   if p.suffix in SUFFIXES and p.is_file())
    count = 0
    for path in files:
        rel = str(path.relative_to(root))
        src = module_of(rel)
        if src is None:
            continue
        src_is_public = rel.startswith("include/") or rel.startswith("tools/include/")
        for number, written in includes(path):
            count += 1
            target = resolve(root, rel, written)
            if target is None:
                continue
            dst = module_of(target)
            broken = []
            if target.startswith("src/") and not rel.startswith("src/"):
                who = "a public header" if src_is_public else rel.split("/")[0] + "/"
                broken.append(f"{target} is private to src/: {who} may include only "
                              f"public headers (include/dlfs/)")
            iface = INTERFACES.get(dst)
            if (iface and src != dst and rel.startswith("src/") and target.startswith("src/")
                    and target != iface):
                broken.append(f"{target} is internal to src/{dst}: other modules include "
                              f"{iface[len('src/'):]} (its named interface) instead")
            if rel.startswith("include/") and target.startswith("tools/include/"):
                broken.append(f"{target} is the tools' interface: a public header (the "
                              f"users' API) may not need it")
            if dst is not None and dst != src and layer.get(dst, -1) > layer.get(src, -1):
                broken.append(f"{src} (layer {layer[src] + 1}) includes {dst} (layer "
                              f"{layer[dst] + 1}): includes go down only ({dst} may "
                              f"include {src}, {src} may not include {dst})")
            key = (rel, written)
            if broken and key in allowed:
                used.add(key)
                continue
            for b in broken:
                problems.append(f"{rel}:{number}: includes \"{written}\": {b}")
            if dst is not None and dst != src:
                graph[src].add(dst)
                where.setdefault((src, dst), f"{rel}:{number}")
                graph.setdefault(dst, set())

    for cycle in find_cycles(graph):
        steps = ", ".join(f"{a} → {b} ({where[(a, b)]})" for a, b in zip(cycle, cycle[1:]))
        problems.append(f"include cycle between modules {' → '.join(cycle)}: {steps}")

    for key in sorted(set(allowed) - used):
        problems.append(f"ALLOWED lists {key[0]} including \"{key[1]}\", which no longer "
                        f"occurs or breaks no rule: remove it from {SCRIPT}")

    if show_graph:
        for m in sorted(graph, key=lambda m: (layer.get(m, -1), m)):
            print(f"{m}: {' '.join(sorted(graph[m], key=lambda d: (layer.get(d, -1), d)))}")
    return problems, count, len(used)


def main():
    summary, _usage, details = __doc__.split("\n\n", 2)
    parser = argparse.ArgumentParser(description=summary + "\n\n" + details,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     usage="%(prog)s [--root DIR] [--graph]")
    parser.add_argument("--root", type=pathlib.Path, metavar="DIR",
                        default=pathlib.Path(__file__).resolve().parents[1],
                        help="the checkout to check (default: this script's)")
    parser.add_argument("--graph", action="store_true",
                        help="also print the modules each module includes")
    args = parser.parse_args()
    problems, count, excepted = check(args.root.resolve(), args.graph)
    for p in problems:
        print(p)
    if problems:
        print(f"layering: {len(problems)} problem(s). The layers, lowest first (LAYERS in "
              f"{SCRIPT}, and {DOC}):\n  {ORDER}")
        return 1
    print(f"layering: {count} includes checked, none looks up "
          f"({excepted} known exception(s) in ALLOWED)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
