// xoshiro256** 1.0 (Blackman and Vigna) and SplitMix64, written out so that
// the streams they make are fixed by this file alone: the epoch permutation
// (Sampler) and the decode pipeline's random choices are specified by them
// and must not change with the standard library.
#pragma once

#include <cstdint>

namespace dlfs {

// SplitMix64's output function of the state after its step (z = state + gamma).
constexpr uint64_t kSplitMixGamma = 0x9e3779b97f4a7c15ull;
inline uint64_t SplitMixOutput(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class Xoshiro256ss {
 public:
  // The four state words; not all zero (SplitMix64 outputs never are in practice).
  explicit Xoshiro256ss(const uint64_t (&state)[4]) : s_{state[0], state[1], state[2], state[3]} {}

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

  // Uniform in [a, b): the top 53 bits as a double in [0, 1).
  double Uniform(double a, double b) {
    return a + (b - a) * (static_cast<double>(Next() >> 11) * 0x1.0p-53);
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace dlfs
