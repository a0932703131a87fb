// Loader: shuffled, sharded batches of samples, read ahead through an
// IoEngine (io_uring by default) and handed out zero-copy.
//
//   auto vol = dlfs::Volume::Open("train.dlfs");
//   auto loader = dlfs::Loader::Create(*vol, {.batch_size = 256, .seed = 7});
//   for (uint64_t epoch = 0; epoch < 90; ++epoch) {
//     (*loader)->SetEpoch(epoch);
//     dlfs::Batch batch;
//     while (true) {
//       auto more = (*loader)->Next(&batch);      // error, or false at epoch end
//       if (!more.ok() || !*more) break;
//       for (size_t i = 0; i < batch.size(); ++i) Use(batch.sample(i), batch.label(i));
//     }
//   }
//
// Order: batch k of an epoch holds this rank's samples k*B .. k*B+B-1 of
// Sampler::RankIndices(epoch) (see dlfs/sampler.h), in that order, whatever
// order the reads completed in. While the caller works on one batch, the
// next prefetch_batches are already being read.
//
// Memory: each batch lives in one buffer from a per-I/O-thread pool; a
// sample is a span into it. The buffer returns to the pool when the last
// Batch copy referring to it is destroyed, so views stay valid for as long as
// the caller keeps the Batch — even after the Loader is gone.
//
// Errors: a failed read or a checksum mismatch (verify_checksums; checked in
// Next(), on the caller's thread, while the next batches are being read) makes
// Next() return an error naming the volume file, the sample index and path;
// the next call continues with the following batch. Wrong bytes are never
// handed out as a sample.
//
// Thread safety: one thread calls Next()/SetEpoch(); Batch objects may be
// read and destroyed from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dlfs/io_engine.h"
#include "dlfs/sampler.h"
#include "dlfs/status.h"
#include "dlfs/volume.h"

namespace dlfs {

struct LoaderOptions {
  uint32_t batch_size = 256;
  bool shuffle = true;
  uint64_t seed = 0;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  bool drop_last = false;         // see dlfs/sampler.h
  uint32_t prefetch_batches = 4;  // batches read ahead of the caller
  uint32_t queue_depth = 64;      // reads in flight per I/O thread
  uint32_t io_threads = 1;        // each owns one engine (one ring)
  EngineKind engine = EngineKind::kAuto;
  bool direct_io = true;  // O_DIRECT where supported
  bool sqpoll = false;
  bool verify_checksums = true;  // CRC32C of every sample before hand-out
  // Merge the reads of samples whose extents touch or lie at most
  // coalesce_gap bytes apart. Gap 0 merges only extents sharing or touching
  // a block: in a shuffled batch samples lie far apart, and a larger gap
  // mostly reads bytes nobody asked for (docs/benchmarks.md).
  bool coalesce = true;
  uint64_t coalesce_gap = 0;
  uint64_t max_read = 1 << 20;
  // When non-empty, read only these sample indices (e.g. a split:
  // SampleDirectory::SamplesUnder); the sampler permutes positions in it.
  std::vector<uint64_t> subset;
  const FaultInjection* faults = nullptr;  // testing hook
};

// The parts of `options` that decide the permutation and the engine; every
// loader (Loader, the MPI ShardLoader) derives them the same way.
SamplerOptions SamplerOptionsOf(const LoaderOptions& options);
EngineOptions EngineOptionsOf(const LoaderOptions& options);

namespace loader_internal {
struct BatchData;
}  // namespace loader_internal
class Batch;
namespace loader_internal {
Batch MakeBatch(std::shared_ptr<const BatchData> data);
}  // namespace loader_internal

// One batch: sample indices, labels, and the samples' bytes. Cheap to copy
// (copies share the buffer).
class Batch {
 public:
  Batch() = default;
  size_t size() const;
  uint64_t epoch() const;
  uint64_t sequence() const;       // batch number within the epoch
  uint64_t index(size_t i) const;  // REQUIRES: i < size()
  uint32_t label(size_t i) const;  // kNoLabel when the sample has none
  std::span<const std::byte> sample(size_t i) const;
  std::span<const uint64_t> indices() const;
  std::span<const uint32_t> labels() const;
  uint64_t payload_bytes() const;  // sum of sample sizes
  uint64_t device_bytes() const;   // bytes read from storage (alignment, gaps)
  double io_seconds() const;       // from submitting the batch's reads to the last completion

 private:
  friend class Loader;
  friend Batch loader_internal::MakeBatch(std::shared_ptr<const loader_internal::BatchData>);
  std::shared_ptr<const loader_internal::BatchData> data_;
};

class Loader {
 public:
  // Creates the engines (one per I/O thread) and the sampler. Errors:
  // InvalidArgument for bad options, Unavailable when a forced engine is
  // not supported here.
  static Result<std::unique_ptr<Loader>> Create(std::shared_ptr<Volume> volume,
                                                const LoaderOptions& options);
  ~Loader();

  // Starts (or restarts) reading `epoch` from its first batch. Before the
  // first call, Next() reads epoch 0.
  void SetEpoch(uint64_t epoch);

  // The next batch of the current epoch into *batch: true, false when the
  // epoch is over (until SetEpoch), or an error for this batch.
  Result<bool> Next(Batch* batch);

  uint64_t batches_per_epoch() const;
  uint64_t epoch() const;
  const Sampler& sampler() const;
  // This rank's sample indices for `epoch`, in reading order (the sampler's
  // order mapped through `subset` when one is set).
  std::vector<uint64_t> RankIndices(uint64_t epoch) const;
  const Volume& volume() const;
  // What the engine is: "io_uring, O_DIRECT, ..., queue depth 64".
  const std::string& engine_description() const;

  class Impl;

 private:
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dlfs
