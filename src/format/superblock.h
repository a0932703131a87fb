// Encoding and validation of the superblock (docs/format.md §2).
#pragma once

#include <cstdint>
#include <string>

#include "dlfs/status.h"
#include "format/format.h"

namespace dlfs::format {

// Sets magic, version, size and the trailing CRC32C of `sb`; call last.
void SealSuperblock(Superblock* sb);

// The CRC32C a sealed superblock must carry.
uint32_t SuperblockChecksum(const Superblock& sb);

// Checks everything a reader must refuse (docs/format.md §5) for the
// superblock read from `path`, a target of `file_size` bytes. Messages name
// `path` and the problem.
Status CheckSuperblock(const Superblock& sb, uint64_t file_size, const std::string& path);

// Returns the one region of `kind`, or nullptr. REQUIRES: CheckSuperblock OK.
const RegionEntry* FindRegion(const Superblock& sb, RegionKind kind);

std::string FormatUuid(const uint8_t (&uuid)[16]);

}  // namespace dlfs::format
