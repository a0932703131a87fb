// TokenBlend: which source each window of a token stream comes from, for a
// blend of K sources with weights, decided per position from O(K) state.
//
// Position g of a segment (the stream from where these weights took
// effect) goes to the source whose interval [B_k, B_k+1) of [0, 2^32)
// holds x_g = (a·g + c) mod 2^32, with B the cumulative weights scaled to
// 2^32, a = 0x9E3779B9 (2^32 / golden ratio, a Weyl sequence) and c a
// phase from the seed. So the sources interleave evenly (the first g
// positions hold w_k·g ± O(log g) of source k's windows, never a run of one
// source longer than its weight allows), each decision is a binary search
// over K boundaries, and how many of the first g positions went to each
// source has a closed form (a floor sum, O(log 2^32) steps per source):
// any position — a resume, another rank, a worker — is reached without
// replaying the decisions before it, and nothing per window is stored.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dlfs/status.h"

namespace dlfs::tokens_internal {

// sum_{i=0}^{n-1} floor((a*i + b) / m), exactly. REQUIRES: m > 0.
unsigned __int128 FloorSum(uint64_t n, uint64_t m, uint64_t a, uint64_t b);

class TokenBlend {
 public:
  // InvalidArgument for weights that are negative, not finite, all zero,
  // empty, more than 65,535, or so small beside the others that their
  // interval would be empty (below 2^-32 of the total).
  static Result<TokenBlend> Create(std::span<const double> weights, uint64_t phase_seed);

  size_t sources() const { return bounds_.size() - 1; }
  // The source of position g. O(log K).
  uint32_t SourceOf(uint64_t g) const {
    const uint32_t x = Point(g);
    // First bound above x, less one: bounds_[0] = 0 <= x < bounds_[K] = 2^32.
    size_t lo = 0, hi = bounds_.size() - 1;
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      (x >= bounds_[mid] ? lo : hi) = mid;
    }
    return static_cast<uint32_t>(lo);
  }
  // How many of positions [0, g) went to source k. O(log 2^32).
  uint64_t CountOf(uint32_t k, uint64_t g) const;
  // Same for every source, into out[0, K).
  void Counts(uint64_t g, std::span<uint64_t> out) const;

 private:
  uint32_t Point(uint64_t g) const { return static_cast<uint32_t>(kStep * g + phase_); }
  // #{i < g : Point(i) < b}, b <= 2^32.
  uint64_t Below(uint64_t g, uint64_t b) const;

  static constexpr uint64_t kStep = 0x9E3779B9u;
  std::vector<uint64_t> bounds_;  // K + 1, from 0 to 2^32, strictly rising
  uint32_t phase_ = 0;
};

}  // namespace dlfs::tokens_internal
