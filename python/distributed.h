// The MPI side of the bindings (bind_distributed.cc): the communicator a
// comm= keyword names, the collective open, and the sources a loader made
// with comm= reads (a Loader, a MixtureSource or a ShardLoader, each made
// collectively). Without MPI at build time, comm= raises ImportError.
#pragma once

#include <pybind11/pybind11.h>

#include <functional>
#include <memory>
#include <string>

#include "dlfs/batch_source.h"
#include "dlfs/loader.h"
#include "dlfs/mixture.h"
#include "dlfs/shard_options.h"
#include "dlfs/volume.h"

namespace dlfs::python {

// A communicator and this rank's place on its node (defined with MPI).
struct MpiJob;

// The job comm= names: a dlfs.distributed communicator (what dlfs's launch
// detection makes) or an mpi4py one (taken through mpi4py's C API, or its
// Fortran handle where the build found no mpi4py header). Holds the GIL.
// ImportError naming python3-mpi4py when mpi4py is missing, or naming
// libopenmpi-dev when dlfs was built without MPI; TypeError for other
// objects. Collective over the communicator (it learns the node layout).
std::shared_ptr<const MpiJob> MpiJobFrom(const pybind11::handle& comm);

// Collective: the volume opened once for the job (OpenShared); with
// shard_local only this node's targets (and target 0). Throws as
// status_bridge.h, the same error on every rank.
std::shared_ptr<Volume> OpenCollectively(const MpiJob& job, const std::string& path,
                                         VolumeOpenOptions options, bool shard_local);

// How a loader made with comm= reads: a Loader, or a ShardLoader reading
// node-local targets (shard_local) or through the cluster cache
// (options.cluster_cache), with options' window_batches and read_ahead
// (options.loader is ignored: the loader keywords give it).
struct ShardKeywords {
  bool shard_local = false;
  ShardLoaderOptions options;
  bool sharded() const { return shard_local || options.cluster_cache; }
};

// The pieces of a source the bindings look into.
struct SourceParts {
  std::vector<Loader*> loaders;  // each volume's Loader (none for a ShardLoader)
  MixtureSource* mixture = nullptr;
  // A ShardLoader's counters as a dict (ShardLoaderStats' fields), or
  // empty; and its quarantine records.
  std::function<pybind11::dict()> shard_stats;
  std::function<std::vector<BadSample>()> shard_quarantine;
  std::function<std::vector<uint64_t>(uint64_t epoch)> shard_rank_indices;
};

// Collective: the source for one volume or a mixture (mixture set) under
// `job`: CreateLoader, CreateMixture or ShardLoader::Create; the same error
// on every rank.
std::unique_ptr<BatchSource> MakeMpiSource(const MpiJob& job,
                                           std::vector<std::shared_ptr<Volume>> volumes,
                                           const MixtureOptions* mixture,
                                           const LoaderOptions& options, const ShardKeywords& shard,
                                           SourceParts* parts);

void RegisterDistributed(pybind11::module_& m);

}  // namespace dlfs::python
