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
Errors: FileNotFoundError / OSError for I/O, ValueError for bad arguments,
KeyError for a path not in the volume, dlfs.CorruptVolumeError when stored
bytes fail an integrity check. Messages name the file and the problem.
"""
import os

from ._dlfs import Batch, CorruptVolumeError, Loader, Volume, __version__
from ._dlfs import ImagePipeline, decode_image, encode_png, prepare_image
from ._dlfs import pack as _pack
from ._progress import Progress as _Progress
from .writer import Writer

__all__ = ["Volume", "Loader", "Batch", "CorruptVolumeError", "Writer", "pack", "__version__",
           "ImagePipeline", "decode_image", "encode_png", "prepare_image"]


def pack(source, output, *args, progress=False, **options):
    """Packs a data set into a new volume, as `dlfs pack` does; returns stats.

    pack(source, output, source_kind="auto", force=False, align=1,
         skip_unreadable=False, class_names=[], all_files=False,
         progress=False, *, fields=[], compress="none", dict=False,
         targets=None, target_paths=[], datum_payload=False, max_side=None,
         resize_filter="bilinear", jpeg_quality=None, always_reencode=False,
         image_format="keep", smart_threshold=196608, jpeg_probability=0.5,
         image_seed=0, image_color="rgb", prepare_threads=0)

    source_kind: "auto", "imagefolder", "idx", "tar" or "lmdb". imagefolder
    packs what torchvision's ImageFolder loads (image files below class
    directories); all_files=True packs every file. Raises FileExistsError if
    `output` exists and force is False. class_names: a list, or "a,b,c" /
    "@FILE" (one name per line). The keywords are `dlfs pack`'s flags:
    fields (tar: keep these, a list or "jpg,cls"), compress ("none", "zstd"
    or "zstd:LEVEL", LEVEL 1..22; a field stays raw when that saves under
    3 %), dict (train a zstd dictionary on the first fields; needs zstd),
    targets (spread over 1..8 files; target_paths names targets 1, 2, ...,
    else OUTPUT.t1, ...), datum_payload (lmdb: only each Caffe Datum's
    data), and image preparation (max_side ... prepare_threads, as
    dlfs.Writer's keywords: see help(dlfs.Writer); stats["images"] says
    what it did). A bad option raises ValueError naming it. progress=True shows
    samples done out of the total, rate and ETA (tqdm when installed, else
    a line on stderr). Ctrl-C stops packing and leaves no volume. The stats
    dict has samples, bytes, classes, skipped, ignored (files ImageFolder
    would not load), dictionary_bytes and seconds.
    """
    source, output = os.fspath(source), os.fspath(output)
    if "target_paths" in options:
        options["target_paths"] = [os.fspath(p) for p in options["target_paths"]]
    if not progress:
        return _pack(source, output, *args, **options)
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
        return _pack(source, output, *args, on_progress=on_progress, **options)
    finally:
        if bar is not None:
            bar.close()
