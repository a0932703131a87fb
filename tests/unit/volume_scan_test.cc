// VolumeScan: every sample of a volume visited exactly once, in storage
// order (target by target, offsets rising), in windows of at most the
// requested bytes (one larger sample alone), each with its stored bytes —
// whether the samples are stored in index order (names added in sorted
// order to one target: no sort) or not (names added out of order, or
// several targets filled in turn: sorted).
#include "volume/scan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "synthetic_volume.h"
#include "testutil.h"

namespace dlfs {
namespace volume_scan_test {

namespace fs = std::filesystem;
using volume_internal::VolumeScan;

struct Layout {
  uint32_t targets, classes;  // sample i is named "c<i % classes>/<i>"
  bool index_order;           // so its samples lie in index order
  // The compact directory: windows from block entries (and split blocks).
  bool compact = false;
};

class VolumeScanTest : public ::testing::TestWithParam<Layout> {
 protected:
  // 600 samples of 0-70 KB (testing::SyntheticBytes), some larger than a
  // window, laid out as the test's Layout says.
  std::shared_ptr<Volume> MakeVolume() {
    const Layout layout = GetParam();
    return testing::MakeSyntheticVolume(
        fs::path(tmp_.path()) / "v.dlfs",
        {.samples = 600,
         .classes = layout.classes,
         .volume = {.layout = layout.compact ? DirectoryLayout::kCompact : DirectoryLayout::kTree,
                    .targets = layout.targets}});
  }

  testing::TempDir tmp_;
};

TEST_P(VolumeScanTest, VisitsEverySampleOnceInStorageOrder) {
  const Layout layout = GetParam();
  std::shared_ptr<Volume> vol = MakeVolume();
  ASSERT_TRUE(vol);
  const SampleDirectory& dir = vol->directory();
  // Both of VolumeScan's paths are taken.
  bool index_order = true;
  for (uint64_t i = 1; i < vol->size(); ++i) {
    const SampleInfo a = dir.sample(i - 1), b = dir.sample(i);
    index_order =
        index_order && (a.target < b.target || (a.target == b.target && a.offset <= b.offset));
  }
  ASSERT_EQ(index_order, layout.index_order);
  constexpr uint64_t kWindow = 64 << 10;
  const VolumeScan scan(*vol, kWindow);
  ASSERT_GT(scan.windows(), 2u);
  Result<std::unique_ptr<IoEngine>> engine = VolumeScan::CreateEngine(*vol);
  ASSERT_OK(engine.status());
  io_internal::ReadDriver driver(**engine);

  std::vector<int> seen(vol->size(), 0);
  std::vector<std::byte> buffer;
  uint32_t last_target = 0;
  uint64_t last_offset = 0;
  bool first = true;
  for (size_t w = 0; w < scan.windows(); ++w) {
    uint64_t samples = 0, begin = 0, end = 0;
    ASSERT_OK(scan.Read(w, driver, &buffer,
                        [&](uint64_t i, std::span<const std::byte> bytes, const Status& read) {
                          ASSERT_OK(read);
                          ASSERT_LT(i, vol->size());
                          ++seen[i];
                          const SampleInfo s = dir.sample(i);
                          EXPECT_EQ(s.target, scan.window_target(w)) << "sample " << i;
                          if (!first) {
                            EXPECT_TRUE(s.target > last_target ||
                                        (s.target == last_target && s.offset >= last_offset))
                                << "sample " << i << " out of storage order";
                          }
                          if (samples++ == 0) begin = end = s.offset;
                          end = std::max(end, s.offset + s.length);
                          first = false;
                          last_target = s.target;
                          last_offset = s.offset;
                          EXPECT_OK(vol->CheckSample(i, bytes)) << "sample " << i;
                        }));
    EXPECT_EQ(scan.window_offset(w), begin) << "window " << w;
    EXPECT_EQ(scan.window_bytes(w), end - begin) << "window " << w;
    EXPECT_TRUE(scan.window_bytes(w) <= kWindow || samples == 1) << "window " << w;
  }
  for (uint64_t i = 0; i < vol->size(); ++i) EXPECT_EQ(seen[i], 1) << "sample " << i;
}

// A window over a damaged range fails; its samples are then read one by
// one, and exactly those whose own bytes lie in the range fail, each
// named; the others are whole.
TEST_P(VolumeScanTest, DamagedRangeFailsExactlyItsSamples) {
  std::shared_ptr<Volume> vol = MakeVolume();
  ASSERT_TRUE(vol);
  const SampleDirectory& dir = vol->directory();
  // One byte inside sample 300 is damaged.
  const SampleInfo bad = dir.sample(300);
  ASSERT_GT(bad.length, 1u);
  EngineOptions faults;
  faults.faults = {
      .eio_target = bad.target, .eio_offset = bad.offset + bad.length / 2, .eio_length = 1};
  const VolumeScan scan(*vol, 64 << 10);
  Result<std::unique_ptr<IoEngine>> engine = VolumeScan::CreateEngine(*vol, faults);
  ASSERT_OK(engine.status());
  io_internal::ReadDriver driver(**engine);
  std::vector<std::byte> buffer;
  size_t failed_windows = 0;
  std::vector<uint64_t> failed;
  uint64_t visited = 0;
  for (size_t w = 0; w < scan.windows(); ++w) {
    const Status window = scan.Read(
        w, driver, &buffer, [&](uint64_t i, std::span<const std::byte> bytes, const Status& read) {
          ++visited;
          if (read.ok()) {
            EXPECT_OK(vol->CheckSample(i, bytes)) << "sample " << i;
            return;
          }
          failed.push_back(i);
          EXPECT_NE(read.message().find("sample " + std::to_string(i)), std::string::npos)
              << read.message();
        });
    if (!window.ok()) ++failed_windows;
  }
  EXPECT_EQ(visited, vol->size());
  EXPECT_EQ(failed_windows, 1u);
  EXPECT_EQ(failed, std::vector<uint64_t>{300});
}

INSTANTIATE_TEST_SUITE_P(Layouts, VolumeScanTest,
                         ::testing::Values(Layout{1, 1, true}, Layout{1, 4, false},
                                           Layout{3, 1, false}, Layout{1, 4, true, true},
                                           Layout{3, 4, false, true}));

}  // namespace volume_scan_test
}  // namespace dlfs
