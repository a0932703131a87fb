#include <algorithm>
#include <charconv>
#include <cstring>
#include <utility>

#include "directory/compact_state.h"
#include "dlfs/directory.h"
#include "format/compact_codec.h"
#include "format/directory_codec.h"
#include "format/format.h"

namespace dlfs {

using format::ClassEntry;
using format::DirEntry;
using format::SampleEntry;

Result<SampleDirectory> SampleDirectory::Create(std::shared_ptr<const std::byte> region,
                                                uint64_t size, const Expected& expected,
                                                const std::string& volume_path) {
  if (expected.format_version == format::kFormatVersionCompact) {
    return CreateCompact(std::move(region), size, expected, volume_path);
  }
  DLFS_ASSIGN_OR_RETURN(const format::DirectoryArrays a,
                        format::DecodeDirectory(region.get(), size, expected, volume_path));
  SampleDirectory d;
  d.region_ = std::move(region);
  d.region_size_ = size;
  d.sample_count_ = a.sample_count;
  d.dir_count_ = a.dir_count;
  d.class_count_ = a.class_count;
  d.samples_ = a.samples;
  d.dirs_ = a.dirs;
  d.classes_ = a.classes;
  d.strings_ = a.strings;
  d.field_count_ = a.field_count;
  d.fields_ = a.fields;
  d.field_index_ = a.field_index;
  d.records_ = a.records;
  d.dict_ = a.dictionary;
  d.dict_bytes_ = a.dictionary_bytes;
  d.images_ = a.images;
  d.image_records_ = a.image_records;
  d.image_record_count_ = a.image_record_count;
  return d;
}

Result<SampleDirectory> SampleDirectory::CreateCompact(std::shared_ptr<const std::byte> region,
                                                       uint64_t size, const Expected& expected,
                                                       const std::string& volume_path) {
  DLFS_ASSIGN_OR_RETURN(const format::CompactLayout layout,
                        format::DecodeCompactHeader(region.get(), size, expected, volume_path));
  if (expected.incompat_flags != 0 || expected.compat_flags != 0) {
    return Status::NotSupported(volume_path +
                                ": a compact directory with fields, codecs or an images section");
  }
  SampleDirectory d;
  d.region_ = region;
  d.region_size_ = size;
  d.sample_count_ = layout.sample_count();
  // Without names the root alone holds every sample (no tree section).
  d.dir_count_ = layout.has_names() ? layout.header.dir_count : 1;
  d.class_count_ = layout.header.class_count;
  d.compact_ = std::make_shared<directory_internal::CompactState>(std::move(region), size, layout,
                                                                  expected, volume_path);
  return d;
}

bool SampleDirectory::has_names() const { return !compact_ || compact_->layout().has_names(); }

std::optional<uint64_t> SampleDirectory::max_sample_length() const {
  if (!compact_) return std::nullopt;
  return compact_->layout().header.max_sample_length;
}

SampleDirectory::BlockPlace SampleDirectory::block_place(uint64_t b) const {
  const format::CompactLayout& l = compact_->layout();
  format::BlockEntry e;
  std::memcpy(&e, &l.blocks[b], sizeof e);
  return BlockPlace{e.target, e.data_offset, l.BlockCount(b)};
}

uint64_t SampleDirectory::block_count() const {
  return compact_ ? compact_->layout().block_count() : 0;
}

uint64_t SampleDirectory::block_samples() const {
  return compact_ ? compact_->layout().block_samples : 0;
}

uint64_t SampleDirectory::sample_metadata_bytes() const {
  if (!compact_) return sample_count_ * sizeof(SampleEntry);
  const format::CompactHeader& h = compact_->layout().header;
  return h.sections[format::kSectionBlocks].length + h.sections[format::kSectionRecords].length;
}

Result<SampleInfo> SampleDirectory::Locate(uint64_t i) const {
  if (compact_) return compact_->Locate(i);
  return sample(i);
}

void SampleDirectory::LocateMany(std::span<const uint64_t> indices, std::span<SampleInfo> out,
                                 std::vector<Status>* failed) const {
  if (compact_) return compact_->LocateMany(indices, out, failed);
  failed->clear();
  for (size_t k = 0; k < indices.size(); ++k) out[k] = sample(indices[k]);
}

Status SampleDirectory::CheckAll() const { return compact_ ? compact_->CheckAll() : Status::Ok(); }

std::optional<VolumeImages> SampleDirectory::images() const {
  if (images_ == nullptr) return std::nullopt;
  format::ImagesHeader h;
  std::memcpy(&h, images_, sizeof h);
  VolumeImages v;
  ImagePrepOptions& o = v.options;
  o.max_side = h.max_side;
  // The codec checked every value (docs/format.md §5 check 54).
  if (h.filter != 0) o.filter = static_cast<ResizeFilter>(h.filter);
  o.mode = static_cast<ImageStoreMode>(h.mode);
  o.jpeg_quality = h.jpeg_quality;
  o.color = static_cast<ColorMode>(h.color);
  o.always_reencode = (h.flags & format::kImageFlagAlwaysReencode) != 0;
  o.smart_threshold = h.smart_threshold;
  o.jpeg_probability = h.jpeg_probability;
  o.seed = h.seed;
  v.images = h.image_count;
  v.changed = h.record_count;
  return v;
}

ImageOrigin SampleDirectory::image_origin(uint64_t k) const {
  const format::ImageRecord& r = image_records_[k];
  return ImageOrigin{r.sample,
                     r.field,
                     static_cast<StoredImage>(r.stored),
                     (r.flags & format::kImageRecordResized) != 0,
                     r.width,
                     r.height};
}

std::optional<ImageOrigin> SampleDirectory::FindImageOrigin(uint64_t i, uint32_t field) const {
  const format::ImageRecord* end = image_records_ + image_record_count_;
  const format::ImageRecord* it =
      std::lower_bound(image_records_, end, std::pair<uint64_t, uint32_t>(i, field),
                       [](const format::ImageRecord& r, const std::pair<uint64_t, uint32_t>& key) {
                         return r.sample != key.first ? r.sample < key.first : r.field < key.second;
                       });
  if (it == end || it->sample != i || it->field != field) return std::nullopt;
  return image_origin(static_cast<uint64_t>(it - image_records_));
}

std::string_view SampleDirectory::String(uint32_t offset, uint32_t length) const {
  return std::string_view(strings_ + offset, length);
}

SampleInfo SampleDirectory::sample(uint64_t i) const {
  if (compact_) {
    Result<SampleInfo> r = compact_->Locate(i);
    // CRC32C of no bytes is 0: a verified read of this never passes.
    if (!r.ok()) return SampleInfo{0, 0, 0xFFFFFFFFu, kNoLabel, kNoParent, 0};
    return *r;
  }
  const SampleEntry& s = samples_[i];
  return SampleInfo{s.offset, s.length, s.crc32c, s.label, s.parent, s.target};
}

std::string SampleDirectory::name(uint64_t i) const {
  if (compact_) {
    if (!compact_->layout().has_names()) return "#" + std::to_string(i);
    const std::string path = Path(i);
    const size_t slash = path.rfind('/');
    return slash == path.npos ? path : path.substr(slash + 1);
  }
  return std::string(String(samples_[i].name_offset, samples_[i].name_length));
}

uint32_t SampleDirectory::label(uint64_t i) const {
  if (compact_) return sample(i).label;
  return samples_[i].label;
}

std::string SampleDirectory::Path(uint64_t i) const {
  if (compact_) {
    if (!compact_->layout().has_names()) return "#" + std::to_string(i);
    Result<std::string_view> p = compact_->PathOf(i);
    if (!p.ok()) {
      return "<damaged name block " + std::to_string(i >> compact_->layout().header.block_shift) +
             ">";
    }
    return std::string(*p);
  }
  std::string dir = DirPath(samples_[i].parent);
  if (!dir.empty()) dir += '/';
  dir += name(i);
  return dir;
}

DirInfo SampleDirectory::dir(uint64_t k) const {
  if (compact_) {
    if (!compact_->layout().has_names()) return DirInfo{kNoDirectory, 0, sample_count_};
    if (!compact_->CheckTree().ok()) return DirInfo{kNoDirectory, 0, 0};
    const format::TreeEntry& e = compact_->layout().tree[k];
    return DirInfo{e.parent, e.child_count, e.own_samples};
  }
  const DirEntry& e = dirs_[k];
  return DirInfo{e.parent == format::kNone ? kNoDirectory : e.parent, e.child_count,
                 e.sample_count};
}

std::vector<uint64_t> SampleDirectory::ChildDirs(uint64_t d) const {
  if (compact_) {
    if (!compact_->layout().has_names() || !compact_->CheckTree().ok()) return {};
    // Children are in the tree's order, path + "/" ("cat-x" before "cat");
    // a listing is by name.
    std::vector<uint64_t> out = compact_->Children(d);
    std::sort(out.begin(), out.end(),
              [&](uint64_t a, uint64_t b) { return dir_name(a) < dir_name(b); });
    return out;
  }
  std::vector<uint64_t> out;
  for (uint64_t c = dirs_[d].first_child; c < uint64_t{dirs_[d].first_child} + dirs_[d].child_count;
       ++c) {
    out.push_back(c);
  }
  return out;
}

std::vector<uint64_t> SampleDirectory::DirSamples(uint64_t d, uint64_t from, uint64_t max) const {
  std::vector<uint64_t> out;
  if (compact_) {
    if (!compact_->layout().has_names()) {
      for (uint64_t i = from; i < sample_count_ && out.size() < max; ++i) out.push_back(i);
      return out;
    }
    if (!compact_->CheckTree().ok()) return out;
    for (const uint64_t p : compact_->OwnPositions(d, from, max)) {
      Result<uint64_t> i = compact_->IndexAt(p);
      if (!i.ok()) break;
      out.push_back(*i);
    }
    return out;
  }
  const DirEntry& e = dirs_[d];
  for (uint64_t j = from; j < e.sample_count && out.size() < max; ++j) {
    out.push_back(e.first_sample + j);
  }
  return out;
}

std::optional<SampleDirectory::IndexRange> SampleDirectory::SubtreeIndexRange(uint64_t d) const {
  if (compact_) {
    if (d == 0) return IndexRange{0, sample_count_};
    if (!compact_->layout().names_sorted() || !compact_->CheckTree().ok()) return std::nullopt;
    const format::TreeEntry& e = compact_->layout().tree[d];
    return IndexRange{e.first_position, e.position_count};
  }
  // v1: each directory's samples are consecutive, and breadth-first order
  // puts a subtree's directories in several runs; it is one run of samples
  // when the samples of its directories, taken in index order, follow each
  // other.
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  std::vector<uint64_t> pending{d};
  while (!pending.empty()) {
    const DirEntry& e = dirs_[pending.back()];
    pending.pop_back();
    if (e.sample_count > 0) runs.emplace_back(e.first_sample, e.sample_count);
    for (uint64_t c = e.first_child; c < uint64_t{e.first_child} + e.child_count; ++c) {
      pending.push_back(c);
    }
  }
  if (runs.empty()) return IndexRange{0, 0};
  std::sort(runs.begin(), runs.end());
  for (size_t k = 1; k < runs.size(); ++k) {
    if (runs[k].first != runs[k - 1].first + runs[k - 1].second) return std::nullopt;
  }
  return IndexRange{runs.front().first,
                    runs.back().first + runs.back().second - runs.front().first};
}

std::string_view SampleDirectory::dir_name(uint64_t k) const {
  if (compact_) {
    if (!compact_->layout().has_names() || !compact_->CheckTree().ok()) return {};
    const std::string_view p = format::TreePath(compact_->layout(), k);
    const size_t slash = p.rfind('/');
    return slash == p.npos ? p : p.substr(slash + 1);
  }
  return String(dirs_[k].name_offset, dirs_[k].name_length);
}

std::string SampleDirectory::DirPath(uint64_t k) const {
  if (compact_) {
    if (!compact_->layout().has_names()) return "";
    if (!compact_->CheckTree().ok()) return "<damaged tree>";
    return std::string(format::TreePath(compact_->layout(), k));
  }
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

namespace {
Status NotTokens() {
  return Status::NotSupported("not a token volume (its samples are not documents of tokens)");
}
}  // namespace

uint32_t SampleDirectory::token_width() const {
  return compact_ && compact_->layout().tokens() ? compact_->layout().token_width : 0;
}

uint64_t SampleDirectory::token_count() const {
  const uint32_t w = token_width();
  return w == 0 ? 0 : compact_->layout().token_stream_bytes / w;
}

uint64_t SampleDirectory::token_stream_offset() const {
  return token_width() == 0 ? 0 : compact_->layout().token_stream_begin;
}

uint32_t SampleDirectory::token_check_shift() const {
  return token_width() == 0 ? 0 : compact_->layout().check_shift;
}

uint64_t SampleDirectory::token_chunk_count() const {
  return token_width() == 0 ? 0 : compact_->layout().token_chunks;
}

Result<uint32_t> SampleDirectory::TokenCheck(uint64_t chunk) const {
  if (token_width() == 0) return NotTokens();
  return compact_->TokenCheck(chunk);
}

Result<uint64_t> SampleDirectory::DocumentStart(uint64_t document) const {
  if (token_width() == 0) return NotTokens();
  return compact_->DocumentStart(document);
}

Result<uint64_t> SampleDirectory::DocumentAt(uint64_t token) const {
  if (token_width() == 0) return NotTokens();
  return compact_->DocumentAt(token);
}

std::string_view SampleDirectory::class_name(uint64_t c) const {
  if (compact_) return compact_->layout().class_name(c);
  return String(classes_[c].name_offset, classes_[c].name_length);
}

std::optional<uint64_t> SampleDirectory::FindChildDir(const DirEntry& d,
                                                      std::string_view name) const {
  return format::FindByName(d.first_child, d.child_count, name,
                            [this](uint64_t k) { return dir_name(k); });
}

std::optional<uint64_t> SampleDirectory::FindSample(const DirEntry& d,
                                                    std::string_view name) const {
  return format::FindByName(d.first_sample, d.sample_count, name,
                            [this](uint64_t i) { return this->name(i); });
}

Result<PathEntry> SampleDirectory::Resolve(std::string_view path) const {
  if (compact_) {
    // Normalized: the components joined by single slashes.
    std::string norm;
    size_t pos = 0;
    while (pos < path.size()) {
      while (pos < path.size() && path[pos] == '/') ++pos;
      size_t end = path.find('/', pos);
      if (end == path.npos) end = path.size();
      if (end > pos) {
        if (!norm.empty()) norm += '/';
        norm.append(path.substr(pos, end - pos));
      }
      pos = end;
    }
    if (norm.empty()) return PathEntry{true, 0};
    if (!compact_->layout().has_names()) {
      // Samples without names are "#<index>".
      uint64_t i = 0;
      const char* first = norm.data() + 1;
      const char* last = norm.data() + norm.size();
      const auto [end, ec] = std::from_chars(first, last, i);
      if (norm.size() > 1 && norm[0] == '#' && ec == std::errc() && end == last &&
          i < sample_count_ && std::to_string(i) == norm.substr(1)) {
        return PathEntry{false, i};
      }
      return Status::NotFound("no sample or directory '" + std::string(path) +
                              "' (the volume's samples have no names: '#<index>' names them)");
    }
    DLFS_ASSIGN_OR_RETURN(const std::optional<uint64_t> sample, compact_->FindSample(norm));
    if (sample) return PathEntry{false, *sample};
    DLFS_ASSIGN_OR_RETURN(const std::optional<uint64_t> d, compact_->FindDir(norm));
    if (d) return PathEntry{true, *d};
    return Status::NotFound("no sample or directory '" + std::string(path) + "'");
  }
  if (dirs_ == nullptr) return Status::NotFound("empty directory");
  uint64_t cur = 0;
  size_t pos = 0;
  while (true) {
    while (pos < path.size() && path[pos] == '/') ++pos;
    if (pos == path.size()) return PathEntry{true, cur};
    size_t end = path.find('/', pos);
    if (end == path.npos) end = path.size();
    const std::string_view component = path.substr(pos, end - pos);
    const DirEntry& info = dirs_[cur];
    if (const std::optional<uint64_t> child = FindChildDir(info, component)) {
      cur = *child;
      pos = end;
      continue;
    }
    size_t rest = end;
    while (rest < path.size() && path[rest] == '/') ++rest;
    if (rest == path.size()) {
      if (const std::optional<uint64_t> sample = FindSample(info, component)) {
        return PathEntry{false, *sample};
      }
    }
    return Status::NotFound("no sample or directory '" + std::string(path) + "'");
  }
}

std::vector<uint64_t> SampleDirectory::SamplesUnder(uint64_t d) const {
  std::vector<uint64_t> out;
  if (compact_) {
    if (d == 0 || !compact_->CheckTree().ok()) {
      if (d == 0) {
        out.resize(sample_count_);
        for (uint64_t i = 0; i < sample_count_; ++i) out[i] = i;
      }
      return out;
    }
    const format::TreeEntry& e = compact_->layout().tree[d];
    out.reserve(e.position_count);
    for (uint64_t p = e.first_position; p < e.first_position + e.position_count; ++p) {
      Result<uint64_t> i = compact_->IndexAt(p);
      if (!i.ok()) return {};
      out.push_back(*i);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  std::vector<uint64_t> pending{d};
  while (!pending.empty()) {
    const DirEntry& info = dirs_[pending.back()];
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

std::string_view SampleDirectory::field_name(uint32_t f) const {
  if (field_count_ == 0) return {};
  return String(fields_[f].name_offset, fields_[f].name_length);
}

std::optional<uint32_t> SampleDirectory::FindField(std::string_view name) const {
  const auto found = format::FindByName(
      0, field_count(), name, [this](uint64_t f) { return field_name(static_cast<uint32_t>(f)); });
  if (!found) return std::nullopt;
  return static_cast<uint32_t>(*found);
}

std::vector<FieldInfo> SampleDirectory::Fields(uint64_t i) const {
  std::vector<FieldInfo> out;
  if (field_index_ == nullptr) {
    // No fields feature, or the single layout: the whole sample is field 0.
    const SampleInfo s = sample(i);
    out.push_back(FieldInfo{0, 0, s.length, s.crc32c, s.length, FieldCodec::kNone});
    return out;
  }
  uint32_t offset = 0;
  for (uint32_t r = field_index_[i]; r < field_index_[i + 1]; ++r) {
    const format::FieldRecord& rec = records_[r];
    out.push_back(FieldInfo{rec.field, offset, rec.stored_length, rec.crc32c, rec.decoded_length,
                            static_cast<FieldCodec>(rec.codec)});
    offset += rec.stored_length;
  }
  return out;
}

std::optional<FieldInfo> SampleDirectory::Field(uint64_t i, uint32_t field) const {
  if (field_index_ == nullptr) {
    if (field != 0) return std::nullopt;
    const SampleInfo s = sample(i);
    return FieldInfo{0, 0, s.length, s.crc32c, s.length, FieldCodec::kNone};
  }
  uint32_t offset = 0;
  for (uint32_t r = field_index_[i]; r < field_index_[i + 1]; ++r) {
    const format::FieldRecord& rec = records_[r];
    if (rec.field == field) {
      return FieldInfo{rec.field,          offset,
                       rec.stored_length,  rec.crc32c,
                       rec.decoded_length, static_cast<FieldCodec>(rec.codec)};
    }
    offset += rec.stored_length;
  }
  return std::nullopt;
}

uint64_t SampleDirectory::field_instance_count() const {
  return field_index_ != nullptr ? field_index_[sample_count_] : sample_count_;
}

Result<uint64_t> SampleDirectory::Lookup(std::string_view path) const {
  DLFS_ASSIGN_OR_RETURN(PathEntry e, Resolve(path));
  if (e.is_dir) return Status::InvalidArgument("'" + std::string(path) + "' is a directory");
  return e.index;
}

}  // namespace dlfs
