#include "builder/compact_writer.h"

#include <algorithm>
#include <cstring>

#include "common/crc32c.h"
#include "format/compact_codec.h"

namespace dlfs::builder_internal {

namespace {

using format::AlignUp;

std::string_view DirOf(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == path.npos ? std::string_view() : path.substr(0, slash);
}

// Whether directory `dir` ("" the root) holds `path`'s directory `d` or is it.
bool Holds(std::string_view dir, std::string_view d) {
  return dir.empty() || d == dir ||
         (d.size() > dir.size() && d.starts_with(dir) && d[dir.size()] == '/');
}

}  // namespace

Result<std::unique_ptr<CompactWriter>> CompactWriter::Create(const std::string& volume_path,
                                                             uint32_t alignment,
                                                             uint32_t block_shift) {
  std::unique_ptr<CompactWriter> w(new CompactWriter());
  w->alignment_ = alignment;
  w->block_shift_ = block_shift;
  w->block_samples_ = uint64_t{1} << block_shift;
  w->volume_path_ = volume_path;
  DLFS_ASSIGN_OR_RETURN(w->records_, SpillFile::Create(volume_path));
  return w;
}

Status CompactWriter::SetTokens(uint32_t width, uint32_t check_shift) {
  if (count_ != 0) return Status::InvalidArgument("SetTokens after the first sample");
  if ((width != 2 && width != 4) || check_shift < format::kMinCheckShift ||
      check_shift > format::kMaxCheckShift) {
    return Status::InvalidArgument("token width " + std::to_string(width) +
                                   " (2 or 4), check shift " + std::to_string(check_shift));
  }
  token_width_ = width;
  check_shift_ = check_shift;
  chunk_bytes_ = uint64_t{1} << check_shift;
  names_ = 0;  // documents are unnamed
  DLFS_ASSIGN_OR_RETURN(token_checks_, SpillFile::Create(volume_path_));
  return Status::Ok();
}

void CompactWriter::FeedTokens(std::span<const std::byte> bytes) {
  fed_bytes_ += bytes.size();
  while (!bytes.empty()) {
    const uint64_t n = std::min<uint64_t>(bytes.size(), chunk_bytes_ - fed_filled_);
    fed_crc_ = crc32c::Extend(fed_crc_, bytes.data(), n);
    fed_filled_ += n;
    bytes = bytes.subspan(n);
    if (fed_filled_ == chunk_bytes_) {
      fed_done_.push_back(fed_crc_);
      fed_crc_ = 0;
      fed_filled_ = 0;
    }
  }
}

void CompactWriter::DropTokenBytes() {
  fed_crc_ = crc_;
  fed_filled_ = filled_;
  fed_bytes_ = 0;
  fed_done_.clear();
}

Status CompactWriter::CommitTokens(uint64_t length) {
  if (fed_bytes_ != length) {
    return Status::IOError("compact writer: " + std::to_string(fed_bytes_) +
                           " token bytes fed for a document of " + std::to_string(length));
  }
  if (!fed_done_.empty()) {
    DLFS_RETURN_IF_ERROR(token_checks_->Append(fed_done_.data(), 4 * fed_done_.size()));
    chunks_ += fed_done_.size();
    fed_done_.clear();
  }
  crc_ = fed_crc_;
  filled_ = fed_filled_;
  fed_bytes_ = 0;
  return Status::Ok();
}

Status CompactWriter::AddDocuments(uint64_t offset, std::span<const uint64_t> lengths,
                                   std::span<const uint32_t> crcs,
                                   std::span<const uint32_t> labels) {
  if (count_ > 0 && offset != stream_end_) {
    return Status::InvalidArgument("compact writer: documents placed at offset " +
                                   std::to_string(offset) + ", expected " +
                                   std::to_string(stream_end_));
  }
  uint64_t total = 0;
  for (const uint64_t l : lengths) total += l;
  DLFS_RETURN_IF_ERROR(CommitTokens(total));
  // A block's worth at a time: its ends, CRCs and labels appended in runs.
  uint64_t at = offset;
  for (size_t k = 0; k < lengths.size();) {
    if (AtBlockStart()) {
      block_target_ = 0;
      block_offset_ = at;
    }
    const size_t room = block_samples_ - (count_ & (block_samples_ - 1));
    const size_t m = std::min<size_t>(room, lengths.size() - k);
    const size_t base = ends_.size();
    ends_.resize(base + m);
    uint64_t* ends = ends_.data() + base;
    uint64_t longest = max_length_;
    for (size_t i = 0; i < m; ++i) {
      const uint64_t length = lengths[k + i];
      at += length;
      ends[i] = at - block_offset_;
      longest = std::max(longest, length);
    }
    max_length_ = longest;
    crcs_.insert(crcs_.end(), crcs.begin() + k, crcs.begin() + k + m);
    if (labels.empty()) {
      labels_.insert(labels_.end(), m, format::kNone);
    } else {
      labels_.insert(labels_.end(), labels.begin() + k, labels.begin() + k + m);
    }
    count_ += m;
    k += m;
    if (AtBlockStart()) DLFS_RETURN_IF_ERROR(CloseBlock());
  }
  stream_end_ = at;
  return Status::Ok();
}

uint64_t CompactWriter::NextOffset() const {
  return block_offset_ + (ends_.empty() ? 0 : AlignUp(ends_.back(), alignment_));
}

Status CompactWriter::Add(uint16_t target, uint64_t offset, uint64_t length, uint32_t crc32c,
                          uint32_t label, std::string_view path) {
  const bool named = !path.empty();
  if (names_ >= 0 && named != (names_ == 1)) {
    return Status::InvalidArgument(
        named ? "sample '" + std::string(path) + "' has a name, but the samples before it have none"
              : "sample #" + std::to_string(count_) + " has no name, but the samples before it do");
  }
  if (length > 0xFFFFFFFFull) {
    return Status::InvalidArgument("sample larger than 4 GiB - 1 bytes");
  }
  if (token_width_ != 0) {
    if (named) {
      return Status::InvalidArgument("document '" + std::string(path) +
                                     "': a token volume's documents have no names (they are "
                                     "addressed by index)");
    }
    if (length % token_width_ != 0) {
      return Status::InvalidArgument("document #" + std::to_string(count_) + " of " +
                                     std::to_string(length) + " bytes is not whole tokens of " +
                                     std::to_string(token_width_) + " bytes");
    }
    if (target != 0 || (count_ > 0 && offset != stream_end_)) {
      return Status::InvalidArgument("compact writer: document #" + std::to_string(count_) +
                                     " placed at target " + std::to_string(target) + " offset " +
                                     std::to_string(offset) + ", expected 0 " +
                                     std::to_string(stream_end_));
    }
    DLFS_RETURN_IF_ERROR(CommitTokens(length));
    stream_end_ = offset + length;
  }
  if (named) {
    if (!format::IsValidPath(path)) {
      return Status::InvalidArgument("bad sample path '" + std::string(path) +
                                     "': empty, '.' or '..' component, a component longer "
                                     "than 65535 bytes, or a NUL byte");
    }
    if (count_ > 0 && sorted_) {
      if (path == previous_name_) {
        return Status::InvalidArgument("duplicate sample path '" + std::string(path) +
                                       "' (already added as sample #" + std::to_string(count_ - 1) +
                                       ")");
      }
      // The sample before is this one's directory: refused now rather than
      // when the tree is built.
      if (path.size() > previous_name_.size() && path.starts_with(previous_name_) &&
          path[previous_name_.size()] == '/') {
        return Status::InvalidArgument("sample path '" + std::string(path) + "' needs directory '" +
                                       previous_name_ + "', which was already added as sample #" +
                                       std::to_string(count_ - 1));
      }
    }
  }
  if (names_ < 0) {  // the first sample decides
    names_ = named ? 1 : 0;
    if (named) {
      DLFS_ASSIGN_OR_RETURN(name_bytes_, SpillFile::Create(volume_path_));
      DLFS_ASSIGN_OR_RETURN(name_ends_, SpillFile::Create(volume_path_));
    }
  }
  if (named) {
    if (count_ > 0 && sorted_ && path < std::string_view(previous_name_)) sorted_ = false;
    if (sorted_) previous_name_.assign(path);
  }
  if (AtBlockStart()) {
    block_target_ = target;
    block_offset_ = offset;
  } else if (target != block_target_ || offset != NextOffset()) {
    return Status::InvalidArgument(
        "compact writer: sample #" + std::to_string(count_) + " placed at target " +
        std::to_string(target) + " offset " + std::to_string(offset) + ", expected " +
        std::to_string(block_target_) + " " + std::to_string(NextOffset()));
  }
  ends_.push_back(offset - block_offset_ + length);
  max_length_ = std::max(max_length_, length);
  crcs_.push_back(crc32c);
  labels_.push_back(label);
  if (named) {
    DLFS_RETURN_IF_ERROR(name_bytes_->Append(path.data(), path.size()));
    names_total_ += path.size();
    DLFS_RETURN_IF_ERROR(name_ends_->Append(&names_total_, sizeof names_total_));
  }
  ++count_;
  if (AtBlockStart()) DLFS_RETURN_IF_ERROR(CloseBlock());
  return Status::Ok();
}

Status CompactWriter::SetLabel(uint64_t n, uint32_t label) {
  const uint64_t open_first = count_ - labels_.size();
  if (n >= count_ || n < open_first) {
    return Status::InvalidArgument(
        "SetLabel: sample " + std::to_string(n) +
        " is not in the open block of the compact "
        "directory (samples " +
        std::to_string(open_first) + ".." + std::to_string(count_) +
        "); give labels with the samples, or write the volume in the tree layout");
  }
  labels_[n - open_first] = label;
  return Status::Ok();
}

Status CompactWriter::CloseBlock() {
  const uint64_t c = ends_.size();
  if (c == 0) return Status::Ok();
  format::BlockEntry e{};
  e.data_offset = block_offset_;
  e.records_offset = records_bytes_;
  e.target = block_target_;
  e.end_width = static_cast<uint8_t>(format::WidthFor(ends_.back()));
  // Labels: one for the whole block when they are all equal, else the
  // fewest bytes that hold the largest (with all ones meaning none).
  const bool same =
      std::all_of(labels_.begin(), labels_.end(), [&](uint32_t l) { return l == labels_[0]; });
  uint32_t lw = 0;
  if (same) {
    e.label = labels_[0];
  } else {
    uint64_t max = 0;
    for (const uint32_t l : labels_) {
      if (l != format::kNone) max = std::max<uint64_t>(max, l);
    }
    lw = 1;
    while (max >= format::NoLabelValue(lw)) ++lw;
  }
  e.label_width = static_cast<uint8_t>(lw);
  // One record per sample (end, CRC, label): a sample is located with one
  // cache line, not three. Each record is made with two 8-byte stores
  // (its end, then its CRC and label), the next record's overwriting what
  // spills past it; the 8 bytes the records end with are zeroed after.
  const uint32_t w = e.end_width;
  const uint32_t rb = format::RecordBytes(w, lw);
  std::vector<std::byte>& rec = block_records_;
  rec.resize(format::BlockRecordBytes(c, w, lw));
  std::byte* p = rec.data();
  const uint64_t none = lw > 0 ? format::NoLabelValue(lw) : 0;
  for (uint64_t j = 0; j < c; ++j, p += rb) {
    std::memcpy(p, &ends_[j], 8);
    const uint32_t l = labels_[j];
    const uint64_t tail = uint64_t{crcs_[j]} | (uint64_t{l == format::kNone ? none : l} << 32);
    std::memcpy(p + w, &tail, 8);
  }
  std::memset(rec.data() + c * rb, 0, rec.size() - c * rb);
  e.crc32c = format::SampleBlockCrc(e, rec);
  DLFS_RETURN_IF_ERROR(records_->Append(rec));
  records_bytes_ += rec.size();
  blocks_.push_back(e);
  ends_.clear();
  crcs_.clear();
  labels_.clear();
  return Status::Ok();
}

std::string_view CompactWriter::SpilledName(uint64_t i) const {
  const uint64_t start = i == 0 ? 0 : name_ends_map_[i - 1];
  return {reinterpret_cast<const char*>(name_bytes_map_) + start, name_ends_map_[i] - start};
}

Status CompactWriter::SortNames(std::vector<uint64_t>* order) {
  order->resize(count_);
  for (uint64_t i = 0; i < count_; ++i) (*order)[i] = i;
  std::sort(order->begin(), order->end(),
            [&](uint64_t a, uint64_t b) { return SpilledName(a) < SpilledName(b); });
  return Status::Ok();
}

Status CompactWriter::BuildTree(const std::vector<uint64_t>& order, uint64_t* dir_count) {
  auto index_at = [&](uint64_t p) { return order.empty() ? p : order[p]; };
  auto name_at = [&](uint64_t p) { return SpilledName(index_at(p)); };
  // Whether some sample's whole path is `path` (binary search in name order).
  auto is_sample = [&](std::string_view path) {
    uint64_t lo = 0, hi = count_;
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (name_at(mid) < path) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo < count_ && name_at(lo) == path;
  };
  DLFS_ASSIGN_OR_RETURN(tree_, SpillFile::Create(volume_path_));
  DLFS_ASSIGN_OR_RETURN(tree_paths_, SpillFile::Create(volume_path_));
  struct Open {
    uint64_t index;
    std::string path;
    format::TreeEntry entry;
  };
  std::vector<Open> stack;
  uint64_t next = 0;
  uint64_t paths_bytes = 0;
  auto open = [&](std::string path, uint64_t position) -> Status {
    Open o{next++, std::move(path), {}};
    o.entry.parent = stack.empty() ? format::kNoDir : stack.back().index;
    o.entry.first_position = position;
    o.entry.path_offset = paths_bytes;
    o.entry.path_length = static_cast<uint32_t>(o.path.size());
    DLFS_RETURN_IF_ERROR(tree_paths_->Append(o.path.data(), o.path.size()));
    paths_bytes += o.path.size();
    if (!stack.empty()) ++stack.back().entry.child_count;
    stack.push_back(std::move(o));
    return Status::Ok();
  };
  auto close = [&](uint64_t position) -> Status {
    Open& o = stack.back();
    o.entry.subtree_dirs = next - o.index;
    o.entry.position_count = position - o.entry.first_position;
    DLFS_RETURN_IF_ERROR(
        tree_->WriteAt(&o.entry, sizeof o.entry, o.index * sizeof(format::TreeEntry)));
    stack.pop_back();
    return Status::Ok();
  };
  DLFS_RETURN_IF_ERROR(open("", 0));
  std::string_view previous;
  for (uint64_t p = 0; p < count_; ++p) {
    const std::string_view name = name_at(p);
    if (p > 0 && name == previous) {
      return Status::InvalidArgument("duplicate sample path '" + std::string(name) +
                                     "' (samples #" + std::to_string(index_at(p - 1)) + " and #" +
                                     std::to_string(index_at(p)) + ")");
    }
    previous = name;
    const std::string_view dir = DirOf(name);
    while (!Holds(stack.back().path, dir)) DLFS_RETURN_IF_ERROR(close(p));
    // Open the directories between the innermost open one and `dir`.
    while (stack.back().path != dir) {
      const std::string& top = stack.back().path;
      const size_t from = top.empty() ? 0 : top.size() + 1;
      const size_t slash = dir.find('/', from);
      const std::string child(dir.substr(0, slash == dir.npos ? dir.size() : slash));
      if (is_sample(child)) {
        return Status::InvalidArgument("'" + child + "' is both a sample and a directory (of '" +
                                       std::string(name) + "')");
      }
      DLFS_RETURN_IF_ERROR(open(child, p));
    }
    ++stack.back().entry.own_samples;
  }
  while (!stack.empty()) DLFS_RETURN_IF_ERROR(close(count_));
  *dir_count = next;
  return Status::Ok();
}

Result<CompactWriter::Region> CompactWriter::Finish(
    std::span<const std::string> class_names, uint64_t class_count,
    const std::function<Status(std::span<const std::byte>)>& sink) {
  DLFS_RETURN_IF_ERROR(CloseBlock());
  const uint64_t n = count_;
  const uint64_t blocks = blocks_.size();
  const bool names = names_ == 1;
  format::CompactHeader h{};
  h.magic = format::kCompactMagic;
  h.header_size = format::kCompactHeaderSize;
  h.sample_count = n;
  h.class_count = class_count;
  h.block_count = blocks;
  h.block_shift = block_shift_;
  h.max_sample_length = max_length_;
  if (token_width_ != 0) {
    // The stream's last chunk, shorter than the others.
    if (filled_ > 0) {
      DLFS_RETURN_IF_ERROR(token_checks_->Append(&crc_, sizeof crc_));
      ++chunks_;
      crc_ = 0;
      filled_ = 0;
      DropTokenBytes();
    }
    h.flags |= format::kCompactTokens;
    h.token_width = static_cast<uint16_t>(token_width_);
    h.check_shift = static_cast<uint16_t>(check_shift_);
  }

  // Names: sorted (or found unsorted and ordered), then the tree over them.
  std::vector<uint64_t> order;
  uint64_t dir_count = 0;
  std::vector<format::NameBlock> name_blocks;
  uint64_t name_ends_bytes = 0;
  if (names) {
    DLFS_ASSIGN_OR_RETURN(name_bytes_map_, name_bytes_->Map());
    DLFS_ASSIGN_OR_RETURN(const std::byte* ends, name_ends_->Map());
    name_ends_map_ = reinterpret_cast<const uint64_t*>(ends);
    if (!sorted_) DLFS_RETURN_IF_ERROR(SortNames(&order));
    DLFS_RETURN_IF_ERROR(BuildTree(order, &dir_count));
    h.flags |= format::kCompactNames | (sorted_ ? format::kCompactNamesSorted : 0);
    h.order_width = sorted_ ? 0 : format::WidthFor(n - 1);
    // Name blocks: each block's ends, relative to its first name.
    for (uint64_t b = 0; b < blocks; ++b) {
      const uint64_t first = b << block_shift_;
      const uint64_t c = std::min<uint64_t>(block_samples_, n - first);
      const uint64_t base = first == 0 ? 0 : name_ends_map_[first - 1];
      format::NameBlock e{};
      e.bytes_offset = base;  // made absolute below, once the ends' size is known
      e.ends_offset = name_ends_bytes;
      e.end_width = static_cast<uint8_t>(format::WidthFor(name_ends_map_[first + c - 1] - base));
      name_ends_bytes += AlignUp(c * e.end_width, 8);
      name_blocks.push_back(e);
    }
  }
  h.dir_count = dir_count;

  // Classes: entries, then names.
  std::vector<std::byte> classes(sizeof(format::ClassesHeader) +
                                 class_count * sizeof(format::ClassEntry));
  {
    std::string pool;
    for (uint64_t c = 0; c < class_count; ++c) {
      const std::string name = c < class_names.size() ? class_names[c] : std::to_string(c);
      const format::ClassEntry ce{static_cast<uint32_t>(pool.size()),
                                  static_cast<uint32_t>(name.size())};
      if (pool.size() + name.size() > 0xFFFFFFFFull) {
        return Status::InvalidArgument("class names of 4 GiB or more");
      }
      std::memcpy(classes.data() + sizeof(format::ClassesHeader) + c * sizeof ce, &ce, sizeof ce);
      pool += name;
    }
    const size_t at = classes.size();
    classes.resize(at + pool.size());
    std::memcpy(classes.data() + at, pool.data(), pool.size());
    format::ClassesHeader ch{};
    ch.name_bytes = pool.size();
    ch.crc32c = crc32c::Value(classes.data() + sizeof ch, classes.size() - sizeof ch);
    std::memcpy(classes.data(), &ch, sizeof ch);
  }

  // Section places: each 8-aligned, in the order they are written.
  uint64_t at = format::kCompactHeaderSize;
  auto place = [&](uint32_t s, uint64_t length) {
    if (length == 0 && s > format::kSectionClasses) return;
    h.sections[s] = {at, length};
    at = AlignUp(at + length, 8);
  };
  place(format::kSectionBlocks, blocks * sizeof(format::BlockEntry));
  place(format::kSectionRecords, records_bytes_);
  place(format::kSectionClasses, classes.size());
  if (names) {
    place(format::kSectionNameBlocks, blocks * sizeof(format::NameBlock));
    place(format::kSectionNames, name_ends_bytes + names_total_);
    if (!sorted_) {
      place(format::kSectionNameOrder, format::OrderEntriesOffset(blocks) + n * h.order_width);
    }
    const uint64_t tree_bytes =
        sizeof(format::TreeHeader) + dir_count * sizeof(format::TreeEntry) + tree_paths_->size();
    place(format::kSectionTree, tree_bytes);
  }
  if (token_width_ != 0) {
    // After the others (its entry is not in the sections array, §10.11).
    h.token_checks = {at, 4 * chunks_};
    at = AlignUp(at + 4 * chunks_, 8);
  }
  h.crc32c = crc32c::Value(&h, offsetof(format::CompactHeader, crc32c));

  // Writing, section by section, padding each to 8.
  uint64_t written = 0;
  auto put = [&](std::span<const std::byte> bytes) -> Status {
    written += bytes.size();
    return sink(bytes);
  };
  auto pad = [&]() -> Status {
    static const std::byte kZeros[8] = {};
    const uint64_t k = AlignUp(written, 8) - written;
    return k == 0 ? Status::Ok() : put({kZeros, k});
  };
  auto bytes_of = [](const auto& v) {
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(v.data()),
                                      v.size() * sizeof(v[0]));
  };
  DLFS_RETURN_IF_ERROR(put({reinterpret_cast<const std::byte*>(&h), sizeof h}));
  DLFS_RETURN_IF_ERROR(put(bytes_of(blocks_)));
  DLFS_RETURN_IF_ERROR(pad());
  DLFS_RETURN_IF_ERROR(records_->CopyTo(0, records_bytes_, put));
  DLFS_RETURN_IF_ERROR(pad());
  DLFS_RETURN_IF_ERROR(put(classes));
  DLFS_RETURN_IF_ERROR(pad());
  if (names) {
    // Name blocks need their CRCs, over each block's ends and names.
    for (uint64_t b = 0; b < blocks; ++b) {
      format::NameBlock& e = name_blocks[b];
      const uint64_t first = b << block_shift_;
      const uint64_t c = std::min<uint64_t>(block_samples_, n - first);
      const uint64_t base = e.bytes_offset;
      std::vector<std::byte> ends(c * e.end_width);
      for (uint64_t j = 0; j < c; ++j) {
        format::StoreUint(ends.data() + j * e.end_width, name_ends_map_[first + j] - base,
                          e.end_width);
      }
      e.bytes_offset = name_ends_bytes + base;
      const uint64_t length = name_ends_map_[first + c - 1] - base;
      e.crc32c = format::NameBlockCrc(e, ends, {name_bytes_map_ + base, length});
    }
    DLFS_RETURN_IF_ERROR(put(bytes_of(name_blocks)));
    DLFS_RETURN_IF_ERROR(pad());
    // The names section: every block's ends (each padded to 8), then the names.
    for (uint64_t b = 0; b < blocks; ++b) {
      const format::NameBlock& e = name_blocks[b];
      const uint64_t first = b << block_shift_;
      const uint64_t c = std::min<uint64_t>(block_samples_, n - first);
      const uint64_t base = e.bytes_offset - name_ends_bytes;
      std::vector<std::byte> ends(AlignUp(c * e.end_width, 8));
      for (uint64_t j = 0; j < c; ++j) {
        format::StoreUint(ends.data() + j * e.end_width, name_ends_map_[first + j] - base,
                          e.end_width);
      }
      DLFS_RETURN_IF_ERROR(put(ends));
    }
    DLFS_RETURN_IF_ERROR(name_bytes_->CopyTo(0, names_total_, put));
    DLFS_RETURN_IF_ERROR(pad());
    if (!sorted_) {
      const uint32_t w = h.order_width;
      std::vector<std::byte> crcs(format::OrderEntriesOffset(blocks));
      std::vector<std::byte> entries;
      for (uint64_t b = 0; b < blocks; ++b) {
        const uint64_t first = b << block_shift_;
        const uint64_t c = std::min<uint64_t>(block_samples_, n - first);
        std::vector<std::byte> block(c * w);
        for (uint64_t j = 0; j < c; ++j)
          format::StoreUint(block.data() + j * w, order[first + j], w);
        format::StoreUint(crcs.data() + 4 * b, crc32c::Value(block.data(), block.size()), 4);
      }
      DLFS_RETURN_IF_ERROR(put(crcs));
      for (uint64_t p0 = 0; p0 < n; p0 += block_samples_) {
        const uint64_t c = std::min<uint64_t>(block_samples_, n - p0);
        entries.assign(c * w, std::byte{0});
        for (uint64_t j = 0; j < c; ++j)
          format::StoreUint(entries.data() + j * w, order[p0 + j], w);
        DLFS_RETURN_IF_ERROR(put(entries));
      }
      DLFS_RETURN_IF_ERROR(pad());
    }
    // The tree: header (CRC of what follows), entries, paths.
    format::TreeHeader th{};
    th.path_bytes = tree_paths_->size();
    uint32_t crc = 0;
    auto crc_of = [&](std::span<const std::byte> bytes) {
      crc = crc32c::Extend(crc, bytes.data(), bytes.size());
      return Status::Ok();
    };
    DLFS_RETURN_IF_ERROR(tree_->CopyTo(0, tree_->size(), crc_of));
    DLFS_RETURN_IF_ERROR(tree_paths_->CopyTo(0, tree_paths_->size(), crc_of));
    th.crc32c = crc;
    DLFS_RETURN_IF_ERROR(put({reinterpret_cast<const std::byte*>(&th), sizeof th}));
    DLFS_RETURN_IF_ERROR(tree_->CopyTo(0, tree_->size(), put));
    DLFS_RETURN_IF_ERROR(tree_paths_->CopyTo(0, tree_paths_->size(), put));
    DLFS_RETURN_IF_ERROR(pad());
  }
  if (token_width_ != 0) {
    DLFS_RETURN_IF_ERROR(token_checks_->CopyTo(0, token_checks_->size(), put));
    DLFS_RETURN_IF_ERROR(pad());
  }
  if (written != at) {
    return Status::IOError("compact writer: wrote " + std::to_string(written) +
                           " directory bytes, laid out " + std::to_string(at));
  }
  return Region{written, h.crc32c, dir_count};
}

}  // namespace dlfs::builder_internal
