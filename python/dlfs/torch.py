"""PyTorch datasets over dlfs volumes.

VolumeDataset: map-style, one sample per item; works with any
    torch.utils.data.DataLoader setting (num_workers, DistributedSampler).
LoaderDataset: iterable, one *batch* per item, driven by the C++ loader
    (io_uring reads ahead, zero-copy); use DataLoader(ds, batch_size=None).
ImageLoader: batches of decoded, augmented image tensors, decoded in C++
    on the loader's threads (dlfs/torch_image.py).

Samples reach `transform` as read-only numpy uint8 arrays of the stored
bytes (decode them there: e.g. PIL for PNG/JPEG, a reshape for raw pixels),
or, with VolumeDataset(decode=...), as tensors decoded in C++.
"""
import os

import numpy as np
import torch
import torch.utils.data as tud

from . import Loader, Volume
from .torch_image import ImageLoader, make_pipeline

__all__ = ["VolumeDataset", "LoaderDataset", "ImageLoader", "distributed_rank_world"]


def distributed_rank_world():
    """(rank, world_size) from torch.distributed when initialised, else the
    RANK / WORLD_SIZE environment variables (set by torchrun), else (0, 1)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


class VolumeDataset(tud.Dataset):
    """Map-style dataset: dataset[i] -> (transform(sample), label).

    root: only the samples under this directory of the volume (e.g. "train").
    Each process (DataLoader workers included) opens its own handle to the
    volume on first use after fork, so workers never share file descriptors.
    Labels are ints (-1 where a sample has none); `targets` holds them all.

    decode: decode each sample natively (GIL released) before `transform`:
    a dlfs.ImagePipeline or a dict of its keywords, e.g.
    dict(size=224, crop="random-resized", flip=True, dtype="float32",
    layout="NCHW"); the sample is then a torch tensor (C, H, W or H, W, C).
    Its random choices are those of (seed, epoch, sample index): call
    set_epoch(e) before each epoch (as with DistributedSampler).
    """

    def __init__(self, path, transform=None, target_transform=None, root=None, verify=True,
                 decode=None):
        self.path = os.fspath(path)
        self.decode = make_pipeline(decode) if decode is not None else None
        self.epoch = 0
        self.transform = transform
        self.target_transform = target_transform
        self.verify = verify
        vol = Volume(self.path)  # fail early, in the parent, on a bad path
        self.indices = vol.indices(root) if root else np.arange(len(vol), dtype=np.int64)
        self.classes = vol.classes
        self.targets = vol.labels[self.indices]
        self._vol, self._pid = vol, os.getpid()

    def _volume(self):
        if self._pid != os.getpid():
            self._vol, self._pid = Volume(self.path), os.getpid()
        return self._vol

    def __len__(self):
        return len(self.indices)

    def set_epoch(self, epoch):
        """Epoch whose random choices decode= uses."""
        self.epoch = epoch

    def __getitem__(self, index):
        vol = self._volume()
        i = int(self.indices[index])
        data = vol.read(i, self.verify)
        if self.decode is not None:
            sample = torch.from_numpy(self.decode(data, self.epoch, i))
        else:
            sample = np.frombuffer(data, dtype=np.uint8)
        label = int(self.targets[index])
        if self.transform is not None:
            sample = self.transform(sample)
        if self.target_transform is not None:
            label = self.target_transform(label)
        return sample, label

    def __getstate__(self):  # workers reopen the volume themselves
        state = dict(self.__dict__)
        state["_vol"], state["_pid"] = None, None
        return state


def _default_batch_transform(samples, labels):
    return samples, torch.from_numpy(labels)


class LoaderDataset(tud.IterableDataset):
    """Iterable dataset yielding whole batches read by the C++ loader.

    Use it with DataLoader(ds, batch_size=None, num_workers=k). The epoch's
    samples are split first across ranks (from torch.distributed, or the
    RANK/WORLD_SIZE variables, or the rank/world_size arguments), then across
    the DataLoader's workers, so every sample is read once per epoch (plus the
    wrap-around padding described in dlfs.Loader when drop_last is False)
    and the order is a pure function of (seed, epoch).

    Each item is batch_transform(samples, labels): samples is a list of
    numpy uint8 views (after `transform`, if given, per sample) and labels an
    int64 numpy array. The default returns (samples, labels tensor).
    root: only the samples under this directory of the volume (e.g. "train").
    Other keyword arguments go to dlfs.Loader (queue_depth, engine, ...).
    Call set_epoch(e) before each epoch. With persistent_workers=True the
    workers keep the epoch they started with, so leave that option off.
    len() counts batches as one worker would read them; with several
    workers each pads and batches its own shard, so the count can be a
    little higher.
    """

    def __init__(self, path, batch_size, shuffle=True, seed=0, drop_last=False,
                 transform=None, batch_transform=None, rank=None, world_size=None,
                 root=None, **loader_options):
        self.path = os.fspath(path)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.transform = transform
        self.batch_transform = batch_transform or _default_batch_transform
        self.rank, self.world_size = rank, world_size
        self.loader_options = loader_options
        self.epoch = 0
        vol = Volume(self.path)
        self.classes = vol.classes
        self.indices = vol.indices(root) if root else None
        self._samples = len(vol) if root is None else len(self.indices)

    def set_epoch(self, epoch):
        self.epoch = epoch

    def _shard(self):
        rank, world = distributed_rank_world()
        if self.rank is not None:
            rank = self.rank
        if self.world_size is not None:
            world = self.world_size
        info = tud.get_worker_info()
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        return rank * workers + worker, world * workers

    def __len__(self):
        _, world = self._shard()
        per = self._samples // world if self.drop_last else -(-self._samples // world)
        if self.drop_last:
            return per // self.batch_size
        return -(-per // self.batch_size)

    def __iter__(self):
        rank, world = self._shard()
        loader = Loader(self.path, self.batch_size, shuffle=self.shuffle, seed=self.seed,
                        rank=rank, world_size=world, drop_last=self.drop_last,
                        indices=self.indices, **self.loader_options)
        loader.set_epoch(self.epoch)
        for batch in loader:
            samples = batch.samples
            if self.transform is not None:
                samples = [self.transform(s) for s in samples]
            yield self.batch_transform(samples, batch.labels)
