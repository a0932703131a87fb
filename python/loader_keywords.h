// The loader keywords of dlfs.Loader and dlfs.ImageLoader (the binding under
// dlfs.torch.ImageLoader), as Python gave them, and the one place they
// become LoaderOptions and the volumes to read. A new LoaderOptions keyword
// is a field here and its line in ResolveLoaderKeywords; each binding then
// names it in its signature (pybind11 spells every keyword out).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

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
  bool direct_io = false;
  bool verify_checksums = false;
  bool coalesce = false;
  std::optional<std::vector<uint64_t>> indices;  // the subset; None: every sample
  std::optional<uint64_t> cache_budget;          // None: LoaderOptions' default
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
};

// What a loader is made of: its volumes (one, or the mixture's in order),
// the mixture's options when `volume` was a list, and the loader's options.
struct LoaderSetup {
  std::vector<std::shared_ptr<Volume>> volumes;
  std::optional<MixtureOptions> mixture;
  LoaderOptions options;
};

// Opens the volumes given as paths and maps every keyword onto
// LoaderOptions; call it holding the GIL. Throws as the bindings do
// (status_bridge.h): OSError or CorruptVolumeError for a volume, ValueError
// for an unknown engine or mixture keywords given with one volume.
LoaderSetup ResolveLoaderKeywords(LoaderKeywords k);

}  // namespace dlfs::python
