#include "tokens/blend.h"

#include <cmath>
#include <string>
#include <utility>

#include "common/xoshiro.h"

namespace dlfs::tokens_internal {

unsigned __int128 FloorSum(uint64_t n, uint64_t m, uint64_t a, uint64_t b) {
  // The Euclid-like reduction (as in AtCoder Library's floor_sum), in 128
  // bits: n may be 2^40 and a·n beyond 64 bits.
  using u128 = unsigned __int128;
  u128 sum = 0;
  u128 nn = n, mm = m, aa = a, bb = b;
  while (true) {
    if (aa >= mm) {
      sum += nn * (nn - 1) / 2 * (aa / mm);
      aa %= mm;
    }
    if (bb >= mm) {
      sum += nn * (bb / mm);
      bb %= mm;
    }
    const u128 y_max = aa * nn + bb;
    if (y_max < mm) break;
    nn = y_max / mm;
    bb = y_max % mm;
    std::swap(mm, aa);
  }
  return sum;
}

Result<TokenBlend> TokenBlend::Create(std::span<const double> weights, uint64_t phase_seed) {
  if (weights.empty()) return Status::InvalidArgument("a blend needs at least one source");
  if (weights.size() > 65535) {
    return Status::InvalidArgument("a blend of " + std::to_string(weights.size()) +
                                   " sources: at most 65,535");
  }
  long double total = 0;
  for (size_t k = 0; k < weights.size(); ++k) {
    const double w = weights[k];
    if (!std::isfinite(w) || w < 0) {
      return Status::InvalidArgument("weight " + std::to_string(k) + " is " + std::to_string(w) +
                                     ": weights must be finite and >= 0");
    }
    total += w;
  }
  if (total <= 0) return Status::InvalidArgument("every weight is 0");
  TokenBlend blend;
  blend.bounds_.reserve(weights.size() + 1);
  blend.bounds_.push_back(0);
  long double cumulative = 0;
  constexpr long double kScale = 4294967296.0L;
  for (size_t k = 0; k < weights.size(); ++k) {
    cumulative += weights[k];
    const uint64_t bound = k + 1 == weights.size()
                               ? uint64_t{1} << 32
                               : static_cast<uint64_t>(std::llround(cumulative / total * kScale));
    if (weights[k] > 0 && bound <= blend.bounds_.back()) {
      return Status::InvalidArgument("weight " + std::to_string(k) + " (" +
                                     std::to_string(weights[k]) +
                                     ") is below 2^-32 of the total: it would never be drawn");
    }
    // A zero weight keeps an empty interval: its source is never drawn.
    blend.bounds_.push_back(std::max(bound, blend.bounds_.back()));
  }
  blend.phase_ = static_cast<uint32_t>(SplitMixOutput(phase_seed + kSplitMixGamma) >> 32);
  return blend;
}

uint64_t TokenBlend::Below(uint64_t g, uint64_t b) const {
  // [x mod m < b] = floor(x/m) - floor((x + m - b)/m) + 1 for x = a·i + c,
  // m = 2^32, 0 <= b <= m; summed over i < g.
  constexpr uint64_t m = uint64_t{1} << 32;
  if (b == 0 || g == 0) return 0;
  if (b >= m) return g;
  const unsigned __int128 low = FloorSum(g, m, kStep, phase_);
  const unsigned __int128 high = FloorSum(g, m, kStep, phase_ + m - b);
  return static_cast<uint64_t>(low + g - high);
}

uint64_t TokenBlend::CountOf(uint32_t k, uint64_t g) const {
  if (sources() == 1) return g;
  return Below(g, bounds_[k + 1]) - Below(g, bounds_[k]);
}

void TokenBlend::Counts(uint64_t g, std::span<uint64_t> out) const {
  uint64_t below = 0;
  for (size_t k = 0; k < sources(); ++k) {
    const uint64_t next = Below(g, bounds_[k + 1]);
    out[k] = next - below;
    below = next;
  }
}

}  // namespace dlfs::tokens_internal
