// What a Batch holds (shared by the Loader and the MPI ShardLoader, which
// build batches).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dlfs/loader.h"

namespace dlfs::loader_internal {

struct Slab;

struct BatchData {
  std::shared_ptr<Slab> slab;         // the Loader's buffer, or
  std::shared_ptr<const void> owner;  // any other owner of the samples' bytes
  uint64_t epoch = 0;
  uint64_t sequence = 0;
  std::vector<uint64_t> indices;
  std::vector<uint32_t> labels;
  std::vector<std::span<const std::byte>> samples;
  uint64_t payload_bytes = 0;
  uint64_t device_bytes = 0;
  double io_seconds = 0;
};

// Wraps `data` as a Batch.
Batch MakeBatch(std::shared_ptr<const BatchData> data);

}  // namespace dlfs::loader_internal
