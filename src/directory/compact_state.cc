#include "directory/compact_state.h"

#include <algorithm>
#include <cstring>

#include <sys/mman.h>
#include <unistd.h>

#include "common/map_guard.h"

namespace dlfs::directory_internal {

using format::CompactLayout;

Status CompactState::Intact() const {
  if (!map_guard::AnyFault() || !map_guard::Faulted(region_.get())) return Status::Ok();
  return Status::Corruption(path_ +
                            ": the volume file changed while open (its directory can no longer "
                            "be read: truncated, or its device failed); open it again");
}

Status CompactState::CheckIntact(uint64_t b) const {
  if (intact_.Get(b)) return Status::Ok();
  Status st = format::CheckSampleBlock(l_, b, expected_, path_);
  DLFS_RETURN_IF_ERROR(Intact());
  DLFS_RETURN_IF_ERROR(st);
  intact_.Set(b);
  return Status::Ok();
}

Status CompactState::CheckSamples(uint64_t b) const {
  if (samples_ok_.Get(b)) return Status::Ok();
  if (l_.tokens()) {
    // Where block b starts is checked against where block b - 1 ends: that
    // one's records must pass their own check first.
    DLFS_RETURN_IF_ERROR(CheckIntact(b));
    if (b > 0) {
      Status previous = CheckIntact(b - 1);
      if (!previous.ok()) {
        return Status::Corruption(path_ + ": directory block " + std::to_string(b) +
                                  ": cannot check that it follows block " + std::to_string(b - 1) +
                                  ": " + previous.message());
      }
    }
    Status st = format::CheckTokenLink(l_, b, path_);
    DLFS_RETURN_IF_ERROR(Intact());
    DLFS_RETURN_IF_ERROR(st);
    samples_ok_.Set(b);
    return Status::Ok();
  }
  Status st = format::CheckSampleBlock(l_, b, expected_, path_);
  DLFS_RETURN_IF_ERROR(Intact());
  DLFS_RETURN_IF_ERROR(st);
  samples_ok_.Set(b);
  return Status::Ok();
}

Result<uint64_t> CompactState::DocumentStart(uint64_t document) const {
  if (document == size()) return l_.token_stream_bytes / l_.token_width;
  if (document > size()) {
    return Status::InvalidArgument(path_ + ": no document " + std::to_string(document) +
                                   " (the volume has " + std::to_string(size()) + ")");
  }
  DLFS_ASSIGN_OR_RETURN(const SampleInfo s, Locate(document));
  // CheckTokenLink placed every block inside the stream, so this is too.
  return (s.offset - l_.token_stream_begin) / l_.token_width;
}

Result<uint64_t> CompactState::DocumentAt(uint64_t token) const {
  const uint64_t tokens = l_.token_stream_bytes / l_.token_width;
  if (token >= tokens) {
    return Status::InvalidArgument(path_ + ": no token " + std::to_string(token) +
                                   " (the volume has " + std::to_string(tokens) + ")");
  }
  const uint64_t pos = l_.token_stream_begin + token * l_.token_width;
  // The last block starting at or before pos (block 0 starts the stream).
  // The entries are read unchecked: the block found is checked below, and
  // a search misled by a damaged entry ends at a block that fails.
  uint64_t lo = 1, hi = l_.block_count();
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (l_.blocks[mid].data_offset <= pos) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  const uint64_t b = lo - 1;
  DLFS_RETURN_IF_ERROR(CheckSamples(b));
  const format::SampleBlockView v = format::SampleBlock(l_, b);
  const uint64_t rel = pos - v.entry->data_offset;
  if (rel >= v.End(v.count - 1)) {
    // Block b + 1 starts past pos, yet block b ends at or before it: b + 1
    // does not follow b, which its check says.
    if (b + 1 < l_.block_count()) DLFS_RETURN_IF_ERROR(CheckSamples(b + 1));
    return Status::Corruption(path_ + ": directory block " + std::to_string(b) + ": token " +
                              std::to_string(token) + " lies in no block");
  }
  // The first document ending after pos holds it (empty ones end where
  // they start).
  uint64_t jlo = 0, jhi = v.count - 1;
  while (jlo < jhi) {
    const uint64_t mid = jlo + (jhi - jlo) / 2;
    if (v.End(mid) <= rel) {
      jlo = mid + 1;
    } else {
      jhi = mid;
    }
  }
  DLFS_RETURN_IF_ERROR(Intact());
  return b * l_.block_samples + jlo;
}

Result<uint32_t> CompactState::TokenCheck(uint64_t chunk) const {
  if (chunk >= l_.token_chunks) {
    return Status::InvalidArgument(path_ + ": no token chunk " + std::to_string(chunk) +
                                   " (the volume has " + std::to_string(l_.token_chunks) + ")");
  }
  const uint32_t crc = format::TokenCheckAt(l_, chunk);
  DLFS_RETURN_IF_ERROR(Intact());
  return crc;
}

Result<SampleInfo> CompactState::Locate(uint64_t i) const {
  const uint64_t b = i >> l_.header.block_shift;
  if (!samples_ok_.Get(b)) DLFS_RETURN_IF_ERROR(CheckSamples(b));
  // The hot path of every read: one record (and the one before it) with
  // fixed-size loads instead of memcpy calls of a variable width. An 8-byte
  // load at any field stays inside the block's records, which end with 8
  // zero bytes and which CheckSampleBlock placed inside the records section.
  const format::BlockEntry& e = l_.blocks[b];
  const uint64_t j = i & (l_.block_samples - 1);
  const uint32_t w = e.end_width;
  const uint32_t r = format::RecordBytes(w, e.label_width);
  const std::byte* rec = l_.records + e.records_offset + j * r;
  const auto load64 = [](const std::byte* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  };
  const uint64_t mask = w >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * w)) - 1;
  const uint64_t end = load64(rec) & mask;
  const uint64_t a = expected_.data_alignment;  // a power of two
  const uint64_t start = j == 0 ? 0 : ((load64(rec - r) & mask) + a - 1) & ~(a - 1);
  const uint64_t tail = load64(rec + w);  // the CRC, then the label
  const uint32_t crc = static_cast<uint32_t>(tail);
  uint32_t label = e.label;
  if (e.label_width > 0) {
    const uint64_t none = format::NoLabelValue(e.label_width);
    const uint64_t v = (tail >> 32) & none;
    label = v == none ? kNoLabel : static_cast<uint32_t>(v);
  }
  const SampleInfo info{
      e.data_offset + start, static_cast<uint32_t>(end - start), crc, label, kNoParent, e.target};
  // Checked blocks are read again on every use: bytes that became zeros
  // since must not pass for the sample's.
  DLFS_RETURN_IF_ERROR(Intact());
  return info;
}

namespace {

// MADV_WILLNEED for the pages holding [p, p + n): starts reading those not
// in memory, without waiting. Best effort (a failure only loses the hint).
void WillNeed(const void* p, size_t n) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const auto end = reinterpret_cast<uintptr_t>(p) + n;
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);
}

}  // namespace

void CompactState::LocateMany(std::span<const uint64_t> indices, std::span<SampleInfo> out,
                              std::vector<Status>* failed) const {
  failed->clear();
  const uint32_t shift = l_.header.block_shift;
  // In passes, so the cache misses of one sample overlap those of the
  // others: the block entries, then (their blocks checked) the records.
  // Blocks not checked yet are about to be read whole, and their pages may
  // not be in memory (a cold volume): ask the kernel for all of them at
  // once, so one batch waits for the device once rather than once per
  // block (at 10^9 samples, 256 faults in a row took seconds).
  // (Once per run of indices in one block: probes read runs.)
  bool cold = false;
  uint64_t last = ~uint64_t{0};
  for (const uint64_t i : indices) {
    if ((i >> shift) != last && !samples_ok_.Get(i >> shift)) {
      WillNeed(&l_.blocks[i >> shift], sizeof(format::BlockEntry));
      cold = true;
    }
    last = i >> shift;
  }
  if (cold) {
    last = ~uint64_t{0};
    for (const uint64_t i : indices) {
      const uint64_t b = i >> shift;
      if (b == last || samples_ok_.Get(b)) continue;
      last = b;
      const format::BlockEntry& e = l_.blocks[b];
      const uint64_t count =
          std::min<uint64_t>(l_.block_samples, l_.header.sample_count - b * l_.block_samples);
      // Unchecked: an entry may lie, so the hint stays inside the records.
      if (e.records_offset >= l_.records_bytes) continue;
      WillNeed(l_.records + e.records_offset,
               std::min<uint64_t>(count * format::RecordBytes(e.end_width, e.label_width) + 8,
                                  l_.records_bytes - e.records_offset));
    }
  }
  for (const uint64_t i : indices) __builtin_prefetch(&l_.blocks[i >> shift]);
  for (const uint64_t i : indices) {
    const uint64_t b = i >> shift;
    if (!samples_ok_.Get(b)) continue;  // Locate checks it below
    const format::BlockEntry& e = l_.blocks[b];
    const uint64_t j = i & (l_.block_samples - 1);
    __builtin_prefetch(l_.records + e.records_offset +
                       j * format::RecordBytes(e.end_width, e.label_width));
  }
  for (size_t k = 0; k < indices.size(); ++k) {
    Result<SampleInfo> r = Locate(indices[k]);
    if (r.ok()) {
      out[k] = *r;
      continue;
    }
    if (failed->empty()) failed->assign(indices.size(), Status::Ok());
    (*failed)[k] = r.status();
    out[k] = SampleInfo{0, 0, 0xFFFFFFFFu, kNoLabel, kNoParent, 0};
  }
}

Result<std::string_view> CompactState::PathOf(uint64_t i) const {
  const uint64_t b = i >> l_.header.block_shift;
  if (!names_ok_.Get(b)) {
    Status st = format::CheckNameBlock(l_, b, path_);
    DLFS_RETURN_IF_ERROR(Intact());
    DLFS_RETURN_IF_ERROR(st);
    names_ok_.Set(b);
  }
  const std::string_view name = format::NameBlockAt(l_, b).Name(i & (l_.block_samples - 1));
  DLFS_RETURN_IF_ERROR(Intact());
  return name;
}

Result<uint64_t> CompactState::IndexAt(uint64_t position) const {
  if (l_.order == nullptr) return position;
  const uint64_t b = position >> l_.header.block_shift;
  if (!order_ok_.Get(b)) {
    Status st = format::CheckOrderBlock(l_, b, path_);
    DLFS_RETURN_IF_ERROR(Intact());
    DLFS_RETURN_IF_ERROR(st);
    order_ok_.Set(b);
  }
  const uint64_t index = format::OrderEntry(l_, position);
  DLFS_RETURN_IF_ERROR(Intact());
  return index;
}

Result<std::optional<uint64_t>> CompactState::FindSample(std::string_view path) const {
  if (!l_.has_names()) return std::optional<uint64_t>();
  uint64_t lo = 0, hi = size();
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    DLFS_ASSIGN_OR_RETURN(const uint64_t i, IndexAt(mid));
    DLFS_ASSIGN_OR_RETURN(const std::string_view name, PathOf(i));
    if (name < path) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == size()) return std::optional<uint64_t>();
  DLFS_ASSIGN_OR_RETURN(const uint64_t i, IndexAt(lo));
  DLFS_ASSIGN_OR_RETURN(const std::string_view name, PathOf(i));
  // The comparison decides, whatever the order section says: a forged order
  // can hide a sample, never hand out another one.
  if (name != path) return std::optional<uint64_t>();
  return std::optional<uint64_t>(i);
}

Status CompactState::CheckTree() const {
  if (!l_.has_names()) return Status::NotFound(path_ + ": the volume has no names");
  std::call_once(tree_once_, [&] { tree_status_ = format::CheckTree(l_, path_); });
  DLFS_RETURN_IF_ERROR(Intact());
  return tree_status_;
}

Result<std::optional<uint64_t>> CompactState::FindDir(std::string_view path) const {
  DLFS_RETURN_IF_ERROR(CheckTree());
  uint64_t lo = 0, hi = l_.header.dir_count;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (format::CompareDirKeys(format::TreePath(l_, mid), path) < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == l_.header.dir_count || format::TreePath(l_, lo) != path) {
    return std::optional<uint64_t>();
  }
  return std::optional<uint64_t>(lo);
}

std::vector<uint64_t> CompactState::Children(uint64_t d) const {
  std::vector<uint64_t> out;
  const uint64_t end = d + l_.tree[d].subtree_dirs;
  // CheckTree made every subtree at least one directory and inside its
  // parent's, so this walk moves forward and stays in range.
  for (uint64_t c = d + 1; c < end && out.size() < l_.tree[d].child_count;
       c += l_.tree[c].subtree_dirs) {
    if (l_.tree[c].parent != d) break;  // a forged tree: stop rather than guess
    out.push_back(c);
  }
  return out;
}

std::vector<uint64_t> CompactState::OwnPositions(uint64_t d, uint64_t from, uint64_t max) const {
  std::vector<uint64_t> out;
  const format::TreeEntry& e = l_.tree[d];
  uint64_t pos = e.first_position;
  const uint64_t end = e.first_position + e.position_count;
  uint64_t skipped = 0;
  auto take = [&](uint64_t a, uint64_t b) {  // positions [a, b) are d's own
    if (b <= a) return;
    uint64_t n = b - a;
    if (skipped < from) {
      const uint64_t s = std::min(n, from - skipped);
      skipped += s;
      a += s;
      n -= s;
    }
    for (uint64_t p = a; p < b && out.size() < max; ++p) out.push_back(p);
  };
  for (const uint64_t c : Children(d)) {
    if (out.size() >= max) return out;
    const format::TreeEntry& ce = l_.tree[c];
    take(pos, std::min(std::max(ce.first_position, pos), end));
    pos = std::max(pos, std::min(ce.first_position + ce.position_count, end));
  }
  if (out.size() < max) take(pos, end);
  return out;
}

Status CompactState::CheckAll() const {
  for (uint64_t b = 0; b < l_.block_count(); ++b) DLFS_RETURN_IF_ERROR(CheckSamples(b));
  // (A token volume's chunks are checked against the data: dlfs verify.)
  if (!l_.has_names()) return Status::Ok();
  DLFS_RETURN_IF_ERROR(CheckTree());
  std::string previous;
  for (uint64_t p = 0; p < size(); ++p) {
    DLFS_ASSIGN_OR_RETURN(const uint64_t i, IndexAt(p));
    DLFS_ASSIGN_OR_RETURN(const std::string_view name, PathOf(i));
    if (p > 0 && !(std::string_view(previous) < name)) {
      return Status::Corruption(path_ + ": directory names: position " + std::to_string(p) + " ('" +
                                std::string(name) + "') does not sort after '" + previous + "'");
    }
    previous.assign(name);
  }
  // Each directory's positions are exactly the names below its path.
  for (uint64_t d = 1; d < l_.header.dir_count; ++d) {
    const format::TreeEntry& e = l_.tree[d];
    const std::string prefix = std::string(format::TreePath(l_, d)) + "/";
    auto below = [&](uint64_t p) -> Result<bool> {
      DLFS_ASSIGN_OR_RETURN(const uint64_t i, IndexAt(p));
      DLFS_ASSIGN_OR_RETURN(const std::string_view name, PathOf(i));
      return name.starts_with(prefix);
    };
    bool ok = e.position_count > 0;
    if (ok) {
      DLFS_ASSIGN_OR_RETURN(const bool first, below(e.first_position));
      DLFS_ASSIGN_OR_RETURN(const bool last, below(e.first_position + e.position_count - 1));
      ok = first && last;
    }
    if (ok && e.first_position > 0) {
      DLFS_ASSIGN_OR_RETURN(const bool before, below(e.first_position - 1));
      ok = !before;
    }
    if (ok && e.first_position + e.position_count < size()) {
      DLFS_ASSIGN_OR_RETURN(const bool after, below(e.first_position + e.position_count));
      ok = !after;
    }
    if (!ok) {
      return Status::Corruption(path_ + ": directory tree: directory " + std::to_string(d) + " ('" +
                                prefix + "') does not hold exactly the names below it");
    }
    DLFS_ASSIGN_OR_RETURN(const std::optional<uint64_t> sample,
                          FindSample(format::TreePath(l_, d)));
    if (sample) {
      return Status::Corruption(path_ + ": directory tree: '" +
                                std::string(format::TreePath(l_, d)) +
                                "' is both a directory and sample " + std::to_string(*sample));
    }
  }
  return Status::Ok();
}

}  // namespace dlfs::directory_internal
