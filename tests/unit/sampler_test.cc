#include "dlfs/sampler.h"

#include <algorithm>
#include <map>
#include <set>

#include "testutil.h"

namespace dlfs {
namespace sampler_test {

using testing::StatusIs;

Sampler Make(uint64_t n, SamplerOptions o) {
  auto s = Sampler::Create(n, o);
  EXPECT_OK(s);
  return *s;
}

TEST(SamplerTest, PermutationIsAPureFunctionOfSeedAndEpoch) {
  const Sampler a = Make(1000, {.seed = 7});
  const Sampler b = Make(1000, {.seed = 7, .rank = 0, .world_size = 1});
  EXPECT_EQ(a.Permutation(3), b.Permutation(3));
  EXPECT_NE(a.Permutation(3), a.Permutation(4));
  EXPECT_NE(a.Permutation(3), Make(1000, {.seed = 8}).Permutation(3));
  std::vector<uint64_t> p = a.Permutation(3);
  std::sort(p.begin(), p.end());
  for (uint64_t i = 0; i < p.size(); ++i) ASSERT_EQ(p[i], i);
}

// Pins the generator: if this changes, ranks built by different versions of
// dlfs would disagree on the epoch order.
TEST(SamplerTest, GoldenPermutation) {
  const Sampler s = Make(10, {.seed = 42});
  EXPECT_EQ(s.Permutation(0), (std::vector<uint64_t>{6, 4, 3, 5, 2, 7, 1, 9, 8, 0}));
  EXPECT_EQ(s.Permutation(1), (std::vector<uint64_t>{1, 3, 9, 6, 7, 0, 5, 2, 8, 4}));
}

TEST(SamplerTest, NoShuffleIsVolumeOrder) {
  const Sampler s = Make(5, {.shuffle = false, .rank = 1, .world_size = 2});
  EXPECT_EQ(s.Permutation(9), (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(s.RankIndices(9), (std::vector<uint64_t>{1, 3, 0}));  // padded by wrapping
}

TEST(SamplerTest, ShardsCoverEveryRankEqually) {
  for (uint64_t n : {1ull, 7ull, 100ull, 1001ull}) {
    for (uint32_t world : {1u, 2u, 3u, 4u, 8u, 13u}) {
      for (bool drop_last : {false, true}) {
        for (uint32_t batch : {1u, 4u, 32u}) {
          std::map<uint64_t, int> seen;
          uint64_t per_rank = 0, batches = 0;
          for (uint32_t r = 0; r < world; ++r) {
            const Sampler s = Make(n, {.seed = 3,
                                       .rank = r,
                                       .world_size = world,
                                       .batch_size = batch,
                                       .drop_last = drop_last});
            const auto mine = s.RankIndices(5);
            ASSERT_EQ(mine.size(), s.samples_per_rank());
            if (r == 0) {
              per_rank = mine.size();
              batches = s.batches_per_epoch();
            }
            // Every rank gets the same number of samples and batches.
            ASSERT_EQ(mine.size(), per_rank);
            ASSERT_EQ(s.batches_per_epoch(), batches);
            for (uint64_t i : mine) ++seen[i];
          }
          const std::string what = "n=" + std::to_string(n) + " world=" + std::to_string(world) +
                                   " batch=" + std::to_string(batch) +
                                   (drop_last ? " drop_last" : "");
          if (drop_last) {
            // Disjoint, nothing repeated, and only a tail dropped.
            for (auto& [i, c] : seen) ASSERT_EQ(c, 1) << what;
            EXPECT_EQ(per_rank % batch, 0u) << what;
            EXPECT_LT(n - seen.size(), uint64_t{world} * batch) << what;
          } else {
            // Every sample at least once; repeats only from wrap-around padding.
            EXPECT_EQ(seen.size(), n) << what;
            uint64_t total = 0;
            for (auto& [i, c] : seen) total += c;
            EXPECT_EQ(total, per_rank * world) << what;
            EXPECT_LT(total - n, std::max<uint64_t>(world, 1) * ((world + n - 1) / n)) << what;
          }
        }
      }
    }
  }
}

TEST(SamplerTest, RejectsBadOptions) {
  EXPECT_THAT(Sampler::Create(10, {.rank = 2, .world_size = 2}),
              StatusIs(StatusCode::kInvalidArgument, "rank 2 is not below world_size 2"));
  EXPECT_THAT(Sampler::Create(10, {.world_size = 0}),
              StatusIs(StatusCode::kInvalidArgument, "world_size must be at least 1"));
  EXPECT_THAT(Sampler::Create(10, {.batch_size = 0}),
              StatusIs(StatusCode::kInvalidArgument, "batch_size must be at least 1"));
  const Sampler empty = Make(0, {});
  EXPECT_TRUE(empty.RankIndices(0).empty());
  EXPECT_EQ(empty.batches_per_epoch(), 0u);
}

}  // namespace sampler_test
}  // namespace dlfs
