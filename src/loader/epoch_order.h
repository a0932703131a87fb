// The samples a Loader reads in an epoch, in order, and where its batches
// start: from the sampler, from an explicit order (LoaderOptions::order, as
// a mixture gives), or the rest of an epoch after an elastic resume.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dlfs/loader.h"
#include "dlfs/sampler.h"
#include "dlfs/status.h"

namespace dlfs::loader_internal {

// This rank's samples of one epoch, or of the rest of it after the parts
// earlier jobs read (an elastic resume): then they are the epoch's last
// batches, from batch first_seq on, and `part` tells them apart.
struct EpochOrder {
  uint64_t epoch;
  uint64_t part = 0;  // 0: the whole epoch; else the resume that made it
  uint64_t first_seq = 0;
  std::vector<uint64_t> indices;
  // Where each batch starts in indices (LoaderOptions::order); empty:
  // every batch_size.
  std::vector<uint64_t> starts;
  Status error;  // an explicit order that does not fit: every batch fails with it
};

// The orders of the last few epochs, each computed once for every I/O
// thread that needs it. Thread-safe.
class EpochOrders {
 public:
  // `volume`, `volume_samples`: for checking an explicit order and naming
  // the volume; `batches`: per epoch. Keeps references to `options` and
  // `sampler`, which must outlive it.
  EpochOrders(std::string volume, uint64_t volume_samples, uint64_t batches,
              const LoaderOptions& options, const Sampler& sampler)
      : volume_(std::move(volume)),
        volume_samples_(volume_samples),
        batches_(batches),
        options_(options),
        sampler_(sampler) {}

  // The order of `epoch`: `part` itself when it is that epoch's rest.
  std::shared_ptr<const EpochOrder> Get(uint64_t epoch, std::shared_ptr<const EpochOrder> part);

  // Forgets what was computed (an explicit order may differ after a resume).
  void Clear();

 private:
  // LoaderOptions::order's order of `epoch`, checked: batch starts rising
  // from 0 to its size over batches_ batches, indices in the volume. One
  // that does not fit gives an order whose every batch fails.
  std::shared_ptr<EpochOrder> Explicit(uint64_t epoch) const;

  const std::string volume_;
  const uint64_t volume_samples_;
  const uint64_t batches_;
  const LoaderOptions& options_;
  const Sampler& sampler_;
  std::mutex mu_;
  std::deque<std::shared_ptr<const EpochOrder>> orders_;
};

}  // namespace dlfs::loader_internal
