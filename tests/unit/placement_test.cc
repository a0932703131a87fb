// The cluster cache's placement (cache/placement.h): within capacities,
// balanced, on the first reader's node where there is room, the part read
// first kept when the capacities hold only part of the volume; a rule per
// position, nothing stored per sample.
#include "cache/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
    // The epoch's order: position p reads sample order_[p].
    order_.resize(volume_->size());
    std::iota(order_.begin(), order_.end(), uint64_t{0});
    std::shuffle(order_.begin(), order_.end(), std::mt19937_64(5));
    double squares = 0;
    for (uint64_t i = 0; i < volume_->size(); ++i) {
      const auto b = static_cast<double>(CachedBytes(volume_->directory().sample(i).length));
      total_ += static_cast<uint64_t>(b);
      squares += b * b;
    }
    mean_ = static_cast<double>(total_) / volume_->size();
    stddev_ = std::sqrt(squares / volume_->size() - mean_ * mean_);
  }

  Placement Place(const std::vector<int>& rank_node, const std::vector<uint64_t>& capacity) const {
    return Placement(volume_->size(), rank_node, capacity, mean_, stddev_);
  }

  // Bytes each node owns.
  std::vector<uint64_t> Owned(const Placement& p, size_t nodes) const {
    std::vector<uint64_t> bytes(nodes, 0);
    for (uint64_t pos = 0; pos < order_.size(); ++pos) {
      const int o = p.Owner(pos);
      if (o >= 0) bytes[o] += CachedBytes(volume_->directory().sample(order_[pos]).length);
    }
    return bytes;
  }

  testing::TempDir dir_;
  std::shared_ptr<Volume> volume_;
  std::vector<uint64_t> order_;
  uint64_t total_ = 0;
  double mean_ = 0, stddev_ = 0;
};

TEST_F(PlacementTest, RoomForAllIsBalancedAndFollowsTheFirstReader) {
  const std::vector<int> rank_node = {0, 0, 1, 1, 2, 2, 3, 3};  // 4 nodes of 2 ranks
  const std::vector<uint64_t> capacity(4, total_);              // each could hold all
  const Placement p = Place(rank_node, capacity);
  uint64_t first_reader = 0;
  for (uint64_t pos = 0; pos < order_.size(); ++pos) {
    ASSERT_GE(p.Owner(pos), 0);
    EXPECT_EQ(p.Owner(pos), Place(rank_node, capacity).Owner(pos));  // a pure function
    first_reader += p.Owner(pos) == rank_node[pos % rank_node.size()];
  }
  EXPECT_EQ(first_reader, order_.size());
  // A quarter of the samples each, so of the bytes within their spread.
  for (uint64_t b : Owned(p, 4)) EXPECT_NEAR(b, total_ / 4.0, total_ * 0.05);
}

TEST_F(PlacementTest, CapacitiesBoundWhatIsKeptAndKeepWhatIsReadFirst) {
  const std::vector<int> rank_node = {0, 1};
  const std::vector<uint64_t> capacity = {total_ * 3 / 20, total_ * 3 / 20};  // 30 % in all
  const Placement p = Place(rank_node, capacity);
  const std::vector<uint64_t> owned = Owned(p, 2);
  EXPECT_LE(owned[0], capacity[0]);
  EXPECT_LE(owned[1], capacity[1]);
  // Nearly full (the bound keeps 4 standard deviations of the sum spare).
  EXPECT_GT(owned[0] + owned[1], (capacity[0] + capacity[1]) * 85 / 100);
  // The part kept is read first.
  uint64_t kept = 0;
  for (uint64_t pos = 0; pos < order_.size(); ++pos) kept += p.Owner(pos) >= 0;
  for (uint64_t pos = 0; pos < kept; ++pos) ASSERT_GE(p.Owner(pos), 0) << pos;
  for (uint64_t pos = kept; pos < order_.size(); ++pos) ASSERT_EQ(p.Owner(pos), -1) << pos;
}

TEST_F(PlacementTest, NoCapacityKeepsNothing) {
  const Placement none = Place({0, 1}, {0, 0});
  for (uint64_t pos = 0; pos < order_.size(); ++pos) ASSERT_EQ(none.Owner(pos), -1);
  // A node without a cache owns nothing; the other takes what fits.
  const Placement one = Place({0, 1}, {0, total_});
  uint64_t second = 0;
  for (uint64_t pos = 0; pos < order_.size(); ++pos) {
    ASSERT_NE(one.Owner(pos), 0);
    second += one.Owner(pos) == 1;
  }
  EXPECT_GT(second, order_.size() * 9 / 10);
  EXPECT_LE(Owned(one, 2)[1], total_);
}

// Nodes of other sizes and capacities: the leftovers of full nodes fill the
// room of the others, in reading order, never past a share.
TEST_F(PlacementTest, LeftoversFillTheRoomOfOtherNodes) {
  const std::vector<int> rank_node = {0, 0, 0, 1, 2, 2};
  const std::vector<uint64_t> capacity = {total_ / 10, total_, total_ / 2};
  const Placement p = Place(rank_node, capacity);
  const std::vector<uint64_t> owned = Owned(p, 3);
  for (size_t k = 0; k < 3; ++k) EXPECT_LE(owned[k], capacity[k]) << k;
  uint64_t kept = 0;
  for (uint64_t pos = 0; pos < order_.size(); ++pos) kept += p.Owner(pos) >= 0;
  EXPECT_GT(kept, order_.size() * 9 / 10);
  // Proportional to the capacities (node 1 takes node 0's overflow).
  EXPECT_GT(owned[1], owned[2]);
  EXPECT_GT(owned[2], owned[0]);
  // Node 0 keeps what its ranks read first.
  for (uint64_t pos = 0; pos < 60; ++pos) {
    if (rank_node[pos % 6] == 0) EXPECT_EQ(p.Owner(pos), 0) << pos;
  }
  // A billion positions: a rule, no table.
  const Placement big(1000000000, rank_node, capacity, 100, 10);
  EXPECT_GE(big.Owner(999999999), -1);
  EXPECT_EQ(big.Owner(1000000000), -1);
}

}  // namespace placement_test
}  // namespace dlfs::cache_internal
