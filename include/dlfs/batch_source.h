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
// Resuming: SaveState() says where the source is (epoch, batches handed out)
// and what decides its order, the order's version among it (kOrderVersion,
// dlfs/sampler.h); LoadState() in a new process, on a source made with the
// same volume and options, continues exactly there:
//
//   std::string saved = source.SaveState()->Serialize();   // with the checkpoint
//   ...                                                     // a new process
//   DLFS_ASSIGN_OR_RETURN(SourceState state, SourceState::Parse(saved));
//   DLFS_RETURN_IF_ERROR(source.LoadState(state));  // refused if volume/options differ
//   for (uint64_t e = state.epoch; ...; ++e) { source.SetEpoch(e); ... }
//
// SetEpoch(state.epoch) right after LoadState keeps the restored position
// (the first call with that epoch only); any other epoch starts it afresh.
//
// A state saved in the middle of an epoch by a dlfs of another epoch order
// (order 1, Fisher-Yates, before the version was recorded: states without
// an "order") is refused: its batches handed out cannot be told apart in
// this order. The error says to resume at an epoch boundary instead (batches
// 0 and no segments re-reads that epoch whole; the next epoch and batches 0
// skips its rest). A state at an epoch boundary (no batches of the epoch
// handed out, or all of them) needs no order and resumes whatever its order.
//
// Elastic resume: a state saved by the ranks of a job (all at the same
// step, as in data-parallel training; any rank's state describes the job)
// resumes on sources of another world size or batch size: the rest of the
// epoch is split among the new ranks so that every sample not yet read is
// read once (dlfs/sampler.h, EpochSegment), and later epochs are what a
// fresh job of the new shape reads. With the same world and batch size a
// state resumes exactly where it stopped, each rank continuing its order.
//
// Thread safety: one thread drives a source (SetEpoch/Next/SaveState/
// LoadState); the batches it hands out may be used from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dlfs/bad_sample.h"
#include "dlfs/batch.h"
#include "dlfs/io_engine.h"
#include "dlfs/sampler.h"
#include "dlfs/status.h"

namespace dlfs {

// A source's position, and what its order depends on.
struct SourceState {
  uint64_t epoch = 0;
  uint64_t batches = 0;  // batches of `epoch` handed out (failed ones count)
  // Parts of `epoch` read by earlier jobs of other shapes, oldest first;
  // `batches` counts from the end of the last.
  std::vector<EpochSegment> done;
  // Samples left out as bad so far (sorted): a resumed source leaves them
  // out too, so its batches are those the run would have had.
  std::vector<uint64_t> quarantined;
  // What decides the order: LoadState refuses a state that differs in any.
  std::string volume_uuid;
  uint64_t volume_samples = 0;
  uint64_t samples = 0;     // samples the sampler orders (the subset's size when one is set)
  uint32_t subset_crc = 0;  // CRC32C of the subset's indices; 0 without one
  SamplerOptions sampler;   // seed, shuffle, batch size, drop_last, rank, world size
  // The epoch order's version (kOrderVersion; 1: Fisher-Yates, a state that
  // does not say).
  uint32_t order = kOrderVersion;

  // One "key value" line each, after a "dlfs-source-state 3" line; the
  // parts as "segments world_size=4,workers=1,batch_size=32,batches=7;..."
  // (empty value: none); "quarantine 3,17" (sorted indices); "order 2".
  // Parse also takes version 2 (no order line: order 1) and version 1
  // (neither segments nor quarantine either); "order" may appear in them.
  std::string Serialize() const;
  // InvalidArgument naming the line for text Serialize() did not write.
  static Result<SourceState> Parse(std::string_view text);
};

// A SourceState's `done` as text, "world_size=4,workers=1,batch_size=32,
// batches=7;..." (empty: none), and back (InvalidArgument if malformed or
// refused by CheckEpochSegments).
std::string FormatEpochSegments(const std::vector<EpochSegment>& done);
Result<std::vector<EpochSegment>> ParseEpochSegments(std::string_view text);

// Ok when `saved` can be resumed by a source whose own state is `current`
// (same volume, sample set, seed, shuffle and drop_last; rank, world size
// and batch size may differ: see "Elastic resume" above; the same order
// version unless saved at an epoch boundary); otherwise InvalidArgument
// "<who>: cannot resume from this state: it was saved with seed 7, this
// loader has seed 8" (every difference named).
Status CheckResumable(const SourceState& saved, const SourceState& current, const std::string& who);

// Where a source of sampler options `mine` continues `saved` (which
// CheckResumable accepted): the parts of the epoch read before, and the
// batches of the current part this source has handed out. The same world
// and batch size continue saved's part; another shape starts a new part
// after it.
struct ResumePoint {
  uint64_t epoch = 0;
  std::vector<EpochSegment> done;
  uint64_t batches = 0;
};
ResumePoint PlanResume(const SourceState& saved, const SamplerOptions& mine);

// CRC32C of a subset's indices (as little-endian uint64), 0 for none
// (SampleSubset::Crc: a range's in O(log^2), equal to its list's).
inline uint32_t SubsetCrc(const SampleSubset& subset) { return subset.Crc(); }

// Where a source's time and memory went since it was created; the
// difference of two snapshots covers the time between them (RunEpochs
// reports one per epoch). Sources that do not count report zeros.
struct SourceStats {
  // Counts and times: a difference of snapshots subtracts them.
  EngineStats io;                // every I/O engine of the source, summed
  double verify_seconds = 0;     // checksums and field decoding, on the caller's thread
  double next_wait_seconds = 0;  // Next() waiting for a batch to be read
  // The node cache (dlfs/loader.h), this process: samples found in it and
  // not, bytes it copied in and the time that took (on its idle thread).
  uint64_t cache_hits = 0;
  uint64_t cache_hit_bytes = 0;  // bytes of the samples found
  uint64_t cache_misses = 0;
  uint64_t cache_fill_bytes = 0;
  double cache_fill_seconds = 0;
  // The fill's sequential reads (this process's share of the node's).
  uint64_t cache_scan_bytes = 0;
  double cache_scan_seconds = 0;
  double cache_fill_cpu_seconds = 0;  // of the fill's thread: reading and copying
  // Levels: a difference of snapshots keeps the later one's.
  uint32_t engines = 0;                  // engines summed in io (ring-empty time is per engine)
  uint64_t buffer_bytes = 0;             // batch buffers allocated
  uint64_t cache_budget = 0;             // node cache budget chosen (0: none)
  uint64_t cache_bytes = 0;              // node cache capacity (0: none)
  uint64_t cache_used_bytes = 0;         // bytes of samples in it (every process's)
  uint32_t cache_sharers = 0;            // processes attached to it
  bool cache_shared = false;             // one region for the node (else this process's)
  double setup_seconds = 0;              // creating the source (allocating, pre-faulting)
  std::vector<std::string> uring_flags;  // io_uring setup flags in use
  // Whether the node cache is filled and why ("fill: saves 1.8 s over 4
  // epochs for 0.4 s ..."); empty until decided or without a cache.
  std::string cache_fill_plan;

  // Mean wall time each engine had no read in flight.
  double ring_empty_seconds() const { return engines ? io.empty_seconds / engines : 0; }
  SourceStats operator-(const SourceStats& earlier) const;
  // Adds the counts of `later` (an interval after this one) and takes its
  // levels: the stats of both intervals together.
  SourceStats& operator+=(const SourceStats& later);
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

  // Where the source is: the current epoch and the batches of it handed out
  // (0 before the first Next() of an epoch). NotSupported where a source
  // cannot resume.
  virtual Result<SourceState> SaveState() const {
    return Status::NotSupported(description() + ": cannot save its position");
  }

  // Continues from `state` (see CheckResumable for what must match): the
  // next Next() hands out batch state.batches of epoch state.epoch, and the
  // batches before it are not read. InvalidArgument, leaving the source
  // as it was, when the state does not fit this source.
  virtual Status LoadState(const SourceState& state) {
    (void)state;
    return Status::NotSupported(description() + ": cannot resume");
  }
};

}  // namespace dlfs
