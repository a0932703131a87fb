// What a Batch holds (filled in by the batch sources: the Loader, the MPI
// ShardLoader, and stages that make new batches).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
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
  std::vector<uint32_t> sources;  // a mixture's: each sample's volume (else empty)
  std::vector<uint32_t> labels;
  // Each sample's bytes: its field 0 when `fields` is set.
  std::vector<std::span<const std::byte>> samples;
  // LoaderOptions::fields: field_count fields per sample, sample-major
  // (fields[i * field_count + f]). 0 (and `fields` empty) when the source
  // hands out whole samples.
  uint32_t field_count = 0;
  std::vector<std::span<const std::byte>> fields;
  // The bytes of the batch's decompressed fields (the others lie in what
  // `owner` keeps); null when it has none.
  std::shared_ptr<const void> decoded;
  uint64_t payload_bytes = 0;
  uint64_t device_bytes = 0;
  uint64_t peer_bytes = 0;  // Batch::peer_bytes()
  double io_seconds = 0;
  // Stages that make one tensor of the batch (dlfs/decode_stage.h) set it;
  // its memory is kept alive by `owner`.
  TensorView tensor;
  // Batch::owns_bytes(): set by a source whose `owner` holds this batch's
  // bytes and nobody else's use of them (the Loader's per-batch slab).
  bool owns_bytes = false;
  // Per sample: already checked against the directory in this process
  // (served by the node cache, which checks each sample's CRC32C the first
  // time a process uses it, and whose bytes do not change once written), so
  // verify_checksums need not check it again. Empty: none.
  std::vector<bool> checked;
  // Samples of the batch left out because they could not be read
  // (LoaderOptions::skip_bad_samples): index, and why.
  std::vector<std::pair<uint64_t, std::string>> left_out;
};

}  // namespace dlfs
