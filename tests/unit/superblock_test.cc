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

TEST(SuperblockTest, UuidFormatting) {
  uint8_t u[16];
  for (int i = 0; i < 16; ++i) u[i] = static_cast<uint8_t>(i * 17);
  EXPECT_EQ(FormatUuid(u), "00112233-4455-6677-8899-aabbccddeeff");
}

}  // namespace
}  // namespace dlfs::format
