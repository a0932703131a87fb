// SampleReader: many samples of a volume in one call, for map-style access.
//
//   auto reader = dlfs::SampleReader::Create(vol, {});
//   auto batch = (*reader)->Read({{42, 7, 1000}});   // one submission
//   for (size_t i = 0; i < batch->size(); ++i) Use(batch->sample(i));
//
// Read(indices) plans the samples' reads as the Loader does (aligned,
// neighbours coalesced), submits them together through its own I/O engine
// (io_uring with O_DIRECT where available: no page cache pollution, no
// copy), waits, and returns them as one Batch whose samples are spans into
// one recycled buffer, in the order asked (duplicates allowed). It is what
// a map-style dataset given a batch of indices (a BatchSampler) wants:
// the latency of one round trip to the device instead of one per sample.
// Samples the node cache holds (dlfs/loader.h) come from it instead, and
// those read are offered to it; batches holding cached samples are
// read-only (Batch::owns_bytes() false).
// For whole epochs in a known order, the Loader (dlfs/loader.h) is faster
// still: it reads ahead. Samples are what Volume::Read returns: a volume of
// one compressed field (docs/format.md §4.8) has its samples checked and
// decoded; one of several fields is refused by Create (read fields by name
// through Volume or a Loader with `fields`).
//
// Errors: an index out of range is InvalidArgument; a read that fails or a
// checksum mismatch (verify) is an error naming the volume and the
// samples (index and path); wrong bytes are never returned.
//
// Thread safety: Read may be called from several threads (one at a time
// reads; the others wait). Batches may outlive the reader. A reader does
// not survive fork(): a child process creates its own (one destroyed in a
// child is left alone rather than touch its parent's I/O).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "dlfs/batch.h"
#include "dlfs/io_engine.h"
#include "dlfs/loader.h"
#include "dlfs/status.h"
#include "dlfs/volume.h"

namespace dlfs {

struct SampleReaderOptions {
  EngineOptions engine;  // queue depth, engine kind, O_DIRECT (dlfs/io_engine.h)
  ReadPlanOptions plan;  // coalescing (dlfs/loader.h)
  // The node cache, as LoaderOptions::cache_budget / cache_shared /
  // planned_epochs: samples it holds are not read; it is filled by
  // sequential reads on a thread of its own where that pays.
  uint64_t cache_budget = kAutoCacheBudget;
  bool cache_shared = true;
  uint32_t planned_epochs = 0;
  // As LoaderOptions::auto_direct_io: buffered reads for samples much
  // smaller than a block.
  bool auto_direct_io = true;
};

class SampleReader {
 public:
  // Creates the engine. Errors as CreateEngine, and Volume::PlainSamples'
  // refusal for a volume of several fields.
  static Result<std::unique_ptr<SampleReader>> Create(std::shared_ptr<Volume> volume,
                                                      const SampleReaderOptions& options);
  ~SampleReader();

  // The samples `indices` (in that order) as one batch (epoch 0, sequence
  // 0), each checked against its CRC32C unless !verify.
  Result<Batch> Read(std::span<const uint64_t> indices, bool verify = true);

  // The same, read into the caller's `buffer` (at least BufferBytes(indices)
  // bytes, aligned to 4 KiB, e.g. shared memory another process maps); the
  // batch's samples are spans into it and do not keep it alive.
  // InvalidArgument when the buffer is too small or misaligned.
  Result<Batch> ReadInto(std::span<const uint64_t> indices, std::span<std::byte> buffer,
                         bool verify = true);
  // Bytes a buffer for ReadInto(indices) needs (aligned reads, gaps
  // included, then the decoded samples of a compressed volume).
  Result<uint64_t> BufferBytes(std::span<const uint64_t> indices);

  // What the engine is ("io_uring, O_DIRECT, ...").
  const std::string& description() const;

 private:
  class Impl;
  explicit SampleReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dlfs
