#include "dlfs/sampler.h"

#include <numeric>

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

}  // namespace

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
  s.per_rank_ = options.drop_last ? sample_count / w / b * b : (sample_count + w - 1) / w;
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

}  // namespace dlfs
