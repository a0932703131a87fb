#include "format/superblock.h"

#include <cstddef>
#include <cstdio>
#include <cstring>

#include "common/crc32c.h"

namespace dlfs::format {

uint32_t SuperblockChecksum(const Superblock& sb) {
  return crc32c::Value(&sb, offsetof(Superblock, crc32c));
}

void SealSuperblock(Superblock* sb) {
  std::memcpy(sb->magic, kSuperblockMagic, sizeof sb->magic);
  sb->format_version = kFormatVersion;
  sb->superblock_size = kSuperblockSize;
  sb->crc32c = SuperblockChecksum(*sb);
}

const RegionEntry* FindRegion(const Superblock& sb, RegionKind kind) {
  for (uint32_t i = 0; i < sb.region_count; ++i) {
    if (sb.regions[i].kind == static_cast<uint32_t>(kind)) return &sb.regions[i];
  }
  return nullptr;
}

Status CheckSuperblock(const Superblock& sb, uint64_t file_size, const std::string& path) {
  auto bad = [&](const std::string& what) { return Status::Corruption(path + ": " + what); };
  if (std::memcmp(sb.magic, kSuperblockMagic, sizeof sb.magic) != 0) {
    return bad("not a dlfs volume (bad magic)");
  }
  if (sb.crc32c != SuperblockChecksum(sb)) return bad("superblock checksum mismatch");
  if (sb.format_version != kFormatVersion) {
    return Status::NotSupported(path + ": format version " + std::to_string(sb.format_version) +
                                " is not supported (this dlfs reads version " +
                                std::to_string(kFormatVersion) + ")");
  }
  if (sb.superblock_size != kSuperblockSize) return bad("unexpected superblock size");
  if ((sb.incompat_flags & ~kKnownIncompatFlags) != 0) {
    char flags[16];
    std::snprintf(flags, sizeof flags, "0x%x", sb.incompat_flags);
    return Status::NotSupported(path + ": volume uses unknown features (incompat flags " + flags +
                                ")");
  }
  if (file_size < 2 * uint64_t{kSuperblockSize}) return bad("too small to hold two superblocks");
  if (sb.volume_size != file_size) {
    return bad(file_size < sb.volume_size
                   ? "truncated: file has " + std::to_string(file_size) + " bytes, volume needs " +
                         std::to_string(sb.volume_size)
                   : "file has " + std::to_string(file_size) + " bytes, volume has only " +
                         std::to_string(sb.volume_size));
  }
  if (sb.target_count == 0 || sb.target_count > kMaxTargets || sb.target_index >= sb.target_count) {
    return bad("bad target table");
  }
  if (sb.target_count != 1) {
    return Status::NotSupported(path + ": multi-target volumes are not supported yet");
  }
  if (sb.region_count > kMaxRegions) return bad("bad region count");
  const uint32_t a = sb.data_alignment;
  if (a == 0 || (a & (a - 1)) != 0 || a > kMaxDataAlignment) return bad("bad data alignment");
  int data = 0, dir = 0;
  for (uint32_t i = 0; i < sb.region_count; ++i) {
    const RegionEntry& r = sb.regions[i];
    if (r.kind == static_cast<uint32_t>(RegionKind::kData)) {
      ++data;
    } else if (r.kind == static_cast<uint32_t>(RegionKind::kDirectory)) {
      ++dir;
    } else {
      return bad("unknown region kind " + std::to_string(r.kind));
    }
    // Regions live between the two superblock copies.
    if (r.target >= sb.target_count || r.offset % kRegionAlignment != 0 ||
        r.offset < kSuperblockSize || r.offset > file_size - kSuperblockSize ||
        r.length > file_size - kSuperblockSize - r.offset) {
      return bad("region " + std::to_string(i) + " lies outside the volume");
    }
  }
  if (data != 1 || dir != 1) return bad("expected exactly one data and one directory region");
  if (sb.data_bytes > FindRegion(sb, RegionKind::kData)->length) {
    return bad("data byte count exceeds the data region");
  }
  const RegionEntry* d = FindRegion(sb, RegionKind::kData);
  const RegionEntry* m = FindRegion(sb, RegionKind::kDirectory);
  if (d->offset < m->offset + m->length && m->offset < d->offset + d->length) {
    return bad("data and directory regions overlap");
  }
  // Version 1: the one target is the file itself.
  const TargetEntry& self = sb.targets[0];
  if (self.size != sb.volume_size || self.path_length != 0 || self.flags != 0) {
    return bad("bad target table");
  }
  return Status::Ok();
}

std::string FormatUuid(const uint8_t (&u)[16]) {
  char buf[40];
  std::snprintf(buf, sizeof buf,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
                u[15]);
  return buf;
}

}  // namespace dlfs::format
