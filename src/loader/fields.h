// Fields in batches (LoaderOptions::fields, format v2 docs/format.md §4.8):
// shared by the Loader and the MPI ShardLoader, which both read each
// sample's whole stored extent and split it here, on the caller's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "dlfs/status.h"
#include "dlfs/volume.h"
#include "loader/batch_data.h"

namespace dlfs::loader_internal {

// The field ids of `names` in `volume`, in that order. Empty `names`:
// nothing for samples stored whole, {0} for a volume of one field (its
// samples are that field, decoded), or Volume::PlainSamples' refusal for
// a volume of several fields. InvalidArgument for a name the volume lacks
// (listing its fields) or a name given twice.
Result<std::vector<uint32_t>> ResolveFields(const Volume& volume,
                                            const std::vector<std::string>& names);

// Buffers for decoded fields, recycled from batch to batch: touching fresh
// pages for every batch took about a third of the time of reading 4.6 KB
// zstd text fields (dlfs bench: 35 k samples/s before recycling, 55 k after).
// A buffer returns here when the last copy of its batch is destroyed (or is
// freed if the pool is gone). Thread safety: any thread.
class DecodedBuffers : public std::enable_shared_from_this<DecodedBuffers> {
 public:
  ~DecodedBuffers();
  // At least `bytes` bytes; null when out of memory.
  std::shared_ptr<std::byte> Acquire(uint64_t bytes);

 private:
  struct Idle {
    std::byte* data;
    uint64_t capacity;
  };
  void Release(std::byte* data, uint64_t capacity);

  std::mutex mu_;
  std::vector<Idle> idle_;  // at most kMaxIdle
  static constexpr size_t kMaxIdle = 8;
};

// Turns `data`, whose samples are whole stored extents, into a batch of
// `fields` per sample (Batch::Data::fields): raw fields are spans into the
// extents, compressed ones are decoded into one new buffer the batch owns
// (data->decoded; from `buffers` when given). With `verify`, each field's stored bytes are checked
// against its CRC32C first. payload_bytes becomes the fields' bytes.
// Errors name the volume, the sample (index and path) and the field: a
// sample lacking a requested field (NotFound), a checksum mismatch or a
// field that does not decode (Corruption); `data` must then be dropped.
// With `into`, the decoded fields go there instead (at least
// DecodedBytes(...) bytes; the caller keeps it alive).
// With `cached_decoded`, the samples the node cache handed out (data->checked)
// hold their fields decoded, back to back in storage order (a NodeCache
// whose decoded() is true): their fields are spans of them, decoded and
// checked already.
// REQUIRES: !fields.empty().
Status SplitFields(const Volume& volume, std::span<const uint32_t> fields, bool verify,
                   Batch::Data* data, DecodedBuffers* buffers = nullptr,
                   std::span<std::byte> into = {}, bool cached_decoded = false);

// Bytes SplitFields decodes for `fields` of the samples `indices`.
uint64_t DecodedBytes(const Volume& volume, std::span<const uint32_t> fields,
                      std::span<const uint64_t> indices);

}  // namespace dlfs::loader_internal
