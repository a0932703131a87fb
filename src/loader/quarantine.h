// Quarantine (LoaderOptions::skip_bad_samples): the samples a loader left
// out as bad, the budget past which it fails, and the check of a batch that
// leaves bad samples out. Shared by the Loader and the MPI ShardLoader.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "dlfs/batch_source.h"
#include "dlfs/status.h"
#include "dlfs/volume.h"
#include "loader/batch_data.h"

namespace dlfs::loader_internal {

class Quarantine {
 public:
  // `skip`: leave bad samples out (else only those listed are, and a bad
  // sample fails its batch); past `budget` found ones, every check fails.
  Quarantine(const Volume& volume, bool skip, uint32_t budget)
      : volume_(volume), skip_(skip), budget_(budget) {}

  // Samples to leave out from the start (not counted in the budget).
  // InvalidArgument for an index out of range.
  Status ListAhead(const std::vector<uint64_t>& indices);

  // Records `index` as bad (once), e.g. from a resumed state.
  void Add(uint64_t index, const std::string& why);

  // Whether anything is to be done for a batch (skipping, or samples listed).
  bool active() const { return skip_ || !set_.empty(); }

  // `check` (checksums, fields) on `data`, whose fields are not split yet:
  // first leaves out the samples recorded (and the batch's left_out ones,
  // recording them); with skip, finds the samples that fail `check` one by
  // one, records and leaves them out; then the budget's error if exceeded.
  // Call from the source's driving thread.
  Status Check(Batch::Data* data, const std::function<Status(Batch::Data*)>& check);

  // The records, in the order found (those listed ahead first); the indices.
  std::vector<BadSample> records() const;
  std::vector<uint64_t> indices() const;

 private:
  static void LeaveOut(Batch::Data* data, const std::vector<size_t>& positions);

  const Volume& volume_;
  const bool skip_;
  const uint32_t budget_;
  mutable std::mutex mu_;  // records() from other threads
  std::set<uint64_t> set_;
  std::vector<BadSample> bad_;
  size_t listed_ahead_ = 0;  // of bad_: not in the budget
  Status over_budget_;
};

}  // namespace dlfs::loader_internal
