// Loader: shuffled, sharded batches of samples, read ahead through an
// IoEngine (io_uring by default) and handed out zero-copy.
//
//   auto vol = dlfs::Volume::Open("train.dlfs");
//   dlfs::LoaderOptions options;
//   options.sampler.batch_size = 256;
//   options.sampler.seed = 7;
//   auto loader = dlfs::Loader::Create(*vol, options);
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
// A Loader is a BatchSource (dlfs/batch_source.h).
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
#include <string>
#include <vector>

#include "dlfs/batch.h"
#include "dlfs/batch_source.h"
#include "dlfs/io_engine.h"
#include "dlfs/sampler.h"
#include "dlfs/status.h"
#include "dlfs/volume.h"

namespace dlfs {

// How a batch's samples become device reads (see docs/benchmarks.md).
struct ReadPlanOptions {
  // Merge the reads of samples whose extents touch or lie at most
  // coalesce_gap bytes apart. Gap 0 merges only extents sharing or touching
  // a block: in a shuffled batch samples lie far apart, and a larger gap
  // mostly reads bytes nobody asked for.
  bool coalesce = true;
  uint64_t coalesce_gap = 0;
  uint64_t max_read = 1 << 20;  // largest single read; bigger runs are split
};

struct LoaderOptions {
  SamplerOptions sampler;  // order, sharding, batch size (dlfs/sampler.h)
  EngineOptions engine;    // the I/O engine each I/O thread owns (dlfs/io_engine.h)
  ReadPlanOptions plan;
  uint32_t prefetch_batches = 4;  // batches read ahead of the caller
  uint32_t io_threads = 1;        // each owns one engine (one ring)
  bool verify_checksums = true;   // CRC32C of every sample before hand-out
  // When non-empty, read only these sample indices (e.g. a split:
  // SampleDirectory::SamplesUnder); the sampler permutes positions in it.
  std::vector<uint64_t> subset;
};

class Loader final : public BatchSource {
 public:
  // Creates the engines (one per I/O thread) and the sampler. Errors:
  // InvalidArgument for bad options, Unavailable when a forced engine is
  // not supported here.
  static Result<std::unique_ptr<Loader>> Create(std::shared_ptr<Volume> volume,
                                                const LoaderOptions& options);
  ~Loader() override;

  // BatchSource. Before the first SetEpoch, Next() reads epoch 0.
  void SetEpoch(uint64_t epoch) override;
  Result<bool> Next(Batch* batch) override;
  uint64_t batches_per_epoch() const override;
  // What the engine is: "io_uring, O_DIRECT, ..., queue depth 64".
  const std::string& description() const override;

  uint64_t epoch() const;
  const Sampler& sampler() const;
  // This rank's sample indices for `epoch`, in reading order (the sampler's
  // order mapped through `subset` when one is set).
  std::vector<uint64_t> RankIndices(uint64_t epoch) const;
  const Volume& volume() const;

 private:
  class Impl;
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dlfs
