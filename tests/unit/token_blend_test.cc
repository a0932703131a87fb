// TokenBlend: the closed-form counts agree with counting the decisions,
// the shares follow the weights, and the floor sum is exact.
#include "tokens/blend.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <vector>

namespace dlfs::tokens_internal {
namespace {

TEST(TokenBlendTest, FloorSumMatchesTheSum) {
  for (uint64_t m : {1ull, 3ull, 7ull, 1000ull, 1ull << 32}) {
    for (uint64_t a : {0ull, 1ull, 5ull, 2654435769ull}) {
      for (uint64_t b : {0ull, 2ull, 999ull, (1ull << 32) + 17}) {
        for (uint64_t n : {0ull, 1ull, 2ull, 50ull, 333ull}) {
          unsigned __int128 want = 0;
          for (uint64_t i = 0; i < n; ++i) {
            want += (static_cast<unsigned __int128>(a) * i + b) / m;
          }
          EXPECT_TRUE(FloorSum(n, m, a, b) == want) << n << " " << m << " " << a << " " << b;
        }
      }
    }
  }
}

TEST(TokenBlendTest, CountsEqualTheDecisionsAndFollowTheWeights) {
  const std::vector<double> weights = {0.5, 0.2, 0.0, 0.25, 0.05};
  Result<TokenBlend> blend = TokenBlend::Create(weights, 42);
  ASSERT_TRUE(blend.ok()) << blend.status().ToString();
  std::vector<uint64_t> counted(weights.size(), 0), closed(weights.size());
  constexpr uint64_t kPositions = 200000;
  for (uint64_t g = 0; g <= kPositions; ++g) {
    if (g % 9973 == 0 || g == kPositions) {
      blend->Counts(g, closed);
      for (uint32_t k = 0; k < weights.size(); ++k) {
        ASSERT_EQ(closed[k], counted[k]) << "source " << k << " at " << g;
        ASSERT_EQ(blend->CountOf(k, g), counted[k]);
      }
    }
    if (g < kPositions) ++counted[blend->SourceOf(g)];
  }
  EXPECT_EQ(counted[2], 0u);  // weight 0: never drawn
  for (uint32_t k = 0; k < weights.size(); ++k) {
    // Low discrepancy: within a few windows of the exact share.
    EXPECT_NEAR(static_cast<double>(counted[k]), weights[k] * kPositions, 8.0) << k;
  }
}

TEST(TokenBlendTest, FarPositionsNeedNoReplay) {
  const std::vector<double> weights = {3, 1};
  Result<TokenBlend> blend = TokenBlend::Create(weights, 7);
  ASSERT_TRUE(blend.ok());
  const uint64_t far = uint64_t{1} << 41;  // 2e12 windows
  const uint64_t a = blend->CountOf(0, far), b = blend->CountOf(1, far);
  EXPECT_EQ(a + b, far);
  EXPECT_NEAR(static_cast<double>(a) / static_cast<double>(far), 0.75, 1e-9);
  // Stepping from there agrees with the closed form.
  uint64_t c0 = a;
  for (uint64_t g = far; g < far + 1000; ++g) c0 += blend->SourceOf(g) == 0;
  EXPECT_EQ(c0, blend->CountOf(0, far + 1000));
}

TEST(TokenBlendTest, RefusesBadWeights) {
  EXPECT_FALSE(TokenBlend::Create(std::vector<double>{}, 0).ok());
  EXPECT_FALSE(TokenBlend::Create(std::vector<double>{0, 0}, 0).ok());
  EXPECT_FALSE(TokenBlend::Create(std::vector<double>{1, -1}, 0).ok());
  EXPECT_FALSE(TokenBlend::Create(std::vector<double>{1, NAN}, 0).ok());
  EXPECT_FALSE(TokenBlend::Create(std::vector<double>{1, 1e-12}, 0).ok());
  EXPECT_TRUE(TokenBlend::Create(std::vector<double>{1}, 0).ok());
}

TEST(TokenBlendTest, ManySourcesDecideQuickly) {
  // Not a speed assertion (tests check correctness): the decisions of 100
  // sources for a million positions agree with the closed-form counts.
  std::vector<double> weights(100);
  for (size_t k = 0; k < weights.size(); ++k) weights[k] = 1.0 + static_cast<double>(k % 7);
  Result<TokenBlend> blend = TokenBlend::Create(weights, 3);
  ASSERT_TRUE(blend.ok());
  std::vector<uint64_t> counted(weights.size(), 0), closed(weights.size());
  for (uint64_t g = 0; g < 1000000; ++g) ++counted[blend->SourceOf(g)];
  blend->Counts(1000000, closed);
  EXPECT_EQ(counted, closed);
}

}  // namespace
}  // namespace dlfs::tokens_internal
