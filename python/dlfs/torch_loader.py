"""dlfs.torch.LoaderDataset: an iterable dataset of whole batches read by the
C++ loader, split across ranks and DataLoader workers, resumable
(state_dict). Re-exported by dlfs.torch; see LoaderDataset's docstring.
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
from ._torch_slots import _SharedLoaderBatch, _default_batch_transform, _slots_usable
from .torch_volume import _check_fields

__all__ = ["LoaderDataset"]


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
            if worker and not options.get("io_threads"):
                # The DataLoader's workers are processes of their own that
                # share the cores: one I/O thread each, not the two a
                # process with two cores to itself gets.
                options["io_threads"] = 1
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
