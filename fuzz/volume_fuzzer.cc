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
//   4 compact   the same for format v3 volumes: every checksum of the
//               compact directory (header, classes, each block of samples,
//               names and name order, the tree) and every sample's is
//               re-sealed, so mutations reach the per-block checks and the
//               queries (docs/format.md §10).
#include <cstring>
#include <memory>
#include <vector>

#include "common/crc32c.h"
#include "dlfs/volume.h"
#include "exercise.h"
#include "format/compact_codec.h"
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

// Re-seals every checksum of a compact directory at `dir` (`len` bytes) of
// the volume file `file` (`file_size` bytes), wherever the structures lie in
// bounds: samples' CRCs first, then the blocks', names', order's, tree's,
// classes' and the header's. Returns the header's CRC.
uint32_t ResealCompact(std::byte* dir, uint64_t len, const std::byte* file, uint64_t file_size,
                       uint32_t alignment) {
  using namespace format;
  if (len < sizeof(CompactHeader)) return 0;
  CompactHeader h;
  std::memcpy(&h, dir, sizeof h);
  auto section = [&](uint32_t s, uint64_t* size) -> std::byte* {
    const SectionEntry& e = h.sections[s];
    if (!InBounds(e.offset, e.length, len)) return nullptr;
    *size = e.length;
    return dir + e.offset;
  };
  const uint64_t per = h.block_shift >= kMinBlockShift && h.block_shift <= kMaxBlockShift
                           ? uint64_t{1} << h.block_shift
                           : 0;
  uint64_t blocks_len = 0, records_len = 0;
  std::byte* blocks = section(kSectionBlocks, &blocks_len);
  std::byte* records = section(kSectionRecords, &records_len);
  const uint64_t max_blocks = std::min<uint64_t>(h.block_count, 20000);
  for (uint64_t b = 0; per != 0 && blocks && records && b < max_blocks &&
                       (b + 1) * sizeof(BlockEntry) <= blocks_len;
       ++b) {
    BlockEntry e;
    std::memcpy(&e, blocks + b * sizeof e, sizeof e);
    const uint64_t first = b * per;
    if (first >= h.sample_count) break;
    const uint64_t c = std::min(per, h.sample_count - first);
    if (e.end_width < 1 || e.end_width > 8 || e.label_width > 4) continue;
    const uint64_t bytes = BlockRecordBytes(c, e.end_width, e.label_width);
    if (!InBounds(e.records_offset, bytes, records_len)) continue;
    std::byte* rec = records + e.records_offset;
    const uint32_t r = RecordBytes(e.end_width, e.label_width);
    uint64_t start = 0;
    for (uint64_t j = 0; j < c; ++j) {
      const uint64_t end = LoadUint(rec + j * r, e.end_width);
      if (end >= start && InBounds(e.data_offset + start, end - start, file_size) &&
          e.data_offset <= file_size) {
        StoreUint(rec + j * r + e.end_width,
                  crc32c::Value(file + e.data_offset + start, end - start), 4);
      }
      start = alignment != 0 ? AlignUp(end, alignment) : end;
    }
    e.crc32c = SampleBlockCrc(e, {rec, bytes});
    std::memcpy(blocks + b * sizeof e, &e, sizeof e);
  }
  uint64_t classes_len = 0;
  if (std::byte* classes = section(kSectionClasses, &classes_len);
      classes && classes_len >= sizeof(ClassesHeader)) {
    ClassesHeader ch;
    std::memcpy(&ch, classes, sizeof ch);
    ch.crc32c = crc32c::Value(classes + sizeof ch, classes_len - sizeof ch);
    std::memcpy(classes, &ch, sizeof ch);
  }
  uint64_t nb_len = 0, names_len = 0;
  std::byte* name_blocks = section(kSectionNameBlocks, &nb_len);
  std::byte* names = section(kSectionNames, &names_len);
  for (uint64_t b = 0;
       per != 0 && name_blocks && names && b < max_blocks && (b + 1) * sizeof(NameBlock) <= nb_len;
       ++b) {
    NameBlock e;
    std::memcpy(&e, name_blocks + b * sizeof e, sizeof e);
    const uint64_t first = b * per;
    if (first >= h.sample_count || e.end_width < 1 || e.end_width > 8) continue;
    const uint64_t c = std::min(per, h.sample_count - first);
    if (!InBounds(e.ends_offset, c * e.end_width, names_len)) continue;
    const uint64_t total = LoadUint(names + e.ends_offset + (c - 1) * e.end_width, e.end_width);
    if (!InBounds(e.bytes_offset, total, names_len)) continue;
    e.crc32c =
        NameBlockCrc(e, {names + e.ends_offset, c * e.end_width}, {names + e.bytes_offset, total});
    std::memcpy(name_blocks + b * sizeof e, &e, sizeof e);
  }
  uint64_t order_len = 0;
  if (std::byte* order = section(kSectionNameOrder, &order_len);
      order && per != 0 && h.order_width >= 1 && h.order_width <= 8) {
    const uint64_t at = OrderEntriesOffset(h.block_count);
    for (uint64_t b = 0; b < max_blocks && 4 * (b + 1) <= order_len; ++b) {
      const uint64_t first = b * per;
      if (first >= h.sample_count) break;
      const uint64_t c = std::min(per, h.sample_count - first);
      if (!InBounds(at + first * h.order_width, c * h.order_width, order_len)) break;
      StoreUint(order + 4 * b, crc32c::Value(order + at + first * h.order_width, c * h.order_width),
                4);
    }
  }
  uint64_t tree_len = 0;
  if (std::byte* tree = section(kSectionTree, &tree_len); tree && tree_len >= sizeof(TreeHeader)) {
    TreeHeader th;
    std::memcpy(&th, tree, sizeof th);
    th.crc32c = crc32c::Value(tree + sizeof th, tree_len - sizeof th);
    std::memcpy(tree, &th, sizeof th);
  }
  h.crc32c = crc32c::Value(&h, offsetof(CompactHeader, crc32c));
  std::memcpy(dir, &h, sizeof h);
  return h.crc32c;
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
      if (sb.format_version == format::kFormatVersionCompact) {
        dir->crc32c = ResealCompact(bytes.data() + dir->offset, dir->length, bytes.data(), size,
                                    sb.data_alignment);
      } else {
        ResealSamples(bytes.data() + dir->offset, dir->length, bytes.data(), size);
        dir->crc32c = crc32c::Value(bytes.data() + dir->offset, dir->length);
      }
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
#elif DLFS_FUZZ_MODE == 3 || DLFS_FUZZ_MODE == 4
  FuzzResealed(data, size);
#else
#error "DLFS_FUZZ_MODE must be 1, 2, 3 or 4"
#endif
  return 0;
}
