"""PyTorch datasets over dlfs volumes.

LoaderDataset: iterable, one *batch* per item, driven by the C++ loader
    (io_uring reads the epoch ahead, zero-copy, node cache); use
    DataLoader(ds, batch_size=None). The fastest path for training.
ImageLoader: batches of decoded, augmented image tensors, decoded in C++
    on the loader's threads (dlfs/torch_image.py).
TokenDataset: documents or fixed-length sequences of a token volume
    (dlfs/torch_tokens.py).
VolumeDataset: map-style. ds[i] is one sample, for any
    torch.utils.data.DataLoader setting (num_workers, DistributedSampler);
    ds[[i, j, ...]] is a whole batch read in one submission, for
    DataLoader(ds, sampler=BatchSampler(...), batch_size=None).

Samples reach `transform` as numpy uint8 arrays of the stored bytes
(decode them there: e.g. PIL for PNG/JPEG, a reshape for raw pixels), or,
with VolumeDataset(decode=...), as tensors decoded in C++. The arrays are
writable and not copies: torch.from_numpy takes them as they are, without a
warning.

The classes live in modules by concern: torch_volume (VolumeDataset),
torch_loader (LoaderDataset), torch_image (ImageLoader), torch_tokens
(TokenDataset), and _torch_slots (the shared-memory hand-over of batches
from DataLoader workers); this module is their public face.
"""
from . import _torch_slots
from ._torch_common import distributed_rank_world
from .torch_image import ImageLoader
from .torch_loader import LoaderDataset
from .torch_tokens import TokenDataset
from .torch_volume import VolumeDataset

__all__ = ["VolumeDataset", "LoaderDataset", "ImageLoader", "TokenDataset",
           "distributed_rank_world"]


def __getattr__(name):
    # The count of batches received through shared memory (tests read it
    # here): a global of _torch_slots, which increments it.
    if name == "_shared_batches_received":
        return _torch_slots._shared_batches_received
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
