#include "dlfs/sampler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
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

// Pins the order (docs/format.md, "Epoch order"; tests/python/test_epoch.py
// computes the same values in Python from that text): if this changes, ranks
// built by different versions of dlfs would disagree on the epoch order, and
// resume states of order version 2 would resume another order.
TEST(SamplerTest, GoldenOrder) {
  struct Golden {
    uint64_t n, seed, epoch, position, sample;
  };
  const Golden golden[] = {
      {2, 0, 0, 0, 0},
      {3, 1, 2, 2, 0},
      {10, 42, 0, 0, 1},
      {10, 42, 1, 9, 8},
      {1000, 7, 3, 500, 771},
      {1ull << 20, 5, 0, 12345, 871166},
      {(1ull << 20) + 1, 5, 0, 1ull << 20, 268671},
      {100000000, 7, 0, 0, 98052685},
      {1000000000, 123, 17, 999999999, 866032615},
      {18446744073709551615ull, 1, 2, 3, 554798756374177014ull},
      {(1ull << 63) + 1, 9, 9, 1ull << 62, 2512644368312552114ull},
  };
  for (const Golden& g : golden) {
    const EpochPermutation p(g.n, g.seed, g.epoch);
    EXPECT_EQ(p(g.position), g.sample) << "n " << g.n;
    EXPECT_EQ(p.PositionOf(g.sample), g.position) << "n " << g.n;
  }
  const Sampler s = Make(10, {.seed = 42});
  EXPECT_EQ(s.Permutation(0), (std::vector<uint64_t>{1, 5, 7, 8, 9, 6, 2, 4, 3, 0}));
  EXPECT_EQ(s.Permutation(1), (std::vector<uint64_t>{9, 1, 2, 0, 4, 6, 3, 5, 7, 8}));
  EXPECT_EQ(EpochPermutation(10, 42, 0).rounds(), 12u);
  EXPECT_EQ(EpochPermutation(1000, 42, 0).rounds(), 6u);
}

TEST(SamplerTest, ABijectionForEverySize) {
  std::vector<uint64_t> sizes = {0, 1, 2, 3, 4, 5, 7, 9, 100, 255, 256, 257, 1000, 4095, 4097};
  for (int k = 10; k <= 17; ++k) {
    for (int64_t d : {-1, 0, 1}) sizes.push_back((uint64_t{1} << k) + d);
  }
  for (uint64_t n : sizes) {
    for (uint64_t seed : {0ull, 1ull, 0xdeadbeefull}) {
      const EpochPermutation p(n, seed, seed + 3);
      std::vector<bool> hit(n, false);
      for (uint64_t t = 0; t < n; ++t) {
        const uint64_t s = p(t);
        ASSERT_LT(s, n) << "n " << n;
        ASSERT_FALSE(hit[s]) << "n " << n << ": sample " << s << " twice";
        hit[s] = true;
        ASSERT_EQ(p.PositionOf(s), t) << "n " << n;
      }
    }
  }
  // Huge domains: in range and invertible, near the edges too.
  for (uint64_t n : {uint64_t{1} << 32, (uint64_t{1} << 32) + 1, uint64_t{1} << 63,
                     (uint64_t{1} << 63) + 1, ~uint64_t{0} - 1, ~uint64_t{0}}) {
    const EpochPermutation p(n, 11, 12);
    for (uint64_t t : {uint64_t{0}, uint64_t{1}, n / 2, n - 2, n - 1}) {
      const uint64_t s = p(t);
      ASSERT_LT(s, n);
      ASSERT_EQ(p.PositionOf(s), t) << "n " << n << " t " << t;
    }
  }
  // No shuffle: the identity.
  const EpochPermutation id(100, 5, 5, false);
  EXPECT_EQ(id.rounds(), 0u);
  for (uint64_t t = 0; t < 100; ++t) ASSERT_EQ(id(t), t);
}

// Where consecutive indices land: far apart, as far as two random positions
// (mean distance n/3, and within n/1000 of each other for 0.2 % of them),
// and uncorrelated; so neighbours in the volume (a class, a shard of a
// source) never travel together through an epoch.
TEST(SamplerQualityTest, NeighboursLandFarApart) {
  for (uint64_t n : {uint64_t{1} << 18, (uint64_t{1} << 18) + 3, uint64_t{300007}}) {
    const EpochPermutation p(n, 1234, 5);
    std::vector<uint64_t> pos(n);
    for (uint64_t t = 0; t < n; ++t) pos[p(t)] = t;
    const double mean = (n - 1) / 2.0;
    double cov = 0, var = 0, distance = 0, cov_positions = 0;
    uint64_t close = 0;
    for (uint64_t i = 0; i + 1 < n; ++i) {
      const double a = pos[i] - mean, b = pos[i + 1] - mean;
      cov += a * b;
      var += a * a;
      const double d = std::fabs(static_cast<double>(pos[i + 1]) - static_cast<double>(pos[i]));
      distance += d;
      close += d < n / 1000.0;
      cov_positions += (p(i) - mean) * (p(i + 1) - mean);
    }
    const double bound = 6 / std::sqrt(static_cast<double>(n));
    EXPECT_LT(std::fabs(cov / var), bound) << "n " << n;
    EXPECT_LT(std::fabs(cov_positions / var), bound) << "n " << n;
    EXPECT_NEAR(distance / (n - 1) / n, 1 / 3.0, 0.005) << "n " << n;
    EXPECT_NEAR(static_cast<double>(close) / (n - 1), 0.002, 0.0005) << "n " << n;
  }
}

// Epochs and seeds give unrelated permutations: as many positions in common
// as two random permutations (one, on average), and uncorrelated.
TEST(SamplerQualityTest, EpochsAndSeedsDiffer) {
  const uint64_t n = 100003;
  const EpochPermutation base(n, 7, 0);
  for (const EpochPermutation& other :
       {EpochPermutation(n, 7, 1), EpochPermutation(n, 7, 2), EpochPermutation(n, 8, 0),
        EpochPermutation(n, 7 ^ (uint64_t{1} << 63), 0)}) {
    uint64_t same = 0;
    double cov = 0, var = 0;
    const double mean = (n - 1) / 2.0;
    for (uint64_t t = 0; t < n; ++t) {
      same += base(t) == other(t);
      cov += (base(t) - mean) * (other(t) - mean);
      var += (t - mean) * (t - mean);
    }
    EXPECT_LT(same, 10u);
    EXPECT_LT(std::fabs(cov / var), 6 / std::sqrt(static_cast<double>(n)));
  }
}

// Chi-square over many epochs of a small n: where index 0 lands (n - 1
// degrees of freedom) and where indices 0 and 1 land together (n (n - 1)
// cells): uniform. Small domains take more rounds for this (6 rounds fail
// it below 100 samples).
TEST(SamplerQualityTest, SmallSizesAreUniformOverEpochs) {
  auto bound = [](double df) { return df + 6 * std::sqrt(2 * df) + 6; };
  for (uint64_t n : {2, 3, 4, 5, 6, 7, 10, 12, 16, 25, 37}) {
    const uint64_t cells = n * (n - 1);
    const uint64_t epochs = std::max<uint64_t>(20000, 40 * cells);
    std::vector<uint64_t> where(n, 0), pair(n * n, 0);
    for (uint64_t e = 0; e < epochs; ++e) {
      const EpochPermutation p(n, 99, e);
      uint64_t p0 = 0, p1 = 0;
      for (uint64_t t = 0; t < n; ++t) {
        const uint64_t s = p(t);
        if (s == 0) p0 = t;
        if (s == 1) p1 = t;
      }
      ++where[p0];
      ++pair[p0 * n + p1];
    }
    double chi = 0, chi_pair = 0;
    const double e1 = static_cast<double>(epochs) / n, e2 = static_cast<double>(epochs) / cells;
    for (uint64_t c : where) chi += (c - e1) * (c - e1) / e1;
    for (uint64_t a = 0; a < n; ++a) {
      for (uint64_t b = 0; b < n; ++b) {
        if (a != b) chi_pair += (pair[a * n + b] - e2) * (pair[a * n + b] - e2) / e2;
      }
    }
    EXPECT_LT(chi, bound(n - 1)) << "n " << n;
    EXPECT_LT(chi_pair, bound(cells - 1)) << "n " << n;
  }
}

// The structure a 4-round Feistel network keeps, whatever its round
// function (Patarin's distinguisher): of the positions sharing the high half
// (a batch's neighbours), pairs whose low halves differ as their samples'
// do are twice as common as for a random permutation. Not with 6 rounds.
TEST(SamplerQualityTest, NoFeistelStructureWithinABlock) {
  const uint64_t n = uint64_t{1} << 16, block = 256;  // a = 8 low bits
  double pairs = 0, expected = 0;
  for (uint64_t seed = 0; seed < 2; ++seed) {
    const EpochPermutation p(n, seed, 0);
    for (uint64_t high = 0; high < n / block; ++high) {
      std::vector<uint64_t> count(block, 0);
      for (uint64_t low = 0; low < block; ++low) {
        ++count[(p(high * block + low) % block) ^ low];
      }
      for (uint64_t c : count) pairs += c * (c - 1) / 2.0;
      expected += block * (block - 1) / 2.0 / block;
    }
  }
  EXPECT_NEAR(pairs / expected, 1.0, 0.03);
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
            // The order, position by position, is the list.
            const RankOrder o = s.Ranked(5);
            ASSERT_EQ(o.size(), mine.size());
            for (uint64_t k = 0; k < mine.size(); ++k) ASSERT_EQ(o.At(k), mine[k]);
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

TEST(SamplerTest, RankOrdersOfHugeEpochsStoreNothing) {
  // A billion samples: the order of any rank, any position, at once.
  const uint64_t n = 1000000000;
  const Sampler s = Make(n, {.seed = 3, .rank = 5, .world_size = 8, .batch_size = 256});
  const RankOrder o = s.Ranked(2);
  EXPECT_EQ(o.size(), n / 8);
  const EpochPermutation p = s.Order(2);
  for (uint64_t k : {uint64_t{0}, uint64_t{1}, n / 16, n / 8 - 1}) {
    EXPECT_EQ(o.At(k), p(k * 8 + 5));
  }
  // Padding wraps around even where k * world + rank passes 2^64.
  const uint64_t m = ~uint64_t{0} - 2;
  const Sampler h = Make(m, {.shuffle = false, .rank = 6, .world_size = 7});
  const RankOrder last = h.Ranked(0);
  EXPECT_EQ(last.size(), m / 7 + 1);
  EXPECT_EQ(last.PositionAt(last.size() - 1), (m / 7) * 7 + 6 - m);
}

TEST(SampleSubsetTest, RangesListsAndTheirCrc) {
  const SampleSubset all;
  EXPECT_TRUE(all.all());
  EXPECT_EQ(all.Count(50), 50u);
  EXPECT_EQ(all.At(7), 7u);
  EXPECT_EQ(all.Crc(), 0u);
  EXPECT_EQ(SampleSubset(std::vector<uint64_t>{}).kind(), SampleSubset::Kind::kAll);

  const SampleSubset range = SampleSubset::Range(10, 5);
  EXPECT_EQ(range.Count(50), 5u);
  EXPECT_EQ(range.At(4), 14u);
  EXPECT_EQ(range.PositionOf(12), 2u);
  EXPECT_EQ(range.PositionOf(15), std::nullopt);
  EXPECT_EQ(range.PositionOf(9), std::nullopt);
  EXPECT_OK(range.Check(15, "v"));
  EXPECT_THAT(range.Check(14, "v"), StatusIs(StatusCode::kInvalidArgument, "out of range"));
  EXPECT_THAT(SampleSubset::Range(~uint64_t{0}, 2).Check(10, "v"),
              StatusIs(StatusCode::kInvalidArgument, "out of range"));

  const SampleSubset list = std::vector<uint64_t>{9, 3, 5, 3};
  EXPECT_EQ(list.kind(), SampleSubset::Kind::kList);
  EXPECT_EQ(list.Count(50), 4u);
  EXPECT_EQ(list.At(2), 5u);
  EXPECT_EQ(list.PositionOf(5), 2u);
  EXPECT_EQ(list.PositionOf(9), 0u);
  EXPECT_EQ(list.PositionOf(4), std::nullopt);
  EXPECT_THAT(list.Check(9, "v.dlfs"),
              StatusIs(StatusCode::kInvalidArgument,
                       "subset index 9 is out of range (v.dlfs has 9 samples)"));
  const SampleSubset sorted = std::vector<uint64_t>{2, 4, 8};
  EXPECT_EQ(sorted.PositionOf(8), 2u);
  EXPECT_EQ(sorted.PositionOf(3), std::nullopt);

  // A range names the same subset as the list of its indices, in O(log^2).
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200; ++i) {
    const uint64_t count = rng() % 3000;
    uint64_t first = rng() % 100000;
    if (i % 10 == 0) first = ~uint64_t{0} - count - rng() % 5;
    if (i % 10 == 1) first = (rng() % 8) << (rng() % 60);
    std::vector<uint64_t> indices(count);
    std::iota(indices.begin(), indices.end(), first);
    ASSERT_EQ(SampleSubset::Range(first, count).Crc(), SampleSubset(indices).Crc())
        << first << " + " << count;
  }
  EXPECT_EQ(SampleSubset::Range(0, 0).Crc(), 1u);  // an empty subset, not "none"
  // Large: a billion indices without a pass over them.
  EXPECT_NE(SampleSubset::Range(5, 1000000000).Crc(), SampleSubset::Range(5, 999999999).Crc());
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

// ---- Elastic resume against the O(n) algorithm it replaced ---------------

// The rest of an epoch after `done` as dlfs computed it before order 2: a
// list of the permutation's positions, each segment marking what it read in
// a vector<bool> of the rest. Kept as the reference model of the arithmetic
// in RankOrder::Rest. Positions only (no permutation): which positions are
// left, in which order, is what both define.
Result<std::vector<uint64_t>> ReferenceRest(uint64_t n, bool drop_last,
                                            std::span<const EpochSegment> done, uint64_t epoch) {
  auto per_shard = [&](uint64_t m, uint64_t shards, uint64_t b) {
    return drop_last ? m / shards / b * b : (m + shards - 1) / shards;
  };
  DLFS_RETURN_IF_ERROR(CheckEpochSegments(done));
  std::vector<uint64_t> rest(n);
  std::iota(rest.begin(), rest.end(), uint64_t{0});
  for (size_t i = 0; i < done.size(); ++i) {
    const EpochSegment& seg = done[i];
    const uint64_t m = rest.size();
    if (m == 0) break;
    const uint64_t shards = uint64_t{seg.world_size} * seg.workers;
    const uint64_t b = seg.batch_size;
    const uint64_t per = per_shard(m, shards, b);
    const uint64_t batches = (per + b - 1) / b;
    if (seg.batches > batches * seg.workers) {
      return Status::InvalidArgument(
          "part " + std::to_string(i + 1) + " of epoch " + std::to_string(epoch) + " says " +
          std::to_string(seg.batches) + " batches were handed out of its " +
          std::to_string(batches * seg.workers));
    }
    if (seg.batches == batches * seg.workers) {
      rest.clear();
      break;
    }
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
  return rest;
}

// Random (n, segments, world, workers, batch, drop_last): every new rank's
// positions, one by one, are the reference's; and so are the errors.
TEST(ElasticOrderTest, MatchesTheReferenceModel) {
  std::mt19937_64 rng(2024);
  auto pick = [&](uint64_t lo, uint64_t hi) { return lo + rng() % (hi - lo + 1); };
  int compared = 0, refused = 0, emptied = 0, wrapped = 0, listed = 0;
  for (int iteration = 0; iteration < 2500; ++iteration) {
    const uint64_t n = iteration % 50 == 0  ? pick(20000, 60000)
                       : iteration % 3 == 0 ? pick(0, 40)
                                            : pick(1, 3000);
    const bool drop_last = rng() % 3 == 0;
    std::vector<EpochSegment> done;
    const int segments = iteration % 97 == 0 ? 64 : static_cast<int>(pick(1, 4));
    bool bad = false;
    for (int s = 0; s < segments; ++s) {
      EpochSegment seg;
      seg.world_size = static_cast<uint32_t>(rng() % 5 == 0 ? pick(1, 300) : pick(1, 8));
      seg.workers = static_cast<uint32_t>(rng() % 4 == 0 ? pick(1, 12) : pick(1, 3));
      seg.batch_size = static_cast<uint32_t>(rng() % 4 == 0 ? pick(1, 3) : pick(1, 64));
      // How many batches it had: from the reference's rest so far.
      ASSERT_OK_AND_ASSIGN(std::vector<uint64_t> so_far, ReferenceRest(n, drop_last, done, 1));
      const uint64_t m = so_far.size();
      const uint64_t shards = uint64_t{seg.world_size} * seg.workers;
      const uint64_t per =
          drop_last ? m / shards / seg.batch_size * seg.batch_size : (m + shards - 1) / shards;
      const uint64_t whole = seg.workers * ((per + seg.batch_size - 1) / seg.batch_size);
      const int kind = static_cast<int>(rng() % 20);
      seg.batches = kind == 0 ? whole : kind == 1 ? whole + 1 : kind == 2 ? 0 : pick(0, whole);
      bad = bad || (m > 0 && seg.batches > whole);
      // The cases of RankOrder::Rest: a segment with no full row whose
      // extra batches wrap around, with fewer or more shards than positions.
      const uint64_t q = seg.batches / seg.workers, extra = seg.batches % seg.workers;
      const uint64_t hi = std::min(per, (q + 1) * seg.batch_size);
      if (m > 0 && seg.batches < whole && extra > 0 && std::min(per, q * seg.batch_size) == 0 &&
          hi * shards > m) {
        ++(shards > m ? listed : wrapped);
      }
      done.push_back(seg);
      if (kind == 1) break;
    }
    const uint32_t world = static_cast<uint32_t>(rng() % 4 == 0 ? pick(1, 40) : pick(1, 6));
    const uint32_t batch = static_cast<uint32_t>(pick(1, 50));
    SCOPED_TRACE(::testing::Message()
                 << "iteration " << iteration << " n " << n << " drop_last " << drop_last
                 << " segments " << done.size() << " world " << world << " batch " << batch);
    Result<std::vector<uint64_t>> ref = ReferenceRest(n, drop_last, done, 1);
    for (uint32_t r = 0; r < world; ++r) {
      const Sampler s =
          Make(n, {.rank = r, .world_size = world, .batch_size = batch, .drop_last = drop_last});
      Result<RankOrder> got = s.Ranked(1, done, {});
      if (!ref.ok()) {
        ASSERT_THAT(got, StatusIs(StatusCode::kInvalidArgument, ref.status().message()));
        ++refused;
        break;
      }
      ASSERT_FALSE(bad);
      ASSERT_OK(got);
      const uint64_t m = ref->size();
      const uint64_t per = m == 0      ? 0
                           : drop_last ? m / world / batch * batch
                                       : (m + world - 1) / world;
      ASSERT_EQ(got->size(), per);
      for (uint64_t k = 0; k < per; ++k) {
        ASSERT_EQ(got->PositionAt(k), (*ref)[(k * world + r) % m]) << "rank " << r << " k " << k;
      }
      emptied += m == 0;
      ++compared;
    }
  }
  EXPECT_GT(compared, 5000);
  EXPECT_GT(refused, 50);
  EXPECT_GT(emptied, 50);
  EXPECT_GT(wrapped, 50);
  EXPECT_GT(listed, 50);
}

// The same through the permutation and a subset: the indices are the
// positions' samples, mapped.
TEST(ElasticOrderTest, MapsPositionsThroughThePermutationAndTheSubset) {
  const uint64_t n = 777;
  std::vector<uint64_t> subset(n);
  for (uint64_t i = 0; i < n; ++i) subset[i] = 5000 - 3 * i;
  const std::vector<EpochSegment> done = {{3, 2, 10, 7}, {5, 1, 4, 9}};
  ASSERT_OK_AND_ASSIGN(std::vector<uint64_t> rest, ReferenceRest(n, false, done, 4));
  const Sampler s = Make(n, {.seed = 17, .rank = 2, .world_size = 3, .batch_size = 8});
  const EpochPermutation p = s.Order(4);
  ASSERT_OK_AND_ASSIGN(std::vector<uint64_t> got, s.RankIndices(4, done, subset));
  ASSERT_EQ(got.size(), (rest.size() + 2) / 3);
  for (uint64_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k], subset[p(rest[(k * 3 + 2) % rest.size()])]);
  }
}

}  // namespace sampler_test
}  // namespace dlfs
