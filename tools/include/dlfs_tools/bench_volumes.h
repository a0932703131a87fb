// BenchVolumes: what `dlfs bench` runs in one process. It opens the
// volumes, reads them through a Loader (one volume), a MixtureSource
// (several, dlfs/mixture.h) or a DecodeStage over a Loader (decode), and
// times RunEpochs (dlfs_tools/bench.h) over that source.
//
// Thread safety: call from one thread; the sources run their own threads.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dlfs/decode_stage.h"
#include "dlfs/loader.h"
#include "dlfs/status.h"
#include "dlfs/volume.h"
#include "dlfs_tools/bench.h"

namespace dlfs {

struct VolumeBenchOptions {
  VolumeOpenOptions open;  // for every volume (e.g. a target map)
  LoaderOptions loader;    // every volume's loader; its sampler is also the mixture's
  BenchOptions bench;
  // With several volumes, the mixture's weights (empty: equal), samples per
  // epoch (0: the most the weights allow) and cycling (MixtureOptions).
  // InvalidArgument when any is set for one volume.
  std::vector<double> weights;
  uint64_t epoch_samples = 0;
  bool cycle = false;
  // Set: the batches are decoded by a DecodeStage with these options, whose
  // transform seed is replaced by loader.sampler.seed (one seed for the
  // order and the crops). One volume only: NotSupported for several.
  std::optional<DecodeStageOptions> decode;
  // Called before the first epoch with the first loader's cache note
  // (Loader::cache_note()) when it has one, e.g. to warn.
  std::function<void(const std::string& note)> on_cache_note;
};

struct VolumeBenchResult {
  BenchReport report;
  uint32_t targets = 0;    // of the first volume
  std::string cache_note;  // of the first volume's loader; empty: none
  // With decode, the stage's:
  uint32_t decode_threads = 0;
  uint32_t channels = 0;
  DecodeStats decode_stats;
};

// Benchmarks reading `paths` (at least one). Errors: opening a volume (the
// first failure), bad options (as the sources' Create calls report them,
// and the above), the first failed batch.
Result<VolumeBenchResult> BenchVolumes(const std::vector<std::string>& paths,
                                       const VolumeBenchOptions& options);

}  // namespace dlfs
