// What a Batch holds (filled in by the batch sources: the Loader, the MPI
// ShardLoader, and stages that make new batches).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dlfs/batch.h"

namespace dlfs {

struct Batch::Data {
  // Whatever owns the samples' bytes (a loader's slab, an exchange window);
  // released with the last Batch copy.
  std::shared_ptr<const void> owner;
  uint64_t epoch = 0;
  uint64_t sequence = 0;
  std::vector<uint64_t> indices;
  std::vector<uint32_t> labels;
  std::vector<std::span<const std::byte>> samples;
  uint64_t payload_bytes = 0;
  uint64_t device_bytes = 0;
  double io_seconds = 0;
  // Stages that make one tensor of the batch (dlfs/decode_stage.h) set it;
  // its memory is kept alive by `owner`.
  TensorView tensor;
  // Batch::owns_bytes(): set by a source whose `owner` holds this batch's
  // bytes and nobody else's use of them (the Loader's per-batch slab).
  bool owns_bytes = false;
};

}  // namespace dlfs
