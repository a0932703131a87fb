#include "format/superblock.h"

#include <algorithm>
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
  if (sb->format_version != kFormatVersionCompact) sb->format_version = kFormatVersion;
  sb->superblock_size = kSuperblockSize;
  sb->crc32c = SuperblockChecksum(*sb);
}

const RegionEntry* FindRegion(const Superblock& sb, RegionKind kind) {
  for (uint32_t i = 0; i < sb.region_count; ++i) {
    if (sb.regions[i].kind == static_cast<uint32_t>(kind)) return &sb.regions[i];
  }
  return nullptr;
}

const RegionEntry* FindDataRegion(const Superblock& sb, uint32_t target) {
  for (uint32_t i = 0; i < sb.region_count; ++i) {
    const RegionEntry& r = sb.regions[i];
    if (r.kind == static_cast<uint32_t>(RegionKind::kData) && r.target == target) return &r;
  }
  return nullptr;
}

std::string_view TargetPath(const TargetEntry& e) {
  return {e.path, std::min<size_t>(e.path_length, kMaxTargetPath)};
}

namespace {

// docs/format.md §5 checks 9-10: the target table, before the regions that are
// bounds-checked against its sizes.
Status CheckTargetTable(const Superblock& sb, const std::string& path) {
  auto bad = [&](const std::string& what) {
    return Status::Corruption(path + ": bad target table (" + what + ")");
  };
  if (sb.target_count == 0 || sb.target_count > kMaxTargets) {
    return bad("target count " + std::to_string(sb.target_count));
  }
  if (sb.target_index >= sb.target_count) {
    return bad("target index " + std::to_string(sb.target_index) + " of " +
               std::to_string(sb.target_count));
  }
  for (uint32_t t = 0; t < sb.target_count; ++t) {
    const TargetEntry& e = sb.targets[t];
    const std::string which = "target " + std::to_string(t);
    if (e.flags != 0) return bad(which + " has unknown flags");
    if (e.size < 2 * uint64_t{kSuperblockSize}) return bad(which + " is too small");
    // Target 0 is where a reader starts, so it has no path: the volume is
    // named by it. Every other target needs one to be found.
    if (t == 0 && e.path_length != 0) return bad("target 0 has a path");
    if (t > 0) {
      if (e.path_length == 0 || e.path_length > kMaxTargetPath) {
        return bad(which + " has no valid path");
      }
      if (TargetPath(e).find('\0') != std::string_view::npos) {
        return bad(which + " has a NUL byte in its path");
      }
    }
  }
  // This file's own entry is its size (which check 8 tied to the file).
  if (sb.targets[sb.target_index].size != sb.volume_size) {
    return bad("target " + std::to_string(sb.target_index) + " size " +
               std::to_string(sb.targets[sb.target_index].size) + " is not this file's " +
               std::to_string(sb.volume_size));
  }
  return Status::Ok();
}

}  // namespace

Status CheckSuperblock(const Superblock& sb, uint64_t file_size, const std::string& path,
                       uint32_t known_incompat) {
  auto bad = [&](const std::string& what) { return Status::Corruption(path + ": " + what); };
  if (std::memcmp(sb.magic, kSuperblockMagic, sizeof sb.magic) != 0) {
    return bad("not a dlfs volume (bad magic)");
  }
  if (sb.crc32c != SuperblockChecksum(sb)) return bad("superblock checksum mismatch");
  if (sb.format_version != kFormatVersion && sb.format_version != kFormatVersionCompact) {
    return Status::NotSupported(path + ": format version " + std::to_string(sb.format_version) +
                                " is not supported (this dlfs reads versions " +
                                std::to_string(kFormatVersion) + " and " +
                                std::to_string(kFormatVersionCompact) + ")");
  }
  if (sb.superblock_size != kSuperblockSize) return bad("unexpected superblock size");
  if ((sb.incompat_flags & ~known_incompat) != 0) {
    char flags[16];
    std::snprintf(flags, sizeof flags, "0x%x", sb.incompat_flags & ~known_incompat);
    return Status::NotSupported(path + ": volume uses features this dlfs does not support (" +
                                IncompatFlagNames(sb.incompat_flags & ~known_incompat) +
                                ", incompat flags " + flags + ")");
  }
  if ((sb.incompat_flags & kIncompatZstd) && !(sb.incompat_flags & kIncompatFields)) {
    return bad("the zstd feature flag is set without the fields flag");
  }
  if (file_size < 2 * uint64_t{kSuperblockSize}) return bad("too small to hold two superblocks");
  if (sb.volume_size != file_size) {
    return bad(file_size < sb.volume_size
                   ? "truncated: file has " + std::to_string(file_size) + " bytes, volume needs " +
                         std::to_string(sb.volume_size)
                   : "file has " + std::to_string(file_size) + " bytes, volume has only " +
                         std::to_string(sb.volume_size));
  }
  DLFS_RETURN_IF_ERROR(CheckTargetTable(sb, path));
  if (sb.region_count > kMaxRegions) return bad("bad region count");
  const uint32_t a = sb.data_alignment;
  if (a == 0 || (a & (a - 1)) != 0 || a > kMaxDataAlignment) return bad("bad data alignment");
  uint32_t data_regions[kMaxTargets] = {};
  int dir = 0;
  for (uint32_t i = 0; i < sb.region_count; ++i) {
    const RegionEntry& r = sb.regions[i];
    const bool is_data = r.kind == static_cast<uint32_t>(RegionKind::kData);
    if (!is_data && r.kind != static_cast<uint32_t>(RegionKind::kDirectory)) {
      return bad("unknown region kind " + std::to_string(r.kind));
    }
    // Regions live between the two superblock copies of their target. The
    // table was checked above: every size there holds both copies, and this
    // file's own entry is its size.
    const uint64_t size = r.target < sb.target_count ? sb.targets[r.target].size : 0;
    if (r.target >= sb.target_count || r.offset % kRegionAlignment != 0 ||
        r.offset < kSuperblockSize || r.offset > size - kSuperblockSize ||
        r.length > size - kSuperblockSize - r.offset) {
      return bad("region " + std::to_string(i) + " lies outside the volume");
    }
    if (is_data) {
      ++data_regions[r.target];
    } else if (r.target != 0) {
      return bad("the directory region is not on target 0");
    } else {
      ++dir;
    }
  }
  if (dir != 1) return bad("expected exactly one directory region");
  uint64_t data_length = 0;
  for (uint32_t t = 0; t < sb.target_count; ++t) {
    if (data_regions[t] != 1) {
      return bad(sb.target_count == 1
                     ? "expected exactly one data and one directory region"
                     : "expected exactly one data region on target " + std::to_string(t));
    }
    data_length += FindDataRegion(sb, t)->length;  // each fits its target: no overflow
  }
  if (sb.data_bytes > data_length) return bad("data byte count exceeds the data region");
  // Only target 0 holds two regions.
  const RegionEntry* d = FindDataRegion(sb, 0);
  const RegionEntry* m = FindRegion(sb, RegionKind::kDirectory);
  if (d->offset < m->offset + m->length && m->offset < d->offset + d->length) {
    return bad("data and directory regions overlap");
  }
  return Status::Ok();
}

std::string IncompatFlagNames(uint32_t flags) {
  std::string out;
  const auto add = [&](const std::string& n) { out += (out.empty() ? "" : ",") + n; };
  if (flags & kIncompatFields) add("fields");
  if (flags & kIncompatZstd) add("zstd");
  for (uint32_t bit = 4; bit != 0; bit <<= 1) {
    if (flags & bit & ~kKnownIncompatFlags) {
      char b[16];
      std::snprintf(b, sizeof b, "0x%x", bit);
      add(std::string("unknown ") + b);
    }
  }
  return out;
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
