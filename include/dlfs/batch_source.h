// BatchSource: anything that hands out an epoch's batches in order — the
// Loader (dlfs/loader.h), the MPI ShardLoader (dlfs/distributed.h), and the
// stages that wrap them. Code that consumes batches (benchmarks, bindings,
// training loops) takes a BatchSource& and does not care which it is.
//
//   source.SetEpoch(e);
//   Batch batch;
//   while (true) {
//     auto more = source.Next(&batch);   // error, or false at the epoch's end
//     if (!more.ok()) { ... }            // this batch failed; Next() goes on
//     if (!*more) break;
//     Use(batch);
//   }
//
// Contract for implementations: Next() hands out batches 0 .. batches_per_epoch() - 1
// of the current epoch in order, then false until SetEpoch(); a failed batch
// is an error for that batch only, and the next call continues with the
// following one; wrong bytes are never handed out as a sample.
//
// Thread safety: one thread drives a source (SetEpoch/Next); the batches it
// hands out may be used from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "dlfs/batch.h"
#include "dlfs/status.h"

namespace dlfs {

class BatchSource {
 public:
  virtual ~BatchSource() = default;

  // Starts (or restarts) `epoch` from its first batch. Before the first
  // call, a source reads epoch 0.
  virtual void SetEpoch(uint64_t epoch) = 0;

  // The next batch of the current epoch into *batch: true; false when the
  // epoch is over; or an error for this batch.
  virtual Result<bool> Next(Batch* batch) = 0;

  virtual uint64_t batches_per_epoch() const = 0;

  // What the source is and how it reads, e.g. "io_uring, O_DIRECT, ...,
  // queue depth 64"; for reports and logs.
  virtual const std::string& description() const = 0;
};

}  // namespace dlfs
