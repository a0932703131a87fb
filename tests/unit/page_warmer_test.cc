// PageWarmer: asks the kernel for every byte of a small page-cached volume's
// data region once, in file order, and is not made where the volume would take more
// than a quarter of the usable memory.
#include "loader/page_warmer.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "synthetic_volume.h"
#include "testutil.h"

namespace dlfs {
namespace page_warmer_test {

namespace fs = std::filesystem;
using loader_internal::PageWarmer;

TEST(PageWarmerTest, AsksForTheWholeDataRegionOnce) {
  testing::TempDir tmp;
  std::shared_ptr<Volume> vol =
      testing::MakeSyntheticVolume(fs::path(tmp.path()) / "v.dlfs", {.samples = 2000});
  ASSERT_TRUE(vol);
  const uint64_t data = vol->info().data_bytes;
  ASSERT_GT(data, 0u);
  // What the targets' data regions span (padding included).
  uint64_t spanned = 0;
  for (const TargetInfo& t : vol->info().target_details) spanned += t.data_length;

  std::unique_ptr<PageWarmer> warmer = PageWarmer::ForVolume(vol, 4 * data);
  ASSERT_TRUE(warmer);
  EXPECT_EQ(warmer->advised_bytes(), 0u);  // nothing before Start
  warmer->Start();
  warmer->Start();  // once
  warmer->Join();
  EXPECT_EQ(warmer->advised_bytes(), spanned);
  EXPECT_GE(spanned, data);
}

TEST(PageWarmerTest, NotMadeWhereTheVolumeWouldCrowdMemory) {
  testing::TempDir tmp;
  std::shared_ptr<Volume> vol =
      testing::MakeSyntheticVolume(fs::path(tmp.path()) / "v.dlfs", {.samples = 200});
  ASSERT_TRUE(vol);
  EXPECT_FALSE(PageWarmer::ForVolume(vol, 4 * vol->info().data_bytes - 1));
  EXPECT_FALSE(PageWarmer::ForVolume(vol, 0));  // usable memory unknown
}

// Destroyed while its pass runs (a loader closed at once): the destructor
// stops and joins the thread; ASan and TSan (scripts/test.sh) check that
// nothing is touched after the warmer is gone.
TEST(PageWarmerTest, DestroyedWhileRunning) {
  testing::TempDir tmp;
  std::shared_ptr<Volume> vol =
      testing::MakeSyntheticVolume(fs::path(tmp.path()) / "v.dlfs", {.samples = 500});
  ASSERT_TRUE(vol);
  auto warmer = PageWarmer::ForVolume(vol, uint64_t{1} << 40);
  ASSERT_TRUE(warmer);
  warmer->Start();
  warmer.reset();
  EXPECT_EQ(vol.use_count(), 1);  // the thread's reference is gone with it
}

}  // namespace page_warmer_test
}  // namespace dlfs
