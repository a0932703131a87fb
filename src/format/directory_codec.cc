#include "format/directory_codec.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace dlfs::format {

namespace {

// ---- Writing -----------------------------------------------------------------

std::string_view DirName(const DirectoryTree& t, uint32_t d) {
  return t.names.substr(t.dirs[d].name_offset, t.dirs[d].name_length);
}

std::string_view SampleName(const DirectoryTree& t, uint32_t s) {
  return t.names.substr(t.samples[s].name_offset, t.samples[s].name_length);
}

std::string ClassName(const DirectoryTree& t, uint64_t c) {
  return c < t.class_names.size() ? t.class_names[c] : std::to_string(c);
}

// "a/b/leaf" for `leaf` in tree directory `dir`, for error messages.
std::string TreePath(const DirectoryTree& t, uint32_t dir, std::string_view leaf) {
  std::string p(leaf);
  for (; dir != 0; dir = t.dirs[dir].parent) p.insert(0, std::string(DirName(t, dir)) + "/");
  return p;
}

// Samples per directory index k, from an order.
std::vector<uint32_t> SampleCounts(const DirectoryTree& t, const DirectoryOrder& o) {
  std::vector<uint32_t> counts(o.dirs.size(), 0);
  for (const TreeSample& s : t.samples) ++counts[o.dir_index[s.dir]];
  return counts;
}

// ---- Reading -----------------------------------------------------------------

// Checks that [offset, offset + count * elem) lies inside [0, size) without
// overflowing.
bool ArrayFits(uint64_t offset, uint64_t count, uint64_t elem, uint64_t size) {
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, elem, &bytes)) return false;
  return offset <= size && bytes <= size - offset && offset % 8 == 0;
}

// One reader pass over a region; every failure is "<path>: directory region: ...".
class Checker {
 public:
  Checker(const SampleDirectory::Expected& expected, const std::string& volume_path)
      : x_(expected), path_(volume_path) {}

  Status Bad(const std::string& what) const {
    return Status::Corruption(path_ + ": directory region: " + what);
  }

  // §5 checks 26-33: the header, then where the arrays are.
  Result<DirectoryArrays> Header(const std::byte* region, uint64_t size) const {
    if (size < sizeof(DirectoryHeader)) return Bad("shorter than its header");
    DirectoryHeader h;
    std::memcpy(&h, region, sizeof h);
    if (h.magic != kDirectoryMagic) return Bad("bad magic");
    const bool with_fields = (x_.incompat_flags & kIncompatFields) != 0;
    if (h.header_size != (with_fields ? kDirectoryHeaderSizeFields : kDirectoryHeaderSize)) {
      return Bad("unexpected header size");
    }
    if (size < h.header_size) return Bad("shorter than its header");
    if (h.sample_entry_size != sizeof(SampleEntry) || h.dir_entry_size != sizeof(DirEntry) ||
        h.class_entry_size != sizeof(ClassEntry)) {
      return Bad("unexpected entry sizes");
    }
    const uint64_t ns = x_.sample_count, nd = x_.dir_count, nc = x_.class_count;
    if (h.sample_count != ns || h.dir_count != nd || h.class_count != nc) {
      return Bad("entry counts disagree with the superblock");
    }
    // Indices are stored as u32; kNone is reserved.
    if (ns >= kNone || nd >= kNone || nc >= kNone || nd == 0) {
      return Bad("entry counts out of range");
    }
    // The arrays follow the header in this order without overlapping.
    if (h.samples_offset < h.header_size ||
        h.dirs_offset < h.samples_offset + ns * sizeof(SampleEntry) ||
        h.classes_offset < h.dirs_offset + nd * sizeof(DirEntry) ||
        (!with_fields && h.strings_offset < h.classes_offset + nc * sizeof(ClassEntry))) {
      return Bad("arrays overlap or are out of order");
    }
    if (!ArrayFits(h.samples_offset, ns, sizeof(SampleEntry), size) ||
        !ArrayFits(h.dirs_offset, nd, sizeof(DirEntry), size) ||
        !ArrayFits(h.classes_offset, nc, sizeof(ClassEntry), size) || h.strings_offset > size ||
        h.string_bytes > size - h.strings_offset || h.string_bytes >= kNone) {
      return Bad("an array lies outside the region");
    }
    const char* base = reinterpret_cast<const char*>(region);
    DirectoryArrays a;
    a.samples = reinterpret_cast<const SampleEntry*>(base + h.samples_offset);
    a.dirs = reinterpret_cast<const DirEntry*>(base + h.dirs_offset);
    a.classes = reinterpret_cast<const ClassEntry*>(base + h.classes_offset);
    a.strings = base + h.strings_offset;
    a.sample_count = ns;
    a.dir_count = nd;
    a.class_count = nc;
    a.string_bytes = h.string_bytes;
    // Where the arrays of §4.1 and §4.8 end.
    uint64_t end = h.classes_offset + nc * sizeof(ClassEntry);
    if (with_fields) DLFS_RETURN_IF_ERROR(FieldsHeaderOk(region, size, h, &a, &end));
    if (x_.compat_flags & kCompatImages) DLFS_RETURN_IF_ERROR(ImagesOk(region, size, h, end, &a));
    return a;
  }

  Status BadImages(const std::string& what) const { return Bad("images section: " + what); }

  // §5 checks 51-54: where the images section and its records are, and
  // its options.
  Status ImagesOk(const std::byte* region, uint64_t size, const DirectoryHeader& h, uint64_t end,
                  DirectoryArrays* a) const {
    const uint64_t off = h.images_offset, bytes = h.images_bytes;
    if (bytes < sizeof(ImagesHeader) || off % 8 != 0 || off > size || bytes > size - off ||
        off < end || off + bytes > h.strings_offset) {
      return BadImages("out of place (offset " + std::to_string(off) + ", " +
                       std::to_string(bytes) + " bytes)");
    }
    ImagesHeader m;
    std::memcpy(&m, region + off, sizeof m);
    if (m.magic != kImagesMagic) return BadImages("bad magic");
    if (m.header_size != sizeof(ImagesHeader) || m.record_entry_size != sizeof(ImageRecord)) {
      return BadImages("unexpected header or record size");
    }
    if (m.record_count > m.image_count) return BadImages("more records than images");
    const uint64_t first = off + sizeof(ImagesHeader);
    if (m.records_offset < first || m.records_offset % 8 != 0 ||
        !ArrayFits(m.records_offset, m.record_count, sizeof(ImageRecord), off + bytes)) {
      return BadImages("records lie outside the section");
    }
    const bool capped = m.max_side != 0;
    if (m.filter > kMaxImageFilterCode ||
        (m.filter == static_cast<uint8_t>(ImageFilterCode::kNone)) == capped ||
        m.mode > kMaxImageModeCode || m.jpeg_quality > 100 || m.color > 2 ||
        (m.flags & ~kImageFlagAlwaysReencode) != 0 ||
        !(m.jpeg_probability >= 0 && m.jpeg_probability <= 1)) {
      return BadImages("an option is out of range");
    }
    a->images = reinterpret_cast<const ImagesHeader*>(region + off);
    a->image_records = reinterpret_cast<const ImageRecord*>(region + m.records_offset);
    a->image_record_count = m.record_count;
    return Status::Ok();
  }

  // §5 checks 42-43 and 49: the fields header and where its arrays are.
  Status FieldsHeaderOk(const std::byte* region, uint64_t size, const DirectoryHeader& h,
                        DirectoryArrays* a, uint64_t* arrays_end) const {
    FieldsHeader f;
    std::memcpy(&f, region + sizeof(DirectoryHeader), sizeof f);
    if (f.magic != kFieldsMagic) return Bad("bad fields header magic");
    const bool single = f.layout == static_cast<uint32_t>(FieldLayout::kSingle);
    if (!single && f.layout != static_cast<uint32_t>(FieldLayout::kRecords)) {
      return Bad("unknown field layout " + std::to_string(f.layout));
    }
    if (f.field_count == 0 || f.field_count > kMaxFields) return Bad("bad field count");
    if (f.field_entry_size != sizeof(FieldEntry) || f.record_entry_size != sizeof(FieldRecord)) {
      return Bad("unexpected field entry sizes");
    }
    if (single && (f.index_offset != 0 || f.records_offset != 0 || f.record_count != 0 ||
                   f.dict_bytes != 0 || f.field_count != 1)) {
      return Bad("single field layout with field records, a dictionary or several fields");
    }
    if (f.dict_bytes != 0 && !(x_.incompat_flags & kIncompatZstd)) {
      return Bad("a zstd dictionary without the zstd feature flag");
    }
    if (f.record_count >= kNone) return Bad("too many field records");
    const uint64_t ns = a->sample_count;
    // Order: classes, field table, index, records, dictionary, pool.
    uint64_t end = h.classes_offset + a->class_count * sizeof(ClassEntry);
    const auto next = [&](uint64_t offset, uint64_t count, uint64_t elem) {
      if (offset < end || !ArrayFits(offset, count, elem, size)) return false;
      end = offset + count * elem;
      return true;
    };
    bool ok = next(f.fields_offset, f.field_count, sizeof(FieldEntry));
    if (ok && !single) {
      ok = next(f.index_offset, ns + 1, sizeof(uint32_t)) &&
           next(f.records_offset, f.record_count, sizeof(FieldRecord));
    }
    if (ok && f.dict_bytes != 0) {
      ok = f.dict_offset >= end && f.dict_offset <= size && f.dict_bytes <= size - f.dict_offset;
      end = f.dict_offset + f.dict_bytes;
    }
    if (!ok) return Bad("field arrays overlap, are out of order or lie outside the region");
    if (h.strings_offset < end) return Bad("arrays overlap or are out of order");
    *arrays_end = end;
    const char* base = reinterpret_cast<const char*>(region);
    a->field_layout = f.layout;
    a->field_count = f.field_count;
    a->fields = reinterpret_cast<const FieldEntry*>(base + f.fields_offset);
    if (!single) {
      a->field_index = reinterpret_cast<const uint32_t*>(base + f.index_offset);
      a->records = reinterpret_cast<const FieldRecord*>(base + f.records_offset);
      a->record_count = f.record_count;
    }
    if (f.dict_bytes != 0) {
      a->dictionary = region + f.dict_offset;
      a->dictionary_bytes = f.dict_bytes;
    }
    return Status::Ok();
  }

  // §5 checks 34-41: every entry, over arrays whose bounds Header checked.
  Status Entries(const DirectoryArrays& a) const {
    for (uint64_t c = 0; c < a.class_count; ++c) {
      if (!NameOk(a, a.classes[c].name_offset, a.classes[c].name_length)) {
        return Bad("class " + std::to_string(c) + " has its name outside the string pool");
      }
    }
    DLFS_RETURN_IF_ERROR(Tree(a));
    DLFS_RETURN_IF_ERROR(Samples(a));
    DLFS_RETURN_IF_ERROR(NoClashes(a));
    if (a.field_count != 0) DLFS_RETURN_IF_ERROR(Fields(a));
    return a.images != nullptr ? ImageRecords(a) : Status::Ok();
  }

  // §5 check 55: every image record, after the fields they name were checked.
  Status ImageRecords(const DirectoryArrays& a) const {
    const uint64_t fields = a.field_count != 0 ? a.field_count : 1;
    for (uint64_t r = 0; r < a.image_record_count; ++r) {
      const ImageRecord& rec = a.image_records[r];
      const auto where = [r] { return "record " + std::to_string(r); };
      if (rec.sample >= a.sample_count || rec.field >= fields) {
        return BadImages(where() + " names a sample or field out of range");
      }
      if (r > 0) {
        const ImageRecord& prev = a.image_records[r - 1];
        if (prev.sample > rec.sample || (prev.sample == rec.sample && prev.field >= rec.field)) {
          return BadImages(where() + " is not sorted by (sample, field)");
        }
      }
      if (rec.stored < static_cast<uint8_t>(StoredImageCode::kJpeg) ||
          rec.stored > static_cast<uint8_t>(StoredImageCode::kRaw) ||
          (rec.flags & ~kImageRecordResized) != 0 || rec.width == 0 || rec.height == 0) {
        return BadImages(where() + " is malformed");
      }
      if (a.field_index != nullptr) {
        bool has = false;
        for (uint64_t k = a.field_index[rec.sample]; k < a.field_index[rec.sample + 1]; ++k) {
          has = has || a.records[k].field == rec.field;
        }
        if (!has) return BadImages(where() + " names a field its sample lacks");
      }
    }
    return Status::Ok();
  }

 private:
  static bool NameOk(const DirectoryArrays& a, uint32_t off, uint64_t len) {
    return off <= a.string_bytes && len <= a.string_bytes - off;
  }
  // A single path component inside the pool (§4.6 rule 5).
  static bool ComponentOk(const DirectoryArrays& a, uint32_t off, uint64_t len) {
    if (len == 0 || !NameOk(a, off, len)) return false;
    const std::string_view s(a.strings + off, len);
    return s.find('/') == s.npos && s.find('\0') == s.npos && s != "." && s != "..";
  }

  // The path of sample `i` in directory `k`, for messages: only after Tree
  // (checks 35-38) passed, so parent links lead to the root and directory
  // names lie in the pool, and after sample i's own name was checked.
  static std::string Path(const DirectoryArrays& a, uint64_t k, uint64_t i) {
    std::string p(a.sample_name(i));
    for (; k != 0; k = a.dirs[k].parent) p.insert(0, std::string(a.dir_name(k)) + "/");
    return p;
  }

  // Checks 35-38. Breadth-first order with contiguous, canonical child and
  // sample ranges: directory k's children start right after those of
  // directories < k, and likewise its samples. This makes every range check
  // below sufficient for the whole tree to be well formed (no cycles, no
  // sharing, full coverage).
  Status Tree(const DirectoryArrays& a) const {
    for (uint64_t k = 0; k < a.dir_count; ++k) {
      const DirEntry& e = a.dirs[k];
      if (k == 0) {
        if (e.parent != kNone || e.name_length != 0 || !NameOk(a, e.name_offset, 0)) {
          return Bad("root entry is malformed");
        }
      } else if (e.parent >= k || !ComponentOk(a, e.name_offset, e.name_length)) {
        return Bad("directory " + std::to_string(k) + " has a bad parent or name");
      }
    }
    uint64_t next_child = 1;
    uint64_t next_sample = 0;
    for (uint64_t k = 0; k < a.dir_count; ++k) {
      const DirEntry& e = a.dirs[k];
      auto where = [k] { return "directory " + std::to_string(k); };
      if (e.first_child != next_child || e.child_count > a.dir_count - next_child) {
        return Bad(where() + " has a bad child range");
      }
      if (e.first_sample != next_sample || e.sample_count > a.sample_count - next_sample) {
        return Bad(where() + " has a bad sample range");
      }
      for (uint64_t c = e.first_child; c < e.first_child + e.child_count; ++c) {
        if (a.dirs[c].parent != k) return Bad(where() + ": child's parent link is wrong");
        if (c > e.first_child && a.dir_name(c - 1) >= a.dir_name(c)) {
          return Bad(where() + ": children are not sorted by name");
        }
      }
      next_child += e.child_count;
      next_sample += e.sample_count;
    }
    if (next_child != a.dir_count) return Bad("some directories have no parent");
    if (next_sample != a.sample_count) return Bad("some samples belong to no directory");
    return Status::Ok();
  }

  // Checks 39-40, over the ranges Tree checked.
  Status Samples(const DirectoryArrays& a) const {
    uint64_t data_bytes = 0;
    for (uint64_t k = 0; k < a.dir_count; ++k) {
      const DirEntry& e = a.dirs[k];
      for (uint64_t i = e.first_sample; i < uint64_t{e.first_sample} + e.sample_count; ++i) {
        const SampleEntry& s = a.samples[i];
        auto where = [i] { return "sample " + std::to_string(i); };
        if (s.parent != k) return Bad(where() + " has a wrong parent");
        if (!ComponentOk(a, s.name_offset, s.name_length)) return Bad(where() + " has a bad name");
        if (i > e.first_sample && a.sample_name(i - 1) >= a.sample_name(i)) {
          return Bad(where() + " is not sorted by name within its directory");
        }
        // The writer's bound (§4.6 rule 7) before the class table's, so the
        // message names it whatever class_count is.
        if (s.label != kNone && s.label >= kLabelLimit) {
          return Bad(where() + " ('" + Path(a, k, i) + "') has label " + std::to_string(s.label) +
                     ": labels must be below " + std::to_string(kLabelLimit));
        }
        if (s.label != kNone && s.label >= a.class_count) {
          return Bad(where() + " has label " + std::to_string(s.label) + " but there are only " +
                     std::to_string(a.class_count) + " classes");
        }
        if (s.target >= x_.data_regions.size()) return Bad(where() + " names a missing target");
        // Each target holds one data region; a sample lies in its target's.
        const SampleDirectory::Expected::DataRange& data = x_.data_regions[s.target];
        if (s.offset < data.begin || s.offset > data.end || s.length > data.end - s.offset) {
          return Bad(where() + " lies outside the data region");
        }
        if (s.offset % x_.data_alignment != 0) {
          return Bad(where() + " is not aligned to " + std::to_string(x_.data_alignment));
        }
        data_bytes += s.length;
      }
    }
    if (data_bytes != x_.data_bytes) {
      return Bad("sample lengths add up to " + std::to_string(data_bytes) +
                 " bytes, the superblock says " + std::to_string(x_.data_bytes));
    }
    return Status::Ok();
  }

  // Check 41: a sample and a sub-directory with one name would make paths
  // ambiguous.
  Status NoClashes(const DirectoryArrays& a) const {
    for (uint64_t k = 0; k < a.dir_count; ++k) {
      const DirEntry& e = a.dirs[k];
      for (uint64_t c = e.first_child; c < uint64_t{e.first_child} + e.child_count; ++c) {
        if (FindByName(e.first_sample, e.sample_count, a.dir_name(c),
                       [&](uint64_t i) { return a.sample_name(i); })) {
          return Bad("directory " + std::to_string(k) +
                     " has a sample and a sub-directory named '" + std::string(a.dir_name(c)) +
                     "'");
        }
      }
    }
    return Status::Ok();
  }

  // §5 checks 44-48: field names, the index and every sample's records.
  Status Fields(const DirectoryArrays& a) const {
    for (uint64_t f = 0; f < a.field_count; ++f) {
      const FieldEntry& e = a.fields[f];
      if (e.name_length > 0xFFFF || !NameOk(a, e.name_offset, e.name_length)) {
        return Bad("field " + std::to_string(f) + " has its name outside the string pool");
      }
      const std::string_view n = a.field_name(f);
      if (n.find('/') != n.npos || n.find('\0') != n.npos) {
        return Bad("field " + std::to_string(f) + " has a bad name");
      }
      if (f > 0 && a.field_name(f - 1) >= n) {
        return Bad("field names are not sorted (field " + std::to_string(f) + ")");
      }
    }
    if (a.field_layout == static_cast<uint32_t>(FieldLayout::kSingle)) return Status::Ok();
    const uint32_t* index = a.field_index;
    if (index[0] != 0 || index[a.sample_count] != a.record_count) {
      return Bad("the field index does not cover the field records");
    }
    std::vector<uint64_t> seen(a.field_count, 0);  // sample i + 1 that used the field last
    for (uint64_t i = 0; i < a.sample_count; ++i) {
      auto where = [i] { return "sample " + std::to_string(i); };
      if (index[i + 1] < index[i]) return Bad("the field index decreases at " + where());
      uint64_t stored = 0;
      for (uint64_t r = index[i]; r < index[i + 1]; ++r) {
        const FieldRecord& rec = a.records[r];
        if (rec.field >= a.field_count) return Bad(where() + " has a field id out of range");
        const std::string field = " field '" + std::string(a.field_name(rec.field)) + "'";
        if (seen[rec.field] == i + 1) return Bad(where() + " has" + field + " twice");
        seen[rec.field] = i + 1;
        if (rec.codec > static_cast<uint8_t>(FieldCodec::kZstdDict) || rec.reserved != 0) {
          return Bad(where() + field + " has an unknown codec");
        }
        const auto codec = static_cast<FieldCodec>(rec.codec);
        if (codec == FieldCodec::kNone && rec.decoded_length != rec.stored_length) {
          return Bad(where() + field + " is raw but has a decoded length");
        }
        if (codec != FieldCodec::kNone && !(x_.incompat_flags & kIncompatZstd)) {
          return Bad(where() + field + " is compressed without the zstd feature flag");
        }
        if (codec == FieldCodec::kZstdDict && a.dictionary_bytes == 0) {
          return Bad(where() + field + " needs the volume's dictionary, which it lacks");
        }
        stored += rec.stored_length;  // < 2^32 records of < 2^32 bytes: no overflow
      }
      if (stored != a.samples[i].length) {
        return Bad(where() + "'s fields add up to " + std::to_string(stored) +
                   " bytes, its extent has " + std::to_string(a.samples[i].length));
      }
    }
    return Status::Ok();
  }

  const SampleDirectory::Expected& x_;
  const std::string& path_;
};

}  // namespace

Result<DirectoryOrder> OrderDirectory(const DirectoryTree& tree) {
  const size_t nd = tree.dirs.size();
  DirectoryOrder o;
  // Breadth-first directory order with each directory's children sorted by
  // name (docs/format.md §4.6 rules 1-3).
  std::vector<std::vector<uint32_t>> children(nd);
  for (uint32_t d = 1; d < nd; ++d) children[tree.dirs[d].parent].push_back(d);
  const auto dir_name = [&](uint32_t d) { return DirName(tree, d); };
  o.dirs.reserve(nd);
  o.dirs.push_back(0);
  o.dir_index.resize(nd);
  for (size_t k = 0; k < o.dirs.size(); ++k) {
    o.dir_index[o.dirs[k]] = static_cast<uint32_t>(k);
    std::vector<uint32_t>& c = children[o.dirs[k]];
    std::ranges::sort(c, {}, dir_name);
    o.dirs.insert(o.dirs.end(), c.begin(), c.end());
  }

  // Samples by directory index, then name (rule 4). Equal keys are the
  // duplicates refused below, so an unstable sort gives one order.
  o.samples.resize(tree.samples.size());
  std::iota(o.samples.begin(), o.samples.end(), 0u);
  const auto sample_name = [&](uint32_t s) { return SampleName(tree, s); };
  std::ranges::sort(o.samples, [&](uint32_t a, uint32_t b) {
    const uint32_t da = o.dir_index[tree.samples[a].dir], db = o.dir_index[tree.samples[b].dir];
    if (da != db) return da < db;
    return sample_name(a) < sample_name(b);
  });
  for (size_t i = 1; i < o.samples.size(); ++i) {
    const uint32_t a = o.samples[i - 1], b = o.samples[i];
    if (tree.samples[a].dir == tree.samples[b].dir && sample_name(a) == sample_name(b)) {
      return Status::InvalidArgument("two samples have the path '" +
                                     TreePath(tree, tree.samples[b].dir, sample_name(b)) + "'");
    }
  }

  // Rule 6: within a directory, no sample may share a sub-directory's name.
  const std::vector<uint32_t> counts = SampleCounts(tree, o);
  uint64_t first = 0;
  for (size_t k = 0; k < nd; ++k) {
    for (uint32_t c : children[o.dirs[k]]) {
      if (FindByName(first, counts[k], dir_name(c),
                     [&](uint64_t i) { return sample_name(o.samples[i]); })) {
        return Status::InvalidArgument("'" + TreePath(tree, tree.dirs[c].parent, dir_name(c)) +
                                       "' is both a sample and a directory");
      }
    }
    first += counts[k];
  }
  return o;
}

Result<std::vector<std::byte>> EncodeDirectory(const DirectoryTree& tree,
                                               const DirectoryOrder& order) {
  const uint64_t n = tree.samples.size(), nd = tree.dirs.size(), nc = tree.class_count;
  // The pool holds every name once, in the order written below.
  uint64_t pool_bytes = 0;
  for (const TreeDir& d : tree.dirs) pool_bytes += d.name_length;
  for (const TreeSample& s : tree.samples) pool_bytes += s.name_length;
  for (uint64_t c = 0; c < nc; ++c) pool_bytes += ClassName(tree, c).size();
  if (tree.with_fields) {
    for (const std::string& f : tree.field_names) pool_bytes += f.size();
  }
  if (pool_bytes >= kNone) {
    return Status::InvalidArgument("names exceed the 4 GiB string pool of format v1");
  }

  DirectoryHeader h{};
  h.magic = kDirectoryMagic;
  h.header_size = tree.with_fields ? kDirectoryHeaderSizeFields : kDirectoryHeaderSize;
  h.sample_count = n;
  h.dir_count = nd;
  h.class_count = nc;
  h.string_bytes = pool_bytes;
  h.sample_entry_size = sizeof(SampleEntry);
  h.dir_entry_size = sizeof(DirEntry);
  h.class_entry_size = sizeof(ClassEntry);
  h.samples_offset = h.header_size;
  h.dirs_offset = h.samples_offset + n * sizeof(SampleEntry);
  h.classes_offset = h.dirs_offset + nd * sizeof(DirEntry);
  h.strings_offset = h.classes_offset + nc * sizeof(ClassEntry);
  // Format v2: the field arrays go between the classes and the pool.
  FieldsHeader fh{};
  bool single = false;
  if (tree.with_fields) {
    single = tree.field_names.size() == 1 && tree.dictionary.empty();
    for (const TreeSample& s : tree.samples) {
      if (!single) break;
      const TreeField* f = s.field_count == 1 ? &tree.fields[s.first_field] : nullptr;
      single = f != nullptr && f->field == 0 && f->codec == 0;
    }
    fh.magic = kFieldsMagic;
    fh.layout = static_cast<uint32_t>(single ? FieldLayout::kSingle : FieldLayout::kRecords);
    fh.field_count = static_cast<uint32_t>(tree.field_names.size());
    fh.field_entry_size = sizeof(FieldEntry);
    fh.record_entry_size = sizeof(FieldRecord);
    fh.fields_offset = h.strings_offset;
    uint64_t end = fh.fields_offset + fh.field_count * sizeof(FieldEntry);
    if (!single) {
      fh.index_offset = end;
      fh.records_offset = AlignUp(fh.index_offset + (n + 1) * sizeof(uint32_t), 8);
      for (const TreeSample& s : tree.samples) fh.record_count += s.field_count;
      if (fh.record_count >= kNone) {
        return Status::InvalidArgument("more than 2^32 - 2 fields in one volume");
      }
      end = fh.records_offset + fh.record_count * sizeof(FieldRecord);
    }
    if (!tree.dictionary.empty()) {
      fh.dict_offset = end;
      fh.dict_bytes = tree.dictionary.size();
      end += fh.dict_bytes;
    }
    h.strings_offset = end;
  }
  // The images section: after every other array, before the pool.
  ImagesHeader ih{};
  std::vector<ImageRecord> image_records;
  if (tree.images != nullptr) {
    std::vector<uint32_t> index_of(n);
    for (uint32_t i = 0; i < n; ++i) index_of[order.samples[i]] = i;
    for (const TreeImage& t : tree.image_records) {
      image_records.push_back(
          ImageRecord{index_of[t.sample], t.field, t.stored, t.flags, t.width, t.height});
    }
    std::ranges::sort(image_records, [](const ImageRecord& a, const ImageRecord& b) {
      return a.sample != b.sample ? a.sample < b.sample : a.field < b.field;
    });
    ih = *tree.images;
    ih.magic = kImagesMagic;
    ih.header_size = sizeof(ImagesHeader);
    ih.record_entry_size = sizeof(ImageRecord);
    ih.record_count = image_records.size();
    h.images_offset = AlignUp(h.strings_offset, 8);
    ih.records_offset = h.images_offset + sizeof(ImagesHeader);
    h.images_bytes = sizeof(ImagesHeader) + image_records.size() * sizeof(ImageRecord);
    h.strings_offset = h.images_offset + h.images_bytes;
  }

  std::vector<std::byte> region(h.strings_offset + pool_bytes);
  const auto put = [&](uint64_t off, const void* src, size_t len) {
    if (len) std::memcpy(region.data() + off, src, len);
  };
  put(0, &h, sizeof h);
  if (tree.with_fields) put(sizeof h, &fh, sizeof fh);
  if (tree.images != nullptr) {
    put(h.images_offset, &ih, sizeof ih);
    put(ih.records_offset, image_records.data(), image_records.size() * sizeof(ImageRecord));
  }
  // Names go to the pool in entry order: directories, samples, classes.
  uint64_t pool_end = 0;
  const auto intern = [&](std::string_view s) {
    put(h.strings_offset + pool_end, s.data(), s.size());
    pool_end += s.size();
    return static_cast<uint32_t>(pool_end - s.size());
  };

  std::vector<uint32_t> child_count(nd, 0);
  for (uint64_t d = 1; d < nd; ++d) ++child_count[order.dir_index[tree.dirs[d].parent]];
  const std::vector<uint32_t> sample_count = SampleCounts(tree, order);
  uint32_t next_child = 1, next_sample = 0;
  for (uint64_t k = 0; k < nd; ++k) {
    const uint32_t id = order.dirs[k];
    DirEntry e{};
    e.parent = k == 0 ? kNone : order.dir_index[tree.dirs[id].parent];
    e.name_offset = intern(DirName(tree, id));
    e.name_length = static_cast<uint16_t>(tree.dirs[id].name_length);
    e.first_child = next_child;
    e.child_count = child_count[k];
    e.first_sample = next_sample;
    e.sample_count = sample_count[k];
    next_child += e.child_count;
    next_sample += e.sample_count;
    put(h.dirs_offset + k * sizeof e, &e, sizeof e);
  }
  for (uint64_t i = 0; i < n; ++i) {
    const TreeSample& p = tree.samples[order.samples[i]];
    SampleEntry e{};
    e.offset = p.offset;
    e.length = p.length;
    e.crc32c = p.crc32c;
    e.label = p.label;
    e.parent = order.dir_index[p.dir];
    e.name_offset = intern(SampleName(tree, order.samples[i]));
    e.name_length = static_cast<uint16_t>(p.name_length);
    e.target = static_cast<uint16_t>(p.target);
    put(h.samples_offset + i * sizeof e, &e, sizeof e);
  }
  for (uint64_t c = 0; c < nc; ++c) {
    const std::string name = ClassName(tree, c);
    ClassEntry e{};
    e.name_offset = intern(name);
    e.name_length = static_cast<uint32_t>(name.size());
    put(h.classes_offset + c * sizeof e, &e, sizeof e);
  }
  if (!tree.with_fields) return region;
  for (size_t f = 0; f < tree.field_names.size(); ++f) {
    FieldEntry e{};
    e.name_offset = intern(tree.field_names[f]);
    e.name_length = static_cast<uint32_t>(tree.field_names[f].size());
    put(fh.fields_offset + f * sizeof e, &e, sizeof e);
  }
  if (!single) {
    // Records in sample index order, each sample's in storage order.
    uint32_t next = 0;
    for (uint64_t i = 0; i < n; ++i) {
      const TreeSample& p = tree.samples[order.samples[i]];
      put(fh.index_offset + i * sizeof next, &next, sizeof next);
      for (uint32_t k = 0; k < p.field_count; ++k) {
        const TreeField& t = tree.fields[p.first_field + k];
        const FieldRecord r{t.stored_length,  t.crc32c,
                            t.decoded_length, static_cast<uint16_t>(t.field),
                            t.codec,          0};
        put(fh.records_offset + uint64_t{next} * sizeof r, &r, sizeof r);
        ++next;
      }
    }
    put(fh.index_offset + n * sizeof next, &next, sizeof next);
  }
  if (!tree.dictionary.empty()) put(fh.dict_offset, tree.dictionary.data(), fh.dict_bytes);
  return region;
}

Result<DirectoryArrays> DecodeDirectory(const std::byte* region, uint64_t size,
                                        const SampleDirectory::Expected& expected,
                                        const std::string& volume_path) {
  const Checker check(expected, volume_path);
  DLFS_ASSIGN_OR_RETURN(DirectoryArrays arrays, check.Header(region, size));
  if (!expected.already_validated) DLFS_RETURN_IF_ERROR(check.Entries(arrays));
  return arrays;
}

}  // namespace dlfs::format
