"""What dlfs.torch and dlfs.torch_image share (private; dlfs.torch
re-exports distributed_rank_world). Importing neither of them keeps the
two free of an import circle."""
import os as _os

from . import _dlfs


def distributed_rank_world():
    """(rank, world_size) of this process as dlfs's loaders see it
    (dlfs.distributed.job(): MPI, torch.distributed, the launcher's
    variables, else (0, 1))."""
    from . import distributed

    job = distributed.job()
    return job.rank, job.world_size


def make_pipeline(decode):
    """An ImagePipeline from `decode`: one already, or a dict of its keywords."""
    if isinstance(decode, _dlfs.ImagePipeline):
        return decode
    if isinstance(decode, dict):
        return _dlfs.ImagePipeline(**decode)
    raise TypeError(f"decode must be a dlfs.ImagePipeline or a dict of its keywords, "
                    f"not {type(decode).__name__}")
