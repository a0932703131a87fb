// The compact directory (format v3, docs/format.md §10): written while the
// samples stream, read in place, checked block by block on first use.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "dlfs/builder.h"
#include "dlfs/verify.h"
#include "dlfs/volume.h"
#include "format/compact_codec.h"
#include "format/format.h"
#include "testutil.h"

namespace dlfs {
namespace compact_test {

using testing::Bytes;
using testing::RandomBytes;
using testing::StatusIs;
using testing::TempDir;

struct Sample {
  std::string path;
  std::vector<std::byte> bytes;
  uint32_t label;
};

VolumeBuilder::Options Compact(uint32_t align = 1, uint32_t targets = 0) {
  VolumeBuilder::Options o;
  o.layout = DirectoryLayout::kCompact;
  o.block_shift = 4;  // 16 samples per block: many blocks from few samples
  o.align = align;
  o.targets = targets;
  return o;
}

Status Write(const std::string& path, const std::vector<Sample>& samples,
             const VolumeBuilder::Options& options, std::vector<std::string> class_names = {}) {
  DLFS_ASSIGN_OR_RETURN(auto b, VolumeBuilder::Create(path, options));
  b->SetClassNames(std::move(class_names));
  for (const Sample& s : samples) DLFS_RETURN_IF_ERROR(b->Add(s.path, s.bytes, s.label));
  return b->Finish();
}

// Samples in nested directories, in an order that is not sorted by path.
std::vector<Sample> Samples(size_t n, uint32_t seed, bool sorted) {
  std::mt19937 rng(seed);
  std::vector<Sample> out;
  const char* dirs[] = {"cat", "cat/sub", "cat-x", "dog", "dog/a/b", "", ".hidden", "cat/.x"};
  for (size_t i = 0; i < n; ++i) {
    const std::string dir = dirs[rng() % 8];
    char name[32];
    std::snprintf(name, sizeof name, "%05zu.jpg", i);
    out.push_back({dir.empty() ? name : dir + "/" + name, RandomBytes(rng() % 200, seed + i),
                   i % 7 == 0 ? kNoLabel : static_cast<uint32_t>(rng() % 5)});
  }
  if (sorted) {
    std::sort(out.begin(), out.end(),
              [](const Sample& a, const Sample& b) { return a.path < b.path; });
  } else {
    std::shuffle(out.begin(), out.end(), rng);
  }
  return out;
}

void ExpectSame(const Volume& v, const std::vector<Sample>& samples) {
  const SampleDirectory& d = v.directory();
  ASSERT_EQ(d.size(), samples.size());
  EXPECT_TRUE(d.compact());
  EXPECT_EQ(v.info().format_version, 3u);
  for (uint64_t i = 0; i < samples.size(); ++i) {
    // A sample's index is the order it was added in.
    ASSERT_OK_AND_ASSIGN(const SampleInfo s, d.Locate(i));
    EXPECT_EQ(s.length, samples[i].bytes.size()) << i;
    EXPECT_EQ(d.label(i), samples[i].label) << i;
    ASSERT_OK_AND_ASSIGN(const std::vector<std::byte> bytes, v.Read(i));
    EXPECT_EQ(bytes, samples[i].bytes) << i;
    EXPECT_EQ(d.Path(i), samples[i].path);
    ASSERT_OK_AND_ASSIGN(const uint64_t found, d.Lookup(samples[i].path));
    EXPECT_EQ(found, i);
    EXPECT_EQ(*d.Lookup("/" + samples[i].path + "/"), found);
  }
  EXPECT_OK(d.CheckAll());
}

TEST(CompactTest, NamedSamplesKeepTheOrderTheyWereAddedIn) {
  for (const bool sorted : {true, false}) {
    for (const uint32_t align : {1u, 8u, 4096u}) {
      TempDir tmp;
      const std::string vol = tmp / "v.dlfs";
      const std::vector<Sample> samples = Samples(100, 7 + align, sorted);
      ASSERT_OK(Write(vol, samples, Compact(align), {"a", "b"}));
      ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol));
      SCOPED_TRACE(::testing::Message() << "sorted " << sorted << " align " << align);
      ExpectSame(*v, samples);
      const SampleDirectory& d = v->directory();
      EXPECT_EQ(d.block_count(), 7u);  // 100 samples, 16 per block
      EXPECT_EQ(d.class_count(), 5u);
      EXPECT_EQ(d.class_name(0), "a");
      EXPECT_EQ(d.class_name(4), "4");
      EXPECT_EQ(d.SubtreeIndexRange(0)->count, 100u);
      // Stored back to back: within 7 samples of padding of the payload.
      EXPECT_EQ(std::distance(std::filesystem::directory_iterator(tmp.path()),
                              std::filesystem::directory_iterator()),
                1)
          << "no spill file is left behind";
    }
  }
}

TEST(CompactTest, TheTreeListsDirectoriesAndSamplesByName) {
  TempDir tmp;
  const std::string vol = tmp / "v.dlfs";
  // torchvision's ImageFolder order: a class's own files, then its
  // sub-folders; "cat-x" sorts after "cat/..." as a class, before it as bytes.
  std::vector<Sample> samples = {
      {"cat/a.jpg", Bytes("1"), 0},     {"cat/z.jpg", Bytes("2"), 0},
      {"cat/sub/b.jpg", Bytes("3"), 0}, {"cat-x/c.jpg", Bytes("4"), 1},
      {"dog/d.jpg", Bytes("5"), 2},     {"top.jpg", Bytes("6"), kNoLabel}};
  ASSERT_OK(Write(vol, samples, Compact()));
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol));
  ExpectSame(*v, samples);
  const SampleDirectory& d = v->directory();
  EXPECT_EQ(d.dir_count(), 5u);  // root, cat, cat/sub, cat-x, dog
  std::vector<std::string> children;
  for (const uint64_t c : d.ChildDirs(0)) children.push_back(d.DirPath(c));
  EXPECT_EQ(children, (std::vector<std::string>{"cat", "cat-x", "dog"}));
  ASSERT_OK_AND_ASSIGN(const PathEntry cat, d.Resolve("cat"));
  ASSERT_TRUE(cat.is_dir);
  EXPECT_EQ(d.dir(cat.index).sample_count, 2u);
  EXPECT_EQ(d.dir(cat.index).child_count, 1u);
  EXPECT_EQ(d.DirSamples(cat.index), (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(d.DirSamples(cat.index, 1, 5), (std::vector<uint64_t>{1}));
  EXPECT_EQ(d.SamplesUnder(cat.index), (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(d.DirSamples(0), (std::vector<uint64_t>{5}));
  EXPECT_EQ(d.dir_name(d.ChildDirs(cat.index)[0]), "sub");
  // Added out of name order: the subtree is not one run of indices.
  EXPECT_FALSE(d.SubtreeIndexRange(cat.index).has_value());
  EXPECT_THAT(d.Resolve("cat/nothere.jpg"), StatusIs(StatusCode::kNotFound, ""));
  EXPECT_THAT(d.Resolve("ca"), StatusIs(StatusCode::kNotFound, ""));
  ASSERT_OK_AND_ASSIGN(const PathEntry root, d.Resolve("//"));
  EXPECT_TRUE(root.is_dir);
  EXPECT_EQ(root.index, 0u);
}

TEST(CompactTest, SortedNamesMakeSubtreesRunsOfIndices) {
  TempDir tmp;
  const std::string vol = tmp / "v.dlfs";
  const std::vector<Sample> samples = Samples(60, 3, /*sorted=*/true);
  ASSERT_OK(Write(vol, samples, Compact()));
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol));
  const SampleDirectory& d = v->directory();
  ASSERT_OK_AND_ASSIGN(const PathEntry cat, d.Resolve("cat"));
  const auto range = d.SubtreeIndexRange(cat.index);
  ASSERT_TRUE(range.has_value());
  std::vector<uint64_t> expected(range->count);
  std::iota(expected.begin(), expected.end(), range->first);
  EXPECT_EQ(d.SamplesUnder(cat.index), expected);
  for (const uint64_t i : expected) EXPECT_TRUE(d.Path(i).starts_with("cat/")) << d.Path(i);
}

TEST(CompactTest, UnnamedSamplesCostNoNames) {
  TempDir tmp;
  const std::string vol = tmp / "v.dlfs";
  std::vector<Sample> samples;
  for (uint32_t i = 0; i < 1000; ++i) samples.push_back({"", RandomBytes(8, i), i % 10});
  ASSERT_OK(Write(vol, samples, Compact()));
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol));
  const SampleDirectory& d = v->directory();
  EXPECT_FALSE(d.has_names());
  EXPECT_EQ(d.Path(3), "#3");
  EXPECT_EQ(d.name(3), "#3");
  EXPECT_EQ(*d.Lookup("#3"), 3u);
  EXPECT_EQ(*d.Lookup("/#999/"), 999u);
  EXPECT_THAT(d.Lookup("#1000"), StatusIs(StatusCode::kNotFound, "'#<index>'"));
  EXPECT_THAT(d.Lookup("#03"), StatusIs(StatusCode::kNotFound, ""));
  EXPECT_THAT(d.Lookup("3"), StatusIs(StatusCode::kNotFound, ""));
  for (uint64_t i = 0; i < samples.size(); ++i) {
    EXPECT_EQ(*v->Read(i), samples[i].bytes);
    EXPECT_EQ(d.label(i), samples[i].label);
  }
  // 8-byte samples, 16 per block: 1-byte ends, a 4-byte CRC, 1-byte labels.
  EXPECT_LE(d.sample_metadata_bytes(), 1000u * 6 + 63u * 32 + 63u * 8);
  EXPECT_EQ(d.DirSamples(0, 990, 100).size(), 10u);
  EXPECT_OK(d.CheckAll());
}

TEST(CompactTest, SpreadsBlocksOverTargets) {
  TempDir tmp;
  const std::string vol = tmp / "v.dlfs";
  const std::vector<Sample> samples = Samples(200, 11, /*sorted=*/false);
  ASSERT_OK(Write(vol, samples, Compact(/*align=*/512, /*targets=*/3)));
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol));
  ExpectSame(*v, samples);
  std::set<uint16_t> used;
  for (uint64_t i = 0; i < v->size(); ++i) used.insert(v->directory().sample(i).target);
  EXPECT_EQ(used.size(), 3u);
}

TEST(CompactTest, RefusesDuplicatesAndPathsThatAreDirectories) {
  TempDir tmp;
  {
    // In order: refused when added.
    ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(tmp / "a.dlfs", Compact()));
    ASSERT_OK(b->Add("x/1", Bytes("a")));
    EXPECT_THAT(b->Add("x/1", Bytes("b")), StatusIs(StatusCode::kInvalidArgument, "'x/1'"));
    ASSERT_OK(b->Add("x/2", Bytes("c")));  // the builder stays usable
    ASSERT_OK(b->Finish());
  }
  {
    // Out of order: found by Finish, naming both samples.
    ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(tmp / "b.dlfs", Compact()));
    ASSERT_OK(b->Add("x/2", Bytes("a")));
    ASSERT_OK(b->Add("x/1", Bytes("b")));
    ASSERT_OK(b->Add("x/2", Bytes("c")));
    EXPECT_THAT(b->Finish(), StatusIs(StatusCode::kInvalidArgument, "duplicate sample path 'x/2'"));
  }
  {
    // In order, a sample under the one before it is refused when added ...
    ASSERT_OK_AND_ASSIGN(auto in_order, VolumeBuilder::Create(tmp / "c0.dlfs", Compact()));
    ASSERT_OK(in_order->Add("x/a", Bytes("a")));
    EXPECT_THAT(in_order->Add("x/a/b", Bytes("b")),
                StatusIs(StatusCode::kInvalidArgument, "needs directory 'x/a'"));
    // ... otherwise by Finish.
    ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(tmp / "c.dlfs", Compact()));
    ASSERT_OK(b->Add("x/a/b", Bytes("b")));
    ASSERT_OK(b->Add("x/a", Bytes("a")));
    EXPECT_THAT(b->Finish(),
                StatusIs(StatusCode::kInvalidArgument, "'x/a' is both a sample and a directory"));
  }
  {
    ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(tmp / "d.dlfs", Compact()));
    ASSERT_OK(b->Add("x", Bytes("a")));
    EXPECT_THAT(b->Add("", Bytes("b")), StatusIs(StatusCode::kInvalidArgument, "no name"));
    EXPECT_THAT(b->Add("a//b", Bytes("b")), StatusIs(StatusCode::kInvalidArgument, "bad sample"));
    EXPECT_THAT(b->Add("a/../b", Bytes("b")), StatusIs(StatusCode::kInvalidArgument, "bad sample"));
  }
  EXPECT_FALSE(std::filesystem::exists(tmp / "b.dlfs"));
  EXPECT_FALSE(std::filesystem::exists(tmp / "c.dlfs"));
}

TEST(CompactTest, AutoLayoutTakesTheTreeForFieldsAndTheCompactOneOtherwise) {
  TempDir tmp;
  VolumeBuilder::Options o;
  o.layout = DirectoryLayout::kAuto;
  {
    ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(tmp / "plain.dlfs", o));
    EXPECT_EQ(b->layout(), DirectoryLayout::kAuto);
    ASSERT_OK(b->Add("a", Bytes("1")));
    EXPECT_EQ(b->layout(), DirectoryLayout::kCompact);
    ASSERT_OK(b->Finish());
  }
  {
    ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(tmp / "fields.dlfs", o));
    ASSERT_OK(b->BeginSample("k/1", 3));
    ASSERT_OK(b->AddField("jpg", Bytes("img")));
    ASSERT_OK(b->AddField("cls", Bytes("3")));
    ASSERT_OK(b->EndSample());
    EXPECT_EQ(b->layout(), DirectoryLayout::kTree);
    ASSERT_OK(b->Finish());
  }
  ASSERT_OK_AND_ASSIGN(auto plain, Volume::Open(tmp / "plain.dlfs"));
  EXPECT_EQ(plain->info().format_version, 3u);
  ASSERT_OK_AND_ASSIGN(auto fields, Volume::Open(tmp / "fields.dlfs"));
  EXPECT_EQ(fields->info().format_version, 1u);
  EXPECT_EQ(*fields->Read(0, "jpg"), Bytes("img"));
  EXPECT_EQ(fields->directory().label(0), 3u);
  // A compact builder refuses a field later on, naming the way out.
  ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(tmp / "late.dlfs", Compact()));
  ASSERT_OK(b->Add("a", Bytes("1")));
  ASSERT_OK(b->BeginSample("b"));
  EXPECT_THAT(b->BeginField("jpg"), StatusIs(StatusCode::kInvalidArgument, "tree layout"));
}

TEST(CompactTest, AnEmptyVolumeOpens) {
  TempDir tmp;
  ASSERT_OK(Write(tmp / "e.dlfs", {}, Compact()));
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(tmp / "e.dlfs"));
  EXPECT_EQ(v->size(), 0u);
  EXPECT_OK(v->directory().CheckAll());
}

TEST(CompactTest, AddBatchWritesWhatAddWould) {
  TempDir tmp;
  std::vector<std::byte> data;
  std::vector<uint64_t> lengths;
  std::vector<uint32_t> labels;
  std::vector<Sample> samples;
  for (uint32_t i = 0; i < 300; ++i) {
    std::vector<std::byte> b = RandomBytes(8 + i % 9, i);
    data.insert(data.end(), b.begin(), b.end());
    lengths.push_back(b.size());
    labels.push_back(i % 3);
    samples.push_back({"", b, i % 3});
  }
  ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(tmp / "v.dlfs", Compact()));
  EXPECT_THAT(b->AddBatch(std::span(data).first(100), std::span(lengths).first(10),
                          std::span(labels).first(10)),
              StatusIs(StatusCode::kInvalidArgument, "lengths add up"));
  ASSERT_OK(b->AddBatch(data, lengths, labels));
  ASSERT_OK(b->Finish());
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(tmp / "v.dlfs"));
  ASSERT_EQ(v->size(), samples.size());
  for (uint64_t i = 0; i < v->size(); ++i) {
    EXPECT_EQ(*v->Read(i), samples[i].bytes);
    EXPECT_EQ(v->directory().label(i), samples[i].label);
  }
}

// ---- Damage: each block is checked when first used ----

class CompactDamageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    vol_ = tmp_ / "v.dlfs";
    samples_ = Samples(64, 5, /*sorted=*/false);
    ASSERT_OK(Write(vol_, samples_, Compact()));
    ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol_));
    dir_offset_ = v->info().directory_offset;
    std::vector<std::byte> head(sizeof(format::CompactHeader));
    ReadAt(dir_offset_, head);
    std::memcpy(&header_, head.data(), sizeof header_);
  }
  void ReadAt(uint64_t offset, std::span<std::byte> out) {
    const int fd = ::open(vol_.c_str(), O_RDONLY);
    ASSERT_EQ(::pread(fd, out.data(), out.size(), static_cast<off_t>(offset)),
              static_cast<ssize_t>(out.size()));
    ::close(fd);
  }
  // Flips one byte of the directory region at `offset` from its start.
  void Flip(uint64_t offset) {
    const int fd = ::open(vol_.c_str(), O_RDWR);
    unsigned char c;
    ASSERT_EQ(::pread(fd, &c, 1, static_cast<off_t>(dir_offset_ + offset)), 1);
    c ^= 0x20;
    ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(dir_offset_ + offset)), 1);
    ::close(fd);
  }
  uint64_t Section(uint32_t s) const { return header_.sections[s].offset; }

  TempDir tmp_;
  std::string vol_;
  std::vector<Sample> samples_;
  uint64_t dir_offset_ = 0;
  format::CompactHeader header_{};
};

TEST_F(CompactDamageTest, ABlockOfRecordsThatFailsItsCheckIsAnErrorNamingItNeverASample) {
  // Block 2's records start somewhere in the records section: damage a byte
  // of its first end.
  format::BlockEntry e;
  std::vector<std::byte> raw(sizeof e);
  ReadAt(dir_offset_ + Section(format::kSectionBlocks) + 2 * sizeof e, raw);
  std::memcpy(&e, raw.data(), sizeof e);
  Flip(Section(format::kSectionRecords) + e.records_offset);
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol_));  // opening reads no block
  const SampleDirectory& d = v->directory();
  EXPECT_THAT(d.Locate(32),
              StatusIs(StatusCode::kCorruption, "directory block 2 (samples 32..47)"));
  EXPECT_THAT(v->Read(40), StatusIs(StatusCode::kCorruption, "directory block 2"));
  EXPECT_THAT(v->Read(40, /*verify=*/false),
              StatusIs(StatusCode::kCorruption, "directory block 2"));
  EXPECT_EQ(d.sample(40).length, 0u);  // never another sample's bytes
  EXPECT_OK(d.Locate(31));
  EXPECT_EQ(*v->Read(31), samples_[31].bytes);
  EXPECT_THAT(d.CheckAll(), StatusIs(StatusCode::kCorruption, "directory block 2"));
}

TEST_F(CompactDamageTest, ADamagedBlockEntryIsCaughtByItsBlocksChecksum) {
  Flip(Section(format::kSectionBlocks) + 3 * sizeof(format::BlockEntry) + 2);  // data_offset
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol_));
  EXPECT_THAT(v->directory().Locate(50), StatusIs(StatusCode::kCorruption, "directory block 3"));
  EXPECT_OK(v->directory().Locate(10));
}

TEST_F(CompactDamageTest, DamagedNamesAreAnErrorOnLookupAndVisibleInPaths) {
  // The names section: the ends of block 0 come first, then every name.
  Flip(Section(format::kSectionNames) + header_.sections[format::kSectionNames].length - 3);
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol_));
  const SampleDirectory& d = v->directory();
  EXPECT_EQ(d.Path(63), "<damaged name block 3>");
  EXPECT_EQ(d.Path(0), samples_[0].path);
  EXPECT_THAT(d.CheckAll(), StatusIs(StatusCode::kCorruption, "name block 3"));
  // Reading by index does not need names.
  EXPECT_EQ(*v->Read(63), samples_[63].bytes);
}

TEST_F(CompactDamageTest, ADamagedHeaderOrTreeIsRefused) {
  Flip(Section(format::kSectionTree) + sizeof(format::TreeHeader) + 1);
  {
    ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol_));
    EXPECT_THAT(v->directory().Resolve("cat"), StatusIs(StatusCode::kCorruption, "tree"));
    EXPECT_THAT(v->directory().CheckAll(), StatusIs(StatusCode::kCorruption, "tree"));
  }
  Flip(20);  // the header's dir count
  EXPECT_THAT(Volume::Open(vol_), StatusIs(StatusCode::kCorruption, "header checksum"));
}

TEST_F(CompactDamageTest, AVolumeTruncatedWhileOpenIsAnErrorNotACrash) {
  // The directory is read through a mapping of the file: a page past the
  // new end would raise SIGBUS. Guarded, it reads as changed.
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol_));
  EXPECT_EQ(*v->Read(3), samples_[3].bytes);  // block 0 checked and used
  ASSERT_EQ(::truncate(vol_.c_str(), static_cast<off_t>(dir_offset_)), 0);
  EXPECT_THAT(v->Read(3), StatusIs(StatusCode::kCorruption, "changed while open"));
  EXPECT_THAT(v->Read(50), StatusIs(StatusCode::kCorruption, "changed while open"));
  EXPECT_THAT(v->directory().Lookup(samples_[5].path),
              StatusIs(StatusCode::kCorruption, "changed while open"));
  VerifyReport report;
  ASSERT_OK(VerifyVolume(*v, {}, &report));
  EXPECT_EQ(report.bad_samples, samples_.size());
  EXPECT_THAT(Volume::Open(vol_), StatusIs(StatusCode::kCorruption, ""));
}

TEST_F(CompactDamageTest, EveryByteOfTheRegionIsCoveredByACheck) {
  // Each byte flipped, in turn: CheckAll (or open) fails, or the byte is
  // padding the reader never uses and the volume still reads the same.
  const uint64_t length =
      header_.sections[format::kSectionTree].offset + header_.sections[format::kSectionTree].length;
  uint64_t caught = 0, unused = 0;
  for (uint64_t at = 0; at < length; at += 7) {
    Flip(at);
    auto v = Volume::Open(vol_);
    if (!v.ok() || !(*v)->directory().CheckAll().ok()) {
      ++caught;
    } else {
      ++unused;
      for (uint64_t i = 0; i < samples_.size(); ++i) {
        ASSERT_EQ(*(*v)->Read(i), samples_[i].bytes) << "byte " << at;
        ASSERT_EQ((*v)->directory().Path(i), samples_[i].path) << "byte " << at;
        ASSERT_EQ((*v)->directory().label(i), samples_[i].label) << "byte " << at;
      }
    }
    Flip(at);
  }
  EXPECT_GT(caught, 0u);
  EXPECT_LT(unused, caught / 10) << "only padding goes unchecked";
}

}  // namespace compact_test
}  // namespace dlfs
