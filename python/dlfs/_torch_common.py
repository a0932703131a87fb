"""What dlfs.torch and dlfs.torch_image share (private; dlfs.torch
re-exports distributed_rank_world). Importing neither of them keeps the
two free of an import circle."""
import os as _os

from . import _dlfs


def distributed_rank_world():
    """(rank, world_size) from torch.distributed when initialised, else the
    RANK / WORLD_SIZE environment variables (set by torchrun), else (0, 1)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(_os.environ.get("RANK", 0)), int(_os.environ.get("WORLD_SIZE", 1))


def make_pipeline(decode):
    """An ImagePipeline from `decode`: one already, or a dict of its keywords."""
    if isinstance(decode, _dlfs.ImagePipeline):
        return decode
    if isinstance(decode, dict):
        return _dlfs.ImagePipeline(**decode)
    raise TypeError(f"decode must be a dlfs.ImagePipeline or a dict of its keywords, "
                    f"not {type(decode).__name__}")
