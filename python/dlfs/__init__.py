"""dlfs: packed sample volumes and a fast shuffled batch loader.

    import dlfs
    vol = dlfs.Volume("fashion-mnist.dlfs")
    data, label = vol[0]
    for batch in dlfs.Loader(vol, batch_size=256, seed=0):
        images = batch.samples        # zero-copy numpy uint8 views
        labels = batch.labels         # int64 numpy array

dlfs.torch has PyTorch datasets (VolumeDataset, LoaderDataset).
Errors: FileNotFoundError / OSError for I/O, ValueError for bad arguments,
KeyError for a path not in the volume, dlfs.CorruptVolumeError when stored
bytes fail an integrity check. Messages name the file and the problem.
"""
from ._dlfs import Batch, CorruptVolumeError, Loader, Volume, pack

__all__ = ["Volume", "Loader", "Batch", "CorruptVolumeError", "pack"]
