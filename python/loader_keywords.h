// The loader keywords of dlfs.Loader and dlfs.ImageLoader (the binding under
// dlfs.torch.ImageLoader): those of kLoaderKeywords and kLoaderOptions
// (dlfs_tools/loader_option_table.h), declared there once for both constructors
// and the CLI, made pybind11 arguments here (DefLoaderInit,
// option_keywords.h), and turned into
// LoaderOptions and the volumes to read in one place (ResolveLoaderKeywords),
// which converts the keywords that take Python objects (volume, indices,
// cache_budget, quarantine, comm, target_map).
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
#include "dlfs_tools/loader_option_table.h"
#include "option_keywords.h"

namespace dlfs::python {

struct LoaderKeywords {
  // A path or a Volume; a list or tuple of them is a weighted mixture.
  pybind11::object volume;
  options::LoaderConfig config;
  KeywordObjects objects;  // the python_object keywords
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

// Defines `cls`'s constructor: (volume, the keywords of `Table`, then the
// class's own keywords `own`, pybind11 arguments of types Own...), which
// calls make(LoaderKeywords, Own...) and returns what it returns. `Table`
// is kLoaderKeywords (dlfs.Loader) or kLoaderOptions (dlfs.ImageLoader);
// every keyword's default comes from LoaderConfig.
template <const auto& Table, typename... Own, typename Class, typename Make, typename... OwnArgs>
void DefLoaderInit(Class& cls, Make make, OwnArgs... own) {
  [&]<size_t... I>(std::index_sequence<I...>) {
    cls.def(pybind11::init([make](pybind11::object volume,
                                  typename KeywordOption<Table, I>::Param... values,
                                  Own... own_values) {
              LoaderKeywords k{.volume = std::move(volume)};
              (KeywordOption<Table, I>::Apply(std::move(values), k.config, k.objects), ...);
              return make(std::move(k), std::move(own_values)...);
            }),
            pybind11::arg("volume"), ArgOf<Table, I>()..., std::move(own)...);
  }
  (std::make_index_sequence<std::tuple_size_v<std::decay_t<decltype(Table)>>>{});
}

}  // namespace dlfs::python
