// The front ends' shared parsing (dlfs/pack.h) and the reports they print
// (dlfs_tools/report.h).
#include "dlfs_tools/report.h"

#include <nlohmann/json.hpp>

#include "dlfs/builder.h"
#include "dlfs/pack.h"
#include "dlfs/sample_image.h"
#include "dlfs/summary.h"
#include "dlfs/verify.h"
#include "dlfs/volume.h"
#include "dlfs_tools/bench.h"
#include "testutil.h"

namespace dlfs {
namespace report_test {

using testing::Bytes;
using testing::StatusIs;
using testing::TempDir;

TEST(PackSpecTest, ClassNamesFromTextOrFile) {
  EXPECT_EQ(*ParseClassNames(""), std::vector<std::string>{});
  EXPECT_EQ(*ParseClassNames("a,,c"), (std::vector<std::string>{"a", "", "c"}));
  TempDir tmp;
  testing::WriteFile(tmp / "names.txt", Bytes("cat\r\ndog\n"));
  EXPECT_EQ(*ParseClassNames("@" + (tmp / "names.txt")), (std::vector<std::string>{"cat", "dog"}));
  EXPECT_THAT(ParseClassNames("@" + (tmp / "missing.txt")),
              StatusIs(StatusCode::kNotFound, "missing.txt"));
}

TEST(PackSpecTest, FieldNamesSkipEmptyItems) {
  EXPECT_EQ(ParseFieldNames(""), std::vector<std::string>{});
  EXPECT_EQ(ParseFieldNames("jpg,,cls,"), (std::vector<std::string>{"jpg", "cls"}));
}

TEST(PackSpecTest, RawShapeIsHxWOrHxWxC) {
  const RawShape gray = *ParseRawShape("28x28");
  EXPECT_EQ(std::tuple(gray.height, gray.width, gray.channels), std::tuple(28u, 28u, 1u));
  const RawShape rgb = *ParseRawShape("32x16x3");
  EXPECT_EQ(std::tuple(rgb.height, rgb.width, rgb.channels), std::tuple(32u, 16u, 3u));
  for (const char* bad : {"", "28", "28x", "0x28", "28x28x", "28x28x3x1", "-1x28", "28x28 ",
                          "99999999999x2", "28X28"}) {
    EXPECT_THAT(ParseRawShape(bad), StatusIs(StatusCode::kInvalidArgument, "HxW or HxWxC")) << bad;
  }
}

TEST(ReportTest, HumanBytesAndProgressLine) {
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(54.9e6), "54.9 MB");
  const std::string line = ProgressLine("packed", 50, 100, 1000, 2, 0.5, ", extra");
  EXPECT_EQ(line,
            "\r  packed 50 of 100 samples (50.0%), 1.0 KB, 25 samples/s, 500 B/s, extra, ETA "
            "0:02\033[K");
  VerifyReport verify;
  verify.samples_checked = 10;  // a tenth of the samples, half of the bytes: progress by bytes
  verify.total_samples = 100;
  verify.bytes_checked = 500;
  verify.total_bytes = 1000;
  verify.seconds = 1;
  EXPECT_EQ(FormatVerifyProgress(verify),
            "\r  verified 10 of 100 samples (50.0%), 500 B, 10 samples/s, 500 B/s, ETA 0:01\033[K");
}

TEST(ReportTest, VolumeSummaryAndSampleLines) {
  TempDir tmp;
  const std::string path = tmp / "v.dlfs";
  auto b = VolumeBuilder::Create(path);
  ASSERT_OK(b);
  ASSERT_OK((*b)->Add("cat/1.jpg", Bytes("abc"), 0));
  ASSERT_OK((*b)->Add("dog/2.jpg", Bytes("defg"), 1));
  (*b)->SetClassNames({"cat", "dog"});
  ASSERT_OK((*b)->Finish());
  auto v = Volume::Open(path);
  ASSERT_OK(v);
  const VolumeSummary s = SummarizeVolume(**v);
  const auto j = nlohmann::json::parse(FormatVolumeSummary(s, ReportFormat::kJson));
  EXPECT_EQ(j["samples"], 2);
  EXPECT_EQ(j["class_names"], (std::vector<std::string>{"cat", "dog"}));
  const std::string text = FormatVolumeSummary(s, ReportFormat::kText);
  EXPECT_NE(text.find("samples      2 in 3 directories\n"), std::string::npos) << text;
  EXPECT_NE(text.find("classes      2: 0=cat, 1=dog\n"), std::string::npos) << text;
  const SampleDirectory& d = (*v)->directory();
  EXPECT_EQ(FormatSampleLine(d, 1, ReportFormat::kText), "1\t4\t1\tdog/2.jpg\n");
  const auto line = nlohmann::json::parse(FormatSampleLine(d, 0, ReportFormat::kJson));
  EXPECT_EQ(line["path"], "cat/1.jpg");
  EXPECT_EQ(line["class"], "cat");
}

// Issue 49: the epoch lines said 1.4 MB, 262.6 KB and 0 B "from the device"
// for a 706 KB volume (the engines' counters: reads ahead for the next epoch
// landed in the one before) with "cache hits 0 %" for a cache never filled.
TEST(ReportTest, EpochLineCountsTheEpochsOwnReads) {
  EpochReport e;
  e.epoch = 1;
  e.samples = 100;
  e.payload_bytes = e.device_bytes = 706'000;
  e.seconds = 1;
  e.stats.io.bytes = 1'412'000;  // this epoch's reads and the next one's
  e.stats.cache_bytes = 1 << 20;
  std::string line = FormatEpochLine(e, false);
  EXPECT_NE(line.find("; 706.0 KB from the device, node cache empty (see its plan)"),
            std::string::npos)
      << line;
  e.stats.cache_hits = 25;
  e.stats.cache_misses = 75;
  e.stats.cache_used_bytes = 176'500;
  line = FormatEpochLine(e, false);
  EXPECT_NE(line.find("; cache hits 25 %, 706.0 KB from the device, 176.5 KB cached"),
            std::string::npos)
      << line;
}

TEST(ReportTest, ListingsAndEpochIndices) {
  TempDir tmp;
  const std::string path = tmp / "v.dlfs";
  auto b = VolumeBuilder::Create(path);
  ASSERT_OK(b);
  ASSERT_OK((*b)->Add("a/x/1", Bytes("1"), 0));
  ASSERT_OK((*b)->Add("a/2", Bytes("22"), 0));
  ASSERT_OK((*b)->Add("b/3", Bytes("333"), 0));
  ASSERT_OK((*b)->Finish());
  auto v = Volume::Open(path);
  ASSERT_OK(v);
  const SampleDirectory& d = (*v)->directory();
  const auto list = [&](std::string_view path, bool recursive) {
    std::string out;
    const Status st = ListPath(d, path, recursive, ReportFormat::kText,
                               [&](const std::string& line) { out += line; });
    return st.ok() ? out : "error: " + st.message();
  };
  // The directory's subdirectories, then its samples; recursively, every
  // sample below it, depth first in name order; a sample's own line.
  // The columns are named above the first sample's line (issue 49).
  // Indices are the order the samples were added in (the compact layout).
  const std::string head = "INDEX\tSIZE\tLABEL\tPATH\n";
  EXPECT_EQ(list("", false), "a/\nb/\n");
  EXPECT_EQ(list("a", false), "a/x/\n" + head + "1\t2\t0\ta/2\n");
  EXPECT_EQ(list("", true), head + "1\t2\t0\ta/2\n0\t1\t0\ta/x/1\n2\t3\t0\tb/3\n");
  EXPECT_EQ(list("b/3", true), head + "2\t3\t0\tb/3\n");
  EXPECT_THAT(ListPath(d, "a/missing", false, ReportFormat::kText, [](const std::string&) {}),
              StatusIs(StatusCode::kNotFound, "a/missing"));

  const std::vector<uint64_t> indices = {5, 3, 9, 1};
  EXPECT_EQ(FormatEpochIndices(indices, 0), "5\n3\n9\n1\n");
  EXPECT_EQ(FormatEpochIndices(indices, 2), "0\t5\n0\t3\n1\t9\n1\t1\n");
}

}  // namespace report_test
}  // namespace dlfs
