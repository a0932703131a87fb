#include "format/compact_codec.h"

#include <cstdio>
#include <string>

#include "common/crc32c.h"

namespace dlfs::format {

namespace {

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

const char* SectionName(uint32_t s) {
  static const char* const kNames[kSectionCount] = {
      "blocks", "records", "classes", "name blocks", "names", "name order", "tree"};
  return kNames[s];
}

// [offset, offset + length) lies inside [0, size), overflow-safe.
bool Inside(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

// The token fields of the header (§10.11) against the superblock: the
// stream is target 0's whole data region, of whole tokens, and the checks
// section has one u32 per chunk of it.
template <typename Bad>
Status DecodeTokens(const std::byte* region, uint64_t size, const SampleDirectory::Expected& e,
                    const Bad& bad, CompactLayout* l) {
  const CompactHeader& h = l->header;
  if (h.token_width != 2 && h.token_width != 4) {
    return bad("token width " + std::to_string(h.token_width) + " (2 or 4 bytes)");
  }
  if (h.check_shift < kMinCheckShift || h.check_shift > kMaxCheckShift) {
    return bad("token check shift " + std::to_string(h.check_shift) + " outside " +
               std::to_string(kMinCheckShift) + ".." + std::to_string(kMaxCheckShift));
  }
  if (e.data_regions.size() != 1) {
    return bad("a token volume has one target, this one " + std::to_string(e.data_regions.size()));
  }
  if (e.data_alignment != 1) {
    return bad("a token volume's documents are back to back (alignment 1), not aligned to " +
               std::to_string(e.data_alignment));
  }
  if (e.data_bytes % h.token_width != 0) {
    return bad(std::to_string(e.data_bytes) + " bytes of tokens are not whole tokens of " +
               std::to_string(h.token_width) + " bytes");
  }
  const auto& data = e.data_regions[0];
  if (data.end - data.begin != e.data_bytes) {
    return bad("the token stream (" + std::to_string(e.data_bytes) +
               " bytes) is not the whole data region (" + std::to_string(data.end - data.begin) +
               " bytes)");
  }
  if (h.block_count == 0 && e.data_bytes != 0) {
    return bad(std::to_string(e.data_bytes) + " bytes of tokens in no document");
  }
  const uint64_t chunk = uint64_t{1} << h.check_shift;
  const uint64_t chunks = e.data_bytes / chunk + (e.data_bytes % chunk != 0 ? 1 : 0);
  const SectionEntry& s = h.token_checks;
  if (s.offset % 8 != 0 || s.offset < kCompactHeaderSize || !Inside(s.offset, s.length, size)) {
    return bad("token checks section [" + std::to_string(s.offset) + ", +" +
               std::to_string(s.length) + ") lies outside the region of " + std::to_string(size) +
               " bytes or is misaligned");
  }
  if (s.length != 4 * chunks) {
    return bad("token checks section of " + std::to_string(s.length) + " bytes for " +
               std::to_string(chunks) + " chunks of " + std::to_string(chunk) + " bytes");
  }
  l->token_width = h.token_width;
  l->check_shift = h.check_shift;
  l->token_stream_begin = data.begin;
  l->token_stream_bytes = e.data_bytes;
  l->token_checks = region + s.offset;
  l->token_chunks = chunks;
  return Status::Ok();
}

}  // namespace

bool IsValidPath(std::string_view name) {
  if (name.empty()) return false;
  size_t start = 0;
  while (true) {
    size_t end = name.find('/', start);
    if (end == name.npos) end = name.size();
    const std::string_view c = name.substr(start, end - start);
    if (c.empty() || c.size() > 65535 || c == "." || c == ".." ||
        c.find('\0') != std::string_view::npos) {
      return false;
    }
    if (end == name.size()) return true;
    start = end + 1;
  }
}

int CompareDirKeys(std::string_view a, std::string_view b) {
  // The root's path is "" and its key too: it comes first (not "/", which
  // sorts after ".x/").
  if (a.empty() || b.empty()) return a.empty() ? (b.empty() ? 0 : -1) : 1;
  const size_t n = a.size() < b.size() ? a.size() : b.size();
  const int c = n == 0 ? 0 : std::memcmp(a.data(), b.data(), n);
  if (c != 0) return c;
  if (a.size() == b.size()) return 0;
  // The shorter one continues with '/', the longer with its next byte.
  const unsigned char next_a = a.size() > n ? static_cast<unsigned char>(a[n]) : '/';
  const unsigned char next_b = b.size() > n ? static_cast<unsigned char>(b[n]) : '/';
  if (next_a != next_b) return next_a < next_b ? -1 : 1;
  // One is the other + "/...": the shorter key ends there, so it is first.
  return a.size() < b.size() ? -1 : 1;
}

uint32_t SampleBlockCrc(const BlockEntry& e, std::span<const std::byte> records) {
  const uint32_t crc = crc32c::Value(&e, offsetof(BlockEntry, crc32c));
  return crc32c::Extend(crc, records.data(), records.size());
}

uint32_t NameBlockCrc(const NameBlock& e, std::span<const std::byte> ends,
                      std::span<const std::byte> names) {
  uint32_t crc = crc32c::Value(&e, offsetof(NameBlock, crc32c));
  crc = crc32c::Extend(crc, ends.data(), ends.size());
  return crc32c::Extend(crc, names.data(), names.size());
}

Result<CompactLayout> DecodeCompactHeader(const std::byte* region, uint64_t size,
                                          const SampleDirectory::Expected& expected,
                                          const std::string& volume_path) {
  auto bad = [&](const std::string& what) {
    return Status::Corruption(volume_path + ": directory region: " + what);
  };
  CompactLayout l;
  if (size < kCompactHeaderSize) {
    return bad(std::to_string(size) + " bytes is too small for its header");
  }
  std::memcpy(&l.header, region, sizeof l.header);
  const CompactHeader& h = l.header;
  if (h.magic != kCompactMagic) return bad("bad magic (not a compact directory)");
  const uint32_t crc = crc32c::Value(region, offsetof(CompactHeader, crc32c));
  if (crc != h.crc32c) {
    return bad("header checksum mismatch (stored " + Hex32(h.crc32c) + ", computed " + Hex32(crc) +
               ")");
  }
  if (h.header_size != kCompactHeaderSize) {
    return bad("header size " + std::to_string(h.header_size) + ", expected " +
               std::to_string(kCompactHeaderSize));
  }
  if ((h.flags & ~kKnownCompactFlags) != 0) {
    return Status::NotSupported(volume_path + ": directory region: unknown flags " +
                                Hex32(h.flags & ~kKnownCompactFlags));
  }
  if ((h.flags & kCompactNamesSorted) != 0 && (h.flags & kCompactNames) == 0) {
    return bad("NAMES_SORTED without NAMES");
  }
  if ((h.flags & kCompactTokens) == 0 &&
      (h.token_width != 0 || h.check_shift != 0 || h.token_checks.offset != 0 ||
       h.token_checks.length != 0)) {
    return bad("token width, check shift or token checks set without the TOKENS flag");
  }
  if (h.sample_count != expected.sample_count || h.class_count != expected.class_count ||
      h.dir_count != expected.dir_count) {
    return bad("counts (" + std::to_string(h.sample_count) + " samples, " +
               std::to_string(h.class_count) + " classes, " + std::to_string(h.dir_count) +
               " directories) differ from the superblock's (" +
               std::to_string(expected.sample_count) + ", " + std::to_string(expected.class_count) +
               ", " + std::to_string(expected.dir_count) + ")");
  }
  if (h.block_shift < kMinBlockShift || h.block_shift > kMaxBlockShift) {
    return bad("block shift " + std::to_string(h.block_shift) + " outside " +
               std::to_string(kMinBlockShift) + ".." + std::to_string(kMaxBlockShift));
  }
  l.block_samples = uint64_t{1} << h.block_shift;
  const uint64_t blocks =
      h.sample_count / l.block_samples + (h.sample_count % l.block_samples != 0 ? 1 : 0);
  if (h.block_count != blocks) {
    return bad(std::to_string(h.block_count) + " blocks for " + std::to_string(h.sample_count) +
               " samples of " + std::to_string(l.block_samples) + " per block (expected " +
               std::to_string(blocks) + ")");
  }
  const bool names = l.has_names();
  if (!names && h.dir_count != 0) return bad("directories without names");
  if (names && h.dir_count == 0) return bad("names without a tree (no root directory)");
  const bool order = names && !l.names_sorted();
  if (order != (h.order_width != 0) || h.order_width > 8) {
    return bad("name order width " + std::to_string(h.order_width) + " does not fit the flags");
  }
  // Each section inside the region, 8-aligned, present exactly when the flags
  // say; fixed-size ones of exactly their size.
  for (uint32_t s = 0; s < kSectionCount; ++s) {
    const SectionEntry& e = h.sections[s];
    const bool wanted = s <= kSectionClasses || (s == kSectionNameOrder ? order : names);
    if (!wanted) {
      if (e.offset != 0 || e.length != 0) {
        return bad(std::string(SectionName(s)) + " section present, but the flags say none");
      }
      continue;
    }
    if (e.offset % 8 != 0 || e.offset < kCompactHeaderSize || !Inside(e.offset, e.length, size)) {
      return bad(std::string(SectionName(s)) + " section [" + std::to_string(e.offset) + ", +" +
                 std::to_string(e.length) + ") lies outside the region of " + std::to_string(size) +
                 " bytes or is misaligned");
    }
  }
  auto at = [&](uint32_t s) { return region + h.sections[s].offset; };
  auto length = [&](uint32_t s) { return h.sections[s].length; };
  // Fixed-size arrays: the block count bounds both (blocks <= region / 32).
  if (length(kSectionBlocks) / sizeof(BlockEntry) != h.block_count ||
      length(kSectionBlocks) % sizeof(BlockEntry) != 0) {
    return bad("blocks section of " + std::to_string(length(kSectionBlocks)) + " bytes for " +
               std::to_string(h.block_count) + " blocks");
  }
  l.blocks = reinterpret_cast<const BlockEntry*>(at(kSectionBlocks));
  l.records = at(kSectionRecords);
  l.records_bytes = length(kSectionRecords);

  // Classes: small (at most 2^24 entries), checked whole here.
  {
    const uint64_t len = length(kSectionClasses);
    if (len < sizeof(ClassesHeader) ||
        (len - sizeof(ClassesHeader)) / sizeof(ClassEntry) < h.class_count) {
      return bad("classes section of " + std::to_string(len) + " bytes for " +
                 std::to_string(h.class_count) + " classes");
    }
    ClassesHeader ch;
    std::memcpy(&ch, at(kSectionClasses), sizeof ch);
    const uint64_t names_at = sizeof(ClassesHeader) + h.class_count * sizeof(ClassEntry);
    if (ch.reserved != 0 || ch.name_bytes != len - names_at) {
      return bad("classes section header disagrees with its size");
    }
    const uint32_t ccrc = crc32c::Value(at(kSectionClasses) + sizeof ch, len - sizeof ch);
    if (ccrc != ch.crc32c) {
      return bad("classes checksum mismatch (stored " + Hex32(ch.crc32c) + ", computed " +
                 Hex32(ccrc) + ")");
    }
    l.classes = reinterpret_cast<const ClassEntry*>(at(kSectionClasses) + sizeof ch);
    l.class_names = reinterpret_cast<const char*>(at(kSectionClasses) + names_at);
    l.class_name_bytes = ch.name_bytes;
    for (uint64_t c = 0; c < h.class_count; ++c) {
      if (!Inside(l.classes[c].name_offset, l.classes[c].name_length, l.class_name_bytes)) {
        return bad("class " + std::to_string(c) + "'s name lies outside the class names");
      }
    }
  }
  if (names) {
    if (length(kSectionNameBlocks) / sizeof(NameBlock) != h.block_count ||
        length(kSectionNameBlocks) % sizeof(NameBlock) != 0) {
      return bad("name blocks section of " + std::to_string(length(kSectionNameBlocks)) +
                 " bytes for " + std::to_string(h.block_count) + " blocks");
    }
    l.name_blocks = reinterpret_cast<const NameBlock*>(at(kSectionNameBlocks));
    l.names = at(kSectionNames);
    l.names_bytes = length(kSectionNames);
    const uint64_t tree_len = length(kSectionTree);
    if (tree_len < sizeof(TreeHeader) ||
        (tree_len - sizeof(TreeHeader)) / sizeof(TreeEntry) < h.dir_count) {
      return bad("tree section of " + std::to_string(tree_len) + " bytes for " +
                 std::to_string(h.dir_count) + " directories");
    }
    TreeHeader th;
    std::memcpy(&th, at(kSectionTree), sizeof th);
    const uint64_t paths_at = sizeof(TreeHeader) + h.dir_count * sizeof(TreeEntry);
    if (th.reserved != 0 || th.path_bytes != tree_len - paths_at) {
      return bad("tree section header disagrees with its size");
    }
    l.tree_section = at(kSectionTree);
    l.tree_section_bytes = tree_len;
    l.tree = reinterpret_cast<const TreeEntry*>(at(kSectionTree) + sizeof th);
    l.tree_paths = reinterpret_cast<const char*>(at(kSectionTree) + paths_at);
    l.tree_path_bytes = th.path_bytes;
  }
  if (order) {
    const uint64_t need = OrderEntriesOffset(h.block_count);
    const uint64_t len = length(kSectionNameOrder);
    if (len < need || (len - need) / h.order_width < h.sample_count) {
      return bad("name order section of " + std::to_string(len) + " bytes for " +
                 std::to_string(h.sample_count) + " entries of " + std::to_string(h.order_width) +
                 " bytes");
    }
    l.order = at(kSectionNameOrder);
    l.order_bytes = len;
  }
  if (l.tokens()) DLFS_RETURN_IF_ERROR(DecodeTokens(region, size, expected, bad, &l));
  return l;
}

SampleBlockView SampleBlock(const CompactLayout& l, uint64_t b) {
  SampleBlockView v;
  v.entry = &l.blocks[b];
  v.count = l.BlockCount(b);
  v.records = l.records + v.entry->records_offset;
  v.record_bytes = RecordBytes(v.entry->end_width, v.entry->label_width);
  return v;
}

Status CheckSampleBlock(const CompactLayout& l, uint64_t b,
                        const SampleDirectory::Expected& expected, const std::string& volume_path) {
  const uint64_t first = b * l.block_samples;
  const uint64_t count = l.BlockCount(b);
  auto bad = [&](const std::string& what) {
    return Status::Corruption(volume_path + ": directory block " + std::to_string(b) +
                              " (samples " + std::to_string(first) + ".." +
                              std::to_string(first + count - 1) + "): " + what);
  };
  BlockEntry e;
  std::memcpy(&e, &l.blocks[b], sizeof e);
  if (e.end_width < 1 || e.end_width > 8 || e.label_width > 4 || e.reserved != 0 ||
      e.records_offset % 8 != 0) {
    return bad("bad entry (end width " + std::to_string(e.end_width) + ", label width " +
               std::to_string(e.label_width) + ")");
  }
  const uint64_t bytes = BlockRecordBytes(count, e.end_width, e.label_width);
  if (!Inside(e.records_offset, bytes, l.records_bytes)) {
    return bad("records [" + std::to_string(e.records_offset) + ", +" + std::to_string(bytes) +
               ") lie outside the records section");
  }
  const uint32_t crc = SampleBlockCrc(e, {l.records + e.records_offset, bytes});
  if (crc != e.crc32c) {
    return bad("checksum mismatch (stored " + Hex32(e.crc32c) + ", computed " + Hex32(crc) + ")");
  }
  // The CRC matched: what follows is what a writer wrote, or a forgery; both
  // are held to the rules so no query can go out of bounds.
  if (e.target >= expected.data_regions.size()) {
    return bad("target " + std::to_string(e.target) + " of a volume of " +
               std::to_string(expected.data_regions.size()));
  }
  const auto& region = expected.data_regions[e.target];
  const uint32_t align = expected.data_alignment;
  if (e.data_offset % align != 0 || e.data_offset < region.begin || e.data_offset > region.end) {
    return bad("data offset " + std::to_string(e.data_offset) + " is outside target " +
               std::to_string(e.target) + "'s data region or misaligned");
  }
  const SampleBlockView v = SampleBlock(l, b);
  const uint32_t width = l.tokens() ? l.token_width : 1;
  uint64_t start = 0;
  for (uint64_t j = 0; j < count; ++j) {
    const uint64_t end = v.End(j);
    if (end < start || end - start > 0xFFFFFFFFull) {
      return bad("sample " + std::to_string(first + j) + " ends at " + std::to_string(end) +
                 " before it starts (" + std::to_string(start) + ") or is 4 GiB or larger");
    }
    if (end % width != 0) {
      return bad("document " + std::to_string(first + j) + " ends at " + std::to_string(end) +
                 ", within a token of " + std::to_string(width) + " bytes");
    }
    if (j + 1 < count) {
      start = AlignUp(end, align);
      if (start < end) return bad("sample extents overflow");
    }
  }
  const uint64_t last_end = count == 0 ? 0 : v.End(count - 1);
  if (last_end > region.end - e.data_offset) {
    return bad("samples end at " + std::to_string(e.data_offset + last_end) + ", past target " +
               std::to_string(e.target) + "'s data region (" + std::to_string(region.end) + ")");
  }
  const uint64_t limit = expected.class_count < kLabelLimit ? expected.class_count : kLabelLimit;
  for (uint64_t j = 0; j < count; ++j) {
    const uint32_t label = v.Label(j);
    if (label != kNone && label >= limit) {
      return bad("sample " + std::to_string(first + j) + " has label " + std::to_string(label) +
                 " (the volume has " + std::to_string(expected.class_count) + " classes)");
    }
  }
  return Status::Ok();
}

uint64_t SampleBlockEnd(const CompactLayout& l, uint64_t b) {
  const SampleBlockView v = SampleBlock(l, b);
  return v.entry->data_offset + (v.count == 0 ? 0 : v.End(v.count - 1));
}

Status CheckTokenLink(const CompactLayout& l, uint64_t b, const std::string& volume_path) {
  const uint64_t first = b * l.block_samples;
  auto bad = [&](const std::string& what) {
    return Status::Corruption(volume_path + ": directory block " + std::to_string(b) +
                              " (samples " + std::to_string(first) + ".." +
                              std::to_string(first + l.BlockCount(b) - 1) + "): " + what +
                              " (a token volume's documents lie back to back)");
  };
  const uint64_t start = l.blocks[b].data_offset;
  if (b == 0 && start != l.token_stream_begin) {
    return bad("starts at byte " + std::to_string(start) + ", but the token stream starts at " +
               std::to_string(l.token_stream_begin));
  }
  if (b > 0) {
    const uint64_t previous = SampleBlockEnd(l, b - 1);
    if (start != previous) {
      return bad("starts at byte " + std::to_string(start) + ", but block " +
                 std::to_string(b - 1) + " ends at " + std::to_string(previous));
    }
  }
  const uint64_t stream_end = l.token_stream_begin + l.token_stream_bytes;
  if (b + 1 == l.block_count() && SampleBlockEnd(l, b) != stream_end) {
    return bad("the last block ends at byte " + std::to_string(SampleBlockEnd(l, b)) +
               ", but the token stream ends at " + std::to_string(stream_end));
  }
  return Status::Ok();
}

NameBlockView NameBlockAt(const CompactLayout& l, uint64_t b) {
  NameBlockView v;
  v.entry = &l.name_blocks[b];
  v.count = l.BlockCount(b);
  v.ends = l.names + v.entry->ends_offset;
  v.bytes = reinterpret_cast<const char*>(l.names + v.entry->bytes_offset);
  return v;
}

Status CheckNameBlock(const CompactLayout& l, uint64_t b, const std::string& volume_path) {
  const uint64_t first = b * l.block_samples;
  const uint64_t count = l.BlockCount(b);
  auto bad = [&](const std::string& what) {
    return Status::Corruption(volume_path + ": directory name block " + std::to_string(b) +
                              " (samples " + std::to_string(first) + ".." +
                              std::to_string(first + count - 1) + "): " + what);
  };
  NameBlock e;
  std::memcpy(&e, &l.name_blocks[b], sizeof e);
  if (e.end_width < 1 || e.end_width > 8 || e.reserved[0] != 0 || e.reserved[1] != 0 ||
      e.reserved[2] != 0 || e.ends_offset % 8 != 0) {
    return bad("bad entry");
  }
  const uint64_t ends_bytes = count * e.end_width;
  if (!Inside(e.ends_offset, ends_bytes, l.names_bytes)) {
    return bad("name ends lie outside the names section");
  }
  const std::byte* ends = l.names + e.ends_offset;
  const uint64_t total = count == 0 ? 0 : LoadUint(ends + (count - 1) * e.end_width, e.end_width);
  if (!Inside(e.bytes_offset, total, l.names_bytes)) {
    return bad("names [" + std::to_string(e.bytes_offset) + ", +" + std::to_string(total) +
               ") lie outside the names section");
  }
  const uint32_t crc = NameBlockCrc(e, {ends, ends_bytes}, {l.names + e.bytes_offset, total});
  if (crc != e.crc32c) {
    return bad("checksum mismatch (stored " + Hex32(e.crc32c) + ", computed " + Hex32(crc) + ")");
  }
  const NameBlockView v = NameBlockAt(l, b);
  uint64_t start = 0;
  std::string_view previous;
  for (uint64_t j = 0; j < count; ++j) {
    const uint64_t end = v.End(j);
    if (end < start) return bad("name ends decrease at sample " + std::to_string(first + j));
    const std::string_view name = v.Name(j);
    if (!IsValidPath(name)) {
      return bad("sample " + std::to_string(first + j) + " has an invalid path");
    }
    if (l.names_sorted() && j > 0 && !(previous < name)) {
      return bad("names not in strictly increasing order at sample " + std::to_string(first + j));
    }
    previous = name;
    start = end;
  }
  return Status::Ok();
}

Status CheckOrderBlock(const CompactLayout& l, uint64_t b, const std::string& volume_path) {
  const uint64_t first = b * l.block_samples;
  const uint64_t count = l.BlockCount(b);
  const uint32_t w = l.header.order_width;
  const std::byte* entries = l.order + OrderEntriesOffset(l.block_count()) + first * w;
  const uint32_t stored = static_cast<uint32_t>(LoadUint(l.order + 4 * b, 4));
  const uint32_t crc = crc32c::Value(entries, count * w);
  auto bad = [&](const std::string& what) {
    return Status::Corruption(volume_path + ": directory name order block " + std::to_string(b) +
                              " (positions " + std::to_string(first) + ".." +
                              std::to_string(first + count - 1) + "): " + what);
  };
  if (crc != stored) {
    return bad("checksum mismatch (stored " + Hex32(stored) + ", computed " + Hex32(crc) + ")");
  }
  for (uint64_t j = 0; j < count; ++j) {
    if (LoadUint(entries + j * w, w) >= l.sample_count()) {
      return bad("position " + std::to_string(first + j) + " names no sample");
    }
  }
  return Status::Ok();
}

Status CheckTree(const CompactLayout& l, const std::string& volume_path) {
  auto bad = [&](const std::string& what) {
    return Status::Corruption(volume_path + ": directory tree: " + what);
  };
  TreeHeader th;
  std::memcpy(&th, l.tree_section, sizeof th);
  const uint32_t crc = crc32c::Value(l.tree_section + sizeof th, l.tree_section_bytes - sizeof th);
  if (crc != th.crc32c) {
    return bad("checksum mismatch (stored " + Hex32(th.crc32c) + ", computed " + Hex32(crc) + ")");
  }
  const uint64_t dirs = l.header.dir_count;
  const uint64_t n = l.sample_count();
  for (uint64_t d = 0; d < dirs; ++d) {
    const TreeEntry& e = l.tree[d];
    const std::string what = "directory " + std::to_string(d);
    if ((d == 0) != (e.parent == kNoDir) || (d > 0 && e.parent >= d)) {
      return bad(what + " has parent " + std::to_string(e.parent));
    }
    if (e.subtree_dirs < 1 || e.subtree_dirs > dirs - d) {
      return bad(what + " has a subtree of " + std::to_string(e.subtree_dirs) + " directories");
    }
    if (!Inside(e.first_position, e.position_count, n) || e.own_samples > e.position_count ||
        e.child_count >= e.subtree_dirs) {
      return bad(what + "'s samples or children are out of range");
    }
    if (!Inside(e.path_offset, e.path_length, l.tree_path_bytes) ||
        (d == 0) != (e.path_length == 0)) {
      return bad(what + "'s path lies outside the tree or is misplaced");
    }
    if (d > 0) {
      const TreeEntry& p = l.tree[e.parent];
      if (d >= e.parent + p.subtree_dirs || !IsValidPath(TreePath(l, d)) ||
          CompareDirKeys(TreePath(l, d - 1), TreePath(l, d)) >= 0) {
        return bad(what + " is not inside its parent's subtree or not in order");
      }
    }
  }
  if (dirs > 0 && (l.tree[0].first_position != 0 || l.tree[0].position_count != n ||
                   l.tree[0].subtree_dirs != dirs)) {
    return bad("the root does not hold every sample and directory");
  }
  return Status::Ok();
}

}  // namespace dlfs::format
