"""dlfs: packed sample volumes and a fast shuffled batch loader.

    import dlfs
    vol = dlfs.Volume("fashion-mnist.dlfs")
    data, label = vol[0]
    for batch in dlfs.Loader(vol, batch_size=256, seed=0):
        images = batch.samples        # zero-copy numpy uint8 views
        labels = batch.labels         # int64 numpy array

dlfs.torch has PyTorch datasets (VolumeDataset, LoaderDataset) and
ImageLoader (decoded image batches). ImagePipeline, decode_image and
encode_png decode single images in C++ (JPEG, PNG, raw pixels).
Errors: FileNotFoundError / OSError for I/O, ValueError for bad arguments,
KeyError for a path not in the volume, dlfs.CorruptVolumeError when stored
bytes fail an integrity check. Messages name the file and the problem.
"""
from ._dlfs import Batch, CorruptVolumeError, Loader, Volume, pack
from ._dlfs import ImagePipeline, decode_image, encode_png

__all__ = ["Volume", "Loader", "Batch", "CorruptVolumeError", "pack",
           "ImagePipeline", "decode_image", "encode_png"]
