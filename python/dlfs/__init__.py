"""dlfs: packed sample volumes and a fast shuffled batch loader.

    import dlfs
    with dlfs.Volume("fashion-mnist.dlfs") as vol:
        data, label = vol[0]
        for batch in dlfs.Loader(vol, batch_size=256, seed=0):
            images = batch.samples        # zero-copy numpy uint8 views
            labels = batch.labels         # int64 numpy array

    with dlfs.Writer("my.dlfs", class_names=["cat", "dog"]) as w:
        w.add("cat/001.jpg", jpeg_bytes, label="cat")

dlfs.torch has PyTorch datasets (VolumeDataset, LoaderDataset) and
ImageLoader (decoded image batches). ImagePipeline, decode_image and
encode_png decode single images in C++ (JPEG, PNG, raw pixels);
prepare_image shows what pack-time image preparation (Writer's and pack's
max_side, jpeg_quality, image_format, ...) makes of one image.
Loaders find their share of a distributed job themselves (mpirun, srun,
torchrun, torch.distributed) or take comm= (an mpi4py communicator):
see dlfs.distributed.
Errors: FileNotFoundError / OSError for I/O, ValueError for bad arguments,
TypeError for an argument of the wrong type or an unknown keyword, KeyError
for a path not in the volume, IndexError for an index out of range,
NotImplementedError for what a volume holds but a call cannot give (several
fields read as one sample, a newer format feature), dlfs.CorruptVolumeError
when stored bytes fail an integrity check. Messages name the volume or file
and the problem.
"""
import os

from ._dlfs import Batch, CorruptVolumeError, Volume, __version__
from ._dlfs import Loader as _Loader
from ._dlfs import ImagePipeline, decode_image, encode_png, prepare_image
from ._dlfs import pack as _pack
from ._progress import Progress as _Progress
from . import _dlfs
from . import _keywords
from . import distributed
from .writer import Writer

# Misspelt keywords and arguments pybind11 cannot convert are named, with a
# suggestion, when the object is made (instead of pybind11's signature dump).
for _cls, _name in ((_dlfs.Volume, "dlfs.Volume"), (_Loader, "dlfs.Loader"),
                    (_dlfs.ImageLoader, "dlfs.ImageLoader"),
                    (ImagePipeline, "dlfs.ImagePipeline")):
    _keywords.checked_init(_cls, _name)
del _cls, _name

__all__ = ["Volume", "Loader", "Batch", "CorruptVolumeError", "Writer", "pack", "__version__",
           "ImagePipeline", "decode_image", "encode_png", "prepare_image",
           "distributed"]


class Loader(_Loader):
    __doc__ = _Loader.__doc__ + """
Distributed jobs: with rank and world_size left out, the loader finds its
share itself (dlfs.distributed: mpirun, srun, torchrun, torch.distributed,
else one process); comm= takes an mpi4py communicator instead. Under MPI
the loader is made collectively (every rank calls it): one rank reads the
metadata, each node keeps one copy of the directory, and the ranks check
that they read the same permutation; shard_local=True reads each node's own
targets and exchanges the rest over MPI, cluster_cache=True makes the nodes'
caches one cache of the volume (window_batches, read_ahead: docs/deploy.md).
Without MPI the processes of a node share one copy of the directory
(directory="node"; directory="private" keeps this process's own).
target_map={1: "/dev/nvme1n1"} (or "1=PATH,...") finds targets elsewhere.
epoch_stats() says per epoch where the bytes came from; close() (or a with
block) frees the loader now.
"""

    def __init__(self, volume, batch_size, *args, comm=None, **kwargs):
        # rank and world_size may come positionally (after shuffle and seed).
        rank = args[2] if len(args) > 2 else kwargs.pop("rank", None)
        world_size = args[3] if len(args) > 3 else kwargs.pop("world_size", None)
        job = distributed.resolve(comm, rank, world_size)
        given = job.loader_keywords()
        if len(args) > 2:
            given.pop("rank")
        if len(args) > 3:
            given.pop("world_size")
        super().__init__(volume, batch_size, *args, **{**given, **kwargs})
        self.job = job
        if job.mpi:
            distributed.track(self)


# dlfs.pack's options, in the order they may be given by position, and the
# types each takes.
def _pack_keywords(args, options):
    """The keywords of _pack from pack()'s arguments, read from _pack's own
    signature (the C++ table of dlfs pack's options): TypeError naming a
    surplus positional argument or an unknown keyword, as Python functions
    do."""
    params = _keywords.parameters(_pack)
    positional = _keywords.positional(_pack)[2:]  # after source, output
    if len(args) > len(positional):
        raise TypeError(f"dlfs.pack() takes at most {len(positional) + 2} positional "
                        f"arguments ({len(args) + 2} given)")
    for name, value in zip(positional, args):
        if name in options:
            raise TypeError(f"dlfs.pack() got multiple values for argument '{name}'")
        options[name] = value
    _keywords.check("dlfs.pack", options,
                    [k for k in params if k not in ("source", "output", "on_progress")])
    if "target_paths" in options and not isinstance(options["target_paths"], (str, bytes)):
        options["target_paths"] = [os.fspath(p) for p in options["target_paths"]]
    return options


def pack(source, output, *args, progress=False, **options):
    """Packs a data set into a new volume, as `dlfs pack` does; returns stats.

    {signature}
    (and progress=False). The first six keywords may also be given by
    position.

    source_kind: "auto", "imagefolder", "idx", "tar", "lmdb", "megatron" or
    "tokens". megatron (a Megatron-LM dataset: its prefix, .bin or .idx) and
    tokens (a .npy or flat file of token ids, cut into documents by lengths=
    FILE or eod=ID; token_dtype= for a flat file) make a token volume, one
    document per sequence or cut (see `dlfs pack --help`). imagefolder
    packs what torchvision's ImageFolder loads (image files below class
    directories); all_files=True packs every file. Raises FileExistsError if
    `output` exists and force is False. class_names: a list, or "a,b,c" /
    "@FILE" (one name per line). The keywords are `dlfs pack`'s flags:
    fields (tar: keep these, a list or "jpg,cls"), compress ("none", "zstd"
    or "zstd:LEVEL", LEVEL 1..22; a field stays raw when that saves under
    3 %), dict (train a zstd dictionary on the first fields; needs zstd),
    targets (spread over 1..8 files; target_paths names targets 1, 2, ...,
    else OUTPUT.t1, ...), datum_payload (lmdb: only each Caffe Datum's
    data), skip_hidden (imagefolder: leave out hidden files and
    directories, which torchvision's ImageFolder reads: labels then differ
    from torchvision's where a hidden directory is at the top), layout
    ("auto", "compact" or "tree": the directory's layout, as --layout), and
    image
    preparation (max_side ... prepare_threads, as dlfs.Writer's keywords:
    see help(dlfs.Writer); stats["images"] says what it did). An unknown
    option or a value of the wrong type raises TypeError naming it, a bad
    value ValueError naming it. progress=True shows
    samples done out of the total, rate and ETA (tqdm when installed, else
    a line on stderr). Ctrl-C stops packing and leaves no volume. The stats
    dict has samples, bytes, classes, skipped, ignored (files ImageFolder
    would not load), skipped_hidden, empty_classes, dictionary_bytes and
    seconds.
    """
    source, output = os.fspath(source), os.fspath(output)
    options = _pack_keywords(args, options)
    if not progress:
        return _keywords.call("dlfs.pack", _pack, source, output, **options)
    bar = None

    def on_progress(p):
        nonlocal bar
        if p["total_samples"] or not p["total_source_bytes"]:
            if bar is None:
                bar = _Progress("packing", total=p["total_samples"] or None)
            bar.update_to(p["samples"], bytes=p["bytes"])
        else:  # tar: how far through the shards
            if bar is None:
                bar = _Progress("packing", unit="B", unit_scale=True,
                                total=p["total_source_bytes"])
            bar.update_to(p["source_bytes"], samples=p["samples"])

    try:
        return _keywords.call("dlfs.pack", _pack, source, output, on_progress=on_progress,
                              **options)
    finally:
        if bar is not None:
            bar.close()



def _signature_of_pack():
    """_pack's signature line as its docstring shows it (from the table of
    dlfs pack's options), indented for pack's docstring."""
    doc = (_pack.__doc__ or "").split("\n\n")
    lines = next((part for part in doc[1:] if part.startswith("pack(")), "").splitlines()
    return "\n    ".join(lines)


if pack.__doc__:
    pack.__doc__ = pack.__doc__.replace("{signature}", _signature_of_pack())