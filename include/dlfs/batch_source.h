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
#include <vector>

#include "dlfs/batch.h"
#include "dlfs/io_engine.h"
#include "dlfs/status.h"

namespace dlfs {

// Where a source's time and memory went since it was created; the
// difference of two snapshots covers the time between them (RunEpochs
// reports one per epoch). Sources that do not count report zeros.
struct SourceStats {
  // Counts and times: a difference of snapshots subtracts them.
  EngineStats io;                // every I/O engine of the source, summed
  double verify_seconds = 0;     // checksumming, on the caller's thread
  double next_wait_seconds = 0;  // Next() waiting for a batch to be read
  // Levels: a difference of snapshots keeps the later one's.
  uint32_t engines = 0;                  // engines summed in io (ring-empty time is per engine)
  uint64_t buffer_bytes = 0;             // batch buffers allocated
  uint64_t cache_bytes = 0;              // memory tier (0: none)
  double setup_seconds = 0;              // creating the source (allocating, pre-faulting)
  std::vector<std::string> uring_flags;  // io_uring setup flags in use

  // Mean wall time each engine had no read in flight.
  double ring_empty_seconds() const { return engines ? io.empty_seconds / engines : 0; }
  SourceStats operator-(const SourceStats& earlier) const;
};

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

  // Time, I/O and memory so far; may be called from any thread.
  virtual SourceStats source_stats() const { return {}; }
};

}  // namespace dlfs
