"""dlfs.torch.VolumeDataset: a map-style dataset over a volume (one sample,
or a batch read in one submission, per item). Re-exported by dlfs.torch;
see VolumeDataset's docstring.
"""
import os as _os

import numpy as _np
import torch as _torch
import torch.utils.data as _tud

from . import _dlfs
from . import _keywords
from . import distributed as _distributed
from ._torch_common import make_pipeline as _make_pipeline
from ._torch_slots import _SharedBatch, _default_batch_transform

__all__ = ["VolumeDataset"]


class VolumeDataset(_tud.Dataset):
    """Map-style dataset over a volume.

    dataset[i] -> (transform(sample), target_transform(label)): one sample,
    as any DataLoader setting expects (shuffle, DistributedSampler, workers).

    dataset[[i, j, ...]] (a list, array or tensor of positions) ->
    batch_transform(samples, labels): the whole batch read in one
    submission (Volume.read_many: io_uring, O_DIRECT, coalesced); samples
    are numpy uint8 views (after `transform`), labels an int64 array. The
    default batch_transform returns (samples, labels tensor). Use it as

        sampler = BatchSampler(RandomSampler(ds), batch_size=256, drop_last=False)
        DataLoader(ds, sampler=sampler, batch_size=None, num_workers=2)

    In DataLoader workers the batched mode with the default transforms hands
    batches over in shared memory (shared_memory=True): the worker reads
    them straight into a memfd it owns and sends only where the samples
    are; the main process maps it and gets zero-copy views, whose slot is
    reused once the views are gone. Moving ~100 KB samples through the
    DataLoader's pipes otherwise costs more than reading them. A batch that
    finds no free slot (you hold many) is sent the ordinary way.

    root: only the samples under this directory of the volume (e.g. "train").
    Each process (DataLoader workers included) opens its own handle to the
    volume on first use after fork, so workers never share file descriptors.
    directory: "node" shares one copy of the volume's directory among the
    node's processes (the default when a launcher started several), else
    "private".
    As torchvision's ImageFolder: `classes` (names, by label), `class_to_idx`
    ({name: label}) and `targets` (the label of every item, a list of ints;
    -1 where a sample has none).

    decode: decode each sample natively (GIL released) before `transform`:
    a dlfs.ImagePipeline or a dict of its keywords, e.g.
    dict(size=224, crop="random-resized", flip=True, dtype="float32",
    layout="NCHW"); the sample is then a torch tensor (C, H, W or H, W, C).
    Its random choices are those of (seed, epoch, sample index): call
    set_epoch(e) before each epoch (as with DistributedSampler).

    fields: names of fields (format v2, e.g. WebDataset's ("jpg", "cls")):
    dataset[i] is then a tuple of those fields of sample i, in that order,
    each as bytes (decompressed when stored with zstd), like WebDataset's
    to_tuple; `transform`, if given, receives that tuple. The label is not
    added: it is a field of its own (e.g. "cls"); `targets` and `classes`
    still give the volume's labels. decode= then decodes the first field
    (a tensor in place of its bytes). dataset[[i, j, ...]] is a tuple of
    per-field lists of bytes (batch_transform, if given, receives that tuple
    and the labels). A sample lacking a field raises KeyError naming it and
    the field; an unknown name raises ValueError listing the volume's
    fields. target_transform does not apply (ValueError).
    """

    @_keywords.checked("dlfs.torch.VolumeDataset")
    def __init__(self, path, transform=None, target_transform=None, root=None, verify=True,
                 batch_transform=None, shared_memory=True, shared_slots=6, decode=None,
                 fields=None, directory=None):
        self.path = _os.fspath(path)
        # One directory copy per node when a launcher started several
        # processes (read from its variables: no MPI, nothing collective).
        if directory is None:
            info = _distributed.launch_info()
            directory = "node" if info["world_size"] > 1 or info["mpi_launch"] else "private"
        self.directory = directory
        if isinstance(fields, str):
            fields = (fields,)
        self.fields = tuple(fields) if fields is not None else None
        self.decode = _make_pipeline(decode) if decode is not None else None
        self.epoch = 0
        self.transform = transform
        self.target_transform = target_transform
        self.batch_transform = batch_transform or _default_batch_transform
        self.verify = verify
        self.shared_memory = shared_memory
        self.shared_slots = shared_slots
        self._slots, self._slots_pid = None, None
        vol = _dlfs.Volume(self.path, directory=directory)  # fail early, in the parent
        if self.fields is not None:
            _check_fields(vol, self.path, self.fields)
            if target_transform is not None:
                raise ValueError("VolumeDataset: with fields the label is a field (e.g. 'cls'); "
                                 "use transform instead of target_transform")
        # The volume's samples (range(len(vol))) or those under `root` (a
        # range when they are one run, else an int64 array): nothing per
        # sample is made here, so a billion-sample volume opens at once.
        self.indices = vol.samples_under(root) if root else range(len(vol))
        self.classes = vol.classes
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        self._targets = None
        self._vol, self._pid = vol, _os.getpid()

    @property
    def targets(self):
        """The label of every item, as a list of ints (made on first use:
        a pass over the items)."""
        if self._targets is None:
            self._targets = self._labels(_np.arange(len(self.indices))).tolist()
        return self._targets

    def _samples(self, positions):
        """The sample indices of item positions (an int64 array)."""
        positions = _np.asarray(positions, dtype=_np.int64)
        if isinstance(self.indices, range):
            n = len(self.indices)
            return _np.where(positions < 0, positions + n, positions) + self.indices.start
        return _np.asarray(self.indices)[positions]

    def _labels(self, positions):
        """The labels of item positions: an int64 array, -1 for none."""
        return self._volume().labels_at(self._samples(positions))

    def _volume(self):
        if self._pid != _os.getpid():
            self._vol = _dlfs.Volume(self.path, directory=self.directory)
            self._pid = _os.getpid()
        return self._vol

    def __len__(self):
        return len(self.indices)

    def set_epoch(self, epoch):
        """Epoch whose random choices decode= uses."""
        self.epoch = epoch

    def __getitem__(self, index):
        vol = self._volume()
        if not isinstance(index, (int, _np.integer)) and not (
                isinstance(index, _torch.Tensor) and index.dim() == 0):
            return self._batch(vol, index)
        if not -len(self.indices) <= int(index) < len(self.indices):
            raise IndexError(f"{self.path}: item {int(index)} out of range (the dataset has "
                             f"{len(self.indices)} items)")
        i = int(self.indices[index])
        if self.fields is not None:
            item = self._fields_of(vol, i)
            return self.transform(item) if self.transform is not None else item
        if self.decode is not None:
            sample = _torch.from_numpy(self.decode(vol.read(i, self.verify), self.epoch, i))
        else:
            sample = vol.read_array(i, self.verify)  # writable, no copy
        label = vol.label(i)
        label = -1 if label is None else label
        if self.transform is not None:
            sample = self.transform(sample)
        if self.target_transform is not None:
            label = self.target_transform(label)
        return sample, label

    def _fields_of(self, vol, i):
        item = tuple(vol.read_field(i, name, self.verify) for name in self.fields)
        if self.decode is not None:
            first = _np.frombuffer(item[0], dtype=_np.uint8)
            item = (_torch.from_numpy(self.decode(first, self.epoch, i)),) + item[1:]
        return item

    def _batch(self, vol, positions):
        positions = _np.asarray(positions, dtype=_np.int64)
        if self.fields is not None:
            items = [self._fields_of(vol, int(i)) for i in self._samples(positions)]
            if self.transform is not None:
                items = [self.transform(item) for item in items]
            columns = tuple(list(c) for c in zip(*items)) if items else tuple(
                [] for _ in self.fields)
            if self.batch_transform is not _default_batch_transform:
                return self.batch_transform(columns, self._labels(positions))
            return columns
        if (self.shared_memory and self.decode is None and self.transform is None
                and self.target_transform is None
                and self.batch_transform is _default_batch_transform
                and _tud.get_worker_info() is not None):
            shared = self._shared_batch(vol, positions)
            if shared is not None:
                return shared
        batch = vol.read_many(self._samples(positions).tolist(), self.verify)
        # Writable, as in every other path, whether or not the node cache
        # (another process's, maybe) held a sample: its views are read-only.
        samples = [s if s.flags.writeable else s.copy() for s in batch.samples]
        if self.decode is not None:
            samples = [_torch.from_numpy(self.decode(s, self.epoch, int(i)))
                       for s, i in zip(samples, self._samples(positions))]
        if self.transform is not None:
            samples = [self.transform(s) for s in samples]
        labels = self._labels(positions)
        if self.target_transform is not None:
            labels = _np.asarray([self.target_transform(int(x)) for x in labels])
        return self.batch_transform(samples, labels)

    def _shared_batch(self, vol, positions):
        indices = self._samples(positions).tolist()
        if self._slots_pid != _os.getpid():
            self._slots, self._slots_pid = None, _os.getpid()
        if self._slots is None:
            # Slots sized from the first batch, with room for larger ones.
            per = max(vol._buffer_bytes(indices), 1 << 20)
            self._slots = _dlfs._SharedSlots(self.shared_slots, per * 5 // 4)
        slot = self._slots.acquire(0.05)
        if slot < 0:
            return None
        try:
            where = self._slots.read(vol, slot, indices, self.verify)
        except BaseException:
            self._slots.release(slot)
            raise
        if where is None:
            self._slots.release(slot)
            return None
        offsets, lengths = where
        return _SharedBatch(_os.getpid(), self._slots.fd, self._slots.total,
                            self._slots.slot_bytes, slot, offsets, lengths,
                            self._labels(positions))

    def __getstate__(self):  # workers reopen the volume themselves
        state = dict(self.__dict__)
        state["_vol"], state["_pid"] = None, None
        state["_slots"], state["_slots_pid"] = None, None
        return state


def _check_fields(vol, path, fields):
    """ValueError for a field name the volume lacks (its own are listed)."""
    known = vol.fields or [""]
    for name in fields:
        if name not in known:
            raise ValueError(f"{path}: has no field '{name}'; its fields: "
                             + ", ".join(f"'{k}'" for k in known))
