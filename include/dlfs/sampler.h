// Sampler: which samples each rank reads in an epoch, and in what order.
//
// The epoch order is a pure function of (sample count, seed, epoch): a
// Fisher-Yates shuffle driven by xoshiro256** seeded through SplitMix64,
// with bounded integers drawn by Lemire's multiply-and-reject method. No
// std:: distribution is involved (their output is implementation-defined),
// so every rank, compiler and platform derives the same permutation without
// talking to the others.
//
// Sharding follows torch.utils.data.DistributedSampler: the permutation is
// padded by wrapping around to a multiple of world_size (drop_last=false) or
// cut down to one (drop_last=true), and rank r takes positions r, r + world,
// r + 2 world, ... So every rank gets the same number of samples; with
// padding, a few samples appear twice in an epoch. The rank's list is then
// cut into batches; with drop_last the last incomplete batch is dropped too,
// otherwise it is kept (and equally short on every rank).
//
// Elastic resume: a job interrupted mid-epoch may resume with another
// number of ranks, DataLoader workers or batch size. The part of the epoch
// it read is an EpochSegment; the rest of the epoch — the permutation's
// samples no segment read (as a sample or as padding), in permutation
// order — is sharded among the new
// ranks exactly as a whole epoch is (padding and drop_last applying to the
// rest), so every remaining sample is read once. Later epochs are whole.
//
// Thread safety: immutable; safe to share.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dlfs/status.h"

namespace dlfs {

struct SamplerOptions {
  bool shuffle = true;  // false: volume (index) order
  uint64_t seed = 0;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint32_t batch_size = 256;
  bool drop_last = false;
};

// A part of an epoch read by one job before it stopped: its ranks (each
// split among `workers` DataLoader workers that hand out batches in turn,
// rank r's worker w reading shard r * workers + w of world_size * workers),
// its batch size, and the batches each rank had handed out. A segment that
// handed out all its batches ends the epoch.
struct EpochSegment {
  uint32_t world_size = 1;
  uint32_t workers = 1;
  uint32_t batch_size = 1;
  uint64_t batches = 0;

  bool operator==(const EpochSegment&) const = default;
};

// InvalidArgument unless every field is at least 1 (batches: 0), world_size
// * workers is at most 2^24, and there are at most kMaxEpochSegments.
inline constexpr size_t kMaxEpochSegments = 64;
Status CheckEpochSegments(std::span<const EpochSegment> done);

class Sampler {
 public:
  // InvalidArgument for rank >= world_size, world_size or batch_size 0.
  static Result<Sampler> Create(uint64_t sample_count, const SamplerOptions& options);

  // The full permutation of [0, sample_count) for `epoch` (identity when
  // !shuffle), before padding and sharding. Identical on every rank.
  std::vector<uint64_t> Permutation(uint64_t epoch) const;

  // This rank's sample indices for `epoch`, in reading order;
  // samples_per_rank() of them.
  std::vector<uint64_t> RankIndices(uint64_t epoch) const;
  // The same, with each position p replaced by subset[p] when `subset` is
  // non-empty (a loader reading only part of a volume). REQUIRES: subset is
  // empty or has the sample_count the sampler was created with.
  std::vector<uint64_t> RankIndices(uint64_t epoch, std::span<const uint64_t> subset) const;

  // This rank's sample indices for the rest of `epoch` after the segments
  // `done` (in the order they were read), in reading order, mapped through
  // `subset` as above. With `done` empty: RankIndices(epoch, subset).
  // InvalidArgument for segments CheckEpochSegments refuses, or one that
  // counts more batches than its part of the epoch had.
  Result<std::vector<uint64_t>> RankIndices(uint64_t epoch, std::span<const EpochSegment> done,
                                            std::span<const uint64_t> subset) const;

  uint64_t samples_per_rank() const { return per_rank_; }
  uint64_t batches_per_epoch() const { return batches_; }
  const SamplerOptions& options() const { return options_; }

 private:
  Sampler() = default;
  uint64_t n_ = 0;
  SamplerOptions options_;
  uint64_t per_rank_ = 0;
  uint64_t batches_ = 0;
};

}  // namespace dlfs
