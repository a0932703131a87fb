"""How dlfs.torch's datasets hand batches from DataLoader workers to the main
process through shared memory (private; dlfs.torch_volume and
dlfs.torch_loader use it): a worker copies a batch into a slot of memory it
owns (dlfs._dlfs._SharedSlots) and pickles only where the samples are; the
main process maps the slot and gets zero-copy tensors (see
_SharedLoaderBatch for why), in the form the default batch_transform gives.
"""
import numpy as _np
import torch as _torch

from . import _dlfs


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
