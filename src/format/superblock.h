// Encoding and validation of the superblock (docs/format.md §2).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "dlfs/status.h"
#include "format/format.h"

namespace dlfs::format {

// Sets magic, version (1, unless it is already 3: a compact directory), size
// and the trailing CRC32C of `sb`; call last.
void SealSuperblock(Superblock* sb);

// The CRC32C a sealed superblock must carry.
uint32_t SuperblockChecksum(const Superblock& sb);

// Checks everything a reader must refuse (docs/format.md §5, checks 2-17)
// for the superblock read from `path`, a target of `file_size` bytes. This
// covers one target file on its own; that the targets of a volume belong
// together is checked by Volume::Open (§5 checks 18-22). Messages name `path`
// and the problem.
// `known_incompat` is the set of incompat flags this reader understands;
// tests pass less to act as an older reader.
Status CheckSuperblock(const Superblock& sb, uint64_t file_size, const std::string& path,
                       uint32_t known_incompat = kKnownIncompatFlags);

// "fields,zstd": the names of the incompat bits in `flags`.
std::string IncompatFlagNames(uint32_t flags);

// Returns the first region of `kind`, or nullptr. With CheckSuperblock OK
// there is exactly one directory region; use FindDataRegion for data.
const RegionEntry* FindRegion(const Superblock& sb, RegionKind kind);

// Returns target `target`'s data region, or nullptr. With CheckSuperblock OK
// every target below target_count has exactly one.
const RegionEntry* FindDataRegion(const Superblock& sb, uint32_t target);

// The path bytes of a target entry (empty for target 0).
std::string_view TargetPath(const TargetEntry& entry);

std::string FormatUuid(const uint8_t (&uuid)[16]);

}  // namespace dlfs::format
