#include "dlfs/builder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "dlfs/volume.h"
#include "testutil.h"

namespace dlfs {
namespace builder_test {

using testing::Bytes;
using testing::StatusIs;
using testing::TempDir;

// The tree (v1) layout's checks, made when a sample is added (the compact
// layout's are in compact_test.cc).
const VolumeBuilder::Options kTree = {.layout = DirectoryLayout::kTree};

// Names in `dir` other than `keep` (to spot leftover temporary files).
std::vector<std::string> Leftovers(const std::string& dir, const std::string& keep = "") {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename() != keep) out.push_back(e.path().filename());
  }
  return out;
}

TEST(BuilderTest, RefusesToOverwriteUnlessAsked) {
  TempDir tmp;
  const std::string vol = tmp / "v.dlfs";
  testing::WriteFile(vol, Bytes("user data"));
  auto b = VolumeBuilder::Create(vol);
  ASSERT_THAT(b, StatusIs(StatusCode::kAlreadyExists, vol + ": already exists"));
  EXPECT_EQ(testing::ReadFile(vol), Bytes("user data"));

  auto f = VolumeBuilder::Create(vol, {.overwrite = true});
  ASSERT_OK(f);
  ASSERT_OK((*f)->Add("x", Bytes("new")));
  ASSERT_OK((*f)->Finish());
  auto v = Volume::Open(vol);
  ASSERT_OK(v);
  EXPECT_EQ(*(*v)->Read(0), Bytes("new"));
}

// The compression specs of `dlfs pack --compress` and dlfs.pack(compress=).
TEST(BuilderTest, ParseCompressionTakesZstdLevelOrNone) {
  auto none = ParseCompression("none");
  ASSERT_OK(none);
  EXPECT_FALSE(none->zstd);
  ASSERT_OK(ParseCompression(""));
  EXPECT_FALSE(ParseCompression("")->zstd);
  auto zstd = ParseCompression("zstd");
  ASSERT_OK(zstd);
  EXPECT_TRUE(zstd->zstd);
  EXPECT_EQ(zstd->level, VolumeBuilder::Options::Compression{}.level);
  auto level = ParseCompression("zstd:19", /*train_dictionary=*/true);
  ASSERT_OK(level);
  EXPECT_EQ(level->level, 19);
  EXPECT_TRUE(level->train_dictionary);
  for (const char* bad : {"zstd:0", "zstd:23", "zstd:", "zstd:3x", "zstd:-1"}) {
    EXPECT_THAT(ParseCompression(bad),
                StatusIs(StatusCode::kInvalidArgument,
                         "compression '" + std::string(bad) + "': the zstd level is 1..22"));
  }
  EXPECT_THAT(ParseCompression("gzip"),
              StatusIs(StatusCode::kInvalidArgument, "'gzip': only zstd[:LEVEL] (or none)"));
  EXPECT_THAT(ParseCompression("none", true),
              StatusIs(StatusCode::kInvalidArgument, "a trained dictionary needs zstd"));
}

TEST(BuilderTest, DestinationCreatedDuringPackIsNotReplaced) {
  TempDir tmp;
  const std::string vol = tmp / "v.dlfs";
  auto b = VolumeBuilder::Create(vol);
  ASSERT_OK(b);
  ASSERT_OK((*b)->Add("x", Bytes("abc")));
  testing::WriteFile(vol, Bytes("appeared meanwhile"));
  const Status st = (*b)->Finish();
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st.ToString();
  EXPECT_EQ(testing::ReadFile(vol), Bytes("appeared meanwhile"));
  EXPECT_EQ(Leftovers(tmp.path(), "v.dlfs"), std::vector<std::string>{});
}

TEST(BuilderTest, UnfinishedBuilderLeavesNothing) {
  TempDir tmp;
  {
    auto b = VolumeBuilder::Create(tmp / "v.dlfs");
    ASSERT_OK(b);
    ASSERT_OK((*b)->Add("x", testing::RandomBytes(100000, 1)));
    EXPECT_TRUE(std::filesystem::exists((*b)->temp_path()));
    // The temporary file is not a volume while packing goes on.
    EXPECT_THAT(Volume::Open((*b)->temp_path()),
                StatusIs(StatusCode::kCorruption, "not a dlfs volume"));
  }
  EXPECT_EQ(Leftovers(tmp.path()), std::vector<std::string>{});
}

bool Contains(const Status& st, std::string_view text) {
  return st.message().find(text) != std::string::npos;
}

TEST(BuilderTest, DuplicatePathIsRefusedWhenAddedNamingTheFirst) {
  TempDir tmp;
  auto b = VolumeBuilder::Create(tmp / "v.dlfs", kTree);
  ASSERT_OK(b);
  ASSERT_OK((*b)->Add("a/x", Bytes("1")));
  ASSERT_OK((*b)->Add("a/y", Bytes("2")));
  const Status st = (*b)->Add("a/x", Bytes("3"));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(st, "duplicate sample path 'a/x' (already added as sample #0)"))
      << st.message();
  // Refused before any byte is written: BeginSample says no too.
  EXPECT_EQ((*b)->BeginSample("a/y").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*b)->data_bytes(), 2u);
  // The builder goes on: the refused samples are not in the volume.
  ASSERT_OK((*b)->Add("a/z", Bytes("4")));
  ASSERT_OK((*b)->Finish());
  auto v = Volume::Open(tmp / "v.dlfs");
  ASSERT_OK(v);
  EXPECT_EQ((*v)->size(), 3u);
  EXPECT_EQ(*(*v)->Read(*(*v)->directory().Lookup("a/x")), Bytes("1"));
}

TEST(BuilderTest, SampleDirectoryClashesAreRefusedWhenAdded) {
  TempDir tmp;
  auto b = VolumeBuilder::Create(tmp / "v.dlfs", kTree);
  ASSERT_OK(b);
  ASSERT_OK((*b)->Add("a/x", Bytes("1")));
  Status st = (*b)->Add("a/x/y", Bytes("2"));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(st, "'a/x/y' needs directory 'a/x', which was already added as sample #0"))
      << st.message();
  ASSERT_OK((*b)->Add("d/e/f", Bytes("3")));
  st = (*b)->Add("d/e", Bytes("4"));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(st, "'d/e' is already a directory")) << st.message();
  st = (*b)->Add("d", Bytes("5"));
  EXPECT_TRUE(Contains(st, "'d' is already a directory")) << st.message();
  ASSERT_OK((*b)->Finish());
  auto v = Volume::Open(tmp / "v.dlfs");
  ASSERT_OK(v);
  EXPECT_EQ((*v)->size(), 2u);
  EXPECT_EQ(Leftovers(tmp.path(), "v.dlfs"), std::vector<std::string>{});
}

TEST(BuilderTest, DuplicateNamesTheSourcesOfBothSamples) {
  TempDir tmp;
  auto b = VolumeBuilder::Create(tmp / "v.dlfs", kTree);
  ASSERT_OK(b);
  (*b)->SetSourceName("one.tar");
  ASSERT_OK((*b)->Add("k.jpg", Bytes("1")));
  ASSERT_OK((*b)->Add("m.jpg", Bytes("2")));
  (*b)->SetSourceName("two.tar");
  ASSERT_OK((*b)->Add("z.jpg", Bytes("3")));
  Status st = (*b)->Add("m.jpg", Bytes("4"));
  EXPECT_TRUE(
      Contains(st, "duplicate sample path 'm.jpg' (already added as sample #1 from one.tar)"))
      << st.message();
  st = (*b)->Add("z.jpg", Bytes("5"));
  EXPECT_TRUE(Contains(st, "as sample #2 from two.tar")) << st.message();
}

TEST(BuilderTest, PathTableKeepsEveryPathAsItGrows) {
  // Past several doublings of the table: every path is still found, and
  // names that differ only in their directory are not confused.
  TempDir tmp;
  auto b = VolumeBuilder::Create(tmp / "v.dlfs", kTree);
  ASSERT_OK(b);
  constexpr int kSamples = 5000;
  for (int i = 0; i < kSamples; ++i) {
    ASSERT_OK((*b)->Add("d" + std::to_string(i % 7) + "/" + std::to_string(i / 7), Bytes("x")));
  }
  for (int i = 0; i < kSamples; i += 97) {
    const Status st = (*b)->Add("d" + std::to_string(i % 7) + "/" + std::to_string(i / 7), {});
    EXPECT_TRUE(Contains(st, "(already added as sample #" + std::to_string(i) + ")"))
        << i << ": " << st.message();
  }
  ASSERT_OK((*b)->Add("d7/0", Bytes("new")));
  EXPECT_EQ((*b)->sample_count(), kSamples + 1u);
  ASSERT_OK((*b)->Finish());
}

TEST(BuilderTest, BadPathsAndOptionsAreRefused) {
  TempDir tmp;
  EXPECT_EQ(VolumeBuilder::Create(tmp / "v", {.align = 3}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(VolumeBuilder::Create(tmp / "v", {.align = 2u << 20}).status().code(),
            StatusCode::kInvalidArgument);
  auto b = VolumeBuilder::Create(tmp / "v", kTree);
  ASSERT_OK(b);
  for (const char* bad : {"", "a//b", "../x", "a/./b", "a/", "x/.."}) {
    EXPECT_EQ((*b)->Add(bad, Bytes("1")).code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ((*b)->Add(std::string_view("a\0b", 3), Bytes("1")).code(),
            StatusCode::kInvalidArgument);
  ASSERT_OK((*b)->Add("ok", Bytes("1")));
  ASSERT_OK((*b)->Finish());
  auto v = Volume::Open(tmp / "v");
  ASSERT_OK(v);
  EXPECT_EQ((*v)->size(), 1u);
  EXPECT_EQ((*v)->directory().dir_count(), 1u);  // rejected paths left no directories
}

TEST(BuilderTest, AbortedSamplesLeaveNoTrace) {
  TempDir tmp;
  auto b = VolumeBuilder::Create(tmp / "v.dlfs");
  ASSERT_OK(b);
  const auto first = testing::RandomBytes(3000, 1);
  const auto big = testing::RandomBytes(20u << 20, 2);  // spans several write buffers
  const auto last = testing::RandomBytes(5000, 3);
  ASSERT_OK((*b)->Add("first", first, 0));
  ASSERT_OK((*b)->BeginSample("dropped", 1));
  ASSERT_OK((*b)->Append(big));
  (*b)->AbortSample();
  ASSERT_OK((*b)->BeginSample("last", 2));
  ASSERT_OK((*b)->Append(std::span(last).first(1000)));
  ASSERT_OK((*b)->Append(std::span(last).subspan(1000)));
  ASSERT_OK((*b)->EndSample());
  EXPECT_EQ((*b)->data_bytes(), first.size() + last.size());
  ASSERT_OK((*b)->Finish());
  auto v = Volume::Open(tmp / "v.dlfs");
  ASSERT_OK(v);
  ASSERT_EQ((*v)->size(), 2u);
  EXPECT_EQ(*(*v)->Read(*(*v)->directory().Lookup("first")), first);
  EXPECT_EQ(*(*v)->Read(*(*v)->directory().Lookup("last")), last);
  // The dropped sample's bytes were cut off: the file is small again.
  EXPECT_LT((*v)->info().volume_size, 64u * 1024);
}

// Pages of zeros past what a new file holds are left as holes: a sparse
// source makes a sparse volume. Zeros written over bytes a dropped sample
// left in the file are written, not skipped.
TEST(BuilderTest, PagesOfZerosInANewFileAreHoles) {
  TempDir tmp;
  const std::string path = tmp / "v.dlfs";
  auto b = VolumeBuilder::Create(path);
  ASSERT_OK(b);
  const std::vector<std::byte> zeros(64u << 20);
  std::vector<std::byte> mixed(20u << 20);
  for (size_t i = 0; i < mixed.size(); i += 4096 * 7) mixed[i] = std::byte{1};
  const auto noise = testing::RandomBytes(12u << 20, 4);
  ASSERT_OK((*b)->Add("zeros", zeros));
  ASSERT_OK((*b)->Add("mixed", mixed));
  // Bytes written to the file (beyond one write buffer), then dropped, then
  // zeros over them.
  ASSERT_OK((*b)->BeginSample("dropped"));
  ASSERT_OK((*b)->Append(noise));
  (*b)->AbortSample();
  ASSERT_OK((*b)->Add("zeros-again", std::span(zeros).first(noise.size() + 4096)));
  ASSERT_OK((*b)->Finish());
  auto v = Volume::Open(path);
  ASSERT_OK(v);
  EXPECT_EQ(*(*v)->Read(*(*v)->directory().Lookup("zeros")), zeros);
  EXPECT_EQ(*(*v)->Read(*(*v)->directory().Lookup("mixed")), mixed);
  EXPECT_EQ(*(*v)->Read(*(*v)->directory().Lookup("zeros-again")),
            std::vector<std::byte>(noise.size() + 4096));
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  // About 96 MiB long; on disk the mixed sample's non-zero pages (1 in 7)
  // and the noise's 12 MiB (written before it was dropped, then zeroed).
  EXPECT_GT(static_cast<uint64_t>(st.st_size), 90u << 20);
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, 20u << 20);
}

TEST(BuilderTest, ClassCountCoversNamesAndLabels) {
  TempDir tmp;
  auto b = VolumeBuilder::Create(tmp / "v.dlfs");
  ASSERT_OK(b);
  (*b)->SetClassNames({"zero", "one"});
  ASSERT_OK((*b)->Add("a", Bytes("1"), 4));
  EXPECT_EQ((*b)->class_count(), 5u);
  ASSERT_OK((*b)->Finish());
  auto v = Volume::Open(tmp / "v.dlfs");
  ASSERT_OK(v);
  const SampleDirectory& d = (*v)->directory();
  ASSERT_EQ(d.class_count(), 5u);
  EXPECT_EQ(d.class_name(1), "one");
  EXPECT_EQ(d.class_name(4), "4");
}

// A label sizes the class table (one entry per class up to the largest), so
// one from a hostile source must not: a tar whose .cls said 1000012602 took
// minutes (found by the tar fuzzer).
TEST(BuilderTest, LabelsThatWouldSizeAHugeClassTableAreRefused) {
  TempDir tmp;
  auto b = VolumeBuilder::Create(tmp / "v.dlfs");
  ASSERT_OK(b);
  constexpr uint32_t kLimit = 1u << 24;
  EXPECT_THAT((*b)->Add("cat/1.jpg", Bytes("1"), 1000012602),
              StatusIs(StatusCode::kInvalidArgument,
                       "sample 'cat/1.jpg' has label 1000012602: labels must be below 16777216"));
  EXPECT_THAT((*b)->Add("cat/2.jpg", Bytes("2"), kLimit),
              StatusIs(StatusCode::kInvalidArgument, "labels must be below"));
  ASSERT_OK((*b)->Add("cat/3.jpg", Bytes("3"), kLimit - 1));
  EXPECT_THAT((*b)->SetLabel(0, kLimit), StatusIs(StatusCode::kInvalidArgument,
                                                  "sample 0 has label 16777216: labels must be"));
  ASSERT_OK((*b)->Add("cat/4.jpg", Bytes("4")));  // unlabelled
  EXPECT_EQ((*b)->class_count(), kLimit);         // not finished: a 128 MiB class table
}

}  // namespace builder_test
}  // namespace dlfs
