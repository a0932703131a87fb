"""dlfs.torch.ImageLoader: batches of decoded, augmented images as torch
tensors, decoded and augmented in C++ on the loader's own threads.

    import dlfs.torch
    loader = dlfs.torch.ImageLoader("train.dlfs", 256, size=224, crop="random-resized",
                                    flip=True, dtype="float32", layout="NCHW",
                                    mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    for epoch in range(90):
        loader.set_epoch(epoch)
        for images, labels in loader:      # torch tensors; images over the loader's buffer
            ...

Re-exported by dlfs.torch; see ImageLoader's docstring.
"""
import os as _os

import torch as _torch

from . import _dlfs
from . import _keywords
from . import distributed as _distributed
from ._torch_common import make_pipeline  # noqa: F401 (part of this module's API)

__all__ = ["ImageLoader", "make_pipeline"]

# Keywords of dlfs.ImagePipeline beyond the ones ImageLoader names itself.
_PIPELINE_KEYS = {"resize", "color", "format", "raw_shape", "max_pixels", "dct_scaling", "scale",
                  "ratio"}
# Keywords of the C++ loader (the table of loader options, which declares
# them) and the decode stage: those of the binding's signature, less the ones
# ImageLoader sets itself or does not take.
_LOADER_KEYS = set(_keywords.parameters(_dlfs.ImageLoader.__init__) or ()) - {
    "volume", "batch_size", "pipeline", "indices", "node_name", "fields"}


# ImageLoader's own keywords (for suggestions).
_OWN_KEYS = ("size", "crop", "flip", "dtype", "layout", "mean", "std", "seed", "shuffle", "rank",
             "world_size", "comm", "root", "decode_threads", "return_indices", "return_sources")


class _Stats(dict):
    """ImageLoader.stats: call it for the dict (as dlfs.Loader.stats()); used
    as the dict itself it warns, for one release."""

    def __call__(self):
        return dict(self)

    def _warn(self):
        import warnings
        warnings.warn("ImageLoader.stats is a method, as dlfs.Loader.stats(): call it "
                      "(loader.stats()); reading it as a dict goes in the next release",
                      DeprecationWarning, stacklevel=3)

    def __getitem__(self, key):
        self._warn()
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        self._warn()
        return dict.get(self, key, default)


class ImageLoader:
    """Iterable of (images, labels) torch tensors for this rank, one epoch per
    iteration: the C++ loader reads the samples (io_uring, read ahead) and a
    pool of decode_threads C++ threads decodes (JPEG, PNG or raw pixels) and
    transforms them into one tensor per batch, without the GIL.

    ImageLoader(volume, batch_size, *, size, crop="center"|"random-resized",
                flip=False, dtype="uint8"|"float32", layout="NHWC"|"NCHW",
                mean=None, std=None, seed=0, shuffle=True, rank=None,
                world_size=None, comm=None, root=None, decode_threads=None,
                **loader_options)

    - size: output images are size x size. crop="center" is torchvision's
      Resize(resize, default size) + CenterCrop(size); "random-resized" is
      RandomResizedCrop(size) (scale=(0.08, 1), ratio=(3/4, 4/3) by default;
      pass scale=/ratio= to change). flip: RandomHorizontalFlip(0.5).
    - dtype "uint8" gives the pixels; "float32" gives ToTensor() values,
      normalised by mean/std (per channel, in [0, 1] units) when given.
      layout: per image H, W, C ("NHWC") or C, H, W ("NCHW").
    - Random choices are a pure function of (seed, epoch, sample index): the
      same batches come out whatever decode_threads is.
    - rank, world_size: this process's share; left out, found from the
      launcher (dlfs.distributed: mpirun and srun through MPI, torchrun,
      torch.distributed), or comm= (an mpi4py communicator). Under MPI the
      loader is made collectively (one metadata read for the job, one
      directory copy per node; shard_local=True and cluster_cache=True as
      dlfs.Loader's). Every rank gets the same number of batches (see
      dlfs.Loader on padding and drop_last). epoch_stats() says per epoch
      where the bytes came from.
    - root: only the samples under this directory of the volume.
    - decode_threads: default one per core.
    - loader_options: color ("auto", "rgb", "gray"), resize, format
      ("auto", "jpeg", "png", "raw"), raw_shape=(H, W[, C]) or "HxW[xC]"
      (as --raw-shape) for raw samples,
      max_pixels, dct_scaling, scale, ratio, skip_bad_samples (leave
      unreadable, corrupt or undecodable samples out of their batch, count
      them in stats() and list them in quarantine(), instead of raising;
      max_bad_samples and quarantine= as dlfs.Loader's), decode_prefetch (batches queued for decoding),
      return_indices (yield (images, labels, indices)), return_sources (add
      each image's volume: its position in a list of volumes), and dlfs.Loader's
      drop_last, prefetch_batches, queue_depth, io_threads, engine,
      direct_io, verify_checksums, coalesce, cache_budget, cache_shared (the
      node cache); field="jpg" decodes that field of
      each sample (format v2 volumes whose samples have several or
      compressed fields need it; one field only: labels come from the
      volume).

    images is a writable tensor over the loader's batch buffer (no copy); the
    buffer is recycled once the tensor (and every view of it) is gone.
    A sample that cannot be decoded raises ValueError naming the volume, the
    sample's index and path, and the problem. Call set_epoch(e) before each
    epoch; len() is the number of batches per epoch for this rank.

    volume may be a list of volumes: a weighted mixture (weights=,
    epoch_samples=, cycle= as dlfs.Loader's; classes are the first volume's).

    Resuming: state_dict() / load_state_dict(state) as dlfs.Loader's; a state
    saved at another world size or batch size resumes the rest of its epoch
    split among this job's ranks (see "Long runs" in the README).
    """

    def __init__(self, volume, batch_size, *, size, crop="center", flip=False, dtype="uint8",
                 layout="NHWC", mean=None, std=None, seed=0, shuffle=True, rank=None,
                 world_size=None, comm=None, root=None, decode_threads=None, **loader_options):
        self.return_indices = bool(loader_options.pop("return_indices", False))
        self.return_sources = bool(loader_options.pop("return_sources", False))
        _keywords.check("dlfs.torch.ImageLoader", loader_options,
                        _PIPELINE_KEYS | _LOADER_KEYS | set(_OWN_KEYS))
        pipe_kw = {k: loader_options.pop(k) for k in list(loader_options) if k in _PIPELINE_KEYS}
        self.pipeline = _dlfs.ImagePipeline(size, crop=crop, flip=flip, dtype=dtype,
                                            layout=layout, mean=mean, std=std, seed=seed,
                                            **pipe_kw)
        job = _distributed.resolve(comm, rank, world_size)
        self.job = job
        self.rank, self.world_size = job.rank, job.world_size

        def open_volume(v):
            if isinstance(v, _dlfs.Volume):
                return v
            return _dlfs.Volume(_os.fspath(v), comm=job.comm if job.mpi else None,
                                shard_local=bool(loader_options.get("shard_local")),
                                target_map=loader_options.get("target_map"),
                                directory=loader_options.get("directory") or
                                ("node" if job.distributed else "private"),
                                node_name=job.node_name)

        mixture = isinstance(volume, (list, tuple))
        if mixture:
            volume = [open_volume(v) for v in volume]
            if root:
                raise ValueError("ImageLoader: root selects samples of one volume, not of a "
                                 "mixture")
        vol = volume[0] if mixture else open_volume(volume)
        self.volume = volume if mixture else vol
        self.classes = vol.classes
        indices = vol.samples_under(root) if root else None  # a range when contiguous
        if decode_threads is not None:
            loader_options["decode_threads"] = decode_threads
        self._loader = _dlfs.ImageLoader(volume if mixture else vol, batch_size,
                                         pipeline=self.pipeline, shuffle=shuffle,
                                         seed=seed, indices=indices,
                                         **{**job.loader_keywords(), **loader_options})
        if job.mpi:
            _distributed.track(self._loader)
        self.batch_size = batch_size

    def set_epoch(self, epoch, discard_restored=False):
        """Sets the epoch the next iteration reads. After load_state_dict() of a
        state taken in the middle of epoch E, set_epoch(E) keeps the position;
        another epoch raises ValueError unless discard_restored=True."""
        self._loader.set_epoch(epoch, discard_restored=discard_restored)

    @property
    def epoch(self):
        return self._loader.epoch

    def __len__(self):
        return len(self._loader)

    def __iter__(self):
        for images, labels, indices, sources in self._loader:
            out = (_torch.from_numpy(images), _torch.from_numpy(labels))
            if self.return_indices:
                out += (_torch.from_numpy(indices),)
            if self.return_sources:
                out += (_torch.from_numpy(sources),)
            yield out

    def quarantine(self):
        """Samples left out under skip_bad_samples (unreadable, failed checksum,
        undecodable): [{volume, index, path, reason}]."""
        return self._loader.quarantine()

    def epoch_stats(self):
        """Per epoch: samples and where their bytes came from (dlfs.Loader.epoch_stats())."""
        return self._loader.epoch_stats()

    def close(self):
        """Stops the loader's threads and frees its buffers now."""
        self._loader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def state_dict(self):
        """Where the iteration is (a dict of ints, bools and strings), as
        dlfs.Loader.state_dict(); images decoded ahead do not count."""
        return self._loader.state_dict()

    def load_state_dict(self, state):
        """Continues from a state_dict(); set_epoch(state["epoch"]) keeps the
        position (another epoch raises ValueError while the restored epoch is
        unfinished: see set_epoch). ValueError naming what differs for another
        volume or order."""
        self._loader.load_state_dict(state)

    @property
    def stats(self):
        """stats(): where the time went and what was decoded, over the loader's
        life, as dlfs.Loader.stats() (a method there too). Read as an
        attribute (loader.stats["images"], as before issue 41) it is the same
        dict, with a DeprecationWarning: that form goes in the next release."""
        return _Stats(self._loader.stats)

    @property
    def decode_threads(self):
        return self._loader.decode_threads

    @property
    def channels(self):
        """Output channels (1 or 3); 0 before the first batch with color="auto"."""
        return self._loader.channels

    @property
    def description(self):
        return self._loader.description

    @property
    def indices(self):
        """This rank's sample indices for the current epoch, in reading order."""
        return self._loader.indices
