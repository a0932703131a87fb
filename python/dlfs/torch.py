"""PyTorch datasets over dlfs volumes.

LoaderDataset: iterable, one *batch* per item, driven by the C++ loader
    (io_uring reads the epoch ahead, zero-copy, node cache); use
    DataLoader(ds, batch_size=None). The fastest path for training.
ImageLoader: batches of decoded, augmented image tensors, decoded in C++
    on the loader's threads (dlfs/torch_image.py).
VolumeDataset: map-style. ds[i] is one sample, for any
    torch.utils.data.DataLoader setting (num_workers, DistributedSampler);
    ds[[i, j, ...]] is a whole batch read in one submission, for
    DataLoader(ds, sampler=BatchSampler(...), batch_size=None).

Samples reach `transform` as numpy uint8 arrays of the stored bytes
(decode them there: e.g. PIL for PNG/JPEG, a reshape for raw pixels), or,
with VolumeDataset(decode=...), as tensors decoded in C++. The arrays are
writable and not copies: torch.from_numpy takes them as they are, without a
warning.
"""
import glob as _glob
import json as _json
import os as _os
import shutil as _shutil
import tempfile as _tempfile
import weakref as _weakref

import numpy as _np
import torch as _torch
import torch.utils.data as _tud

from . import _dlfs
from . import _keywords
from . import distributed as _distributed
from ._torch_common import distributed_rank_world
from ._torch_common import make_pipeline as _make_pipeline
from .torch_image import ImageLoader
from .torch_tokens import TokenDataset

__all__ = ["VolumeDataset", "LoaderDataset", "ImageLoader", "TokenDataset",
           "distributed_rank_world"]


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


def _default_batch_transform(samples, labels):
    return samples, _torch.from_numpy(_np.ascontiguousarray(labels))


class _SharedBatch:
    """A batch in a worker's shared memory, as it travels to the main process:
    unpickled there as (samples, labels) like the default batch_transform
    makes, the samples zero-copy views into the worker's slot."""

    def __init__(self, pid, fd, total, slot_bytes, slot, offsets, lengths, labels):
        self.args = (pid, fd, total, slot_bytes, slot, offsets, lengths, labels)

    def __reduce__(self):
        return _open_shared_batch, self.args


# Batches received through shared memory in this process (for tests).
_shared_batches_received = 0


def _open_shared_batch(pid, fd, total, slot_bytes, slot, offsets, lengths, labels):
    global _shared_batches_received
    lease = _dlfs._attach_slot(pid, fd, total, slot_bytes, slot)
    # Tensors, as DataLoader makes of the samples of a batch sent the
    # ordinary way; each keeps the slot's lease alive.
    samples = [_torch.frombuffer(lease, dtype=_torch.uint8, count=n, offset=o) if n else
               _torch.empty(0, dtype=_torch.uint8) for o, n in zip(offsets, lengths)]
    _shared_batches_received += 1
    return _default_batch_transform(samples, labels)


class _SharedLoaderBatch:
    """A LoaderDataset batch in a DataLoader worker's shared memory, as it
    travels to the main process: its samples back to back in one slot, the
    labels (a small int64 array) pickled. Unpickled there as the default
    batch_transform makes it: (samples, labels tensor), samples one (batch,
    size) uint8 tensor when `stacked`, else a list of uint8 tensors; both
    zero-copy views of the slot, which is free again once they are gone.

    Why: DataLoader moves a tensor made in a worker by copying it into a new
    shared-memory file and passing that file's descriptor over a socket, per
    tensor and per batch (about 1 ms to pickle a new 200 KB batch tensor
    here, 0.17 ms its labels: 0.1-0.2 M Fashion-MNIST samples/s with 2
    workers); the slots are made once per worker and mapped by the main
    process while any of their tensors lives, so a batch costs a memcpy and
    a pickle of 3 KB (about 0.1 ms in the worker, loader included)."""

    def __init__(self, pid, fd, total, slot_bytes, slot, lengths, stacked, labels):
        self.args = (pid, fd, total, slot_bytes, slot, lengths, stacked, labels)

    def __reduce__(self):
        return _open_shared_loader_batch, self.args


def _open_shared_loader_batch(pid, fd, total, slot_bytes, slot, lengths, stacked, labels):
    global _shared_batches_received
    lengths = _np.asarray(lengths, dtype=_np.int64)
    if (lengths < 0).any() or int(lengths.sum()) > slot_bytes:
        raise ValueError(f"a DataLoader worker's shared batch (pid {pid}) does not fit its slot")
    lease = _dlfs._attach_slot(pid, fd, total, slot_bytes, slot)
    n = len(lengths)
    if stacked:
        size = int(lengths[0]) if n else 0
        samples = (_torch.frombuffer(lease, dtype=_torch.uint8, count=n * size).view(n, size)
                   if n * size else _torch.empty((n, size), dtype=_torch.uint8))
    else:
        offsets = _np.concatenate(([0], _np.cumsum(lengths)[:-1])).tolist() if n else []
        samples = [_torch.frombuffer(lease, dtype=_torch.uint8, count=k, offset=o) if k else
                   _torch.empty(0, dtype=_torch.uint8)
                   for o, k in zip(offsets, lengths.tolist())]
    _shared_batches_received += 1
    return _default_batch_transform(samples, labels)


def _slots_usable():
    """Whether the main process can map this worker's shared memory: it opens
    /proc/<worker>/fd/<fd>, which the kernel refuses for a process that is
    not dumpable (prctl PR_SET_DUMPABLE 0, set-uid programs) unless the
    opener has CAP_SYS_PTRACE. Batches then go the ordinary way rather than
    fail in the main process."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(3, 0, 0, 0, 0) == 1  # PR_GET_DUMPABLE: 1 for this user
    except (OSError, AttributeError):
        return False


class _SharedPosition:
    """Where a LoaderDataset's next iteration starts, in shared memory.

    Set in the main process, read by DataLoader workers at __iter__ (also
    persistent workers, which keep the dataset object they received once);
    the workers write back how the latest iteration was split, which the
    main process needs for state_dict(). Shared through torch's
    multiprocessing (inherited on fork, passed as shared memory for spawn).
    """

    EPOCH = 0
    RESUME_EPOCH = 1    # the epoch a restored position belongs to; -1: none
    RESUME_BATCHES = 2  # batches of it the DataLoader had handed out
    RESUME_WORKERS = 3  # how many workers had read them (1: the main process)
    SEEN_EPOCH = 4      # the epoch of the latest iteration; -1: none yet
    SEEN_WORKERS = 5    # its DataLoader's num_workers (0: the main process)
    TAKEN = 6           # batches it handed out, when run in the main process
    RESUME_WORLD = 7    # the restored position's world size
    RESUME_BATCH_SIZE = 8  # and batch size
    MAX_SEGMENTS = 64   # parts of the restored epoch read before (elastic resume)

    def __init__(self):
        self._values = _torch.tensor([0, -1, 0, 0, -1, 0, 0, 1, 1],
                                     dtype=_torch.int64).share_memory_()
        self._segments = _torch.zeros(1 + 4 * self.MAX_SEGMENTS,
                                      dtype=_torch.int64).share_memory_()

    def __getitem__(self, slot):
        return int(self._values[slot])

    def __setitem__(self, slot, value):
        self._values[slot] = int(value)

    @property
    def segments(self):
        """The restored epoch's earlier parts: [(world_size, workers, batch_size, batches)]."""
        n = int(self._segments[0])
        v = self._segments[1:1 + 4 * n].tolist()
        return [tuple(v[i:i + 4]) for i in range(0, 4 * n, 4)]

    @segments.setter
    def segments(self, segments):
        if len(segments) > self.MAX_SEGMENTS:
            raise ValueError(f"an epoch resumed more than {self.MAX_SEGMENTS} times")
        flat = [x for seg in segments for x in seg]
        self._segments[1:1 + len(flat)] = _torch.tensor(flat, dtype=_torch.int64)
        self._segments[0] = len(segments)


def _indices_of(records):
    """Sample indices from a quarantine list: ints, or dicts with an "index"."""
    return [r["index"] if isinstance(r, dict) else int(r) for r in records]


def _format_segments(segments):
    """[(world_size, workers, batch_size, batches)] as a state's "segments" string."""
    return ";".join(f"world_size={w},workers={k},batch_size={b},batches={n}"
                    for w, k, b, n in segments)


def _parse_segments(text, path):
    """A state's "segments" string back; ValueError naming the volume if malformed."""
    if not isinstance(text, str):
        raise ValueError(f"{path}: cannot resume from this state: segments must be a str")
    out = []
    for part in filter(None, text.split(";")):
        try:
            kv = dict(item.split("=", 1) for item in part.split(","))
            seg = tuple(int(kv.pop(k)) for k in ("world_size", "workers", "batch_size",
                                                  "batches"))
        except (ValueError, KeyError):
            kv, seg = {"?": 1}, ()
        if kv or min(seg[:3]) < 1 or seg[3] < 0:
            raise ValueError(f"{path}: cannot resume from this state: malformed segments "
                             f"{text[:200]!r}")
        out.append(seg)
    return out


class LoaderDataset(_tud.IterableDataset):
    """Iterable dataset yielding whole batches read by the C++ loader.

    Use it with DataLoader(ds, batch_size=None, num_workers=k). The epoch's
    samples are split first across ranks, then across the DataLoader's
    workers, so every sample is read once per epoch (plus the wrap-around
    padding described in dlfs.Loader when drop_last is False) and the order
    is a pure function of (seed, epoch). The ranks: comm= (an mpi4py
    communicator), or rank= and world_size=, or else found from the launcher
    (dlfs.distributed: mpirun, srun, torchrun, torch.distributed — make the
    dataset after init_process_group). Under MPI the dataset is made
    collectively (every rank makes it: one metadata read for the job, one
    directory copy per node) and so is its loader at the first iteration;
    with num_workers=0 reading and checksums run on the loader's native
    threads, and shard_local=True / cluster_cache=True (samples exchanged
    between nodes over MPI) need it: DataLoader workers read their share of
    their rank's samples without MPI, attaching the node's directory and
    cache.

    Each item is batch_transform(samples, labels): samples is a list of
    numpy uint8 views (after `transform`, if given, per sample) and labels an
    int64 numpy array. The default returns (samples, labels tensor). With
    stack=True (or "auto", the default, when no `transform` is given and
    every sample of the batch has the same size, e.g. raw pixels), samples
    is instead one (batch, size) uint8 array: DataLoader then makes one
    tensor of it rather than one per sample.
    root: only the samples under this directory of the volume (e.g. "train").
    fields: names of fields (format v2, e.g. ("jpg", "cls")): each item is
    then a tuple with one list per field, in that order, of that field's
    numpy uint8 views for the batch's samples (zero-copy for raw fields,
    decompressed by the loader for zstd ones; bytes(view) gives bytes), like
    VolumeDataset(fields=...) per batch. The label is not added (it is a
    field, e.g. "cls"); batch_transform, if given, receives the tuple and
    the labels. `transform` and stack=True do not apply (ValueError). A
    batch holding a sample that lacks a field raises KeyError naming the
    sample and the field.
    path may be a list of volumes: a weighted mixture (weights=,
    epoch_samples=, cycle= as dlfs.Loader's; the classes are the first
    volume's).
    Other keyword arguments go to dlfs.Loader (queue_depth, engine, ...);
    with skip_bad_samples=True bad samples are left out of their batch and
    quarantine() lists them, whichever worker met them.
    Call set_epoch(e) before each epoch (before iterating the DataLoader).
    The epoch lives in shared memory, so DataLoader workers read the current
    one whenever they start an epoch, persistent_workers=True included. Each
    process keeps its loader from epoch to epoch, so the read-ahead of the
    next epoch carries over; the node cache (cache_budget) is shared by the
    workers and the main process whatever they do.
    shared_memory: in DataLoader workers, with the default batch_transform
    and no transform or fields, each worker copies its batches into shared
    memory it owns (shared_slots slots, sized from its first batch) and sends
    the main process only where they are; the main process maps that memory
    once and gets zero-copy tensors, as DataLoader would have made them,
    whose slot is reused once they are gone. DataLoader's own transport
    makes a new shared-memory file per tensor and passes its descriptor
    over a socket, for every batch: about 4x slower for Fashion-MNIST held
    in memory (docs/benchmarks.md, bench/python/workers_bench.py). A batch that finds no free slot at once
    (the training loop holds many) or does not fit one is sent the ordinary
    way. shared_memory=False sends every batch the ordinary way.
    len() counts batches as one worker would read them; with several
    workers each pads and batches its own shard, so the count can be a
    little higher.

    Resuming: state_dict(batches) is the position after the DataLoader has
    handed out `batches` batches of the current epoch (e.g. step + 1; with
    num_workers=0 it may be left out, the dataset counts them itself), with
    what decides the order; load_state_dict(state) on a dataset made with the
    same volume, seed, shuffle and drop_last, before iterating the
    DataLoader, makes the DataLoader hand out the rest of that epoch. With
    the same world size, num_workers and batch_size that is the original
    order, each worker skipping its batches already handed out without
    reading them; with others (elastic resume) the samples of the epoch not
    yet handed out are split among this job's ranks and workers, each read
    once, and later epochs are those of a fresh job. Every rank may load
    rank 0's state (all ranks stop at the same step). See state_dict().
    """

    def __init__(self, path, batch_size, shuffle=True, seed=0, drop_last=False,
                 transform=None, batch_transform=None, rank=None, world_size=None,
                 root=None, stack="auto", fields=None, comm=None, shared_memory=True,
                 shared_slots=6, **loader_options):
        # The loader is made at the first iteration, maybe in a DataLoader
        # worker: its keywords are checked here.
        _keywords.check("dlfs.torch.LoaderDataset", loader_options,
                        set(_keywords.parameters(_dlfs.Loader.__init__._dlfs_wrapped) or ())
                        | set(_keywords.python_keywords(LoaderDataset.__init__, named_only=True)))
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, _np.integer)):
            raise TypeError(f"dlfs.torch.LoaderDataset(): batch_size takes an int, not "
                            f"{type(batch_size).__name__}")
        if batch_size < 1:
            raise ValueError(f"dlfs.torch.LoaderDataset(): batch_size={batch_size}: must be >= 1")
        # A list of volumes is a weighted mixture (weights=, epoch_samples=,
        # cycle= go to dlfs.Loader).
        mixture = isinstance(path, (list, tuple))
        self.path = [_os.fspath(p) for p in path] if mixture else _os.fspath(path)
        if mixture and root is not None:
            raise ValueError("LoaderDataset: root selects samples of one volume, not of a "
                             "mixture")
        if isinstance(fields, str):
            fields = (fields,)
        self.fields = tuple(fields) if fields is not None else None
        if self.fields is not None and (transform is not None or stack is True):
            raise ValueError("LoaderDataset: transform and stack=True do not apply with fields; "
                             "use batch_transform")
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.transform = transform
        self.batch_transform = batch_transform or _default_batch_transform
        self._job = _distributed.resolve(comm, rank, world_size)
        self.rank, self.world_size = self._job.rank, self._job.world_size
        self.loader_options = loader_options
        self.stack = stack
        self.shared_memory = shared_memory
        self.shared_slots = shared_slots
        self._slots, self._slots_pid = None, None
        self._position = _SharedPosition()
        self._loader, self._loader_key = None, None
        # Opened as this job's loaders read them: collectively under MPI (the
        # main process's loader reads these), else sharing the node's
        # directory copy when several processes read.
        self._volumes = [self._open(p) for p in (self.path if mixture else [self.path])]
        vol = self._volumes[0]
        for p, v in zip(self.path if mixture else [self.path], self._volumes):
            if self.fields is not None:
                _check_fields(v, p, self.fields)
        self.classes = vol.classes
        # A range when the samples under root are contiguous (nothing per
        # sample), else an array of their indices.
        self.indices = vol.samples_under(root) if root else None
        if mixture:
            # What the mixture's order depends on, as its Loader states it.
            probe = _dlfs.Loader(self._volumes, batch_size, shuffle=shuffle, seed=seed,
                                 drop_last=drop_last, cache_budget=0,
                                 **{k: v for k, v in loader_options.items()
                                    if k in ("weights", "epoch_samples", "cycle")}).state_dict()
            self._samples = probe["samples"]
            volume_uuid, volume_samples = probe["volume_uuid"], probe["volume_samples"]
        else:
            self._samples = len(vol) if root is None else len(self.indices)
            volume_uuid, volume_samples = vol.info()["uuid"], len(vol)
        self._identity = {
            "volume_uuid": volume_uuid, "volume_samples": volume_samples,
            "samples": self._samples,
            "subset_crc": 0 if root is None else _dlfs._subset_crc(self.indices),
            "seed": seed, "shuffle": bool(shuffle), "batch_size": batch_size,
            "drop_last": bool(drop_last)}
        self._loaded = None  # the state load_state_dict() was given, until iterated
        self._restored_rest = ""  # what of the restored epoch is left, when mid-epoch
        # Bad samples met by the workers: each appends its records to a file
        # here, which quarantine() reads (removed with the dataset).
        self._quarantine_dir = None
        if loader_options.get("skip_bad_samples"):
            self._quarantine_dir = _tempfile.mkdtemp(prefix="dlfs-quarantine-")
            _weakref.finalize(self, _shutil.rmtree, self._quarantine_dir, True)
        self._resumed_quarantine = []  # indices from a loaded state

    @property
    def epoch(self):
        """The epoch the next iteration reads (shared with the workers)."""
        return self._position[_SharedPosition.EPOCH]

    @epoch.setter
    def epoch(self, epoch):
        self.set_epoch(epoch)

    def set_epoch(self, epoch, discard_restored=False):
        """Sets the epoch the next iteration reads, in every worker. After
        load_state_dict() of a state taken in the middle of epoch E,
        set_epoch(E) keeps the restored position; another epoch raises
        ValueError (it would drop the rest of E) unless discard_restored=True."""
        epoch = int(epoch)
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, not {epoch}")
        p = self._position
        restored = p[p.RESUME_EPOCH]
        if restored != epoch:
            pending = restored >= 0 and p[p.SEEN_EPOCH] == -1 and self._restored_rest
            if pending and not discard_restored:
                raise ValueError(
                    f"set_epoch({epoch}): load_state_dict() restored a position in the middle "
                    f"of epoch {restored} ({self._restored_rest}), and starting epoch {epoch} "
                    f"would drop the rest of it. To finish epoch {restored} first, call "
                    f"set_epoch({restored}) (or iterate without set_epoch), e.g. `for epoch in "
                    f"range(state[\"epoch\"], epochs)`; to leave it unread, call "
                    f"set_epoch({epoch}, discard_restored=True)")
            p[p.RESUME_EPOCH] = -1  # a restored position holds for its own epoch only
            self._restored_rest = ""
        p[p.EPOCH] = epoch

    def _directory(self, worker=False):
        """Where this process keeps the directory: directory= when given, else
        one copy per node when several processes read (ranks or workers)."""
        given = self.loader_options.get("directory")
        return given or ("node" if self._job.distributed or worker else "private")

    def _open(self, path):
        job = self._job
        sharded = bool(self.loader_options.get("shard_local"))
        return _dlfs.Volume(path, comm=job.comm if job.mpi else None, shard_local=sharded,
                            target_map=self.loader_options.get("target_map"),
                            directory=self._directory(), node_name=job.node_name)

    def _rank_world(self):
        return self._job.rank, self._job.world_size

    def _shard(self):
        rank, world = self._rank_world()
        info = _tud.get_worker_info()
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        return rank * workers + worker, world * workers

    def __len__(self):
        _, world = self._shard()
        return self._batches_per_shard(world)

    def _batches_per_shard(self, shards):
        per = self._samples // shards if self.drop_last else -(-self._samples // shards)
        if self.drop_last:
            return per // self.batch_size
        return -(-per // self.batch_size)

    def _get_loader(self, rank, world, workers):
        key = (_os.getpid(), rank, world)
        if self._loader_key != key:
            if self._loader is not None and self._loader_key[0] != _os.getpid():
                _INHERITED.append(self._loader)  # the parent's: never used or destroyed here
            options = dict(self.loader_options)
            if self._resumed_quarantine:
                options["quarantine"] = sorted(set(self._resumed_quarantine) |
                                               set(_indices_of(options.get("quarantine") or [])))
            job = self._job
            worker = _tud.get_worker_info() is not None
            if worker and (options.get("shard_local") or options.get("cluster_cache")):
                raise ValueError(
                    "LoaderDataset: shard_local and cluster_cache exchange samples between "
                    "nodes over MPI, which DataLoader workers cannot use: use num_workers=0 "
                    "(reading and checksums already run on the loader's native threads)")
            if job.mpi and not worker and workers == 1:
                # The main process of an MPI rank: made collectively, over the
                # volumes opened at construction (every rank iterates).
                volume = self._volumes if isinstance(self.path, list) else self._volumes[0]
                options.update(comm=job.comm, node_name=job.node_name)
                rank_world = {}
            else:
                volume = self.path
                options.update(directory=self._directory(worker), node_name=job.node_name)
                rank_world = {"rank": rank, "world_size": world}
            self._loader = _dlfs.Loader(volume, self.batch_size, shuffle=self.shuffle,
                                        seed=self.seed, drop_last=self.drop_last,
                                        indices=self.indices,
                                        fields=list(self.fields) if self.fields else None,
                                        **rank_world, **options)
            if job.mpi and not worker:
                _distributed.track(self._loader)
            self._published = 0
            self._loader_key = key
        return self._loader

    def __iter__(self):
        info = _tud.get_worker_info()
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        p = self._position
        epoch = self.epoch
        p[p.SEEN_EPOCH] = epoch
        p[p.SEEN_WORKERS] = info.num_workers if info else 0
        # The DataLoader takes batches from its workers in turn, starting
        # with worker 0: batch j of the epoch is batch j // W of worker
        # j % W. Resuming after k batches, worker w plays the part worker
        # (w + k) % W had, so the DataLoader's first batch is batch k, and
        # skips that worker's batches among the first k.
        # A job of another shape (world size, workers, batch size) instead
        # reads the rest of the epoch as a new part (elastic resume).
        rank, world = self._rank_world()
        segments, offset = self._resumed_part(epoch, world, workers)
        role, skip = worker, 0
        if offset:
            role = (worker + offset) % workers
            skip = -(-(offset - role) // workers) if offset > role else 0
        loader = self._get_loader(rank * workers + role, world * workers, workers)
        loader.set_epoch(epoch)
        if skip or segments:
            state = loader.state_dict()
            state.update(epoch=epoch, batches=skip, segments=_format_segments(segments))
            loader.load_state_dict(state)  # the skipped batches are not read
        main = info is None
        if main:
            p[p.TAKEN] = skip
        stack = self.stack
        want_stack = stack is True or (stack == "auto" and self.transform is None)
        share = (not main and self.shared_memory and self.fields is None
                 and self.transform is None
                 and self.batch_transform is _default_batch_transform and _slots_usable())
        for batch in loader:
            if self._quarantine_dir is not None:
                self._publish_quarantine(loader)
            if self.fields is not None:
                if main:
                    p[p.TAKEN] = p[p.TAKEN] + 1
                # Views shared with other processes (the node cache) are
                # copied, as below: torch wants writable arrays.
                fields = tuple([v if v.flags.writeable else v.copy() for v in column]
                               for column in batch.fields)
                if self.batch_transform is _default_batch_transform:
                    yield fields
                else:
                    yield self.batch_transform(fields, batch.labels)
                continue
            if share:
                shared = self._shared_batch(batch, want_stack, stack is True)
                if shared is not None:
                    yield shared
                    continue
            samples = None
            if want_stack:
                try:
                    samples = batch.stack()
                except ValueError:
                    if stack is True:
                        raise
            if samples is None:
                # Writable, as torch wants them (no "not writable" warning,
                # no surprises): views of a batch's own buffer are, zero-copy;
                # bytes shared with other processes (the node cache) are
                # copied rather than exposed.
                samples = [s if s.flags.writeable else s.copy() for s in batch.samples]
                if self.transform is not None:
                    samples = [self.transform(s) for s in samples]
            if main:
                p[p.TAKEN] = p[p.TAKEN] + 1
            yield self.batch_transform(samples, batch.labels)

    def _shared_batch(self, batch, want_stack, must_stack):
        """`batch` copied into this worker's shared memory (a _SharedLoaderBatch),
        or None to send it the ordinary way: no slot free at once (the main
        process holds many batches; waiting would stall the worker), a batch
        larger than a slot, an empty one, or samples of several sizes with
        stack=True (the ordinary path raises the ValueError)."""
        if self._slots_pid != _os.getpid():
            self._slots, self._slots_pid = None, _os.getpid()
        if self._slots is None:
            # Slots sized from the first batch, with room for larger ones.
            per = max(batch.payload_bytes, 1 << 20)
            self._slots = _dlfs._SharedSlots(self.shared_slots, per * 5 // 4)
        if len(batch) == 0:
            return None
        slot = self._slots.acquire(0)
        if slot < 0:
            return None
        try:
            lengths = self._slots.put(slot, batch)
        except BaseException:
            self._slots.release(slot)
            raise
        uniform = lengths is not None and lengths.min() == lengths.max()
        if lengths is None or (must_stack and not uniform):
            self._slots.release(slot)
            return None
        return _SharedLoaderBatch(_os.getpid(), self._slots.fd, self._slots.total,
                                  self._slots.slot_bytes, slot, lengths,
                                  want_stack and uniform, batch.labels)

    def _publish_quarantine(self, loader):
        """Appends the records `loader` added since the last call to this
        process's file (one JSON object per line)."""
        bad = loader.quarantine()
        if len(bad) > self._published:
            with open(_os.path.join(self._quarantine_dir, f"{_os.getpid()}.jsonl"), "a") as f:
                for record in bad[self._published:]:
                    f.write(_json.dumps(record) + "\n")
            self._published = len(bad)

    def epoch_stats(self):
        """Per epoch iterated in this process, as dlfs.Loader.epoch_stats(): the
        samples and where their bytes came from (storage, the node cache,
        other nodes, the network). With DataLoader workers each worker counts
        its own reads: this process's list is then empty."""
        if self._loader is None or self._loader_key[0] != _os.getpid():
            return []
        return self._loader.epoch_stats()

    def quarantine(self):
        """Samples left out as bad (skip_bad_samples) by this process and the
        DataLoader's workers, and those of a loaded state:
        [{volume, index, path, reason}] by index."""
        records = {}
        for index in self._resumed_quarantine:
            records[index] = {"volume": self.path, "index": index, "path": None,
                              "reason": "left out by the state resumed from"}
        if self._loader is not None and self._loader_key[0] == _os.getpid():
            for r in self._loader.quarantine():
                records.setdefault(r["index"], r)
        if self._quarantine_dir is not None:
            for name in sorted(_glob.glob(_os.path.join(self._quarantine_dir, "*.jsonl"))):
                with open(name) as f:
                    for line in f:
                        if line.endswith("\n"):  # (a line being written is skipped)
                            r = _json.loads(line)
                            records.setdefault(r["index"], r)
        return [records[i] for i in sorted(records)]

    def _resumed_part(self, epoch, world, workers):
        """How this job continues a restored `epoch`: the parts of it read
        before, and the batches of the current part the DataLoader had
        handed out (for a job of the same shape; else a new part: 0)."""
        p = self._position
        if p[p.RESUME_EPOCH] != epoch:
            return [], 0
        segments, k = p.segments, p[p.RESUME_BATCHES]
        saved = (p[p.RESUME_WORLD], p[p.RESUME_WORKERS], p[p.RESUME_BATCH_SIZE])
        if saved == (world, workers, self.batch_size):
            return segments, k
        return segments + ([saved + (k,)] if k > 0 else []), 0

    def state_dict(self, batches=None):
        """The position after the DataLoader has handed out `batches` batches of
        the current epoch, as a dict (ints, bools, strings: torch.save or json
        store it), with what decides the order: volume, sample set, seed,
        shuffle, batch_size, drop_last, rank, world_size, num_workers and the
        epoch order's version ("order"; a state saved mid-epoch with another
        is refused, one at an epoch boundary resumes).

        batches: what the training loop has taken from the DataLoader in this
        iteration (step + 1 after `for step, batch in enumerate(loader)`); in a
        resumed epoch count from the first batch after the restore, the
        batches before it are added (after an elastic resume the state counts
        the batches of the new part, and its "segments" lists the parts read
        before it). Required when the DataLoader has
        workers: they read ahead of the loop, so the dataset cannot tell.
        With num_workers=0 the dataset counts what it handed out itself.
        """
        p = self._position
        epoch = self.epoch
        resumed = p[p.RESUME_EPOCH] == epoch
        seen = p[p.SEEN_EPOCH] == epoch
        if resumed and not seen and self._loaded is not None:
            if batches:
                raise ValueError(f"LoaderDataset.state_dict(): batches={batches}, but epoch "
                                 f"{epoch} has not been iterated since load_state_dict()")
            return dict(self._loaded)  # nothing read since: the state as loaded
        rank, world = self._rank_world()
        workers = max(p[p.SEEN_WORKERS], 1) if seen else None
        segments, offset = self._resumed_part(epoch, world, workers) if seen else ([], 0)
        if batches is None:
            if seen and p[p.SEEN_WORKERS] > 0:
                raise ValueError(
                    "LoaderDataset.state_dict(): the DataLoader has workers, which read "
                    "ahead of the training loop: pass batches= (the batches taken from "
                    "the DataLoader in this epoch, e.g. step + 1)")
            total = p[p.TAKEN] if seen else offset
        else:
            if int(batches) < 0:
                raise ValueError(f"batches must be >= 0, not {batches}")
            total = offset + int(batches)
        if total > 0 and workers is None:
            raise ValueError(
                f"LoaderDataset.state_dict(): batches={batches}, but epoch {epoch} has not "
                "been iterated")
        if total > 0 and not segments:
            whole = workers * self._batches_per_shard(world * workers)
            if total > whole:
                raise ValueError(f"batches={total}, but the epoch has {whole} batches "
                                 f"(num_workers={workers if workers > 1 else 0})")
        state = dict(self._identity, rank=rank, world_size=world, order=_dlfs.ORDER_VERSION)
        state.update(epoch=epoch, batches=total,
                     num_workers=workers if total > 0 or segments else 0,
                     segments=_format_segments(segments),
                     # (A mixture's records name indices of several volumes:
                     # its loaders meet them again, not carried.)
                     quarantine="" if isinstance(self.path, list) else
                     ",".join(str(r["index"]) for r in self.quarantine()))
        return state

    def load_state_dict(self, state):
        """Resumes from a state_dict(): the next iteration of state["epoch"]
        (set_epoch to it keeps the position; another epoch raises ValueError
        while the rest of it is unread, see set_epoch) hands out
        the batches after those the state counts, in the original order, read
        by a DataLoader with the same num_workers. ValueError, naming what
        differs, for a state of another volume or other options."""
        if not isinstance(state, dict):
            raise TypeError("load_state_dict() takes the dict state_dict() returned")
        # World size, workers and batch size may differ (elastic resume).
        mine = {k: v for k, v in self._identity.items() if k != "batch_size"}
        keys = set(mine) | {"epoch", "batches", "num_workers", "rank", "world_size",
                            "batch_size"}
        missing = sorted(keys - set(state))
        if missing:
            raise ValueError(f"{self.path}: not a LoaderDataset state: {', '.join(missing)} "
                             "missing")
        differ = [f"it was saved with {k} {state[k]!r}, this dataset has {k} {v!r}"
                  for k, v in mine.items() if state[k] != v]
        if differ:
            raise ValueError(f"{self.path}: cannot resume from this state: " + "; ".join(differ))
        epoch, batches, workers, world, batch_size = (
            int(state[k]) for k in ("epoch", "batches", "num_workers", "world_size",
                                    "batch_size"))
        if epoch < 0 or batches < 0 or workers < 0 or world < 1 or batch_size < 1:
            raise ValueError(f"{self.path}: cannot resume from this state: epoch, batches or "
                             "num_workers negative, or world_size or batch_size below 1")
        segments = _parse_segments(state.get("segments", ""), self.path)
        try:
            quarantined = [int(i) for i in filter(None, str(state.get("quarantine", "")).split(","))]
        except ValueError:
            raise ValueError(f"{self.path}: cannot resume from this state: malformed "
                             f"quarantine {str(state['quarantine'])[:200]!r}") from None
        if any(i < 0 or i >= self._identity["volume_samples"] for i in quarantined):
            raise ValueError(f"{self.path}: cannot resume from this state: it quarantines a "
                             "sample out of range")
        workers = max(workers, 1)
        rest = "continued from an earlier job; more batches to come" if segments else ""
        whole = batches
        if batches > 0 and not segments:
            shards = world * workers
            per = self._samples // shards if self.drop_last else -(-self._samples // shards)
            whole = workers * (per // batch_size if self.drop_last else -(-per // batch_size))
            if batches > whole:
                raise ValueError(f"{self.path}: cannot resume from this state: it counts "
                                 f"{batches} batches of an epoch of {whole}")
            if batches < whole:
                rest = f"{batches} of {whole} batches handed out"
        # A state of another epoch order (1, Fisher-Yates: states without an
        # "order") means the same only at an epoch boundary.
        order = int(state.get("order", 1))
        if order != _dlfs.ORDER_VERSION and (segments or 0 < batches < whole):
            raise ValueError(
                f"{self.path}: cannot resume from this state: it was saved in the middle of "
                f"epoch {epoch} ({batches} batches handed out"
                f"{' after earlier parts' if segments else ''}) with epoch order {order}"
                f"{' (Fisher-Yates, dlfs before the order had versions)' if order == 1 else ''}"
                f", and this dlfs reads epoch order {_dlfs.ORDER_VERSION}: which samples those "
                "batches held cannot be told. Resume at an epoch boundary: the state with "
                f"batches 0 and no segments reads epoch {epoch} again whole; with epoch "
                f"{epoch + 1} and batches 0 it goes on with the next epoch")
        p = self._position
        self._restored_rest = ""  # a position restored before is replaced
        self.epoch = epoch
        p.segments = segments
        p[p.RESUME_EPOCH] = epoch
        p[p.RESUME_BATCHES] = batches
        p[p.RESUME_WORKERS] = workers
        p[p.RESUME_WORLD] = world
        p[p.RESUME_BATCH_SIZE] = batch_size
        p[p.SEEN_EPOCH] = -1
        p[p.TAKEN] = 0
        self._loaded = dict(state)
        self._restored_rest = rest
        if quarantined != self._resumed_quarantine:
            self._resumed_quarantine = quarantined
            self._loader, self._loader_key = None, None  # made again, leaving them out

    def __getstate__(self):  # each process makes its own loader and opens its volumes
        state = dict(self.__dict__)
        state["_loader"], state["_loader_key"] = None, None
        state["_slots"], state["_slots_pid"] = None, None
        state["_volumes"] = None
        return state


# Loaders inherited through fork() from a parent process: kept alive, never
# used, so that their destructors do not run where their threads are not.
_INHERITED = []
