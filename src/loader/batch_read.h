// BatchRead: the device reads of one batch into one buffer, what became of
// them, and the Batch (or the error) they make. A ReadJob (io/read_driver.h):
// the Loader streams many of these through its driver, SampleReader runs one
// at a time.
//
//   BatchRead b(volume, indices, options);  // plans reads (BatchPlanner)
//   b.SetBuffer(base, slot);                // where they go
//   driver.Run(b);                          // round 0, then any retries
//   Result<Batch> batch = b.Finish(owner, epoch, sequence);
//
// A failed read that held several samples is split once into reads of
// those samples' own blocks (round 1), so the error names exactly the
// samples whose bytes could not be read, not every neighbour that was
// coalesced with them; if the retries all succeed the batch is whole.
// Checksums are not verified here: the consumer does that off the I/O
// thread.
//
// Thread safety: one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dlfs/batch.h"
#include "dlfs/io_engine.h"
#include "dlfs/volume.h"
#include "io/read_driver.h"
#include "loader/batch_data.h"
#include "loader/batch_planner.h"

namespace dlfs::loader_internal {

class BatchRead final : public io_internal::ReadJob {
 public:
  // Plans the reads of `indices` (which must outlive this object).
  BatchRead(const Volume& volume, std::span<const uint64_t> indices, const PlanOptions& options);

  // Bytes the buffer given to Start must hold.
  uint64_t buffer_bytes() const { return plan_.buffer_bytes; }
  uint64_t sample_bytes() const { return plan_.sample_bytes; }

  // The reads go into `base` (registered as `slot`, or kNoSlot), which
  // holds buffer_bytes(). REQUIRES: before the first NextRound.
  void SetBuffer(std::byte* base, uint32_t slot) {
    base_ = base;
    slot_ = slot;
  }
  // ReadJob: round 0 is the planned reads, round 1 the retries of failed
  // multi-sample reads; then the batch is done.
  bool NextRound(std::vector<ReadRequest>* out) override;
  void Complete(size_t r, const Status& status) override;

  // The batch (samples as spans into the buffer, which `owner` keeps
  // alive and nobody else uses: Batch::owns_bytes() is true), or an error naming the volume and
  // every sample (index and path) whose bytes could not be read.
  Result<Batch> Finish(std::shared_ptr<const void> owner, uint64_t epoch, uint64_t sequence,
                       double io_seconds) const;
  // The same, still open to changes (the Loader splits fields into it).
  // With `skip_failed`, samples that could not be read are left out of the
  // batch and listed in its left_out instead of failing it.
  Result<std::shared_ptr<Batch::Data>> FinishData(std::shared_ptr<const void> owner, uint64_t epoch,
                                                  uint64_t sequence, double io_seconds,
                                                  bool skip_failed = false) const;

 private:
  struct Sub {
    uint64_t buffer_offset;
    uint64_t length;
    size_t parent;  // round-0 read it retries
  };

  // Positions (into indices) whose bytes lie in buffer range [begin, end).
  std::vector<size_t> PositionsIn(uint64_t begin, uint64_t end) const;

  const Volume& volume_;
  std::span<const uint64_t> indices_;
  uint32_t alignment_;
  BatchPlan plan_;
  std::byte* base_ = nullptr;
  uint32_t slot_ = ReadRequest::kNoSlot;
  int round_ = -1;              // -1: not started; 2: done
  std::vector<Status> round0_;  // per planned read
  std::vector<Sub> subs_;       // round 1
  std::vector<Status> round1_;  // per sub-read
  std::vector<Status> failed_;  // per position: OK, or why its bytes are missing
  bool any_failed_ = false;
};

// "v.dlfs: sample 12 'train/x.jpg'"
std::string SampleName(const Volume& volume, uint64_t index);

// The error for a batch whose samples at `positions` (into `indices`)
// failed with `failures[position]`: the first failure with every unreadable
// sample named (up to a handful, then a count).
Status UnreadableSamples(const Volume& volume, std::span<const uint64_t> indices,
                         const std::vector<size_t>& positions, const std::vector<Status>& failures);

}  // namespace dlfs::loader_internal
