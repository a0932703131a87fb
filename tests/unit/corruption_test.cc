// Damaged volumes: every flipped byte of the superblock and the directory,
// truncations, and damaged sample data. The contract: a clean refusal naming
// the file, or (for sample data) a checksum error naming the sample — never a
// crash, an out-of-range read or a silently wrong sample. Run under ASan/UBSan
// in CI to catch the out-of-range part.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <map>

#include "common/crc32c.h"
#include "dlfs/builder.h"
#include "dlfs/verify.h"
#include "dlfs/volume.h"
#include "format/format.h"
#include "format/superblock.h"
#include "testutil.h"

namespace dlfs {
namespace corruption_test {

using testing::Bytes;
using testing::StatusIs;
using testing::TempDir;

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = tmp_ / "v.dlfs";
    // The tree (v1) directory, checked whole at open (compact_test.cc has
    // the compact one's damage tests).
    auto b = VolumeBuilder::Create(path_, {.layout = DirectoryLayout::kTree});
    ASSERT_OK(b);
    (*b)->SetClassNames({"cat", "dog"});
    ASSERT_OK((*b)->Add("cat/1.jpg", Bytes("first cat"), 0));
    ASSERT_OK((*b)->Add("cat/2.jpg", Bytes("second cat"), 0));
    ASSERT_OK((*b)->Add("dog/deep/1.jpg", Bytes("a dog"), 1));
    ASSERT_OK((*b)->Add("README", Bytes("unlabelled"), kNoLabel));
    ASSERT_OK((*b)->Finish());
    original_ = testing::ReadFile(path_);
    auto v = Volume::Open(path_);
    ASSERT_OK(v);
    info_ = (*v)->info();
  }

  void Restore() { testing::WriteFile(path_, original_); }

  // Overwrites one byte in place.
  void Poke(uint64_t offset, std::byte value) {
    const int fd = ::open(path_.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, &value, 1, static_cast<off_t>(offset)), 1);
    ::close(fd);
  }

  // Expects Open to refuse with a message naming the file.
  void ExpectRefused(const std::string& what) {
    auto v = Volume::Open(path_);
    ASSERT_THAT(v, ::testing::AnyOf(StatusIs(StatusCode::kCorruption, path_ + ": "),
                                    StatusIs(StatusCode::kNotSupported, path_ + ": ")))
        << what;
    EXPECT_EQ(v.status().message().rfind(path_ + ": ", 0), 0u) << v.status().message();
  }

  TempDir tmp_;
  std::string path_;
  std::vector<std::byte> original_;
  VolumeInfo info_;
};

TEST_F(CorruptionTest, EveryFlippedSuperblockByteIsRefused) {
  for (uint64_t off = 0; off < format::kSuperblockSize; ++off) {
    Poke(off, original_[off] ^ std::byte{0x5a});
    ExpectRefused("superblock byte " + std::to_string(off));
    Poke(off, original_[off]);
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_OK(Volume::Open(path_));
}

TEST_F(CorruptionTest, EveryFlippedDirectoryByteIsRefused) {
  for (uint64_t i = 0; i < info_.directory_bytes; ++i) {
    const uint64_t off = info_.directory_offset + i;
    Poke(off, original_[off] ^ std::byte{0x01});
    ExpectRefused("directory byte " + std::to_string(i));
    Poke(off, original_[off]);
    if (::testing::Test::HasFailure()) return;
  }
}

// The checksum catches random damage; the structural checks behind it must
// also hold against a crafted region whose checksum was recomputed. Either
// the volume is refused, or every query on it stays in range.
TEST_F(CorruptionTest, ResealedDirectoryDamageNeverReadsOutOfRange) {
  const uint64_t dir_off = info_.directory_offset;
  for (uint64_t i = 0; i < info_.directory_bytes; ++i) {
    for (std::byte flip : {std::byte{0x01}, std::byte{0x80}, std::byte{0xff}}) {
      std::vector<std::byte> bytes = original_;
      bytes[dir_off + i] ^= flip;
      format::Superblock sb;
      std::memcpy(&sb, bytes.data(), sizeof sb);
      for (uint32_t r = 0; r < sb.region_count; ++r) {
        if (sb.regions[r].kind == static_cast<uint32_t>(format::RegionKind::kDirectory)) {
          sb.regions[r].crc32c = crc32c::Value(bytes.data() + dir_off, info_.directory_bytes);
        }
      }
      format::SealSuperblock(&sb);
      std::memcpy(bytes.data(), &sb, sizeof sb);
      testing::WriteFile(path_, bytes);
      auto v = Volume::Open(path_);
      if (!v.ok()) {
        EXPECT_EQ(v.status().code(), StatusCode::kCorruption) << v.status().ToString();
        continue;
      }
      // Accepted (e.g. a changed label within range, or name bytes that stay
      // sorted): every query must still be consistent.
      const SampleDirectory& d = (*v)->directory();
      for (uint64_t s = 0; s < d.size(); ++s) {
        const std::string p = d.Path(s);
        auto found = d.Lookup(p);
        ASSERT_OK(found) << "byte " << i << ": " << p;
        EXPECT_EQ(*found, s);
        (void)(*v)->Read(s);  // may fail its checksum, must not read out of range
      }
      for (uint64_t k = 0; k < d.dir_count(); ++k) (void)d.Resolve(d.DirPath(k));
      for (uint64_t c = 0; c < d.class_count(); ++c) (void)d.class_name(c);
    }
  }
}

// A label of 2^24 or more, which the writer refuses (format.md §4.6 rule 7),
// is refused on reading too, in a region whose checksums agree (another
// writer's volume, or one of dlfs before the writer's bound): Open, and so
// `dlfs verify`, names the file, the sample and the label. The same reseal
// with a label in range opens, so it is the label that is refused.
TEST_F(CorruptionTest, LabelOfTwoToTheTwentyFourthIsRefusedOnOpen) {
  uint64_t idx = 0;
  {
    ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(path_));
    ASSERT_OK_AND_ASSIGN(idx, v->directory().Lookup("dog/deep/1.jpg"));
  }
  const auto with_label = [&](uint32_t label) {
    std::vector<std::byte> bytes = original_;
    std::byte* dir = bytes.data() + info_.directory_offset;
    format::DirectoryHeader h;
    std::memcpy(&h, dir, sizeof h);
    std::memcpy(dir + h.samples_offset + idx * sizeof(format::SampleEntry) +
                    offsetof(format::SampleEntry, label),
                &label, sizeof label);
    format::Superblock sb;
    std::memcpy(&sb, bytes.data(), sizeof sb);
    for (uint32_t r = 0; r < sb.region_count; ++r) {
      if (sb.regions[r].kind == static_cast<uint32_t>(format::RegionKind::kDirectory)) {
        sb.regions[r].crc32c = crc32c::Value(dir, info_.directory_bytes);
      }
    }
    format::SealSuperblock(&sb);
    std::memcpy(bytes.data(), &sb, sizeof sb);
    std::memcpy(bytes.data() + bytes.size() - sizeof sb, &sb, sizeof sb);  // the copy
    testing::WriteFile(path_, bytes);
  };

  with_label(0);
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(path_));
  EXPECT_EQ(v->directory().sample(idx).label, 0u);

  for (uint32_t label : {1u << 24, 1000012602u, kNoLabel - 1}) {
    with_label(label);
    const std::string want = path_ + ": directory region: sample " + std::to_string(idx) +
                             " ('dog/deep/1.jpg') has label " + std::to_string(label) +
                             ": labels must be below 16777216";
    auto r = Volume::Open(path_);
    ASSERT_THAT(r, StatusIs(StatusCode::kCorruption, want));
    EXPECT_EQ(r.status().message(), want);
  }

  with_label(kNoLabel);  // "no label" is not bound
  EXPECT_OK(Volume::Open(path_));
}

TEST_F(CorruptionTest, TruncatedFilesAreRefused) {
  const uint64_t size = original_.size();
  for (uint64_t len :
       {uint64_t{0}, uint64_t{1}, uint64_t{4095}, uint64_t{4096}, uint64_t{8191}, uint64_t{4100},
        info_.directory_offset, info_.directory_offset + 10, size - 4096, size - 1}) {
    Restore();
    std::filesystem::resize_file(path_, len);
    ExpectRefused("truncated to " + std::to_string(len));
  }
  Restore();
  std::filesystem::resize_file(path_, size + 100);
  ExpectRefused("grown by 100 bytes");
}

TEST_F(CorruptionTest, WrongMagicSaysNotAVolume) {
  testing::WriteFile(path_, testing::RandomBytes(64 * 1024, 5));
  auto v = Volume::Open(path_);
  ASSERT_THAT(v, StatusIs(StatusCode::kCorruption, "not a dlfs volume"));
  EXPECT_EQ(Volume::Open(tmp_ / "missing.dlfs").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Volume::Open(tmp_.path()).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CorruptionTest, DamagedPrimaryMentionsIntactCopy) {
  Poke(20, original_[20] ^ std::byte{1});
  auto v = Volume::Open(path_);
  ASSERT_THAT(v, StatusIs(StatusCode::kCorruption, "copy at the end of the file is intact"));
}

TEST_F(CorruptionTest, DamagedCopyIsReportedByVerify) {
  Poke(original_.size() - 100, original_[original_.size() - 100] ^ std::byte{1});
  auto v = Volume::Open(path_);
  ASSERT_OK(v);  // the primary is what readers use
  VerifyReport report;
  ASSERT_OK(VerifyVolume(**v, {}, &report));
  EXPECT_EQ(report.bad_samples, 0u);
  EXPECT_THAT(report.backup_superblock,
              StatusIs(StatusCode::kCorruption,
                       "the superblock copy at the end of the file differs from the primary"));
}

// Issue 49: a flipped first byte is damage, not "not a dlfs volume", when
// the copy is intact; and the copy repairs it.
TEST_F(CorruptionTest, BadMagicWithIntactCopyNamesBothAndTheRepair) {
  Poke(0, original_[0] ^ std::byte{1});
  auto v = Volume::Open(path_);
  ASSERT_THAT(v, StatusIs(StatusCode::kCorruption, "primary superblock is damaged (bad magic)"));
  EXPECT_THAT(v, StatusIs(StatusCode::kCorruption, "copy at the end of the file is intact"));
  EXPECT_THAT(v, StatusIs(StatusCode::kCorruption, "dlfs repair " + path_));

  auto dry = RepairSuperblock(path_, /*dry_run=*/true);
  ASSERT_OK(dry);
  EXPECT_FALSE(dry->repaired);
  EXPECT_NE(dry->what.find("would rewrite the primary superblock"), std::string::npos) << dry->what;
  EXPECT_FALSE(Volume::Open(path_).ok());  // a dry run writes nothing

  auto r = RepairSuperblock(path_);
  ASSERT_OK(r);
  EXPECT_TRUE(r->repaired);
  EXPECT_EQ(r->offset, 0u);
  EXPECT_EQ(testing::ReadFile(path_), original_);  // one superblock rewritten, nothing else
  ASSERT_OK(Volume::Open(path_));
  auto again = RepairSuperblock(path_);
  ASSERT_OK(again);
  EXPECT_FALSE(again->repaired);
  EXPECT_NE(again->what.find("nothing to repair"), std::string::npos);
}

TEST_F(CorruptionTest, RepairRewritesADamagedCopyFromThePrimary) {
  Poke(original_.size() - 100, original_[original_.size() - 100] ^ std::byte{1});
  auto r = RepairSuperblock(path_);
  ASSERT_OK(r);
  EXPECT_TRUE(r->repaired);
  EXPECT_EQ(r->offset, original_.size() - format::kSuperblockSize);
  EXPECT_EQ(testing::ReadFile(path_), original_);
}

TEST_F(CorruptionTest, RepairRefusesWhenBothSuperblocksAreDamaged) {
  Poke(20, original_[20] ^ std::byte{1});
  Poke(original_.size() - 100, original_[original_.size() - 100] ^ std::byte{1});
  auto r = RepairSuperblock(path_);
  ASSERT_THAT(r, StatusIs(StatusCode::kCorruption, "both superblocks are damaged"));
  EXPECT_THAT(RepairSuperblock(tmp_ / "missing.dlfs").status(),
              StatusIs(StatusCode::kNotFound, "missing.dlfs"));
}

TEST_F(CorruptionTest, FlippedSampleByteIsCaughtByReadAndVerify) {
  auto v0 = Volume::Open(path_);
  ASSERT_OK(v0);
  const uint64_t idx = *(*v0)->directory().Lookup("cat/2.jpg");
  const SampleInfo s = (*v0)->directory().sample(idx);
  Poke(s.offset + 3, original_[s.offset + 3] ^ std::byte{0x20});

  auto v = Volume::Open(path_);
  ASSERT_OK(v);
  auto bytes = (*v)->Read(idx, /*verify=*/true);
  ASSERT_THAT(bytes, StatusIs(StatusCode::kCorruption, "'cat/2.jpg': checksum mismatch"));
  auto raw = (*v)->Read(idx, /*verify=*/false);
  ASSERT_OK(raw);
  EXPECT_NE(*raw, Bytes("second cat"));

  std::vector<uint64_t> bad;
  VerifyOptions opt;
  opt.on_bad_sample = [&](uint64_t i, const Status& st) {
    bad.push_back(i);
    EXPECT_NE(st.message().find("cat/2.jpg"), std::string::npos);
  };
  VerifyReport report;
  ASSERT_OK(VerifyVolume(**v, opt, &report));
  EXPECT_EQ(report.samples_checked, 4u);
  EXPECT_EQ(report.bad_samples, 1u);
  EXPECT_EQ(bad, std::vector<uint64_t>{idx});
  EXPECT_OK(report.backup_superblock);
  // The report keeps the records a loader's quarantine takes.
  ASSERT_EQ(report.bad.size(), 1u);
  EXPECT_EQ(report.bad[0].index, idx);
  EXPECT_EQ(report.bad[0].path, "cat/2.jpg");
  EXPECT_EQ(report.bad[0].volume, (*v)->path());
  EXPECT_NE(report.bad[0].reason.find("checksum mismatch"), std::string::npos);
  EXPECT_EQ(report.total_samples, 4u);
  EXPECT_EQ(report.total_bytes, (*v)->info().data_bytes);
}

// Issue 13 #4: a window read that failed (EIO on a byte range) was
// reported as 10 "bad" samples with messages naming no sample, healthy ones
// included. Here the file ends inside the data region after the volume was
// opened: reads past the cut fail as a bad range would (the file-system
// level EIO test is tests/python/test_faults.py).
TEST(VerifyTest, UnreadableBytesNameExactlyTheSamplesTheyHold) {
  TempDir tmp;
  const std::string path = tmp / "v.dlfs";
  // The tree layout, whose directory is in memory: the cut takes only data.
  // (A compact directory is read from the file: CompactDamageTest.)
  ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(path, {.layout = DirectoryLayout::kTree}));
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK(b->Add("s/" + std::to_string(i), testing::RandomBytes(1000, i)));
  }
  ASSERT_OK(b->Finish());
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(path));
  // Samples are stored in the order added: 0-5 end by byte 6000 of the data
  // region, 6 straddles the cut, 7-9 lie beyond it.
  ASSERT_EQ(::truncate(path.c_str(), format::kSuperblockSize + 6500), 0);
  std::map<uint64_t, std::string> bad;
  VerifyOptions opt;
  opt.on_bad_sample = [&](uint64_t i, const Status& st) { bad[i] = st.message(); };
  VerifyReport report;
  ASSERT_OK(VerifyVolume(*v, opt, &report));
  EXPECT_EQ(report.samples_checked, 10u);
  EXPECT_EQ(report.bad_samples, 4u);
  ASSERT_EQ(bad.size(), 4u);
  for (int i = 6; i < 10; ++i) {
    const uint64_t idx = *v->directory().Lookup("s/" + std::to_string(i));
    ASSERT_TRUE(bad.contains(idx)) << i;
    EXPECT_NE(bad[idx].find(path + ": sample " + std::to_string(idx) + " 's/" + std::to_string(i) +
                            "': "),
              std::string::npos)
        << bad[idx];
  }
}

}  // namespace corruption_test
}  // namespace dlfs
