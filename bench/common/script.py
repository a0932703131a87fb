"""What the Python benchmark scripts share: their command line from their
docstring, a cold start, and how a figure is finished and saved."""
import argparse
import os
import pathlib
import subprocess


def parser(doc, work_subdir, dlfs):
    """An ArgumentParser whose help is `doc` (first paragraph: the summary),
    with --dlfs (default `dlfs`) and --dir ($DLFS_BENCH_DIR/work_subdir)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=doc.split("\n\n", 1)[1])
    p.add_argument("--dlfs", default=dlfs)
    p.add_argument("--dir", default=os.environ.get("DLFS_BENCH_DIR", "/tmp/dlfs-bench") + "/" +
                   work_subdir)
    return p


def save_figure(fig, axes, title, out):
    """Grids and legends on `axes`, `title` over them, written to `out`."""
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot: {out}")


def drop_caches():
    """Writes dirty pages out and drops the page cache (as root): a cold start."""
    subprocess.run(["sync"], check=True)
    pathlib.Path("/proc/sys/vm/drop_caches").write_text("3\n")
