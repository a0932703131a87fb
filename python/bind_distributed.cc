// Python binding of how a job is launched (dlfs/launch.h) and of its MPI
// side: MPI's life in a Python process, the communicator comm= names, the
// collective open and the sources of loaders made with comm=. The policy —
// which launcher gets MPI, when to initialize and finalize it, aborting the
// job when a rank fails — is dlfs/distributed.py's; this file only does
// what needs C++.
#include "distributed.h"

#include <pybind11/stl.h>

#include <cstdio>
#include <utility>

#include "dlfs/launch.h"
#include "status_bridge.h"

#ifdef DLFS_PYTHON_MPI
#include <mpi.h>

#include "dlfs/distributed.h"
#include "dlfs/sampler.h"
#ifdef DLFS_HAVE_MPI4PY_H
#include <mpi4py/mpi4py.h>
#endif
#endif

namespace py = pybind11;

namespace dlfs::python {

namespace {

py::dict LaunchDict(const LaunchInfo& info) {
  py::dict d;
  d["launcher"] = std::string(NameOf(kLauncherNames, info.launcher));
  d["rank"] = info.rank;
  d["world_size"] = info.world_size;
  d["local_rank"] = info.local_rank;
  d["local_world_size"] = info.local_world_size;
  d["node"] = info.node;
  d["mpi_launch"] = info.mpi_launch;
  d["notes"] = info.notes;
  d["description"] = DescribeLaunch(info);
  return d;
}

}  // namespace

#ifdef DLFS_PYTHON_MPI

// A communicator of dlfs's own (a duplicate of the one given, so dlfs's
// collectives never mix with the caller's) and this rank's node.
struct MpiJob {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  int node_index = 0, node_count = 1, local_rank = 0, local_size = 1;
  std::string node_name;
  ~MpiJob() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
};

namespace {

// MPI_COMM_WORLD, or a communicator handed in, as a Python object.
struct PyComm {
  MPI_Comm comm = MPI_COMM_NULL;
};

MPI_Comm FromMpi4py(const py::handle& obj) {
  // mpi4py.MPI initializes MPI when imported, so it is imported only when
  // the caller holds one of its objects already.
  py::object mpi;
  try {
    mpi = py::module_::import("mpi4py.MPI");
  } catch (const py::error_already_set&) {
    throw py::import_error(
        "comm= takes an mpi4py communicator, and mpi4py is not installed (Debian: "
        "python3-mpi4py); leave comm out to let dlfs find the job from its launcher");
  }
  if (!py::isinstance(obj, mpi.attr("Comm"))) {
    throw py::type_error("comm= takes an mpi4py communicator (e.g. MPI.COMM_WORLD), not " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))));
  }
#ifdef DLFS_HAVE_MPI4PY_H
  static const bool imported = import_mpi4py() == 0;
  if (!imported) throw py::error_already_set();
  MPI_Comm* c = PyMPIComm_Get(obj.ptr());
  if (c == nullptr) throw py::error_already_set();
  return *c;
#else
  // Without mpi4py's header at build time: its Fortran handle, which MPI
  // converts back exactly.
  return MPI_Comm_f2c(obj.attr("py2f")().cast<MPI_Fint>());
#endif
}

void CheckMpiUsable() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    throw py::value_error(std::string("comm=: MPI is ") +
                          (finalized ? "finalized already" : "not initialized"));
  }
}

// The communicator `comm` names (not duplicated); MPI must be usable.
MPI_Comm CommOf(const py::handle& comm) {
  MPI_Comm given =
      py::isinstance<PyComm>(comm) ? comm.cast<const PyComm&>().comm : FromMpi4py(comm);
  CheckMpiUsable();
  return given;
}

}  // namespace

std::shared_ptr<const MpiJob> MpiJobFrom(const py::handle& comm) {
  MPI_Comm given = CommOf(comm);
  if (given == MPI_COMM_NULL) throw py::value_error("comm= is MPI.COMM_NULL");
  auto job = std::make_shared<MpiJob>();
  Status st;
  {
    py::gil_scoped_release release;
    int rc = MPI_Comm_dup(given, &job->comm);
    if (rc != MPI_SUCCESS) {
      st = MpiError(rc, "comm=: duplicating the communicator");
    } else {
      MPI_Comm_rank(job->comm, &job->rank);
      MPI_Comm_size(job->comm, &job->size);
      auto topo = NodeTopology::Create(job->comm);
      if (topo.ok()) {
        job->node_index = topo->node_index();
        job->node_count = topo->node_count();
        job->local_rank = topo->local_rank();
        job->local_size = topo->local_size();
        job->node_name = topo->node_name();
      } else {
        st = topo.status();
      }
    }
  }
  Check(st);
  return job;
}

std::shared_ptr<Volume> OpenCollectively(const MpiJob& job, const std::string& path,
                                         VolumeOpenOptions options, bool shard_local) {
  if (shard_local) options.open_only = ShardTargetsOfNode(job.node_index, job.node_count);
  Result<std::shared_ptr<Volume>> v = Status::Unavailable("not opened");
  SharedOpenStats stats;
  {
    py::gil_scoped_release release;
    v = OpenShared(job.comm, path, options, &stats);
  }
  std::shared_ptr<Volume> volume = Unwrap(std::move(v));
  if (!stats.note.empty() &&
      PyErr_WarnEx(PyExc_RuntimeWarning, ("dlfs: " + path + ": " + stats.note).c_str(), 1) != 0) {
    throw py::error_already_set();
  }
  return volume;
}

std::unique_ptr<BatchSource> MakeMpiSource(const MpiJob& job,
                                           std::vector<std::shared_ptr<Volume>> volumes,
                                           const MixtureOptions* mixture,
                                           const LoaderOptions& options, const ShardKeywords& shard,
                                           SourceParts* parts) {
  if (shard.sharded() && mixture != nullptr) {
    throw py::value_error(
        "shard_local and cluster_cache read one volume, not a mixture (a list of volumes)");
  }
  if (shard.shard_local && shard.options.cluster_cache) {
    throw py::value_error("shard_local and cluster_cache are two ways to read: choose one");
  }
  if (shard.sharded()) {
    ShardLoaderOptions so = shard.options;
    so.loader = options;
    Result<std::unique_ptr<ShardLoader>> made = Status::Unavailable("not made");
    {
      py::gil_scoped_release release;
      made = ShardLoader::Create(job.comm, volumes.front(), so);
    }
    std::unique_ptr<ShardLoader> loader = Unwrap(std::move(made));
    ShardLoader* raw = loader.get();
    parts->shard_stats = [raw] {
      const ShardLoaderStats& s = raw->stats();
      py::dict d;
      d["local_samples"] = s.local_samples;
      d["remote_samples"] = s.remote_samples;
      d["served_samples"] = s.served_samples;
      d["bytes_received"] = s.bytes_received;
      d["bytes_sent"] = s.bytes_sent;
      d["exchanges"] = s.exchanges;
      d["storage_bytes"] = s.storage_bytes;
      d["peer_bytes"] = s.peer_bytes;
      d["cached_samples"] = s.cached_samples;
      d["cached_bytes"] = s.cached_bytes;
      d["absent_samples"] = s.absent_samples;
      d["gifts_sent"] = s.gifts_sent;
      d["gifts_kept"] = s.gifts_kept;
      d["cache_capacity"] = s.cache_capacity;
      d["cache_used"] = s.cache_used;
      d["io_seconds"] = s.io_seconds;
      d["exchange_seconds"] = s.exchange_seconds;
      return d;
    };
    parts->shard_quarantine = [raw] { return raw->quarantine(); };
    // The order a Loader with these options reads (ShardLoader's batches
    // are byte-identical to its).
    LoaderOptions o = options;
    o.sampler.rank = static_cast<uint32_t>(job.rank);
    o.sampler.world_size = static_cast<uint32_t>(job.size);
    const uint64_t n = o.subset.Count(volumes.front()->size());
    auto sampler = std::make_shared<Sampler>(Unwrap(Sampler::Create(n, o.sampler)));
    parts->shard_rank_indices = [sampler, subset = o.subset](uint64_t epoch) {
      return sampler->RankIndices(epoch, subset);
    };
    return loader;
  }
  if (mixture != nullptr) {
    Result<std::unique_ptr<MixtureSource>> made = Status::Unavailable("not made");
    {
      py::gil_scoped_release release;
      made = CreateMixture(job.comm, volumes, *mixture, options);
    }
    std::unique_ptr<MixtureSource> m = Unwrap(std::move(made));
    for (size_t v = 0; v < volumes.size(); ++v) {
      parts->loaders.push_back(const_cast<Loader*>(&m->loader(v)));
    }
    parts->mixture = m.get();
    return m;
  }
  Result<std::unique_ptr<Loader>> made = Status::Unavailable("not made");
  Status agreed;
  {
    py::gil_scoped_release release;
    made = CreateLoader(job.comm, volumes.front(), options);
    // A Loader fails alone (memory, an engine): every rank raises it.
    agreed = AgreeOnStatus(job.comm, made.ok() ? Status::Ok() : made.status());
  }
  Check(agreed);
  std::unique_ptr<Loader> loader = Unwrap(std::move(made));
  parts->loaders.push_back(loader.get());
  return loader;
}

#else  // !DLFS_PYTHON_MPI

struct MpiJob {};

std::shared_ptr<const MpiJob> MpiJobFrom(const py::handle&) {
  throw py::import_error(
      "comm=: this dlfs was built without MPI (Debian: libopenmpi-dev and liblmdb-dev at "
      "build time)");
}

std::shared_ptr<Volume> OpenCollectively(const MpiJob&, const std::string&, VolumeOpenOptions,
                                         bool) {
  throw py::import_error("dlfs was built without MPI");
}

std::unique_ptr<BatchSource> MakeMpiSource(const MpiJob&, std::vector<std::shared_ptr<Volume>>,
                                           const MixtureOptions*, const LoaderOptions&,
                                           const ShardKeywords&, SourceParts*) {
  throw py::import_error("dlfs was built without MPI");
}

#endif  // DLFS_PYTHON_MPI

void RegisterDistributed(py::module_& m) {
  m.def(
      "_launch_info",
      [] {
        Result<LaunchInfo> info = DetectLaunch();
        return LaunchDict(Unwrap(std::move(info)));
      },
      "How this process was started (dlfs/launch.h), as a dict; ValueError naming a "
      "malformed variable.");
#ifdef DLFS_PYTHON_MPI
  m.attr("_mpi_built") = true;
  py::class_<PyComm>(m, "_Comm", "An MPI communicator dlfs's launch detection made.")
      .def_property_readonly("rank",
                             [](const PyComm& c) {
                               int r = 0;
                               MPI_Comm_rank(c.comm, &r);
                               return r;
                             })
      .def_property_readonly("size", [](const PyComm& c) {
        int s = 0;
        MPI_Comm_size(c.comm, &s);
        return s;
      });
  m.def("_mpi_state", [] {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    return std::string(finalized ? "finalized" : initialized ? "initialized" : "uninitialized");
  });
  m.def(
      "_mpi_init",
      [] {
        int provided = 0;
        int rc = 0;
        {
          py::gil_scoped_release release;
          // MULTIPLE, as mpi4py asks by default: Python threads may iterate
          // a loader, and the caller's own MPI calls may come from any thread.
          rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
        }
        if (rc != MPI_SUCCESS) throw py::value_error("MPI_Init_thread failed");
        return provided;
      },
      "Initializes MPI (MPI_THREAD_MULTIPLE); the level provided.");
  m.def("_mpi_finalize", [] {
    py::gil_scoped_release release;
    MPI_Finalize();
  });
  m.def(
      "_mpi_abort",
      [](int code) {
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code);
      },
      py::arg("code"));
  m.def("_mpi_world", [] {
    CheckMpiUsable();
    return PyComm{MPI_COMM_WORLD};
  });
  m.def(
      "_mpi_job",
      [](const py::object& comm) {
        std::shared_ptr<const MpiJob> job = MpiJobFrom(comm);
        py::dict d;
        d["rank"] = job->rank;
        d["world_size"] = job->size;
        d["local_rank"] = job->local_rank;
        d["local_world_size"] = job->local_size;
        d["node"] = job->node_index;
        d["nodes"] = job->node_count;
        d["node_name"] = job->node_name;
        return d;
      },
      py::arg("comm"),
      "Collective: this rank's place in the job of `comm` (a dict), as the loaders see it.");
  m.def(
      "_mpi_bcast",
      [](const py::object& comm, const std::string& text, int root) {
        MPI_Comm c = CommOf(comm);
        std::string out = text;
        {
          py::gil_scoped_release release;
          uint64_t n = out.size();
          MPI_Bcast(&n, 1, MPI_UINT64_T, root, c);
          out.resize(n);
          MPI_Bcast(out.data(), static_cast<int>(n), MPI_CHAR, root, c);
        }
        return out;
      },
      py::arg("comm"), py::arg("text"), py::arg("root") = 0,
      "Collective: `text` of rank `root`, on every rank (a short string).");
#else
  m.attr("_mpi_built") = false;
#endif
}

}  // namespace dlfs::python
