// SequentialFill: a node cache filled by reading its volume in windows in
// storage order; the node's processes (here: cache handles of their own,
// on threads) share the windows, each read once; a fill that would not pay
// stops after its probe; a requested one is filled whatever it costs.
// Regions go to a temporary DLFS_CACHE_DIR per test, not /dev/shm.
#include "cache/sequential_fill.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <thread>
#include <vector>

#include "synthetic_volume.h"
#include "testutil.h"

namespace dlfs {
namespace sequential_fill_test {

namespace fs = std::filesystem;
using cache_internal::NodeCache;
using cache_internal::SequentialFill;

class SequentialFillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(fs::path(shm_.path()) / "shm");
    ::setenv("DLFS_CACHE_DIR", (fs::path(shm_.path()) / "shm").c_str(), 1);
    // ~3,000 samples of 1-9 KB: a few fill windows of 4 MiB.
    vol_ = testing::MakeSyntheticVolume(fs::path(tmp_.path()) / "v.dlfs",
                                        {.samples = 3000, .bytes = [](uint64_t i) {
                                           return testing::RandomBytes(1000 + (i * 7919) % 8000,
                                                                       static_cast<uint32_t>(i));
                                         }});
    ASSERT_TRUE(vol_);
  }
  void TearDown() override { ::unsetenv("DLFS_CACHE_DIR"); }

  std::shared_ptr<NodeCache> Cache() {
    std::string note;
    auto c = NodeCache::Open(*vol_, {.budget = uint64_t{1} << 30}, &note);
    EXPECT_TRUE(c) << note;
    return c;
  }
  // Every sample found in `cache`, with the volume's bytes.
  void ExpectAllCached(NodeCache& cache) {
    for (uint64_t i = 0; i < vol_->size(); ++i) {
      auto found = cache.Find(i);
      ASSERT_TRUE(found) << "sample " << i;
      ASSERT_OK_AND_ASSIGN(auto stored, vol_->ReadStored(i));
      ASSERT_TRUE(std::equal(found->begin(), found->end(), stored.begin(), stored.end())) << i;
    }
  }

  testing::TempDir tmp_, shm_;
  std::shared_ptr<Volume> vol_;
};

TEST_F(SequentialFillTest, ARequestedFillCachesTheWholeVolume) {
  auto cache = Cache();
  ASSERT_TRUE(cache);
  SequentialFill fill(cache, vol_, {.epochs_after = 0, .requested = true});
  fill.WaitFilled();
  const auto st = fill.stats();
  EXPECT_TRUE(st.decided && st.decision.fill) << st.decision.reason;
  EXPECT_GT(st.windows, 2u);
  EXPECT_EQ(st.windows_filled, st.windows);
  ExpectAllCached(*cache);
}

TEST_F(SequentialFillTest, TheNodesProcessesShareTheWindows) {
  // Three "processes": each its own handle on the region and its own fill.
  std::vector<std::shared_ptr<NodeCache>> caches = {Cache(), Cache(), Cache()};
  std::vector<std::unique_ptr<SequentialFill>> fills;
  for (auto& c : caches) {
    ASSERT_TRUE(c);
    fills.push_back(std::make_unique<SequentialFill>(
        c, vol_, SequentialFill::Options{.epochs_after = 0, .requested = true}));
  }
  uint64_t filled = 0, windows = 0;
  for (auto& f : fills) {
    f->WaitFilled();
    filled += f->stats().windows_filled;
    windows = f->stats().windows;
  }
  EXPECT_EQ(filled, windows);  // each window read once on the node
  EXPECT_EQ(caches[0]->fill_windows_done(), windows);
  ExpectAllCached(*caches[2]);
}

TEST_F(SequentialFillTest, AFillThatDoesNotPayStopsAfterItsProbe) {
  auto cache = Cache();
  ASSERT_TRUE(cache);
  // The caller never waited for data: caching would save it nothing.
  SequentialFill fill(cache, vol_, {.epochs_after = 100, .progress = [] {
                                      return SequentialFill::ReaderProgress{
                                          .caller_wait_seconds = 0, .payload_bytes = 1u << 30};
                                    }});
  fill.Start();
  fill.WaitFilled();
  const auto st = fill.stats();
  EXPECT_TRUE(st.decided);
  EXPECT_FALSE(st.decision.fill) << st.decision.reason;
  EXPECT_EQ(st.windows_filled, 1u);  // the probe
  EXPECT_LT(cache->stats().samples, vol_->size());
}

TEST_F(SequentialFillTest, AFillThatPaysGoesOn) {
  auto cache = Cache();
  ASSERT_TRUE(cache);
  // The caller waited 10 s per GB it got: any fill here pays over 10 epochs.
  SequentialFill fill(cache, vol_, {.epochs_after = 10, .progress = [] {
                                      return SequentialFill::ReaderProgress{
                                          .caller_wait_seconds = 10,
                                          .payload_bytes = 1'000'000'000};
                                    }});
  fill.Start();
  fill.WaitFilled();
  const auto st = fill.stats();
  EXPECT_TRUE(st.decision.fill) << st.decision.reason;
  EXPECT_EQ(st.windows_filled, st.windows);
  ExpectAllCached(*cache);
}

// The cache never takes the last of the job's memory: with memory short
// before its first window, even a requested fill reads nothing, and says so.
TEST_F(SequentialFillTest, NoFillWhileMemoryIsShort) {
  auto cache = Cache();
  ASSERT_TRUE(cache);
  int asked = 0;
  SequentialFill fill(cache, vol_, {.epochs_after = 10, .requested = true, .memory_short = [&] {
                                      ++asked;
                                      return true;
                                    }});
  fill.WaitFilled();
  const auto st = fill.stats();
  EXPECT_GE(asked, 1);
  EXPECT_TRUE(st.memory_short);
  EXPECT_EQ(st.windows_filled, 0u);
  EXPECT_EQ(cache->stats().samples, 0u);
}

TEST_F(SequentialFillTest, NothingStartsBeforeTheReader) {
  auto cache = Cache();
  ASSERT_TRUE(cache);
  {
    SequentialFill fill(cache, vol_, {.epochs_after = 10});
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(fill.stats().windows_filled, 0u);
  }  // destroyed without being started: stops cleanly
  EXPECT_EQ(cache->stats().samples, 0u);
}

}  // namespace sequential_fill_test
}  // namespace dlfs
