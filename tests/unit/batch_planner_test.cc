#include "loader/batch_planner.h"

#include <algorithm>
#include <random>

#include "dlfs/builder.h"
#include "dlfs/volume.h"
#include "synthetic_volume.h"
#include "testutil.h"

namespace dlfs::loader_internal {
namespace batch_planner_test {

using testing::TempDir;

class PlannerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One class directory, so volume index i is sample i.
    testing::SyntheticVolume spec{.samples = 300, .classes = 1};
    spec.bytes = [](uint64_t i) {
      // Mostly small samples, a few large ones (one over max_read).
      std::mt19937 rng(static_cast<uint32_t>(i) + 1);
      size_t n = rng() % 3000;
      if (i % 50 == 7) n = 200000 + rng() % 100000;
      if (i == 123) n = 3 << 20;
      if (i == 200) n = 0;
      return testing::RandomBytes(n, static_cast<uint32_t>(i));
    };
    vol_ = testing::MakeSyntheticVolume(tmp_ / "v.dlfs", spec);
    ASSERT_TRUE(vol_);
    file_ = testing::ReadFile(tmp_ / "v.dlfs");
  }

  // Executes a plan against the file bytes and checks every sample's span.
  void CheckPlan(const std::vector<uint64_t>& indices, const PlanOptions& o, BatchPlan* plan) {
    PlanBatch(vol_->directory(), indices, o, plan);
    std::vector<std::byte> buf(plan->buffer_bytes);
    uint64_t expect_at = 0;
    for (const PlannedRead& r : plan->reads) {
      ASSERT_EQ(r.offset % o.alignment, 0u);
      ASSERT_EQ(r.length % o.alignment, 0u);
      ASSERT_LE(r.length, o.read.max_read);
      ASSERT_EQ(r.buffer_offset, expect_at);  // back to back
      ASSERT_LE(r.offset + r.length, file_.size());
      std::memcpy(buf.data() + r.buffer_offset, file_.data() + r.offset, r.length);
      expect_at += r.length;
    }
    ASSERT_EQ(expect_at, plan->buffer_bytes);
    for (size_t k = 0; k < indices.size(); ++k) {
      const SampleInfo s = vol_->directory().sample(indices[k]);
      ASSERT_LE(plan->sample_offsets[k] + s.length, plan->buffer_bytes);
      ASSERT_EQ(
          std::memcmp(buf.data() + plan->sample_offsets[k], file_.data() + s.offset, s.length), 0)
          << "sample " << indices[k];
    }
  }

  TempDir tmp_;
  std::shared_ptr<Volume> vol_;
  std::vector<std::byte> file_;
};

TEST_F(PlannerTest, EverySampleLandsIntactUnderAllOptions) {
  std::mt19937 rng(5);
  for (int round = 0; round < 50; ++round) {
    std::vector<uint64_t> idx(1 + rng() % 64);
    for (auto& i : idx) i = rng() % vol_->size();
    idx.push_back(idx.front());  // duplicates are allowed
    for (uint32_t align : {1u, 512u, 4096u}) {
      for (bool coalesce : {false, true}) {
        PlanOptions o{align, {coalesce, uint64_t{1} << (rng() % 18), 1 << 20}};
        BatchPlan plan;
        CheckPlan(idx, o, &plan);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_F(PlannerTest, CoalescingMergesNeighboursAndSplitsHugeSamples) {
  std::vector<uint64_t> all(vol_->size());
  for (uint64_t i = 0; i < all.size(); ++i) all[i] = i;
  BatchPlan separate, merged;
  CheckPlan(all, {4096, {false, 0, 1 << 20}}, &separate);
  CheckPlan(all, {4096, {true, 64 << 10, 1 << 20}}, &merged);
  EXPECT_LT(merged.reads.size(), separate.reads.size() / 10);
  // The whole data region is wanted: merged reads cover it, re-reading at
  // most the block where two runs meet.
  const uint64_t region =
      (vol_->info().data_offset + vol_->info().data_length + 4095) / 4096 * 4096 -
      vol_->info().data_offset;
  EXPECT_GE(merged.buffer_bytes, region);
  EXPECT_LE(merged.buffer_bytes, region + merged.reads.size() * 4096);
  // Sample 123 (3 MiB) alone needs at least 3 reads of at most 1 MiB.
  BatchPlan huge;
  CheckPlan({123}, {4096, {true, 64 << 10, 1 << 20}}, &huge);
  EXPECT_GE(huge.reads.size(), 3u);
}

// Targets are separate files: their offsets overlap (every data region starts
// at 4096), so coalescing by offset alone would merge reads of different
// files. Every sample must come from a read of its own target.
TEST(PlannerTargetsTest, ReadsNeverSpanTargets) {
  TempDir tmp;
  auto b = VolumeBuilder::Create(tmp / "v.dlfs", {.targets = 4});
  ASSERT_OK(b);
  for (int i = 0; i < 400; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "%05d", i);
    ASSERT_OK((*b)->Add(name, testing::RandomBytes(100 + i % 700, i)));
  }
  ASSERT_OK((*b)->Finish());
  auto v = Volume::Open(tmp / "v.dlfs");
  ASSERT_OK(v);
  const SampleDirectory& d = (*v)->directory();
  std::vector<uint64_t> all(d.size());
  for (uint64_t i = 0; i < all.size(); ++i) all[i] = i;
  std::shuffle(all.begin(), all.end(), std::mt19937(4));
  for (uint64_t gap : {uint64_t{0}, uint64_t{1} << 30}) {
    BatchPlan plan;
    PlanBatch(d, all, {.alignment = 4096, .read = {.coalesce = true, .coalesce_gap = gap}}, &plan);
    std::vector<bool> targets_seen(4, false);
    for (size_t k = 0; k < all.size(); ++k) {
      const SampleInfo s = d.sample(all[k]);
      const uint64_t at = plan.sample_offsets[k];
      auto r = std::find_if(plan.reads.begin(), plan.reads.end(), [&](const PlannedRead& r) {
        return at >= r.buffer_offset && at < r.buffer_offset + r.length;
      });
      ASSERT_NE(r, plan.reads.end()) << all[k];
      EXPECT_EQ(r->target, s.target) << "sample " << all[k] << ", gap " << gap;
      EXPECT_EQ(r->offset + (at - r->buffer_offset), s.offset) << all[k];
      targets_seen[s.target] = true;
    }
    EXPECT_EQ(targets_seen, std::vector<bool>(4, true));
    // With an unbounded gap, one run per target (split only at max_read).
    if (gap > 0) {
      for (size_t i = 1; i < plan.reads.size(); ++i) {
        EXPECT_LE(plan.reads[i - 1].target, plan.reads[i].target);
      }
    }
  }
}

}  // namespace batch_planner_test
}  // namespace dlfs::loader_internal
