"""PyTorch datasets over dlfs volumes.

VolumeDataset: map-style, one sample per item; works with any
    torch.utils.data.DataLoader setting (num_workers, DistributedSampler).
LoaderDataset: iterable, one *batch* per item, driven by the C++ loader
    (io_uring reads ahead, zero-copy); use DataLoader(ds, batch_size=None).

Samples reach `transform` as numpy uint8 arrays of the stored bytes
(decode them there: e.g. PIL for PNG/JPEG, a reshape for raw pixels). They
are writable and not copies: torch.from_numpy takes them as they are,
without a warning.
"""
import os

import numpy as np
import torch
import torch.utils.data as tud

from . import Loader, Volume

__all__ = ["VolumeDataset", "LoaderDataset", "distributed_rank_world"]


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
    As torchvision's ImageFolder: `classes` (names, by label), `class_to_idx`
    ({name: label}) and `targets` (the label of every item, a list of ints;
    -1 where a sample has none).
    """

    def __init__(self, path, transform=None, target_transform=None, root=None, verify=True):
        self.path = os.fspath(path)
        self.transform = transform
        self.target_transform = target_transform
        self.verify = verify
        vol = Volume(self.path)  # fail early, in the parent, on a bad path
        self.indices = vol.indices(root) if root else np.arange(len(vol), dtype=np.int64)
        self.classes = vol.classes
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        self._labels = vol.labels[self.indices]  # int64 array, item order
        self._targets = None
        self._vol, self._pid = vol, os.getpid()

    @property
    def targets(self):
        """The label of every item, as a list of ints (made on first use)."""
        if self._targets is None:
            self._targets = self._labels.tolist()
        return self._targets

    def _volume(self):
        if self._pid != os.getpid():
            self._vol, self._pid = Volume(self.path), os.getpid()
        return self._vol

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, index):
        vol = self._volume()
        sample = vol.read_array(int(self.indices[index]), self.verify)  # writable, no copy
        label = int(self._labels[index])
        if self.transform is not None:
            sample = self.transform(sample)
        if self.target_transform is not None:
            label = self.target_transform(label)
        return sample, label

    def __getstate__(self):  # workers reopen the volume themselves
        state = dict(self.__dict__)
        state["_vol"], state["_pid"] = None, None
        return state


class _SharedPosition:
    """Where the next iteration of a dataset starts, in shared memory.

    Set in the main process, read by DataLoader workers at __iter__: also by
    persistent workers (persistent_workers=True), which keep the dataset
    object they received once. Shared through torch's multiprocessing
    (inherited on fork; passed as shared memory when pickled for spawn).
    Slot 0 is the epoch; the others are kept for the resume point (batches
    of the epoch already consumed), which belongs with it.
    """

    EPOCH = 0

    def __init__(self):
        self._values = torch.zeros(4, dtype=torch.int64).share_memory_()

    @property
    def epoch(self):
        return int(self._values[self.EPOCH])

    @epoch.setter
    def epoch(self, epoch):
        epoch = int(epoch)
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, not {epoch}")
        self._values[self.EPOCH] = epoch


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
    Call set_epoch(e) before each epoch (before iterating the DataLoader).
    The epoch lives in shared memory, so DataLoader workers read the current
    one whenever they start an epoch, persistent_workers=True included.
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
        self._position = _SharedPosition()
        self.epoch = 0
        vol = Volume(self.path)
        self.classes = vol.classes
        self.indices = vol.indices(root) if root else None
        self._samples = len(vol) if root is None else len(self.indices)

    @property
    def epoch(self):
        """The epoch the next iteration reads (shared with the workers)."""
        return self._position.epoch

    @epoch.setter
    def epoch(self, epoch):
        self._position.epoch = epoch

    def set_epoch(self, epoch):
        """Sets the epoch the next iteration reads, in every worker."""
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
