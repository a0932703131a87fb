"""dlfs.torch.TokenDataset: token windows for language-model pretraining.

Re-exported by dlfs.torch; the C++ loader under it is dlfs._TokenLoader
(include/dlfs/tokens.h). docs/tokens.md explains the stream.
"""
import json as _json
import os as _os

import numpy as _np
import torch as _torch
import torch.utils.data as _tud

from . import _dlfs
from . import distributed as _distributed

__all__ = ["TokenDataset"]

_STATE_FORMAT = "dlfs-token-state/1"


class _Shared:
    """The epoch, where it starts and a restored state, in shared memory.

    Set in the main process, read by DataLoader workers at __iter__
    (persistent ones included, which keep the dataset they received once).
    """

    # PENDING: a restored position not iterated yet.
    EPOCH, START, STATE_VERSION, STATE_BYTES, PENDING = 0, 1, 2, 3, 4
    MAX_STATE = 1 << 20  # a state is < 1 KB plus 8 B per source

    def __init__(self):
        self.values = _torch.zeros(5, dtype=_torch.int64).share_memory_()
        self.state = _torch.zeros(self.MAX_STATE, dtype=_torch.uint8).share_memory_()

    def __getitem__(self, slot):
        return int(self.values[slot])

    def __setitem__(self, slot, value):
        self.values[slot] = int(value)

    def put_state(self, state):
        data = _json.dumps(state).encode()
        if len(data) > self.MAX_STATE:
            raise ValueError(f"a token state of {len(data)} bytes: at most {self.MAX_STATE}")
        self.state[:len(data)] = _torch.frombuffer(bytearray(data), dtype=_torch.uint8)
        self[self.STATE_BYTES] = len(data)
        self[self.STATE_VERSION] = self[self.STATE_VERSION] + 1

    def get_state(self):
        n = self[self.STATE_BYTES]
        return _json.loads(bytes(self.state[:n].numpy())) if n else None


def _sources(volumes):
    """[(path, weight)] from a path, a list of paths or of (path, weight)."""
    if isinstance(volumes, (str, bytes)) or hasattr(volumes, "__fspath__"):
        volumes = [volumes]
    out = []
    for v in volumes:
        if isinstance(v, (tuple, list)):
            if len(v) != 2:
                raise ValueError(f"a source is a path or (path, weight), not {v!r}")
            path, weight = v
        else:
            path, weight = v, 1.0
        out.append((str(path.__fspath__() if hasattr(path, "__fspath__") else path),
                    float(weight)))
    if not out:
        raise ValueError("TokenDataset needs at least one volume")
    return out


class TokenDataset(_tud.IterableDataset):
    """Batches of token windows from token volumes, for pretraining.

    volumes: a token volume (`dlfs pack` of a Megatron .bin/.idx pair or of
    token files; dlfs.Writer(tokens=...)), a list of them, or a list of
    (path, weight): a blend, each source drawn in proportion to its weight.
    Each item is one batch, a dict:
      "tokens"      (batch_size, seq_len + 1) int64 (dtype="int32" for
                    int32): inputs are tokens[:, :-1], targets tokens[:, 1:];
      "cu_seqlens"  int32, the starts of the documents in the flattened
                    inputs (batch_size * seq_len tokens), each row starting
                    one, then batch_size * seq_len: what variable-length
                    attention takes to keep documents from attending to
                    each other;
      "position_ids" (batch_size, seq_len), restarting at each document
                    (with position_ids=True);
      "sources"     int64, the source of each row (its index in `volumes`);
      "lengths"     (windows="document") the document's tokens in each row,
                    the rest being pad_id.
    windows="across" (default): documents back to back, cut every seq_len
    tokens into windows of seq_len + 1 (Megatron's GPTDataset);
    windows="document": one window per document, cut or padded.

    order="megatron": the windows Megatron-LM's GPTDataset/BlendedDataset
    (d98e8a6) give for the same seed, seq_len, split ("969,30,1"),
    split_name ("train", "valid", "test"), num_samples (what Megatron's
    builder asks of the split: train_iters x global batch size; 0: one
    epoch) and weights (given as (path, weight) pairs; plain paths are
    blended by their lengths, as Megatron without weights), in the same
    order; with pad_id=-1 a partial last window (drop_last_partial=False)
    is padded as Megatron pads it. It builds Megatron's per-window arrays
    at start, as Megatron does. The ranks split its stream as Megatron's
    sampler does (rank r takes the r-th batch_size of each global batch).

    The order: each source's windows by a keyed bijection per pass (seed),
    the sources interleaved by weight; the epoch is every source's windows
    once (epoch_windows= to set it). The global stream is the same for any
    number of ranks and DataLoader workers: global batch j is batch j of
    every rank (rank r taking the r-th batch_size windows), and batch j of
    a rank goes to worker j % num_workers, so the DataLoader hands batches
    out in stream order. The ranks: comm= (mpi4py), or rank= and
    world_size=, or found from the launcher (mpirun, srun, torchrun).

    direct_io: None (default) reads through the page cache when the
    sources' tokens fit in half of the memory the job may use, else with
    O_DIRECT; True or False forces it (description says which and why).

    Use it with DataLoader(ds, batch_size=None, num_workers=k); call
    set_epoch(e) before each epoch. state_dict(batches) after `batches`
    batches of the epoch (e.g. step + 1) and load_state_dict() resume the
    stream where it was, on any world size: each window is read once; with
    changed weights the sources continue where they were (docs/tokens.md).
    """

    def __init__(self, volumes, seq_len, batch_size, seed=0, *, shuffle=True, windows="across",
                 pad_id=0, epoch_windows=0, drop_last=False, verify=True, dtype="int64",
                 position_ids=False, pin_memory=False, comm=None, rank=None, world_size=None,
                 engine="auto", direct_io=None, order="dlfs", split="1", split_name="train", num_samples=0,
                 drop_last_partial=True):
        super().__init__()
        if order not in ("dlfs", "megatron"):
            raise ValueError(f"order must be 'dlfs' or 'megatron', not {order!r}")
        splits = ("train", "valid", "test")
        if split_name not in splits:
            raise ValueError(f"split_name must be one of {splits}, not {split_name!r}")
        # Megatron weighs a blend by --data-path weights when given, else by
        # the sources' lengths: weights given here as (path, weight) pairs.
        weighted = not (isinstance(volumes, (str, bytes)) or hasattr(volumes, "__fspath__")) and \
            any(isinstance(v, (tuple, list)) for v in volumes)
        if dtype not in ("int64", "int32"):
            raise ValueError(f"dtype must be 'int64' or 'int32', not {dtype!r}")
        job = _distributed.resolve(comm, rank, world_size)
        self.sources = _sources(volumes)
        self.seq_len = int(seq_len)
        self.batch_size = int(batch_size)
        self.rank, self.world_size = job.rank, job.world_size
        self.dtype = dtype
        self.position_ids = bool(position_ids)
        self.pin_memory = bool(pin_memory)
        self._args = dict(sources=self.sources, seq_len=self.seq_len, batch_size=self.batch_size,
                          seed=int(seed), shuffle=bool(shuffle), windows=windows,
                          pad_id=int(pad_id), epoch_windows=int(epoch_windows), rank=self.rank,
                          world_size=self.world_size, drop_last=bool(drop_last),
                          verify=bool(verify), engine=engine, direct_io=direct_io,
                          megatron=order == "megatron",
                          split=str(split), split_index=splits.index(split_name),
                          num_samples=int(num_samples), weighted=weighted,
                          drop_last_partial=bool(drop_last_partial))
        self._windows = windows
        self._loader = None
        self._loader_pid = None
        self._applied = 0  # the shared state version this process's loader resumed from
        self._shared = _Shared()
        self._taken = 0  # batches handed out by an iteration in this process
        self._loader_here()  # errors (a bad volume, seq_len) now, not in a worker

    def __getstate__(self):  # DataLoader workers build their own C++ loader
        d = dict(self.__dict__)
        d["_loader"] = None
        return d

    def _loader_here(self):
        if self._loader is None or self._loader_pid != _os.getpid():
            self._loader = _dlfs._TokenLoader(**self._args)
            self._loader_pid = _os.getpid()
            self._applied = 0
        version = self._shared[_Shared.STATE_VERSION]
        if version != self._applied:
            state = self._shared.get_state()
            if state is not None:
                self._loader.resume(state["stream"])
            self._applied = version
        return self._loader

    @property
    def epoch(self):
        return self._shared[_Shared.EPOCH]

    @property
    def description(self):
        """How windows are read and why: the page cache or O_DIRECT, the engine."""
        return self._loader_here().description

    @property
    def windows_per_epoch(self):
        """Windows of the global stream in an epoch (all ranks)."""
        return self._loader_here().windows_per_epoch

    def __len__(self):
        """This rank's batches in the epoch to come (from a restored position)."""
        return self._loader_here().batches_after(self._shared[_Shared.START])

    def set_epoch(self, epoch, discard_restored=False):
        """Sets the epoch the next iteration reads, in every worker. After
        load_state_dict() of a state taken in the middle of epoch E,
        set_epoch(E) keeps the restored position; another epoch raises
        ValueError unless discard_restored=True (which leaves the rest of E
        unread)."""
        epoch = int(epoch)
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, not {epoch}")
        s = self._shared
        if s[s.PENDING] and epoch != s[s.EPOCH]:
            if not discard_restored:
                raise ValueError(
                    f"set_epoch({epoch}): load_state_dict() restored a position in the middle "
                    f"of epoch {s[s.EPOCH]} (window {s[s.START]} of "
                    f"{self.windows_per_epoch}); call set_epoch({s[s.EPOCH]}) to finish it, or "
                    f"set_epoch({epoch}, discard_restored=True) to leave it unread")
        if epoch != s[s.EPOCH] or not s[s.PENDING]:
            s[s.START] = 0
            s[s.PENDING] = 0
        s[s.EPOCH] = epoch

    def __iter__(self):
        loader = self._loader_here()
        info = _tud.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        epoch, start = self._shared[_Shared.EPOCH], self._shared[_Shared.START]
        self._shared[_Shared.PENDING] = 0
        batches = loader.batches_after(start)
        if info is None:
            self._taken = 0
        dtype = _np.int64 if self.dtype == "int64" else _np.int32
        S = self.seq_len
        for b in range(worker, batches, workers):
            out = _np.empty((self.batch_size, S + 1), dtype=dtype)
            pos = _np.empty((self.batch_size, S), dtype=_np.int64) if self.position_ids else None
            meta = loader.read_batch(epoch, b, out, start, pos)
            tokens = _torch.from_numpy(out)
            if self.pin_memory and _torch.cuda.is_available():
                tokens = tokens.pin_memory()
            item = {"tokens": tokens, "cu_seqlens": _torch.from_numpy(meta["cu_seqlens"]),
                    "sources": _torch.from_numpy(meta["sources"].astype(_np.int64))}
            if pos is not None:
                item["position_ids"] = _torch.from_numpy(pos)
            if self._windows == "document":
                item["lengths"] = _torch.from_numpy(meta["lengths"].astype(_np.int64))
            if info is None:
                self._taken = b + 1
            yield item

    def state_dict(self, batches=None):
        """Where the stream stands after this rank's DataLoader handed out
        `batches` batches of the current iteration (since set_epoch(), or
        since the restored position after load_state_dict(); every rank the
        same number). batches=None: those an iteration in this process
        handed out (num_workers=0). A few hundred bytes plus 8 per source;
        the same on every rank."""
        if batches is None:
            batches = self._taken
        batches = int(batches)
        s = self._shared
        loader = self._loader_here()
        epoch, start = s[s.EPOCH], s[s.START]
        if batches < 0 or batches > loader.batches_after(start):
            raise ValueError(f"state_dict(batches={batches}): the epoch has "
                             f"{loader.batches_after(start)} batches here")
        consumed = min(start + batches * self.batch_size * self.world_size,
                       loader.windows_per_epoch)
        return {"format": _STATE_FORMAT, "seq_len": self.seq_len,
                "seed": self._args["seed"], "windows": self._windows,
                "stream": loader.state_at(epoch, consumed)}

    def load_state_dict(self, state):
        """Resumes the stream from state_dict()'s result (any world size,
        batch size or number of workers): the next iteration reads the rest
        of that epoch, then set_epoch(e + 1) goes on."""
        if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
            raise ValueError(f"not a TokenDataset state (format {_STATE_FORMAT!r} expected)")
        for key in ("seq_len", "seed", "windows"):
            mine = self.seq_len if key == "seq_len" else self._args[key] if key == "seed" \
                else self._windows
            if state.get(key) != mine:
                raise ValueError(f"cannot resume: the state has {key}={state.get(key)!r}, "
                                 f"this dataset {mine!r} (the windows would differ)")
        position = self._loader_here().resume(state["stream"])
        s = self._shared
        s.put_state(state)
        s[s.EPOCH] = int(state["stream"]["epoch"])
        s[s.START] = int(position)
        s[s.PENDING] = 1
        self._applied = s[s.STATE_VERSION]
