// Fuzzes Volume::Open and every query over a volume that opens.
//
// One source, three harnesses (DLFS_FUZZ_MODE):
//   1 file      the input is a whole volume file, as is: mostly exercises the
//               superblock checks and the checksum refusals.
//   2 metadata  the input is a superblock (4096 bytes) then a directory
//               region, handed over as VolumeOpenOptions::metadata (the MPI
//               collective open's path); the target file is a sparse file of
//               the size the superblock names. An odd first byte re-seals the
//               superblock and directory checksums first.
//   3 resealed  the input is a whole volume file whose checksums (superblock
//               copies, directory region, every sample in bounds) and sizes
//               are re-sealed before opening, so mutations reach the
//               directory decoder and the queries instead of the CRC checks.
#include <cstring>
#include <memory>
#include <vector>

#include "common/crc32c.h"
#include "dlfs/volume.h"
#include "exercise.h"
#include "format/format.h"
#include "format/superblock.h"
#include "fuzz_util.h"

using namespace dlfs;

namespace {

// The directory region entry of `sb`, found without trusting anything, or
// nullptr.
format::RegionEntry* DirectoryEntry(format::Superblock* sb) {
  for (uint32_t r = 0; r < format::kMaxRegions && r < sb->region_count; ++r) {
    if (sb->regions[r].kind == static_cast<uint32_t>(format::RegionKind::kDirectory)) {
      return &sb->regions[r];
    }
  }
  return nullptr;
}

bool InBounds(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

// Gives every sample entry of the directory at `dir` (`dir_len` bytes) the
// CRC of its bytes in `file`, where both lie in bounds.
void ResealSamples(std::byte* dir, uint64_t dir_len, const std::byte* file, uint64_t file_size) {
  if (dir_len < sizeof(format::DirectoryHeader)) return;
  format::DirectoryHeader h;
  std::memcpy(&h, dir, sizeof h);
  const uint64_t entry = sizeof(format::SampleEntry);
  if (h.sample_entry_size != entry || h.samples_offset % 8 != 0) return;
  for (uint64_t i = 0; i < h.sample_count && i < 100000; ++i) {
    const uint64_t at = h.samples_offset + i * entry;
    if (!InBounds(at, entry, dir_len)) return;
    format::SampleEntry s;
    std::memcpy(&s, dir + at, entry);
    if (!InBounds(s.offset, s.length, file_size)) continue;
    s.crc32c = crc32c::Value(file + s.offset, s.length);
    std::memcpy(dir + at, &s, entry);
  }
}

void Exercise(const Result<std::shared_ptr<Volume>>& v) {
  if (v.ok()) fuzz::ExerciseVolume(**v);
}

[[maybe_unused]] void FuzzFile(const uint8_t* data, size_t size) {
  static fuzz::MemFile file("volume");
  file.Set(data, size);
  Exercise(Volume::Open(file.path()));
}

[[maybe_unused]] void FuzzResealed(const uint8_t* data, size_t size) {
  static fuzz::MemFile file("volume");
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data),
                               reinterpret_cast<const std::byte*>(data) + size);
  if (size >= 2 * format::kSuperblockSize) {
    format::Superblock sb;
    std::memcpy(&sb, bytes.data(), sizeof sb);
    sb.volume_size = size;
    sb.targets[0].size = size;
    if (format::RegionEntry* dir = DirectoryEntry(&sb);
        dir != nullptr && dir->target == 0 && InBounds(dir->offset, dir->length, size)) {
      ResealSamples(bytes.data() + dir->offset, dir->length, bytes.data(), size);
      dir->crc32c = crc32c::Value(bytes.data() + dir->offset, dir->length);
    }
    sb.crc32c = format::SuperblockChecksum(sb);
    std::memcpy(bytes.data(), &sb, sizeof sb);
    std::memcpy(bytes.data() + size - sizeof sb, &sb, sizeof sb);  // the copy
  }
  file.Set(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  Exercise(Volume::Open(file.path()));
}

[[maybe_unused]] void FuzzMetadata(const uint8_t* data, size_t size) {
  static fuzz::MemFile file("volume");
  if (size < 1) return;
  const bool reseal = data[0] & 1;
  ++data;
  --size;
  format::Superblock sb{};
  std::memcpy(&sb, data, std::min(size, sizeof sb));
  const size_t dir_len = size > sizeof sb ? size - sizeof sb : 0;
  // 8-byte aligned, as the reader requires of a directory region.
  std::shared_ptr<std::byte> dir(new std::byte[std::max<size_t>(dir_len, 1)](),
                                 std::default_delete<std::byte[]>());
  if (dir_len > 0) std::memcpy(dir.get(), data + sizeof sb, dir_len);
  if (reseal) {
    if (format::RegionEntry* e = DirectoryEntry(&sb); e != nullptr) {
      e->length = dir_len;
      e->crc32c = crc32c::Value(dir.get(), dir_len);
    }
    sb.crc32c = format::SuperblockChecksum(sb);
  }
  // The target file the superblock describes (sparse; capped so a huge
  // claim is simply a size mismatch).
  file.SetSize(std::min<uint64_t>(sb.volume_size, uint64_t{1} << 40));
  VolumeMetadata md;
  md.superblocks.emplace_back(sizeof sb);
  std::memcpy(md.superblocks[0].data(), &sb, sizeof sb);
  for (uint32_t t = 1; t < sb.target_count && t < format::kMaxTargets; ++t) {
    md.superblocks.emplace_back();  // the other targets are read (and missing)
  }
  md.directory = dir;
  md.directory_bytes = dir_len;
  VolumeOpenOptions options;
  options.metadata = &md;
  Exercise(Volume::Open(file.path(), options));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
#if DLFS_FUZZ_MODE == 1
  FuzzFile(data, size);
#elif DLFS_FUZZ_MODE == 2
  FuzzMetadata(data, size);
#elif DLFS_FUZZ_MODE == 3
  FuzzResealed(data, size);
#else
#error "DLFS_FUZZ_MODE must be 1, 2 or 3"
#endif
  return 0;
}
