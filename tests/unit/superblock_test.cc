#include "format/superblock.h"

#include <cstring>

#include "testutil.h"

namespace dlfs::format {
namespace {

constexpr uint64_t kFileSize = 5 * 4096;

// A minimal valid superblock: data in [4096, 8192), directory in [8192, 12288).
Superblock ValidSuperblock() {
  Superblock sb{};
  sb.volume_size = kFileSize;
  sb.data_alignment = 1;
  sb.target_count = 1;
  sb.region_count = 2;
  sb.data_bytes = 100;
  sb.regions[0] = {static_cast<uint32_t>(RegionKind::kData), 0, 4096, 4096, 0, 0};
  sb.regions[1] = {static_cast<uint32_t>(RegionKind::kDirectory), 0, 8192, 200, 0x1234, 0};
  sb.targets[0].size = kFileSize;
  SealSuperblock(&sb);
  return sb;
}

Status Check(Superblock sb, bool reseal = true) {
  if (reseal) SealSuperblock(&sb);
  return CheckSuperblock(sb, kFileSize, "v.dlfs");
}

TEST(SuperblockTest, SealedSuperblockPassesAndRoundTrips) {
  const Superblock sb = ValidSuperblock();
  ASSERT_OK(CheckSuperblock(sb, kFileSize, "v.dlfs"));
  // The bytes are the format: a copy through memory is the same superblock.
  unsigned char raw[kSuperblockSize];
  std::memcpy(raw, &sb, sizeof raw);
  Superblock back;
  std::memcpy(&back, raw, sizeof back);
  EXPECT_OK(CheckSuperblock(back, kFileSize, "v.dlfs"));
  EXPECT_EQ(std::memcmp(raw, kSuperblockMagic, 8), 0);
  EXPECT_EQ(FindRegion(back, RegionKind::kDirectory)->crc32c, 0x1234u);
}

TEST(SuperblockTest, RefusesWithNamedReasons) {
  Superblock sb = ValidSuperblock();
  sb.magic[1] = 'X';
  Status st = Check(sb, /*reseal=*/false);
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("v.dlfs: not a dlfs volume"), std::string::npos) << st.message();

  sb = ValidSuperblock();
  sb.sample_count = 7;  // changed without resealing
  st = Check(sb, false);
  EXPECT_NE(st.message().find("superblock checksum mismatch"), std::string::npos);

  sb = ValidSuperblock();
  sb.format_version = 2;
  sb.crc32c = SuperblockChecksum(sb);
  st = Check(sb, false);
  EXPECT_EQ(st.code(), StatusCode::kNotSupported) << st.ToString();

  sb = ValidSuperblock();
  sb.incompat_flags = 1;
  EXPECT_EQ(Check(sb).code(), StatusCode::kNotSupported);

  sb = ValidSuperblock();
  sb.compat_flags = 1;  // unknown compat features are ignored
  EXPECT_OK(Check(sb));
}

TEST(SuperblockTest, RefusesInconsistentLayout) {
  auto expect_corrupt = [](Superblock sb, const char* what) {
    const Status st = Check(sb);
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << what << ": " << st.ToString();
  };
  Superblock sb = ValidSuperblock();
  sb.volume_size = kFileSize + 4096;
  const Status truncated = Check(sb);
  EXPECT_NE(truncated.message().find("truncated"), std::string::npos) << truncated.message();

  sb = ValidSuperblock();
  sb.regions[1].offset = 8000;  // not aligned
  expect_corrupt(sb, "unaligned region");
  sb = ValidSuperblock();
  sb.regions[1].length = 3 * 4096;  // runs into the superblock copy
  expect_corrupt(sb, "region over the copy");
  sb = ValidSuperblock();
  sb.regions[1].offset = 4096;  // overlaps data
  expect_corrupt(sb, "overlap");
  sb = ValidSuperblock();
  sb.regions[1].kind = 9;
  expect_corrupt(sb, "unknown kind");
  sb = ValidSuperblock();
  sb.region_count = 1;
  expect_corrupt(sb, "missing directory");
  sb = ValidSuperblock();
  sb.data_alignment = 3;
  expect_corrupt(sb, "alignment");
  sb = ValidSuperblock();
  sb.data_bytes = 5000;
  expect_corrupt(sb, "data bytes");
  sb = ValidSuperblock();
  sb.target_index = 1;
  expect_corrupt(sb, "target index");
  sb = ValidSuperblock();
  sb.regions[0].offset = ~uint64_t{0} - 4095;  // offset + length overflows
  expect_corrupt(sb, "overflow");
}

// Target 1 of a two-target volume: its own data region in [4096, 8192) of a
// 12288-byte file; target 0 (20480 bytes) holds data and the directory.
Superblock ValidSecondTarget() {
  Superblock sb = ValidSuperblock();
  sb.target_count = 2;
  sb.target_index = 1;
  sb.volume_size = 12288;
  sb.region_count = 3;
  sb.regions[2] = {static_cast<uint32_t>(RegionKind::kData), 1, 4096, 4000, 0, 0};
  sb.targets[1].size = 12288;
  sb.targets[1].path_length = 4;
  std::memcpy(sb.targets[1].path, "v.t1", 4);
  SealSuperblock(&sb);
  return sb;
}

TEST(SuperblockTest, MultiTargetTable) {
  auto check = [](Superblock sb) {
    SealSuperblock(&sb);
    return CheckSuperblock(sb, 12288, "v.t1");
  };
  ASSERT_OK(check(ValidSecondTarget()));
  EXPECT_EQ(FindDataRegion(ValidSecondTarget(), 1)->length, 4000u);
  EXPECT_EQ(TargetPath(ValidSecondTarget().targets[1]), "v.t1");
  // Target 0's regions are bounded by target 0's size from the table, not
  // by this file's: a directory at 12288 lies beyond this 12288-byte file
  // but inside target 0's 20480 bytes.
  Superblock sb = ValidSecondTarget();
  sb.regions[1].offset = 12288;
  EXPECT_OK(check(sb));

  auto expect_corrupt = [&](Superblock sb, const char* what, const char* says) {
    const Status st = check(sb);
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << what << ": " << st.ToString();
    EXPECT_NE(st.message().find(says), std::string::npos) << what << ": " << st.message();
  };
  sb = ValidSecondTarget();
  sb.targets[1].path_length = 0;
  expect_corrupt(sb, "no path", "bad target table");
  sb = ValidSecondTarget();
  sb.targets[1].path_length = 241;
  expect_corrupt(sb, "long path", "bad target table");
  sb = ValidSecondTarget();
  sb.targets[1].path[2] = '\0';
  expect_corrupt(sb, "NUL in path", "NUL");
  sb = ValidSecondTarget();
  sb.targets[0].path_length = 1;
  sb.targets[0].path[0] = 'x';
  expect_corrupt(sb, "target 0 with a path", "target 0 has a path");
  sb = ValidSecondTarget();
  sb.targets[0].flags = 1;
  expect_corrupt(sb, "flags", "flags");
  sb = ValidSecondTarget();
  sb.targets[0].size = 4096;
  expect_corrupt(sb, "target too small", "too small");
  sb = ValidSecondTarget();
  sb.targets[1].size = 16384;  // not this file's size
  expect_corrupt(sb, "own size", "not this file's");
  sb = ValidSecondTarget();
  sb.regions[2].length = 8192;  // over target 1's copy
  expect_corrupt(sb, "region past its target", "outside the volume");
  sb = ValidSecondTarget();
  sb.regions[1].offset = 20480;  // past target 0's end
  expect_corrupt(sb, "region past target 0", "outside the volume");
  sb = ValidSecondTarget();
  sb.regions[1].target = 1;
  sb.regions[1].offset = 4096;
  expect_corrupt(sb, "directory on target 1", "not on target 0");
  sb = ValidSecondTarget();
  sb.regions[2].target = 0;  // two data regions on target 0, none on 1
  expect_corrupt(sb, "missing data region", "data region on target");
  sb = ValidSecondTarget();
  sb.region_count = 2;
  expect_corrupt(sb, "data region not counted", "data region on target 1");
  sb = ValidSecondTarget();
  sb.data_bytes = 4096 + 4001;  // more than both data regions
  expect_corrupt(sb, "data bytes", "data byte count");
  sb = ValidSecondTarget();
  sb.data_bytes = 4096 + 4000;  // exactly both
  EXPECT_OK(check(sb));
  sb = ValidSecondTarget();
  sb.target_count = 9;
  expect_corrupt(sb, "too many targets", "target count 9");
}

TEST(SuperblockTest, UuidFormatting) {
  uint8_t u[16];
  for (int i = 0; i < 16; ++i) u[i] = static_cast<uint8_t>(i * 17);
  EXPECT_EQ(FormatUuid(u), "00112233-4455-6677-8899-aabbccddeeff");
}

}  // namespace
}  // namespace dlfs::format
