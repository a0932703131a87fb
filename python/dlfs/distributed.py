"""How a dlfs loader takes part in a distributed job.

dlfs.Loader, dlfs.torch.LoaderDataset and dlfs.torch.ImageLoader find the
job themselves; job() says what they found:

    import dlfs.distributed
    print(dlfs.distributed.job())   # Job(launcher='mpi', rank=3, world_size=4, ...)

In this order:

- comm=: an mpi4py communicator; its ranks read the epoch (MPI).
- rank= and world_size= given: exactly those (nothing is detected).
- MPI already initialized (mpi4py imported, say): MPI_COMM_WORLD.
- Started by mpirun, or by srun with PMIx (``srun --mpi=pmix``): dlfs
  initializes MPI (and finalizes it at exit unless something else does)
  and uses MPI_COMM_WORLD.
- torch.distributed initialized: its rank and world size.
- A launcher's variables (torchrun; srun without PMIx; MPICH's Hydra;
  MVAPICH; RANK and WORLD_SIZE set by hand): dlfs.launch_info() has the
  details, including variables ignored because they lie under another
  launcher (SLURM_PROCID under mpirun, say).
- Otherwise one process, exactly as before.

Under MPI a loader is made collectively: every rank of the communicator
makes it, in the same order (a loader only some ranks make — evaluation on
rank 0, say — takes rank=0, world_size=1, which detects nothing). What each
gets: under MPI one rank reads the volume's metadata for the whole job and
each node keeps one copy of the directory; the ranks check
that they read the same permutation; shard_local= and cluster_cache= move
samples between nodes; errors are collective (every rank raises the same
one); and an uncaught exception on one rank aborts the job (MPI_Abort)
instead of leaving the others waiting. Without MPI every process opens the
volume itself, but the processes of a node still share one copy of the
directory (a region in /dev/shm, dlfs/volume.h's DirectorySharing) and
one node cache; shard_local and cluster_cache raise, saying how to launch.
The order is the same permutation either way. DataLoader workers never
talk MPI: they read their share of their rank's samples and attach the
node's directory and cache.

DLFS_RANKS_PER_NODE=K splits one machine into "nodes" of K processes, for
trying multi-node behaviour (docs/deploy.md).
"""
import atexit as _atexit
import dataclasses as _dataclasses
import os as _os
import sys as _sys
import warnings as _warnings
import weakref as _weakref

from . import _dlfs

__all__ = ["Job", "job", "launch_info", "init_process_group"]


@_dataclasses.dataclass(frozen=True)
class Job:
    """This process's place in the job, as dlfs's loaders see it.

    launcher: "mpi" (comm= or MPI_COMM_WORLD), "torch.distributed", a
        launcher's name ("torchrun", "srun", "hydra", "mvapich",
        "environment"), "explicit" (rank=/world_size= given) or "none".
    rank, world_size: the shard this process reads.
    local_rank, local_world_size: among the processes of its node.
    node: the node's index (-1: not known without MPI or a launcher that says).
    node_name: what tells its fake node's shared regions apart
        (DLFS_RANKS_PER_NODE), else "".
    mpi: loaders use MPI (collective open, exchange between nodes).
    notes: what detection saw and did not use, and why.
    """

    launcher: str
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node: int = -1
    node_name: str = ""
    mpi: bool = False
    notes: tuple = ()
    comm: object = _dataclasses.field(default=None, compare=False, repr=False)

    @property
    def distributed(self):
        """More than one process reads the epoch."""
        return self.world_size > 1

    def loader_keywords(self):
        """The keywords of dlfs's C++ loaders for this process."""
        out = {"rank": self.rank, "world_size": self.world_size,
               "directory": "node" if self.distributed else "private",
               "node_name": self.node_name}
        if self.mpi:
            out["comm"] = self.comm
        return out

    def __getstate__(self):  # DataLoader workers get the layout, not the communicator
        state = dict(self.__dict__)
        state["comm"] = None
        return state

    def __setstate__(self, state):
        for k, v in state.items():
            object.__setattr__(self, k, v)


def launch_info():
    """How this process was started, from the launchers' variables (a dict:
    launcher, rank, world_size, local_rank, local_world_size, node,
    mpi_launch, notes, description). ValueError naming a malformed variable."""
    return _dlfs._launch_info()


def job(comm=None):
    """The job dlfs's loaders see from this process (see the module's doc).
    Under an MPI launcher this initializes MPI, as a loader would."""
    return resolve(comm)


def init_process_group(backend=None, **kwargs):
    """torch.distributed.init_process_group for this job, under any launcher:
    the rank and world size dlfs found (job()), and a rendezvous that works
    without torchrun: MASTER_ADDR/MASTER_PORT when set (torchrun sets
    them), else under MPI rank 0's host name and a free port, broadcast
    over MPI. backend: "nccl" where CUDA is available, else "gloo".
    Does nothing when torch.distributed is initialized already; returns the
    Job. Without MPI and without MASTER_ADDR it raises ValueError saying what
    to set."""
    import torch
    import torch.distributed as dist

    found = job()
    if dist.is_initialized():
        return found
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if "MASTER_ADDR" in _os.environ and "MASTER_PORT" in _os.environ:
        init = "env://"
    elif found.mpi:
        address = ""
        if found.rank == 0:
            import socket

            with socket.socket() as s:  # a port free now; the store binds it next
                s.bind(("", 0))
                address = f"tcp://{socket.getfqdn()}:{s.getsockname()[1]}"
        init = _dlfs._mpi_bcast(found.comm, address, 0)
    elif found.world_size == 1:
        import tempfile

        init = "file://" + _os.path.join(tempfile.mkdtemp(prefix="dlfs-pg-"), "store")
    else:
        raise ValueError(f"dlfs.distributed.init_process_group: {found.launcher} gives no "
                         "rendezvous: set MASTER_ADDR and MASTER_PORT (rank 0's host and a "
                         "free port), or launch with torchrun, mpirun or `srun --mpi=pmix`")
    dist.init_process_group(backend, init_method=init, rank=found.rank,
                            world_size=found.world_size, **kwargs)
    return found


# --- resolution -------------------------------------------------------------

_resolved = None      # the job found without arguments, once per process
_pid = None           # ... in this process (not a fork's parent)
_mpi_ours = False     # MPI was initialized by dlfs
_failed = False       # an uncaught exception is on its way out
_live = _weakref.WeakSet()  # loaders holding MPI resources, closed before MPI_Finalize


def resolve(comm=None, rank=None, world_size=None):
    """The Job for a loader given comm=, rank= and world_size= (None: detect)."""
    if comm is not None:
        if rank is not None or world_size is not None:
            raise ValueError("comm= gives the rank and world size: leave rank= and "
                             "world_size= out")
        return _mpi_job(comm, "mpi")
    if rank is not None or world_size is not None:
        # (The loaders check them, in their own words.)
        rank = 0 if rank is None else int(rank)
        world_size = 1 if world_size is None else int(world_size)
        # As if on one node (DLFS_RANKS_PER_NODE then splits it by rank).
        return _with_fake_node(Job("explicit", rank, world_size, rank, max(world_size, 1)))
    # An MPI job is found once per process (it holds a communicator); the
    # launchers' variables are read afresh each time.
    global _resolved, _pid
    if _resolved is not None and _pid == _os.getpid():
        return _resolved
    found = _detect()
    if found.mpi:
        _resolved, _pid = found, _os.getpid()
    return found


def _detect():
    info = launch_info()
    notes = tuple(info["notes"])
    if _dlfs._mpi_built:
        state = _dlfs._mpi_state()
        # One process (mpirun -np 1, or mpi4py imported in a notebook) reads
        # as one process always has; a PMIx launch that names no world size
        # needs MPI to tell.
        several = info["world_size"] > 1 or (info["launcher"] == "mpirun" and
                                             "OMPI_COMM_WORLD_SIZE" not in _os.environ)
        if state == "uninitialized" and info["mpi_launch"] and several:
            _init_mpi()
            state = "initialized"
        if state == "initialized" and _dlfs._mpi_world().size > 1:
            found = _mpi_job(_dlfs._mpi_world(), "mpi", notes)
            _check_torch_distributed(found)
            return found
    elif info["mpi_launch"]:
        notes += ("started by an MPI launcher, but this dlfs was built without MPI: ranks "
                  "from the launcher's variables",)
    dist = _torch_distributed()
    if dist is not None:
        rank, world = dist
        if info["launcher"] != "none" and info["world_size"] != world:
            _warnings.warn(f"dlfs: torch.distributed has {world} ranks, but "
                           f"{info['description']}: dlfs shards by torch.distributed's",
                           RuntimeWarning, stacklevel=3)
        local = info["local_rank"] if info["launcher"] != "none" else 0
        local_world = info["local_world_size"] if info["launcher"] != "none" else 1
        return _with_fake_node(Job("torch.distributed", rank, world, local, local_world,
                                   info["node"], notes=notes))
    return _with_fake_node(Job(info["launcher"], info["rank"], info["world_size"],
                               info["local_rank"], info["local_world_size"], info["node"],
                               notes=notes))


def _mpi_job(comm, launcher, notes=()):
    if not _dlfs._mpi_built:
        # (_dlfs raises the same from comm=; said here before anything is opened)
        raise ImportError("comm=: this dlfs was built without MPI (Debian: libopenmpi-dev "
                          "and liblmdb-dev at build time)")
    if not isinstance(comm, _dlfs._Comm) and not _is_mpi4py_comm(comm):
        raise TypeError("comm= takes an mpi4py communicator (e.g. MPI.COMM_WORLD), not "
                        f"{type(comm).__name__}")
    layout = _dlfs._mpi_job(comm)  # collective; ImportError without mpi4py
    _install_failure_handling()
    return Job(launcher, layout["rank"], layout["world_size"], layout["local_rank"],
               layout["local_world_size"], layout["node"], layout["node_name"], True,
               tuple(notes), comm)


def _is_mpi4py_comm(obj):
    try:
        from mpi4py import MPI
    except ImportError:
        raise ImportError("comm= takes an mpi4py communicator, and mpi4py is not installed "
                          "(Debian: python3-mpi4py); leave comm out to let dlfs find the job "
                          "from its launcher") from None
    return isinstance(obj, MPI.Comm)


def _torch_distributed():
    """(rank, world_size) of an initialized torch.distributed, else None."""
    dist = _sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size()


def _check_torch_distributed(found):
    dist = _torch_distributed()
    if dist is not None and dist[1] != found.world_size:
        _warnings.warn(f"dlfs: torch.distributed has {dist[1]} ranks and MPI {found.world_size}:"
                       " dlfs shards by MPI's", RuntimeWarning, stacklevel=4)


def _with_fake_node(found):
    """DLFS_RANKS_PER_NODE=K: processes local_rank // K share a fake node."""
    text = _os.environ.get("DLFS_RANKS_PER_NODE", "")
    if not text or not found.distributed:
        return found
    try:
        k = int(text)
    except ValueError:
        raise ValueError(f"DLFS_RANKS_PER_NODE='{text}' is not a rank count (a whole number "
                         ">= 0)") from None
    if k <= 0:
        return found
    local = found.local_rank
    node = local // k
    return _dataclasses.replace(found, node=node, node_name=f"-node{node}",
                                local_rank=local % k, local_world_size=k)


# --- MPI's life in this process ---------------------------------------------

def _init_mpi():
    global _mpi_ours
    _dlfs._mpi_init()
    _mpi_ours = True
    _atexit.register(_finalize_mpi)


def _finalize_mpi():
    """At exit: close dlfs's loaders (their communicators), then finalize MPI
    if dlfs initialized it; not after a failure (MPI_Abort ran, or the job
    is being torn down)."""
    for loader in list(_live):
        try:
            loader.close()
        except Exception:  # noqa: BLE001 (exiting: nothing to report to)
            pass
    if _mpi_ours and not _failed and _dlfs._mpi_state() == "initialized":
        _dlfs._mpi_finalize()


def track(loader):
    """Closes `loader` before MPI is finalized at exit (a loader made with MPI)."""
    _live.add(loader)
    return loader


_hooked = False


def _install_failure_handling():
    """An uncaught exception on one rank aborts the MPI job: the others would
    otherwise wait in a collective (the loader's, or DDP's) until a timeout."""
    global _hooked
    if _hooked:
        return
    _hooked = True
    previous = _sys.excepthook

    def abort_job(exc_type, exc, tb):
        global _failed
        _failed = True
        try:
            previous(exc_type, exc, tb)
        finally:
            if _dlfs._mpi_state() == "initialized" and _dlfs._mpi_world().size > 1:
                rank = _dlfs._mpi_world().rank
                _sys.stderr.write(f"dlfs: rank {rank} stopped with {exc_type.__name__}: {exc}; "
                                  "aborting the MPI job so that the other ranks do not wait "
                                  "for it\n")
                _sys.stderr.flush()
                _dlfs._mpi_abort(1)

    _sys.excepthook = abort_job
