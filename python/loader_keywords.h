// The loader keywords of dlfs.Loader and dlfs.ImageLoader (the binding under
// dlfs.torch.ImageLoader): declared once for both constructors
// (DefLoaderInit), gathered in LoaderKeywords, and turned into LoaderOptions
// and the volumes to read in one place (ResolveLoaderKeywords). A new
// LoaderOptions keyword is a field of LoaderKeywords, its parameter and
// pybind11 argument in DefLoaderInit, and its line in ResolveLoaderKeywords.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distributed.h"
#include "dlfs/io_engine.h"
#include "dlfs/loader.h"
#include "dlfs/mixture.h"
#include "dlfs/volume.h"

namespace dlfs::python {

struct LoaderKeywords {
  // A path or a Volume; a list or tuple of them is a weighted mixture.
  pybind11::object volume;
  uint32_t batch_size = 0;
  bool shuffle = false;
  uint64_t seed = 0;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  bool drop_last = false;
  uint32_t prefetch_batches = 0;
  uint32_t queue_depth = 0;
  uint32_t io_threads = 0;
  std::string engine;  // a name of kEngineKindNames
  // None: O_DIRECT unless samples are much smaller than a block
  // (LoaderOptions::auto_direct_io); True or False: as said.
  std::optional<bool> direct_io;
  bool verify_checksums = false;
  bool coalesce = false;
  // The subset: a range (step 1: nothing per sample), a sequence of
  // indices, or None: every sample.
  pybind11::object indices = pybind11::none();
  // None: LoaderOptions' default; bytes (an int) or ParseByteBudget's text.
  pybind11::object cache_budget = pybind11::none();
  std::optional<std::vector<std::string>> fields;
  bool cache_shared = false;
  bool skip_bad_samples = false;
  uint32_t max_bad_samples = 0;
  // Samples to leave out: indices, or the records of `dlfs verify --json` /
  // quarantine() (dicts with an "index").
  pybind11::object quarantine = pybind11::none();
  // Of a mixture only (ValueError with one volume).
  std::optional<std::vector<double>> weights;  // None: equal
  uint64_t epoch_samples = 0;
  bool cycle = false;
  // The job (distributed.h): an MPI communicator, or None (one process, or
  // ranks that share by rank/world_size and the node's regions).
  pybind11::object comm = pybind11::none();
  ShardKeywords shard;
  // Targets elsewhere than target 0's table says: {t: path} or the CLI's
  // "1=PATH,2=PATH"; None: as recorded.
  pybind11::object target_map = pybind11::none();
  std::string directory;  // a name of kDirectorySharingNames
  std::string node_name;  // VolumeOpenOptions::node_name
  uint32_t epochs = 0;    // LoaderOptions::planned_epochs
};

// What a loader is made of: its volumes (one, or the mixture's in order),
// the mixture's options when `volume` was a list, and the loader's options.
struct LoaderSetup {
  std::vector<std::shared_ptr<Volume>> volumes;
  std::optional<MixtureOptions> mixture;
  LoaderOptions options;
  std::shared_ptr<const MpiJob> job;  // comm=: the volumes were opened collectively
  ShardKeywords shard;
};

// indices= as a SampleSubset: None, every sample; a range of step 1, that
// range; else a sequence of indices (an empty one: every sample).
// ValueError for a range below 0, TypeError for what is no sequence of them.
SampleSubset SubsetFromPython(const pybind11::object& indices);

// Opens the volumes given as paths (collectively with comm=) and maps every
// keyword onto LoaderOptions; call it holding the GIL. Throws as the
// bindings do (status_bridge.h): OSError or CorruptVolumeError for a
// volume, ValueError for an unknown engine or mixture keywords given with
// one volume, or shard_local/cluster_cache without comm=.
LoaderSetup ResolveLoaderKeywords(LoaderKeywords k);

// The source `setup` describes: one Loader, a MixtureSource of its volumes,
// or with comm= what MakeMpiSource makes (collectively); `parts` says what
// it is made of. Throws as ResolveLoaderKeywords.
std::unique_ptr<BatchSource> MakeSource(LoaderSetup setup, SourceParts* parts);

// Defines `cls`'s constructor: (volume, batch_size, the loader keywords,
// then the class's own keywords `own`, pybind11 arguments of types Own...),
// which calls make(LoaderKeywords, Own...) and returns what it returns.
// Every loader keyword's default comes from LoaderOptions.
template <typename... Own, typename Class, typename Make, typename... OwnArgs>
void DefLoaderInit(Class& cls, Make make, OwnArgs... own) {
  namespace py = pybind11;
  static const LoaderOptions d;
  static const ShardLoaderOptions ds;
  static const VolumeOpenOptions dv;
  cls.def(
      py::init([make](py::object volume, uint32_t batch_size, bool shuffle, uint64_t seed,
                      uint32_t rank, uint32_t world_size, bool drop_last, uint32_t prefetch_batches,
                      uint32_t queue_depth, uint32_t io_threads, std::string engine,
                      std::optional<bool> direct_io, bool verify_checksums, bool coalesce,
                      py::object indices, py::object cache_budget, bool cache_shared,
                      bool skip_bad_samples, uint32_t max_bad_samples, py::object quarantine,
                      std::optional<std::vector<double>> weights, uint64_t epoch_samples,
                      bool cycle, py::object comm, bool shard_local, bool cluster_cache,
                      uint32_t window_batches, bool read_ahead, py::object target_map,
                      std::string directory, std::string node_name, uint32_t epochs,
                      Own... own_values) {
        return make(LoaderKeywords{.volume = std::move(volume),
                                   .batch_size = batch_size,
                                   .shuffle = shuffle,
                                   .seed = seed,
                                   .rank = rank,
                                   .world_size = world_size,
                                   .drop_last = drop_last,
                                   .prefetch_batches = prefetch_batches,
                                   .queue_depth = queue_depth,
                                   .io_threads = io_threads,
                                   .engine = std::move(engine),
                                   .direct_io = direct_io,
                                   .verify_checksums = verify_checksums,
                                   .coalesce = coalesce,
                                   .indices = std::move(indices),
                                   .cache_budget = std::move(cache_budget),
                                   .cache_shared = cache_shared,
                                   .skip_bad_samples = skip_bad_samples,
                                   .max_bad_samples = max_bad_samples,
                                   .quarantine = std::move(quarantine),
                                   .weights = std::move(weights),
                                   .epoch_samples = epoch_samples,
                                   .cycle = cycle,
                                   .comm = std::move(comm),
                                   .shard = {.shard_local = shard_local,
                                             .options = {.window_batches = window_batches,
                                                         .read_ahead = read_ahead,
                                                         .cluster_cache = cluster_cache}},
                                   .target_map = std::move(target_map),
                                   .directory = std::move(directory),
                                   .node_name = std::move(node_name),
                                   .epochs = epochs},
                    std::move(own_values)...);
      }),
      py::arg("volume"), py::arg("batch_size"), py::arg("shuffle") = d.sampler.shuffle,
      py::arg("seed") = d.sampler.seed, py::arg("rank") = d.sampler.rank,
      py::arg("world_size") = d.sampler.world_size, py::arg("drop_last") = d.sampler.drop_last,
      py::arg("prefetch_batches") = d.prefetch_batches,
      py::arg("queue_depth") = d.engine.queue_depth, py::arg("io_threads") = d.io_threads,
      py::arg("engine") = std::string(EngineKindName(d.engine.kind)),
      py::arg("direct_io") = py::none(), py::arg("verify_checksums") = d.verify_checksums,
      py::arg("coalesce") = d.plan.coalesce, py::arg("indices") = py::none(),
      py::arg("cache_budget") = py::none(), py::arg("cache_shared") = d.cache_shared,
      py::arg("skip_bad_samples") = d.skip_bad_samples,
      py::arg("max_bad_samples") = d.max_bad_samples, py::arg("quarantine") = py::none(),
      py::arg("weights") = py::none(), py::arg("epoch_samples") = 0, py::arg("cycle") = false,
      py::arg("comm") = py::none(), py::arg("shard_local") = false,
      py::arg("cluster_cache") = ds.cluster_cache, py::arg("window_batches") = ds.window_batches,
      py::arg("read_ahead") = ds.read_ahead, py::arg("target_map") = py::none(),
      py::arg("directory") = std::string(NameOf(kDirectorySharingNames, dv.directory_sharing)),
      py::arg("node_name") = dv.node_name, py::arg("epochs") = d.planned_epochs, std::move(own)...);
}

}  // namespace dlfs::python
