// The samples a Loader reads in an epoch, batch by batch: from the sampler
// (computed per batch, nothing of the epoch's size stored), from an explicit
// order (LoaderOptions::order: the caller's lists; or batch_order, asked per
// batch, as a mixture gives), or the rest of an epoch after an elastic
// resume.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
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
  uint64_t epoch = 0;
  uint64_t part = 0;  // 0: the whole epoch; else the resume that made it
  uint64_t first_seq = 0;
  // The sampler's order (neither explicit form below).
  RankOrder ranked;
  // LoaderOptions::order: the indices, and where each batch starts in them.
  bool listed = false;
  std::vector<uint64_t> indices;
  std::vector<uint64_t> starts;
  // LoaderOptions::batch_order, asked per batch (with the volume's sample
  // count, to check what it gives).
  std::function<std::vector<uint64_t>(uint64_t epoch, uint64_t batch)> per_batch;
  uint64_t volume_samples = 0;
  std::string volume;
  Status error;  // an explicit order that does not fit: every batch fails with it

  // The indices of batch `seq` (first_seq <= seq < the epoch's batches),
  // each batch_size but the last of the sampler's order. InvalidArgument
  // for a batch batch_order gives with an index out of the volume.
  Status Batch(uint64_t seq, uint64_t batch_size, std::vector<uint64_t>* out) const;
  // Every index, in order (for RankIndices(): O(the rank's samples)).
  std::vector<uint64_t> All(uint64_t batches, uint64_t batch_size) const;
};

// The orders of the last few epochs, each made once for every I/O thread
// that needs it (an explicit order's lists are asked once per epoch).
// Thread-safe.
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

  // Forgets what was made (an explicit order may differ after a resume).
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
