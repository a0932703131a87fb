#include "dlfs/sampler.h"

#include <numeric>

namespace dlfs {

namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// xoshiro256** 1.0 (Blackman and Vigna), written out so the stream is fixed
// by this file alone.
class Xoshiro256 {
 public:
  Xoshiro256(uint64_t seed, uint64_t epoch) {
    uint64_t sm = seed ^ (epoch * 0xd1342543de82ef95ull + 0x2545f4914f6cdd1dull);
    for (uint64_t& w : s_) w = SplitMix64(&sm);
  }
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, bound), bound > 0 (Lemire 2019, unbiased).
  uint64_t Below(uint64_t bound) {
    unsigned __int128 m = static_cast<unsigned __int128>(Next()) * bound;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < bound) {
      const uint64_t threshold = -bound % bound;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(Next()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

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
  Xoshiro256 rng(options_.seed, epoch);
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
