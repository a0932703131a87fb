#include "dlfs/sampler.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "common/xoshiro.h"

namespace dlfs {

namespace {

// The generator of one epoch's permutation: xoshiro256** seeded by four
// SplitMix64 steps from the seed mixed with the epoch (docs/format.md's
// permutation is this stream).
Xoshiro256ss EpochRng(uint64_t seed, uint64_t epoch) {
  uint64_t sm = seed ^ (epoch * 0xd1342543de82ef95ull + 0x2545f4914f6cdd1dull);
  uint64_t state[4];
  for (uint64_t& w : state) w = SplitMixOutput(sm += kSplitMixGamma);
  return Xoshiro256ss(state);
}

// Samples per shard when `m` samples are split among `shards` in batches
// of `batch` (DistributedSampler's rule, see sampler.h).
uint64_t PerShard(uint64_t m, uint64_t shards, uint64_t batch, bool drop_last) {
  return drop_last ? m / shards / batch * batch : (m + shards - 1) / shards;
}

}  // namespace

Status CheckEpochSegments(std::span<const EpochSegment> done) {
  constexpr uint64_t kMaxShards = uint64_t{1} << 24;
  if (done.size() > kMaxEpochSegments) {
    return Status::InvalidArgument("an epoch resumed more than " +
                                   std::to_string(kMaxEpochSegments) + " times");
  }
  for (const EpochSegment& s : done) {
    if (s.world_size == 0 || s.workers == 0 || s.batch_size == 0) {
      return Status::InvalidArgument("an epoch segment with no ranks, workers or batch size");
    }
    if (uint64_t{s.world_size} * s.workers > kMaxShards) {
      return Status::InvalidArgument("an epoch segment of more than " + std::to_string(kMaxShards) +
                                     " ranks x workers");
    }
  }
  return Status::Ok();
}

Result<Sampler> Sampler::Create(uint64_t sample_count, const SamplerOptions& options) {
  if (options.world_size == 0) return Status::InvalidArgument("world_size must be at least 1");
  if (options.rank >= options.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(options.rank) +
                                   " is not below world_size " +
                                   std::to_string(options.world_size));
  }
  if (options.batch_size == 0) return Status::InvalidArgument("batch_size must be at least 1");
  Sampler s;
  s.n_ = sample_count;
  s.options_ = options;
  const uint64_t w = options.world_size;
  const uint64_t b = options.batch_size;
  s.per_rank_ = PerShard(sample_count, w, b, options.drop_last);
  s.batches_ = (s.per_rank_ + b - 1) / b;
  return s;
}

std::vector<uint64_t> Sampler::Permutation(uint64_t epoch) const {
  std::vector<uint64_t> p(n_);
  std::iota(p.begin(), p.end(), uint64_t{0});
  if (!options_.shuffle || n_ < 2) return p;
  Xoshiro256ss rng = EpochRng(options_.seed, epoch);
  for (uint64_t i = n_ - 1; i > 0; --i) std::swap(p[i], p[rng.Below(i + 1)]);
  return p;
}

std::vector<uint64_t> Sampler::RankIndices(uint64_t epoch) const {
  std::vector<uint64_t> mine;
  if (n_ == 0) return mine;
  const std::vector<uint64_t> p = Permutation(epoch);
  const uint64_t w = options_.world_size;
  mine.reserve(per_rank_);
  for (uint64_t k = 0; k < per_rank_; ++k) {
    // Position in the padded sequence; padding wraps around to the start.
    const uint64_t pos = k * w + options_.rank;
    mine.push_back(p[pos % n_]);
  }
  return mine;
}

std::vector<uint64_t> Sampler::RankIndices(uint64_t epoch, std::span<const uint64_t> subset) const {
  std::vector<uint64_t> order = RankIndices(epoch);
  if (!subset.empty()) {
    for (uint64_t& i : order) i = subset[i];
  }
  return order;
}

Result<std::vector<uint64_t>> Sampler::RankIndices(uint64_t epoch,
                                                   std::span<const EpochSegment> done,
                                                   std::span<const uint64_t> subset) const {
  DLFS_RETURN_IF_ERROR(CheckEpochSegments(done));
  if (done.empty()) return RankIndices(epoch, subset);
  std::vector<uint64_t> rest = Permutation(epoch);
  for (size_t i = 0; i < done.size(); ++i) {
    const EpochSegment& seg = done[i];
    // Shard s of the segment read rest[(j * shards + s) % m] for j < per;
    // worker w = s % workers had handed out q or q + 1 batches of them.
    const uint64_t m = rest.size();
    if (m == 0) break;
    const uint64_t shards = uint64_t{seg.world_size} * seg.workers;
    const uint64_t b = seg.batch_size;
    const uint64_t per = PerShard(m, shards, b, options_.drop_last);
    const uint64_t batches = (per + b - 1) / b;
    if (seg.batches > batches * seg.workers) {
      return Status::InvalidArgument(
          "part " + std::to_string(i + 1) + " of epoch " + std::to_string(epoch) + " says " +
          std::to_string(seg.batches) + " batches were handed out of its " +
          std::to_string(batches * seg.workers));
    }
    if (seg.batches == batches * seg.workers) {  // it finished the epoch
      rest.clear();
      break;
    }
    // Consumed: what each shard read, its wrap-around padding included (a
    // sample read as padding was read).
    const uint64_t q = seg.batches / seg.workers, extra = seg.batches % seg.workers;
    std::vector<bool> read(m, false);
    for (uint64_t shard = 0; shard < shards; ++shard) {
      const uint64_t count = std::min(per, (q + (shard % seg.workers < extra ? 1 : 0)) * b);
      for (uint64_t j = 0; j < count; ++j) read[(j * shards + shard) % m] = true;
    }
    size_t kept = 0;
    for (uint64_t t = 0; t < m; ++t) {
      if (!read[t]) rest[kept++] = rest[t];
    }
    rest.resize(kept);
  }
  std::vector<uint64_t> mine;
  const uint64_t m = rest.size();
  if (m == 0) return mine;
  const uint64_t w = options_.world_size;
  const uint64_t per = PerShard(m, w, options_.batch_size, options_.drop_last);
  mine.reserve(per);
  for (uint64_t k = 0; k < per; ++k) mine.push_back(rest[(k * w + options_.rank) % m]);
  if (!subset.empty()) {
    for (uint64_t& i : mine) i = subset[i];
  }
  return mine;
}

}  // namespace dlfs
