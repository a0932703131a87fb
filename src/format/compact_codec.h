// The compact directory codec (format v3, docs/format.md §10): the one place
// that knows how its sections are laid out and checked. A reader decodes the
// header (O(1): counts against section sizes, plus the small classes
// section) and then checks each block of samples, names or name order the
// first time it uses it; a writer builds the same structures with the
// helpers at the end.
//
// Thread safety: plain functions and views over caller-owned bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "dlfs/directory.h"
#include "dlfs/status.h"
#include "format/format.h"

namespace dlfs::format {

// Reads a `width`-byte little-endian unsigned integer (width 0..8) at p.
inline uint64_t LoadUint(const std::byte* p, uint32_t width) {
  uint64_t v = 0;
  std::memcpy(&v, p, width);  // little-endian host (format.h)
  return v;
}
inline void StoreUint(std::byte* p, uint64_t v, uint32_t width) { std::memcpy(p, &v, width); }

// The fewest bytes (1..8) that hold `max_value`.
inline uint32_t WidthFor(uint64_t max_value) {
  uint32_t w = 1;
  while (w < 8 && (max_value >> (8 * w)) != 0) ++w;
  return w;
}

// The value a label of `width` bytes (1..4) stores for "no label".
inline uint64_t NoLabelValue(uint32_t width) { return (uint64_t{1} << (8 * width)) - 1; }

// Bytes of one sample's record: its end, CRC and label (§10.2).
inline uint32_t RecordBytes(uint32_t end_width, uint32_t label_width) {
  return end_width + 4 + label_width;
}
// Bytes of a block's records: `count` records, then 8 zero bytes (so a
// reader may load 8 bytes at any field), then zeros to a multiple of 8.
inline uint64_t BlockRecordBytes(uint64_t count, uint32_t end_width, uint32_t label_width) {
  return AlignUp(count * RecordBytes(end_width, label_width) + 8, 8);
}

// Where the name order's entries start in its section: after one u32 CRC per
// block, padded to 8.
inline uint64_t OrderEntriesOffset(uint64_t block_count) { return AlignUp(4 * block_count, 8); }

// A decoded compact directory region: the header's counts and where each
// section lies. Every pointer range below lies inside the region (checked by
// DecodeCompactHeader); entries inside the sections are checked per block.
struct CompactLayout {
  CompactHeader header{};
  uint64_t block_samples = 0;  // 2^block_shift
  const BlockEntry* blocks = nullptr;
  const std::byte* records = nullptr;
  uint64_t records_bytes = 0;
  const ClassEntry* classes = nullptr;
  const char* class_names = nullptr;
  uint64_t class_name_bytes = 0;
  const NameBlock* name_blocks = nullptr;
  const std::byte* names = nullptr;
  uint64_t names_bytes = 0;
  const std::byte* order = nullptr;  // the name-order section, or null
  uint64_t order_bytes = 0;
  const TreeEntry* tree = nullptr;
  const char* tree_paths = nullptr;
  uint64_t tree_path_bytes = 0;
  const std::byte* tree_section = nullptr;  // for the tree's CRC
  uint64_t tree_section_bytes = 0;
  // TOKENS (§10.11): the token stream is target 0's whole data region,
  // [token_stream_begin, + token_stream_bytes); token_checks holds one u32
  // CRC32C per 2^check_shift bytes of it.
  uint32_t token_width = 0;  // 0: not a token volume
  uint32_t check_shift = 0;
  uint64_t token_stream_begin = 0;
  uint64_t token_stream_bytes = 0;
  const std::byte* token_checks = nullptr;
  uint64_t token_chunks = 0;

  uint64_t sample_count() const { return header.sample_count; }
  uint64_t block_count() const { return header.block_count; }
  bool has_names() const { return (header.flags & kCompactNames) != 0; }
  bool names_sorted() const { return (header.flags & kCompactNamesSorted) != 0; }
  bool tokens() const { return (header.flags & kCompactTokens) != 0; }
  // Samples in block b. REQUIRES: b < block_count().
  uint64_t BlockCount(uint64_t b) const {
    const uint64_t first = b * block_samples;
    return sample_count() - first < block_samples ? sample_count() - first : block_samples;
  }
  std::string_view class_name(uint64_t c) const {
    return {class_names + classes[c].name_offset, classes[c].name_length};
  }
};

// Checks the compact directory region's header, section table and classes
// section against the superblock (`expected`): O(1) plus the classes. Never
// reads a block. Corruption "<volume_path>: directory region: <problem>".
Result<CompactLayout> DecodeCompactHeader(const std::byte* region, uint64_t size,
                                          const SampleDirectory::Expected& expected,
                                          const std::string& volume_path);

// One block's sample records, read in place. Valid once CheckSampleBlock
// passed for the block.
struct SampleBlockView {
  const BlockEntry* entry = nullptr;
  const std::byte* records = nullptr;
  uint32_t record_bytes = 0;
  uint64_t count = 0;

  const std::byte* Record(uint64_t j) const { return records + j * record_bytes; }
  uint64_t End(uint64_t j) const { return LoadUint(Record(j), entry->end_width); }
  uint64_t Start(uint64_t j, uint32_t alignment) const {
    return j == 0 ? 0 : AlignUp(End(j - 1), alignment);
  }
  uint32_t Crc(uint64_t j) const {
    return static_cast<uint32_t>(LoadUint(Record(j) + entry->end_width, 4));
  }
  uint32_t Label(uint64_t j) const {
    const uint32_t w = entry->label_width;
    if (w == 0) return entry->label;
    const uint64_t v = LoadUint(Record(j) + entry->end_width + 4, w);
    return v == NoLabelValue(w) ? kNone : static_cast<uint32_t>(v);
  }
};
SampleBlockView SampleBlock(const CompactLayout& l, uint64_t b);

// Checks block b of samples (docs/format.md §10.2): its entry, its records'
// place and CRC, every extent inside its target's data region, every label;
// in a token volume also every end a multiple of the token width. The
// block alone: CheckTokenLink relates it to its neighbours. Corruption
// naming the volume and the block.
Status CheckSampleBlock(const CompactLayout& l, uint64_t b,
                        const SampleDirectory::Expected& expected, const std::string& volume_path);

// The end of block b's samples in its target (data_offset + the last end).
// REQUIRES: CheckSampleBlock passed for b.
uint64_t SampleBlockEnd(const CompactLayout& l, uint64_t b);

// Token volumes (§10.11): block b starts where block b - 1 ends (block 0
// where the token stream starts), and the last block ends where the stream
// ends. REQUIRES: l.tokens(); CheckSampleBlock passed for b and for b - 1.
// Corruption naming the volume and the block.
Status CheckTokenLink(const CompactLayout& l, uint64_t b, const std::string& volume_path);

// Token volumes: the CRC32C of the stream's chunk k (k < l.token_chunks).
inline uint32_t TokenCheckAt(const CompactLayout& l, uint64_t k) {
  return static_cast<uint32_t>(LoadUint(l.token_checks + 4 * k, 4));
}

// One block's names (full paths), read in place. Valid once CheckNameBlock
// passed.
struct NameBlockView {
  const NameBlock* entry = nullptr;
  const std::byte* ends = nullptr;
  const char* bytes = nullptr;
  uint64_t count = 0;

  uint64_t End(uint64_t j) const { return LoadUint(ends + j * entry->end_width, entry->end_width); }
  std::string_view Name(uint64_t j) const {
    const uint64_t start = j == 0 ? 0 : End(j - 1);
    return {bytes + start, End(j) - start};
  }
};
NameBlockView NameBlockAt(const CompactLayout& l, uint64_t b);
Status CheckNameBlock(const CompactLayout& l, uint64_t b, const std::string& volume_path);

// The name order's entry at `position` (the index of the sample whose name
// is position-th in name order). Valid once its block (position >>
// block_shift) passed CheckOrderBlock.
inline uint64_t OrderEntry(const CompactLayout& l, uint64_t position) {
  const uint32_t w = l.header.order_width;
  return LoadUint(l.order + OrderEntriesOffset(l.block_count()) + position * w, w);
}
Status CheckOrderBlock(const CompactLayout& l, uint64_t b, const std::string& volume_path);

// Checks the whole tree section: its CRC, then each entry's bounds (parents
// before children, subtrees and name positions in range, paths inside the
// section).
Status CheckTree(const CompactLayout& l, const std::string& volume_path);
inline std::string_view TreePath(const CompactLayout& l, uint64_t d) {
  return {l.tree_paths + l.tree[d].path_offset, l.tree[d].path_length};
}

// Whether `name` is a valid sample path (§10.4): 1 or more components of 1
// to 65535 bytes, joined by single '/', none "." or "..", no NUL. Writers and
// readers use the same rule.
bool IsValidPath(std::string_view name);

// Compares (a + "/") with (b + "/") byte-wise, the root ("") first: the
// tree's order (§10.6).
int CompareDirKeys(std::string_view a, std::string_view b);

// The CRC32C of a block entry's first 28 bytes followed by `records`.
uint32_t SampleBlockCrc(const BlockEntry& e, std::span<const std::byte> records);
// The CRC32C of a name block's first 20 bytes, its ends, then its names.
uint32_t NameBlockCrc(const NameBlock& e, std::span<const std::byte> ends,
                      std::span<const std::byte> names);

}  // namespace dlfs::format
