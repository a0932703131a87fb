// The cluster cache's placement (cache/placement.h): within capacities,
// balanced by bytes, on the first reader's node where there is room, the
// part read first kept when the capacities hold only part of the volume.
#include "cache/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "synthetic_volume.h"
#include "testutil.h"

namespace dlfs::cache_internal {
namespace placement_test {

class PlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    volume_ = testing::MakeSyntheticVolume(dir_.path() + "/v.dlfs",
                                           {.samples = 2000, .bytes = [](uint64_t i) {
                                              return testing::RandomBytes(50 + (i * 7919) % 3000,
                                                                          static_cast<uint32_t>(i));
                                            }});
    ASSERT_TRUE(volume_);
    order_.resize(volume_->size());
    std::iota(order_.begin(), order_.end(), uint64_t{0});
    std::shuffle(order_.begin(), order_.end(), std::mt19937_64(5));
    for (uint64_t i = 0; i < volume_->size(); ++i) {
      total_ += CachedBytes(volume_->directory().sample(i).length);
    }
  }

  // Bytes each node owns.
  std::vector<uint64_t> Owned(const std::vector<int32_t>& owner, size_t nodes) const {
    std::vector<uint64_t> bytes(nodes, 0);
    for (uint64_t i = 0; i < owner.size(); ++i) {
      if (owner[i] >= 0) bytes[owner[i]] += CachedBytes(volume_->directory().sample(i).length);
    }
    return bytes;
  }

  testing::TempDir dir_;
  std::shared_ptr<Volume> volume_;
  std::vector<uint64_t> order_;
  uint64_t total_ = 0;
};

TEST_F(PlacementTest, RoomForAllIsBalancedAndFollowsTheFirstReader) {
  const std::vector<int> rank_node = {0, 0, 1, 1, 2, 2, 3, 3};  // 4 nodes of 2 ranks
  const std::vector<uint64_t> capacity(4, total_);              // each could hold all
  const std::vector<int32_t> owner =
      PlaceSamples(volume_->directory(), order_, rank_node, capacity);
  ASSERT_EQ(owner.size(), volume_->size());
  EXPECT_EQ(owner, PlaceSamples(volume_->directory(), order_, rank_node, capacity));
  for (int32_t o : owner) ASSERT_GE(o, 0);
  // Within a few samples of a quarter each (a share rounds up by a sample).
  for (uint64_t b : Owned(owner, 4)) EXPECT_NEAR(b, total_ / 4.0, 4 * 3100.0);
  uint64_t first_reader = 0;
  for (size_t p = 0; p < order_.size(); ++p) {
    first_reader += owner[order_[p]] == rank_node[p % rank_node.size()];
  }
  EXPECT_GT(first_reader, order_.size() * 9 / 10);
}

TEST_F(PlacementTest, CapacitiesBoundWhatIsKeptAndKeepWhatIsReadFirst) {
  const std::vector<int> rank_node = {0, 1};
  const std::vector<uint64_t> capacity = {total_ * 3 / 20, total_ * 3 / 20};  // 30 % in all
  const std::vector<int32_t> owner =
      PlaceSamples(volume_->directory(), order_, rank_node, capacity);
  const std::vector<uint64_t> owned = Owned(owner, 2);
  EXPECT_LE(owned[0], capacity[0]);
  EXPECT_LE(owned[1], capacity[1]);
  // Nearly full: only a sample's worth of room left.
  EXPECT_GT(owned[0] + owned[1], capacity[0] + capacity[1] - 2 * 3200);
  // The part kept is read first: of the samples read first (as many as
  // are kept), nearly all are kept.
  const uint64_t kept = std::ranges::count_if(owner, [](int32_t o) { return o >= 0; });
  uint64_t early = 0;
  for (uint64_t p = 0; p < kept; ++p) early += owner[order_[p]] >= 0;
  EXPECT_GT(early, kept * 9 / 10);
}

TEST_F(PlacementTest, NoCapacityKeepsNothing) {
  const std::vector<int32_t> owner = PlaceSamples(
      volume_->directory(), order_, std::vector<int>{0, 1}, std::vector<uint64_t>{0, 0});
  EXPECT_TRUE(std::ranges::all_of(owner, [](int32_t o) { return o == -1; }));
  // A node without a cache owns nothing; the other takes what fits.
  const std::vector<int32_t> one = PlaceSamples(
      volume_->directory(), order_, std::vector<int>{0, 1}, std::vector<uint64_t>{0, total_});
  EXPECT_TRUE(std::ranges::all_of(one, [](int32_t o) { return o == 1; }));
}

}  // namespace placement_test
}  // namespace dlfs::cache_internal
