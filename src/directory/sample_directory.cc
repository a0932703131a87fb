#include <algorithm>
#include <cstring>

#include "dlfs/directory.h"
#include "format/format.h"

namespace dlfs {
namespace {

using format::ClassEntry;
using format::DirectoryHeader;
using format::DirEntry;
using format::SampleEntry;

// Checks that [offset, offset + count * elem) lies inside [0, size) without
// overflowing.
bool ArrayFits(uint64_t offset, uint64_t count, uint64_t elem, uint64_t size) {
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, elem, &bytes)) return false;
  return offset <= size && bytes <= size - offset && offset % 8 == 0;
}

int CompareNames(std::string_view a, std::string_view b) { return a.compare(b); }

}  // namespace

Result<SampleDirectory> SampleDirectory::Create(std::shared_ptr<const std::byte> region,
                                                uint64_t size, const Expected& expected,
                                                const std::string& volume_path) {
  const uint64_t sample_count = expected.sample_count;
  const uint64_t dir_count = expected.dir_count;
  const uint64_t class_count = expected.class_count;
  auto bad = [&](const std::string& what) {
    return Status::Corruption(volume_path + ": directory region: " + what);
  };
  if (size < sizeof(DirectoryHeader)) return bad("shorter than its header");
  DirectoryHeader h;
  std::memcpy(&h, region.get(), sizeof h);
  if (h.magic != format::kDirectoryMagic) return bad("bad magic");
  if (h.header_size != format::kDirectoryHeaderSize) return bad("unexpected header size");
  if (h.sample_entry_size != sizeof(SampleEntry) || h.dir_entry_size != sizeof(DirEntry) ||
      h.class_entry_size != sizeof(ClassEntry)) {
    return bad("unexpected entry sizes");
  }
  if (h.sample_count != sample_count || h.dir_count != dir_count || h.class_count != class_count) {
    return bad("entry counts disagree with the superblock");
  }
  // Indices are stored as u32; kNone is reserved.
  if (sample_count >= format::kNone || dir_count >= format::kNone || class_count >= format::kNone ||
      dir_count == 0) {
    return bad("entry counts out of range");
  }
  // The arrays follow the header in this order without overlapping.
  if (h.samples_offset < sizeof(DirectoryHeader) ||
      h.dirs_offset < h.samples_offset + sample_count * sizeof(SampleEntry) ||
      h.classes_offset < h.dirs_offset + dir_count * sizeof(DirEntry) ||
      h.strings_offset < h.classes_offset + class_count * sizeof(ClassEntry)) {
    return bad("arrays overlap or are out of order");
  }
  if (!ArrayFits(h.samples_offset, sample_count, sizeof(SampleEntry), size) ||
      !ArrayFits(h.dirs_offset, dir_count, sizeof(DirEntry), size) ||
      !ArrayFits(h.classes_offset, class_count, sizeof(ClassEntry), size) ||
      h.strings_offset > size || h.string_bytes > size - h.strings_offset ||
      h.string_bytes >= format::kNone) {
    return bad("an array lies outside the region");
  }

  SampleDirectory d;
  const char* base = reinterpret_cast<const char*>(region.get());
  d.region_size_ = size;
  d.sample_count_ = sample_count;
  d.dir_count_ = dir_count;
  d.class_count_ = class_count;
  d.samples_ = reinterpret_cast<const SampleEntry*>(base + h.samples_offset);
  d.dirs_ = reinterpret_cast<const DirEntry*>(base + h.dirs_offset);
  d.classes_ = reinterpret_cast<const ClassEntry*>(base + h.classes_offset);
  d.strings_ = base + h.strings_offset;
  d.string_bytes_ = h.string_bytes;
  if (expected.already_validated) {
    d.region_ = std::move(region);
    return d;
  }

  auto name_ok = [&](uint32_t off, uint64_t len) {
    return off <= d.string_bytes_ && len <= d.string_bytes_ - off;
  };
  auto component_ok = [&](uint32_t off, uint64_t len) {
    if (len == 0 || !name_ok(off, len)) return false;
    std::string_view s(d.strings_ + off, len);
    return s.find('/') == s.npos && s.find('\0') == s.npos && s != "." && s != "..";
  };

  for (uint64_t c = 0; c < class_count; ++c) {
    if (!name_ok(d.classes_[c].name_offset, d.classes_[c].name_length)) {
      return bad("class " + std::to_string(c) + " has its name outside the string pool");
    }
  }

  // Breadth-first order with contiguous, canonical child and sample ranges:
  // directory k's children start right after those of directories < k, and
  // likewise its samples. This makes every range check below sufficient for
  // the whole tree to be well formed (no cycles, no sharing, full coverage).
  for (uint64_t k = 0; k < dir_count; ++k) {
    const DirEntry& e = d.dirs_[k];
    if (k == 0) {
      if (e.parent != format::kNone || e.name_length != 0 || !name_ok(e.name_offset, 0)) {
        return bad("root entry is malformed");
      }
    } else if (e.parent >= k || !component_ok(e.name_offset, e.name_length)) {
      return bad("directory " + std::to_string(k) + " has a bad parent or name");
    }
  }
  uint64_t next_child = 1;
  uint64_t next_sample = 0;
  for (uint64_t k = 0; k < dir_count; ++k) {
    const DirEntry& e = d.dirs_[k];
    auto where = [k] { return "directory " + std::to_string(k); };
    if (e.first_child != next_child || e.child_count > dir_count - next_child) {
      return bad(where() + " has a bad child range");
    }
    if (e.first_sample != next_sample || e.sample_count > sample_count - next_sample) {
      return bad(where() + " has a bad sample range");
    }
    for (uint64_t c = e.first_child; c < e.first_child + e.child_count; ++c) {
      if (d.dirs_[c].parent != k) return bad(where() + ": child's parent link is wrong");
      if (c > e.first_child && d.dir_name(c - 1) >= d.dir_name(c)) {
        return bad(where() + ": children are not sorted by name");
      }
    }
    next_child += e.child_count;
    next_sample += e.sample_count;
  }
  if (next_child != dir_count) return bad("some directories have no parent");
  if (next_sample != sample_count) return bad("some samples belong to no directory");

  uint64_t data_bytes = 0;
  for (uint64_t k = 0; k < dir_count; ++k) {
    const DirEntry& e = d.dirs_[k];
    for (uint64_t i = e.first_sample; i < uint64_t{e.first_sample} + e.sample_count; ++i) {
      const SampleEntry& s = d.samples_[i];
      auto where = [i] { return "sample " + std::to_string(i); };
      if (s.parent != k) return bad(where() + " has a wrong parent");
      if (!component_ok(s.name_offset, s.name_length)) return bad(where() + " has a bad name");
      if (i > e.first_sample && d.name(i - 1) >= d.name(i)) {
        return bad(where() + " is not sorted by name within its directory");
      }
      if (s.label != format::kNone && s.label >= class_count) {
        return bad(where() + " has label " + std::to_string(s.label) + " but there are only " +
                   std::to_string(class_count) + " classes");
      }
      if (s.target >= expected.data_regions.size()) {
        return bad(where() + " names a missing target");
      }
      // Each target holds one data region; a sample lies in its target's.
      const Expected::DataRange& data = expected.data_regions[s.target];
      if (s.offset < data.begin || s.offset > data.end || s.length > data.end - s.offset) {
        return bad(where() + " lies outside the data region");
      }
      if (s.offset % expected.data_alignment != 0) {
        return bad(where() + " is not aligned to " + std::to_string(expected.data_alignment));
      }
      data_bytes += s.length;
    }
  }
  if (data_bytes != expected.data_bytes) {
    return bad("sample lengths add up to " + std::to_string(data_bytes) +
               " bytes, the superblock says " + std::to_string(expected.data_bytes));
  }
  // A sample and a sub-directory with one name would make paths ambiguous.
  for (uint64_t k = 0; k < dir_count; ++k) {
    const DirInfo info = d.dir(k);
    for (uint64_t c = info.first_child; c < info.first_child + info.child_count; ++c) {
      uint64_t unused;
      if (d.FindSample(info, d.dir_name(c), &unused)) {
        return bad("directory " + std::to_string(k) + " has a sample and a sub-directory named '" +
                   std::string(d.dir_name(c)) + "'");
      }
    }
  }
  d.region_ = std::move(region);
  return d;
}

std::string_view SampleDirectory::String(uint32_t offset, uint32_t length) const {
  return std::string_view(strings_ + offset, length);
}

SampleInfo SampleDirectory::sample(uint64_t i) const {
  const SampleEntry& s = samples_[i];
  return SampleInfo{s.offset, s.length, s.crc32c, s.label, s.parent, s.target};
}

std::string_view SampleDirectory::name(uint64_t i) const {
  return String(samples_[i].name_offset, samples_[i].name_length);
}

uint32_t SampleDirectory::label(uint64_t i) const { return samples_[i].label; }

std::string SampleDirectory::Path(uint64_t i) const {
  std::string dir = DirPath(samples_[i].parent);
  if (!dir.empty()) dir += '/';
  dir += name(i);
  return dir;
}

DirInfo SampleDirectory::dir(uint64_t k) const {
  const DirEntry& e = dirs_[k];
  return DirInfo{e.parent, e.first_child, e.child_count, e.first_sample, e.sample_count};
}

std::string_view SampleDirectory::dir_name(uint64_t k) const {
  return String(dirs_[k].name_offset, dirs_[k].name_length);
}

std::string SampleDirectory::DirPath(uint64_t k) const {
  // Depth is bounded by dir_count because parents precede children.
  std::string path;
  while (k != 0) {
    std::string_view n = dir_name(k);
    path.insert(0, n.data(), n.size());
    k = dirs_[k].parent;
    if (k != 0) path.insert(path.begin(), '/');
  }
  return path;
}

std::string_view SampleDirectory::class_name(uint64_t c) const {
  return String(classes_[c].name_offset, classes_[c].name_length);
}

bool SampleDirectory::FindChildDir(const DirInfo& d, std::string_view name, uint64_t* out) const {
  uint64_t lo = d.first_child, hi = uint64_t{d.first_child} + d.child_count;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    const int c = CompareNames(dir_name(mid), name);
    if (c == 0) {
      *out = mid;
      return true;
    }
    if (c < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return false;
}

bool SampleDirectory::FindSample(const DirInfo& d, std::string_view name, uint64_t* out) const {
  uint64_t lo = d.first_sample, hi = uint64_t{d.first_sample} + d.sample_count;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    const int c = CompareNames(this->name(mid), name);
    if (c == 0) {
      *out = mid;
      return true;
    }
    if (c < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return false;
}

Result<PathEntry> SampleDirectory::Resolve(std::string_view path) const {
  if (dirs_ == nullptr) return Status::NotFound("empty directory");
  uint64_t cur = 0;
  size_t pos = 0;
  while (true) {
    while (pos < path.size() && path[pos] == '/') ++pos;
    if (pos == path.size()) return PathEntry{true, cur};
    size_t end = path.find('/', pos);
    if (end == path.npos) end = path.size();
    const std::string_view component = path.substr(pos, end - pos);
    const DirInfo info = dir(cur);
    uint64_t next;
    if (FindChildDir(info, component, &next)) {
      cur = next;
      pos = end;
      continue;
    }
    size_t rest = end;
    while (rest < path.size() && path[rest] == '/') ++rest;
    if (rest == path.size() && FindSample(info, component, &next)) return PathEntry{false, next};
    return Status::NotFound("no sample or directory '" + std::string(path) + "'");
  }
}

std::vector<uint64_t> SampleDirectory::SamplesUnder(uint64_t d) const {
  std::vector<uint64_t> out;
  std::vector<uint64_t> pending{d};
  while (!pending.empty()) {
    const DirInfo info = dir(pending.back());
    pending.pop_back();
    for (uint64_t i = info.first_sample; i < uint64_t{info.first_sample} + info.sample_count; ++i) {
      out.push_back(i);
    }
    for (uint64_t c = info.first_child; c < uint64_t{info.first_child} + info.child_count; ++c) {
      pending.push_back(c);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<uint64_t> SampleDirectory::Lookup(std::string_view path) const {
  DLFS_ASSIGN_OR_RETURN(PathEntry e, Resolve(path));
  if (e.is_dir) return Status::InvalidArgument("'" + std::string(path) + "' is a directory");
  return e.index;
}

}  // namespace dlfs
