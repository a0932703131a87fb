#include "format/superblock.h"

#include <cstring>
#include <functional>
#include <vector>

#include "testutil.h"

namespace dlfs::format {
namespace superblock_test {

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

// One damaged superblock: how it is made from a valid one, and how the
// reader must refuse it.
struct Mutation {
  const char* name;
  std::function<void(Superblock&)> apply;
  StatusCode code;
  const char* says;    // a part of the message
  bool reseal = true;  // false: the change is made after sealing
};

void ExpectRefused(const std::vector<Mutation>& table, const Superblock& valid, uint64_t file_size,
                   const char* file) {
  for (const Mutation& m : table) {
    Superblock sb = valid;
    m.apply(sb);
    if (m.reseal) SealSuperblock(&sb);
    const Status st = CheckSuperblock(sb, file_size, file);
    EXPECT_EQ(st.code(), m.code) << m.name << ": " << st.ToString();
    EXPECT_NE(st.message().find(m.says), std::string::npos) << m.name << ": " << st.message();
    EXPECT_EQ(st.message().rfind(file, 0), 0u) << m.name << ": names the file: " << st.message();
  }
}

TEST(SuperblockTest, RefusesWithNamedReasons) {
  const std::vector<Mutation> table = {
      {"bad magic", [](Superblock& sb) { sb.magic[1] = 'X'; }, StatusCode::kCorruption,
       "v.dlfs: not a dlfs volume", false},
      {"changed without resealing", [](Superblock& sb) { sb.sample_count = 7; },
       StatusCode::kCorruption, "superblock checksum mismatch", false},
      {"newer version",
       [](Superblock& sb) {
         sb.format_version = 2;
         sb.crc32c = SuperblockChecksum(sb);
       },
       StatusCode::kNotSupported, "version", false},
      {"unknown incompatible feature", [](Superblock& sb) { sb.incompat_flags = 4; },
       StatusCode::kNotSupported, "features this dlfs does not support (unknown 0x4"},
      {"unknown feature beside known ones",
       [](Superblock& sb) { sb.incompat_flags = kIncompatFields | 0x80000000u; },
       StatusCode::kNotSupported, "unknown 0x80000000"},
      {"zstd without fields", [](Superblock& sb) { sb.incompat_flags = kIncompatZstd; },
       StatusCode::kCorruption, "zstd feature flag is set without the fields flag"},
  };
  ExpectRefused(table, ValidSuperblock(), kFileSize, "v.dlfs");

  Superblock sb = ValidSuperblock();
  sb.compat_flags = 1;  // unknown compat features are ignored
  EXPECT_OK(Check(sb));
  // Format v2's features are known to this reader, and refused by one that
  // lacks them (a v1 reader knows none).
  sb.incompat_flags = kIncompatFields | kIncompatZstd;
  SealSuperblock(&sb);
  EXPECT_OK(CheckSuperblock(sb, kFileSize, "v.dlfs"));
  const Status v1 = CheckSuperblock(sb, kFileSize, "v.dlfs", 0);
  EXPECT_EQ(v1.code(), StatusCode::kNotSupported);
  EXPECT_NE(v1.message().find("(fields,zstd, incompat flags 0x3)"), std::string::npos)
      << v1.message();
}

TEST(SuperblockTest, RefusesInconsistentLayout) {
  const std::vector<Mutation> table = {
      {"truncated file", [](Superblock& sb) { sb.volume_size = kFileSize + 4096; },
       StatusCode::kCorruption, "truncated"},
      {"unaligned region", [](Superblock& sb) { sb.regions[1].offset = 8000; },
       StatusCode::kCorruption, "region 1 lies outside the volume"},
      {"region over the copy", [](Superblock& sb) { sb.regions[1].length = 3 * 4096; },
       StatusCode::kCorruption, "region 1 lies outside the volume"},
      {"overlap", [](Superblock& sb) { sb.regions[1].offset = 4096; }, StatusCode::kCorruption,
       "data and directory regions overlap"},
      {"unknown kind", [](Superblock& sb) { sb.regions[1].kind = 9; }, StatusCode::kCorruption,
       "unknown region kind 9"},
      {"missing directory", [](Superblock& sb) { sb.region_count = 1; }, StatusCode::kCorruption,
       "expected exactly one directory region"},
      {"alignment", [](Superblock& sb) { sb.data_alignment = 3; }, StatusCode::kCorruption,
       "bad data alignment"},
      {"data bytes", [](Superblock& sb) { sb.data_bytes = 5000; }, StatusCode::kCorruption,
       "data byte count exceeds"},
      {"target index", [](Superblock& sb) { sb.target_index = 1; }, StatusCode::kCorruption,
       "target index 1 of 1"},
      {"offset + length overflows",
       [](Superblock& sb) { sb.regions[0].offset = ~uint64_t{0} - 4095; }, StatusCode::kCorruption,
       "region 0 lies outside the volume"},
  };
  ExpectRefused(table, ValidSuperblock(), kFileSize, "v.dlfs");
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
  sb = ValidSecondTarget();
  sb.data_bytes = 4096 + 4000;  // exactly both data regions
  EXPECT_OK(check(sb));

  constexpr StatusCode kBad = StatusCode::kCorruption;
  const std::vector<Mutation> table = {
      {"no path", [](Superblock& sb) { sb.targets[1].path_length = 0; }, kBad, "bad target table"},
      {"long path", [](Superblock& sb) { sb.targets[1].path_length = 241; }, kBad,
       "bad target table"},
      {"NUL in path", [](Superblock& sb) { sb.targets[1].path[2] = '\0'; }, kBad, "NUL"},
      {"target 0 with a path",
       [](Superblock& sb) {
         sb.targets[0].path_length = 1;
         sb.targets[0].path[0] = 'x';
       },
       kBad, "target 0 has a path"},
      {"flags", [](Superblock& sb) { sb.targets[0].flags = 1; }, kBad, "flags"},
      {"target too small", [](Superblock& sb) { sb.targets[0].size = 4096; }, kBad, "too small"},
      {"own size", [](Superblock& sb) { sb.targets[1].size = 16384; }, kBad, "not this file's"},
      {"region past its target", [](Superblock& sb) { sb.regions[2].length = 8192; }, kBad,
       "outside the volume"},
      {"region past target 0", [](Superblock& sb) { sb.regions[1].offset = 20480; }, kBad,
       "outside the volume"},
      {"directory on target 1",
       [](Superblock& sb) {
         sb.regions[1].target = 1;
         sb.regions[1].offset = 4096;
       },
       kBad, "not on target 0"},
      {"two data regions on target 0, none on 1", [](Superblock& sb) { sb.regions[2].target = 0; },
       kBad, "data region on target"},
      {"data region not counted", [](Superblock& sb) { sb.region_count = 2; }, kBad,
       "data region on target 1"},
      {"more data bytes than both data regions",
       [](Superblock& sb) { sb.data_bytes = 4096 + 4001; }, kBad, "data byte count"},
      {"too many targets", [](Superblock& sb) { sb.target_count = 9; }, kBad, "target count 9"},
  };
  ExpectRefused(table, ValidSecondTarget(), 12288, "v.t1");
}

TEST(SuperblockTest, UuidFormatting) {
  uint8_t u[16];
  for (int i = 0; i < 16; ++i) u[i] = static_cast<uint8_t>(i * 17);
  EXPECT_EQ(FormatUuid(u), "00112233-4455-6677-8899-aabbccddeeff");
}

}  // namespace superblock_test
}  // namespace dlfs::format
