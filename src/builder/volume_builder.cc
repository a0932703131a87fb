// VolumeBuilder's public calls: samples, fields, labels and their checks,
// the table of paths that refuses duplicates when they are added, and
// compression. Storing a complete sample is in store.cc, its targets in
// builder_targets.cc, Finish in finish.cc.
#include <fcntl.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <functional>
#include <optional>
#include <thread>

#include "builder/builder_impl.h"
#include "common/crc32c.h"
#include "dlfs/builder.h"

namespace dlfs {

namespace {

constexpr uint32_t kEmptySlot = 0xFFFFFFFFu;
constexpr size_t kMinPathSlots = 1024;

Status ValidateComponent(std::string_view c, std::string_view path) {
  if (c.empty() || c == "." || c == "..") {
    return Status::InvalidArgument("bad sample path '" + std::string(path) +
                                   "': empty, '.' or '..' component");
  }
  if (c.size() > 0xFFFF) {
    return Status::InvalidArgument("bad sample path '" + std::string(path) +
                                   "': component longer than 65535 bytes");
  }
  if (c.find('\0') != c.npos) {
    return Status::InvalidArgument("bad sample path: NUL byte in '" + std::string(path) + "'");
  }
  return Status::Ok();
}

// The checks of Create's arguments that need no state.
Status CheckOptions(const std::string& path, const VolumeBuilder::Options& options) {
  const uint32_t a = options.align;
  if (a == 0 || (a & (a - 1)) != 0 || a > format::kMaxDataAlignment) {
    return Status::InvalidArgument("align must be a power of two from 1 to 1 MiB, not " +
                                   std::to_string(a));
  }
  if (path.empty()) return Status::InvalidArgument("empty volume path");
  if (options.block_shift != 0 && (options.block_shift < format::kMinBlockShift ||
                                   options.block_shift > format::kMaxBlockShift)) {
    return Status::InvalidArgument("block_shift must be " + std::to_string(format::kMinBlockShift) +
                                   " to " + std::to_string(format::kMaxBlockShift) + ", not " +
                                   std::to_string(options.block_shift));
  }
  if (options.layout == DirectoryLayout::kCompact &&
      (options.compress.zstd || options.images.enabled())) {
    return Status::InvalidArgument(
        "the compact directory layout holds raw samples: compression and image preparation "
        "need the tree layout");
  }
  const uint32_t n = options.TargetCount();
  if (options.token_width != 0) {
    const auto refuse = [](const std::string& what) {
      return Status::InvalidArgument("a token volume (token_width) " + what);
    };
    if (options.token_width != 2 && options.token_width != 4) {
      return Status::InvalidArgument("token_width must be 2 (uint16) or 4 (uint32), not " +
                                     std::to_string(options.token_width));
    }
    if (options.layout == DirectoryLayout::kTree) {
      return refuse("needs the compact directory layout, not the tree layout");
    }
    if (options.compress.zstd) return refuse("holds raw token ids: no compression");
    if (options.images.enabled()) return refuse("holds token ids: no image preparation");
    if (n != 1) return refuse("has one target, not " + std::to_string(n));
    if (options.align != 1) {
      return refuse("holds its documents back to back: align must be 1, not " +
                    std::to_string(options.align));
    }
  }
  if (n > format::kMaxTargets) {
    return Status::InvalidArgument("a volume has 1 to " + std::to_string(format::kMaxTargets) +
                                   " targets, not " + std::to_string(n));
  }
  if (!options.target_paths.empty() && options.target_paths.size() != n - 1) {
    return Status::InvalidArgument(std::to_string(n) + " targets need " + std::to_string(n - 1) +
                                   " target_paths (or none), not " +
                                   std::to_string(options.target_paths.size()));
  }
  return Status::Ok();
}

}  // namespace

format::ImagesHeader VolumeBuilder::Impl::MakeImagesHeader() const {
  const ImagePrepOptions& o = options_.images;
  format::ImagesHeader h{};
  h.image_count = image_stats_.images;
  h.max_side = o.max_side;
  h.filter = o.max_side != 0 ? static_cast<uint8_t>(o.filter) : 0;
  h.mode = static_cast<uint8_t>(o.mode);
  h.jpeg_quality = static_cast<uint8_t>(o.jpeg_quality);
  h.color = static_cast<uint8_t>(o.color);
  h.flags = o.always_reencode ? format::kImageFlagAlwaysReencode : 0;
  h.smart_threshold = o.mode == ImageStoreMode::kSmart ? o.smart_threshold : 0;
  h.jpeg_probability = o.mode == ImageStoreMode::kProportion ? o.jpeg_probability : 0;
  h.seed = o.mode == ImageStoreMode::kProportion ? o.seed : 0;
  return h;
}

size_t VolumeBuilder::Impl::Probe(uint32_t dir, std::string_view name) const {
  const size_t mask = path_slots_.size() - 1;
  for (size_t i = PathHash(dir, name) & mask;; i = (i + 1) & mask) {
    const uint32_t n = path_slots_[i];
    if (n == kEmptySlot || (samples_[n].dir == dir && NameOf(samples_[n]) == name)) return i;
  }
}

std::optional<uint32_t> VolumeBuilder::Impl::FindSample(uint32_t dir, std::string_view name) const {
  if (path_slots_.empty()) return std::nullopt;
  const uint32_t n = path_slots_[Probe(dir, name)];
  if (n == kEmptySlot) return std::nullopt;
  return n;
}

void VolumeBuilder::Impl::IndexLastSample() {
  const size_t n = samples_.size();
  if (2 * n > path_slots_.size()) {
    path_slots_.assign(std::max(kMinPathSlots, std::bit_ceil(2 * n)), kEmptySlot);
    for (size_t i = 0; i + 1 < n; ++i) {
      path_slots_[Probe(samples_[i].dir, NameOf(samples_[i]))] = static_cast<uint32_t>(i);
    }
  }
  path_slots_[Probe(samples_[n - 1].dir, NameOf(samples_[n - 1]))] = static_cast<uint32_t>(n - 1);
}

std::string VolumeBuilder::Impl::DescribeSample(uint64_t n) const {
  std::string out = "sample #" + std::to_string(n);
  auto it = std::upper_bound(sources_.begin(), sources_.end(), n,
                             [](uint64_t v, const auto& s) { return v < s.first; });
  if (it != sources_.begin() && !std::prev(it)->second.empty()) {
    out += " from " + std::prev(it)->second;
  }
  return out;
}

Result<uint32_t> VolumeBuilder::Impl::DirId(std::string_view dir_path, std::string_view full) {
  auto it = dir_ids_.find(std::string(dir_path));
  if (it != dir_ids_.end()) return it->second;
  const size_t slash = dir_path.rfind('/');
  const std::string_view parent_path =
      slash == dir_path.npos ? std::string_view() : dir_path.substr(0, slash);
  const std::string_view name = slash == dir_path.npos ? dir_path : dir_path.substr(slash + 1);
  DLFS_RETURN_IF_ERROR(ValidateComponent(name, full));
  DLFS_ASSIGN_OR_RETURN(const uint32_t parent, DirId(parent_path, full));
  if (const auto sample = FindSample(parent, name)) {
    return Status::InvalidArgument("sample path '" + std::string(full) + "' needs directory '" +
                                   std::string(dir_path) + "', which was already added as " +
                                   DescribeSample(*sample));
  }
  if (dirs_.size() >= format::kNone - 1) return Status::InvalidArgument("too many directories");
  const uint32_t id = static_cast<uint32_t>(dirs_.size());
  dirs_.push_back(PendingDir{parent, names_.size(), static_cast<uint32_t>(name.size())});
  names_.append(name);
  dir_ids_.emplace(std::string(dir_path), id);
  return id;
}

uint64_t VolumeBuilder::Impl::class_count() const {
  return std::max<uint64_t>(class_names_.size(), max_label_plus_one_);
}

VolumeBuilder::VolumeBuilder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

VolumeBuilder::~VolumeBuilder() = default;

Result<std::unique_ptr<VolumeBuilder>> VolumeBuilder::Create(const std::string& path,
                                                             Options options) {
  DLFS_RETURN_IF_ERROR(CheckOptions(path, options));
  auto impl = std::make_unique<Impl>();
  DLFS_RETURN_IF_ERROR(impl->SetUpCompression(options.compress));
  if (options.images.enabled()) DLFS_RETURN_IF_ERROR(CheckImagePrepOptions(options.images));
  impl->path_ = path;
  impl->options_ = std::move(options);
  DLFS_RETURN_IF_ERROR(impl->NameTargets());
  DLFS_RETURN_IF_ERROR(impl->CreateTargets());
  const Options& o = impl->options_;
  const bool tree_only = o.compress.zstd || o.images.enabled();
  if (o.layout == DirectoryLayout::kCompact || (o.layout == DirectoryLayout::kAuto && !tree_only)) {
    const uint32_t shift = o.block_shift != 0          ? o.block_shift
                           : impl->targets_.size() > 1 ? 5
                                                       : format::kDefaultBlockShift;
    DLFS_ASSIGN_OR_RETURN(impl->compact_,
                          builder_internal::CompactWriter::Create(
                              impl->targets_[0].target->location(), o.align, shift));
    impl->layout_decided_ = o.layout == DirectoryLayout::kCompact;
    if (o.token_width != 0) {
      DLFS_RETURN_IF_ERROR(impl->compact_->SetTokens(o.token_width, format::kDefaultCheckShift));
      impl->layout_decided_ = true;  // never switched to the tree by a named field
      // Written behind: the page cache's copies overlap the next bytes'
      // checksums and records.
      for (Impl::TargetFile& tf : impl->targets_) {
        tf.behind = std::make_unique<builder_internal::WriteBehind>(
            [&tf](std::span<const std::byte> data, uint64_t offset) {
              DLFS_RETURN_IF_ERROR(Impl::WriteOut(tf, data, offset));
              // Its writeback starts now, not at Finish's fsync: the disk
              // works while the import goes on.
              if (const int fd = tf.target->fd(); fd >= 0) {
                (void)::sync_file_range(fd, static_cast<off_t>(offset),
                                        static_cast<off_t>(data.size()), SYNC_FILE_RANGE_WRITE);
              }
              return Status::Ok();
            });
      }
    }
  } else {
    impl->layout_decided_ = true;
  }
  const ImagePrepOptions& images = impl->options_.images;
  if (images.enabled()) {
    const uint32_t threads =
        images.threads != 0 ? images.threads : std::max(1u, std::thread::hardware_concurrency());
    impl->stage_ = std::make_unique<builder_internal::ImageStage>(images, threads);
  }
  return std::unique_ptr<VolumeBuilder>(new VolumeBuilder(std::move(impl)));
}

uint32_t VolumeBuilder::Options::TargetCount() const {
  return targets != 0 ? targets : 1 + static_cast<uint32_t>(target_paths.size());
}

std::vector<std::string> VolumeBuilder::Options::TargetPaths(const std::string& path) const {
  std::vector<std::string> paths = {path};
  for (uint32_t t = 1; t < std::min(TargetCount(), format::kMaxTargets); ++t) {
    if (target_paths.empty()) {
      paths.push_back(DefaultTargetPath(path, t));
    } else if (t <= target_paths.size()) {
      paths.push_back(target_paths[t - 1]);
    }
  }
  return paths;
}

std::string VolumeBuilder::DefaultTargetPath(const std::string& path, uint32_t target) {
  return target == 0 ? path : path + ".t" + std::to_string(target);
}

void VolumeBuilder::SetClassNames(std::vector<std::string> names) {
  impl_->class_names_ = std::move(names);
}

void VolumeBuilder::SetSourceName(std::string name) {
  auto& sources = impl_->sources_;
  const uint64_t first = sample_count();
  if (!sources.empty() && sources.back().first == first) {
    sources.back().second = std::move(name);
  } else {
    sources.emplace_back(first, std::move(name));
  }
}

Status VolumeBuilder::Add(std::string_view path, std::span<const std::byte> data, uint32_t label) {
  DLFS_RETURN_IF_ERROR(BeginSample(path, label));
  Status st = Append(data);
  if (!st.ok()) {
    AbortSample();
    return st;
  }
  return EndSample();
}

namespace {

// A label must not size the class table (format::kLabelLimit says why).
bool LabelTooLarge(uint32_t label) {
  return label != format::kNone && label >= format::kLabelLimit;
}

// `sample` names it, e.g. "sample 'cat/1.jpg'" (built only on failure: Add is
// on pack's per-sample path).
Status LabelError(const std::string& sample, uint32_t label) {
  return Status::InvalidArgument(sample + " has label " + std::to_string(label) +
                                 ": labels must be below " + std::to_string(format::kLabelLimit));
}

}  // namespace

Status VolumeBuilder::BeginSample(std::string_view path, uint32_t label) {
  Impl& m = *impl_;
  if (m.closed_) return Status::InvalidArgument("builder already finished");
  if (m.in_sample_) return Status::InvalidArgument("BeginSample while a sample is open");
  if (LabelTooLarge(label)) return LabelError("sample '" + std::string(path) + "'", label);
  if (m.compact_) return m.BeginCompactSample(path, label);
  // Components are checked below; a leading '/' would otherwise vanish with
  // the empty component before it ("/etc/x" stored as "etc/x").
  if (path.starts_with('/')) {
    return Status::InvalidArgument("bad sample path '" + std::string(path) +
                                   "': absolute (paths in a volume are relative)");
  }
  const size_t slash = path.rfind('/');
  const std::string_view dir = slash == path.npos ? std::string_view() : path.substr(0, slash);
  const std::string_view name = slash == path.npos ? path : path.substr(slash + 1);
  DLFS_RETURN_IF_ERROR(ValidateComponent(name, path));
  if (m.dir_ids_.contains(std::string(path))) {
    return Status::InvalidArgument("sample path '" + std::string(path) +
                                   "' is already a directory of the volume");
  }
  DLFS_ASSIGN_OR_RETURN(const uint32_t dir_id, m.DirId(dir, path));
  if (const auto earlier = m.FindSample(dir_id, name)) {
    return Status::InvalidArgument("duplicate sample path '" + std::string(path) +
                                   "' (already added as " + m.DescribeSample(*earlier) + ")");
  }
  if (m.samples_.size() >= format::kNone - 1) return Status::InvalidArgument("too many samples");
  // A sample held for dictionary training or image preparation is placed
  // when it is written.
  const bool held = m.training_ || m.stage_;
  const uint32_t target = held ? 0 : m.PickTarget();
  Impl::TargetFile& tf = m.targets_[target];
  if (!held) DLFS_RETURN_IF_ERROR(m.Pad(tf, m.options_.align));
  if (m.stage_) m.cur_path_ = path;
  m.cur_ = PendingSample{held ? 0 : tf.Tell(),
                         target,
                         0,
                         0,
                         label,
                         dir_id,
                         m.names_.size(),
                         static_cast<uint32_t>(name.size()),
                         0,
                         m.fields_.size()};
  m.names_.append(name);
  m.in_sample_ = true;
  return Status::Ok();
}

Status VolumeBuilder::Append(std::span<const std::byte> data) {
  Impl& m = *impl_;
  if (!m.in_sample_) return Status::InvalidArgument("Append without BeginSample");
  if (m.compact_) {
    DLFS_RETURN_IF_ERROR(m.WriteBytes(m.cur_, nullptr, data));
    if (m.compact_->token_width() != 0) m.compact_->FeedTokens(data);
    return Status::Ok();
  }
  if (!m.in_field_) {
    if (m.cur_.field_count != 0) {
      return Status::InvalidArgument("Append outside a field of a sample that has fields");
    }
    DLFS_RETURN_IF_ERROR(BeginField(""));
    m.implicit_field_ = true;
  }
  if (m.options_.compress.zstd || m.stage_) {
    if (data.size() > uint64_t{0xFFFFFFFFu} - m.field_buf_.size()) {
      return Status::InvalidArgument("field larger than 4 GiB - 1 bytes");
    }
    m.field_buf_.insert(m.field_buf_.end(), data.begin(), data.end());
    return Status::Ok();
  }
  DLFS_RETURN_IF_ERROR(m.WriteSampleBytes(data));
  m.cur_field_.decoded_length = m.cur_field_.stored_length;
  return Status::Ok();
}

Status VolumeBuilder::BeginField(std::string_view name) {
  Impl& m = *impl_;
  if (!m.in_sample_) return Status::InvalidArgument("BeginField without BeginSample");
  if (m.in_field_) return Status::InvalidArgument("BeginField while a field is open");
  if (m.compact_ && !name.empty()) {
    if (m.layout_decided_ || m.compact_->count() != 0 || m.cur_.length != 0) {
      return Status::InvalidArgument(
          "field '" + std::string(name.substr(0, 80)) +
          "': the compact directory layout holds one unnamed field per sample; write samples "
          "with fields in the tree layout");
    }
    const std::string path = std::move(m.cur_compact_path_);
    const uint32_t label = m.cur_.label;
    m.SwitchToTree();
    DLFS_RETURN_IF_ERROR(BeginSample(path, label));
  }
  if (m.compact_) {
    m.in_field_ = true;  // the unnamed field: the sample's bytes as they come
    return Status::Ok();
  }
  if (name.size() > 0xFFFF || name.find('/') != name.npos || name.find('\0') != name.npos) {
    return Status::InvalidArgument("bad field name '" + std::string(name.substr(0, 80)) +
                                   "' (at most 65535 bytes, no '/' or NUL)");
  }
  auto [it, fresh] =
      m.field_ids_.try_emplace(std::string(name), static_cast<uint32_t>(m.field_names_.size()));
  if (fresh) {
    if (m.field_names_.size() >= format::kMaxFields) {
      m.field_ids_.erase(it);
      return Status::InvalidArgument("more than 65535 field names in one volume");
    }
    m.field_names_.emplace_back(name);
  }
  for (uint64_t k = m.cur_.first_field; k < m.fields_.size(); ++k) {
    if (m.fields_[k].field == it->second) {
      return Status::InvalidArgument("field '" + std::string(name) + "' added twice to one sample");
    }
  }
  m.in_field_ = true;
  m.implicit_field_ = false;
  m.cur_field_ = format::TreeField{it->second, 0, 0, 0, 0};
  m.field_buf_.clear();
  return Status::Ok();
}

Status VolumeBuilder::EndField() {
  Impl& m = *impl_;
  if (!m.in_field_) return Status::InvalidArgument("EndField without BeginField");
  if (m.compact_) {
    m.in_field_ = false;
    return Status::Ok();
  }
  if (m.stage_) {
    // Held raw until the sample goes to the stage (EndSample).
    std::string name = m.field_names_[m.cur_field_.field];
    const bool image = IsImageField(name);
    const uint64_t given = m.field_buf_.size();
    m.cur_fields_.push_back(
        {m.fields_.size(), std::move(name), image, std::move(m.field_buf_), given, {}});
    m.field_buf_.clear();
  } else if (m.training_) {
    // Held raw until the dictionary is trained (TrainAndWrite).
    m.cur_field_.decoded_length = static_cast<uint32_t>(m.field_buf_.size());
    m.held_bytes_ += m.field_buf_.size();
    m.held_.push_back(std::move(m.field_buf_));
    m.field_buf_.clear();
  } else if (m.options_.compress.zstd) {
    const std::vector<std::byte> raw = std::move(m.field_buf_);
    m.field_buf_.clear();
    DLFS_RETURN_IF_ERROR(m.StoreField(m.cur_, m.cur_field_, raw));
  }
  m.in_field_ = false;
  m.implicit_field_ = false;
  m.fields_.push_back(m.cur_field_);
  ++m.cur_.field_count;
  return Status::Ok();
}

Status VolumeBuilder::AddField(std::string_view name, std::span<const std::byte> data) {
  DLFS_RETURN_IF_ERROR(BeginField(name));
  DLFS_RETURN_IF_ERROR(Append(data));
  return EndField();
}

Result<VolumeBuilder::Options::Compression> ParseCompression(std::string_view spec,
                                                             bool train_dictionary) {
  VolumeBuilder::Options::Compression c;
  const size_t colon = spec.find(':');
  if (spec.empty() || spec == "none") {
    c.zstd = false;
  } else if (spec.substr(0, colon) == "zstd") {
    c.zstd = true;
    if (colon != spec.npos) {
      int level = 0;
      const auto [end, ec] =
          std::from_chars(spec.data() + colon + 1, spec.data() + spec.size(), level);
      if (ec != std::errc() || end != spec.data() + spec.size() || level < 1 || level > 22) {
        return Status::InvalidArgument("compression '" + std::string(spec) +
                                       "': the zstd level is 1..22");
      }
      c.level = level;
    }
  } else {
    return Status::InvalidArgument("compression '" + std::string(spec) +
                                   "': only zstd[:LEVEL] (or none) is supported");
  }
  if (train_dictionary && !c.zstd) {
    return Status::InvalidArgument("a trained dictionary needs zstd compression");
  }
  c.train_dictionary = train_dictionary;
  return c;
}

Result<std::vector<std::byte>> VolumeBuilder::TrainDictionary(
    const std::vector<std::vector<std::byte>>& samples, size_t max_bytes) {
  return format::TrainZstdDictionary(samples, max_bytes);
}

Status VolumeBuilder::EndSample() {
  Impl& m = *impl_;
  if (!m.in_sample_) return Status::InvalidArgument("EndSample without BeginSample");
  if (m.compact_) {
    if (m.in_field_) return Status::InvalidArgument("EndSample with a field still open");
    return m.EndCompactSample();
  }
  if (m.in_field_ && !m.implicit_field_) {
    return Status::InvalidArgument("EndSample with a field still open");
  }
  if (m.in_field_) DLFS_RETURN_IF_ERROR(EndField());
  // A sample given no bytes at all is one empty unnamed field, like v1's
  // empty sample.
  if (m.cur_.field_count == 0) DLFS_RETURN_IF_ERROR(AddField("", {}));
  m.in_sample_ = false;
  m.samples_.push_back(m.cur_);
  m.IndexLastSample();
  if (m.cur_.label != format::kNone) {
    m.max_label_plus_one_ = std::max(m.max_label_plus_one_, m.cur_.label + 1);
  }
  if (m.stage_) {
    m.dropped_.push_back(false);
    builder_internal::PrepSample p;
    p.sample = m.samples_.size() - 1;
    p.path = std::move(m.cur_path_);
    if (!m.sources_.empty()) p.source = m.sources_.back().second;
    p.fields = std::move(m.cur_fields_);
    m.cur_fields_.clear();
    return m.SubmitPrepared(std::move(p));
  }
  m.data_bytes_ += m.cur_.length;
  if (m.training_ && (m.held_bytes_ >= m.options_.compress.training_bytes ||
                      m.held_.size() >= m.options_.compress.training_fields)) {
    return m.TrainAndWrite();
  }
  return Status::Ok();
}

void VolumeBuilder::AbortSample() {
  Impl& m = *impl_;
  if (!m.in_sample_) return;
  m.in_sample_ = false;
  m.in_field_ = false;
  m.implicit_field_ = false;
  if (m.compact_) {
    Impl::Rewind(m.targets_[m.cur_.target], m.cur_.offset);
    if (m.compact_->token_width() != 0) m.compact_->DropTokenBytes();
    return;
  }
  m.field_buf_.clear();
  m.fields_.resize(m.cur_.first_field);
  m.names_.resize(m.cur_.name_offset);
  if (m.stage_) {
    m.cur_fields_.clear();  // nothing was written
  } else if (m.training_) {
    for (size_t k = m.cur_.first_field; k < m.held_.size(); ++k) m.held_bytes_ -= m.held_[k].size();
    m.held_.resize(m.cur_.first_field);
  } else {
    Impl::Rewind(m.targets_[m.cur_.target], m.cur_.offset);
  }
}

Status VolumeBuilder::SetLabel(uint64_t n, uint32_t label) {
  Impl& m = *impl_;
  if (m.closed_) return Status::InvalidArgument("builder already finished");
  if (m.compact_) {
    if (LabelTooLarge(label)) return LabelError("sample " + std::to_string(n), label);
    DLFS_RETURN_IF_ERROR(m.compact_->SetLabel(n, label));
    if (label != format::kNone) m.max_label_plus_one_ = std::max(m.max_label_plus_one_, label + 1);
    return Status::Ok();
  }
  if (n >= m.samples_.size()) {
    return Status::InvalidArgument("SetLabel: no sample " + std::to_string(n) + " (" +
                                   std::to_string(m.samples_.size()) + " added)");
  }
  if (LabelTooLarge(label)) return LabelError("sample " + std::to_string(n), label);
  m.samples_[n].label = label;
  // Not lowered when a label is replaced: class_count() never shrinks.
  if (label != format::kNone) m.max_label_plus_one_ = std::max(m.max_label_plus_one_, label + 1);
  return Status::Ok();
}

uint64_t VolumeBuilder::sample_count() const {
  return impl_->compact_ ? impl_->compact_->count() : impl_->samples_.size();
}

DirectoryLayout VolumeBuilder::layout() const {
  if (!impl_->layout_decided_) return DirectoryLayout::kAuto;
  return impl_->compact_ ? DirectoryLayout::kCompact : DirectoryLayout::kTree;
}

Status VolumeBuilder::Impl::BeginCompactSample(std::string_view path, uint32_t label) {
  if (compact_->token_width() != 0 && !path.empty()) {
    return Status::InvalidArgument("document '" + std::string(path) +
                                   "': a token volume's documents have no names (they are "
                                   "addressed by index; give \"\")");
  }
  if (path.starts_with('/')) {
    return Status::InvalidArgument("bad sample path '" + std::string(path) +
                                   "': absolute (paths in a volume are relative)");
  }
  const uint32_t target = compact_->AtBlockStart() ? PickTarget() : compact_->block_target();
  TargetFile& tf = targets_[target];
  DLFS_RETURN_IF_ERROR(Pad(tf, options_.align));
  cur_ = PendingSample{};
  cur_.offset = tf.Tell();
  cur_.target = target;
  cur_.label = label;
  cur_compact_path_.assign(path);
  in_sample_ = true;
  return Status::Ok();
}

Status VolumeBuilder::Impl::EndCompactSample() {
  Status st = compact_->Add(static_cast<uint16_t>(cur_.target), cur_.offset, cur_.length,
                            cur_.crc32c, cur_.label, cur_compact_path_);
  in_sample_ = false;
  if (!st.ok()) {
    Rewind(targets_[cur_.target], cur_.offset);
    if (compact_->token_width() != 0) compact_->DropTokenBytes();
    return st;
  }
  layout_decided_ = true;
  data_bytes_ += cur_.length;
  if (cur_.label != format::kNone) {
    max_label_plus_one_ = std::max(max_label_plus_one_, cur_.label + 1);
  }
  return Status::Ok();
}

void VolumeBuilder::Impl::SwitchToTree() {
  // Only the first sample is open and nothing of it is written: the caller
  // begins it again in the tree layout, at the same place.
  Rewind(targets_[cur_.target], cur_.offset);
  compact_.reset();
  layout_decided_ = true;
  in_sample_ = false;
}

Status VolumeBuilder::AddBatch(std::span<const std::byte> data, std::span<const uint64_t> lengths,
                               std::span<const uint32_t> labels,
                               std::span<const std::string_view> paths) {
  Impl& m = *impl_;
  if (!labels.empty() && labels.size() != lengths.size()) {
    return Status::InvalidArgument("AddBatch: " + std::to_string(labels.size()) + " labels for " +
                                   std::to_string(lengths.size()) + " samples");
  }
  if (!paths.empty() && paths.size() != lengths.size()) {
    return Status::InvalidArgument("AddBatch: " + std::to_string(paths.size()) + " paths for " +
                                   std::to_string(lengths.size()) + " samples");
  }
  uint64_t total = 0;
  for (const uint64_t l : lengths) {
    if (l > data.size() - std::min<uint64_t>(total, data.size())) {
      return Status::InvalidArgument("AddBatch: the lengths add up to more than the " +
                                     std::to_string(data.size()) + " bytes given");
    }
    total += l;
  }
  if (total != data.size()) {
    return Status::InvalidArgument("AddBatch: the lengths add up to " + std::to_string(total) +
                                   " bytes, not the " + std::to_string(data.size()) + " given");
  }
  if (m.closed_) return Status::InvalidArgument("builder already finished");
  if (m.in_sample_) return Status::InvalidArgument("AddBatch while a sample is open");
  if (m.compact_ && m.compact_->token_width() != 0)
    return m.AddDocuments(data, lengths, labels, paths);
  uint64_t at = 0;
  for (size_t k = 0; k < lengths.size(); ++k) {
    const std::span<const std::byte> bytes = data.subspan(at, lengths[k]);
    const std::string_view path = paths.empty() ? std::string_view() : paths[k];
    const uint32_t label = labels.empty() ? kNoLabel : labels[k];
    DLFS_RETURN_IF_ERROR(m.compact_ ? m.AddCompact(path, bytes, label) : Add(path, bytes, label));
    at += lengths[k];
  }
  return Status::Ok();
}

// A token volume's AddBatch: every document checked first, then their bytes
// written and fed to the chunk sums, and their records added, a slice of
// documents at a time (nothing per document but its CRC and its record).
Status VolumeBuilder::Impl::AddDocuments(std::span<const std::byte> data,
                                         std::span<const uint64_t> lengths,
                                         std::span<const uint32_t> labels,
                                         std::span<const std::string_view> paths) {
  const uint32_t width = compact_->token_width();
  for (size_t k = 0; k < paths.size(); ++k) {
    if (!paths[k].empty()) {
      return Status::InvalidArgument("document '" + std::string(paths[k]) +
                                     "': a token volume's documents have no names (they are "
                                     "addressed by index)");
    }
  }
  uint64_t bad = 0;
  for (const uint64_t l : lengths) bad |= l % width;
  if (bad != 0 ||
      std::any_of(lengths.begin(), lengths.end(), [](uint64_t l) { return l > 0xFFFFFFFFull; })) {
    for (size_t k = 0; k < lengths.size(); ++k) {
      if (lengths[k] % width != 0 || lengths[k] > 0xFFFFFFFFull) {
        return Status::InvalidArgument(
            "document #" + std::to_string(compact_->count() + k) + " of " +
            std::to_string(lengths[k]) + " bytes is " +
            (lengths[k] % width != 0 ? "not whole tokens of " + std::to_string(width) + " bytes"
                                     : "4 GiB or larger"));
      }
    }
  }
  uint32_t max_label = 0;
  for (size_t k = 0; k < labels.size(); ++k) {
    if (labels[k] == kNoLabel) continue;
    if (LabelTooLarge(labels[k])) {
      return LabelError("document #" + std::to_string(compact_->count() + k), labels[k]);
    }
    max_label = std::max(max_label, labels[k] + 1);
  }
  // The bytes in one write (straight from `data` when large), then the
  // records a slice of documents at a time, so that what is kept per
  // document (its CRC until its record is made) stays bounded whatever the
  // batch. A slice that fails leaves the slices before it added.
  TargetFile& tf = targets_[0];
  uint64_t offset = tf.Tell();
  if (Status st = Write(tf, data); !st.ok()) {
    Rewind(tf, offset);
    return st;
  }
  constexpr size_t kSlice = 1u << 16;
  const std::byte* p = data.data();
  for (size_t first = 0; first < lengths.size(); first += kSlice) {
    const size_t n = std::min(kSlice, lengths.size() - first);
    crcs_.resize(n);
    const std::byte* begin = p;
    for (size_t k = 0; k < n; ++k) {
      crcs_[k] = crc32c::Value(p, lengths[first + k]);
      p += lengths[first + k];
    }
    const std::span<const std::byte> bytes(begin, static_cast<size_t>(p - begin));
    compact_->FeedTokens(bytes);
    Status st = compact_->AddDocuments(offset, lengths.subspan(first, n), crcs_,
                                       labels.empty() ? labels : labels.subspan(first, n));
    if (!st.ok()) {
      Rewind(tf, offset);
      compact_->DropTokenBytes();
      return st;
    }
    layout_decided_ = true;
    data_bytes_ += bytes.size();
    offset += bytes.size();
  }
  max_label_plus_one_ = std::max(max_label_plus_one_, max_label);
  return Status::Ok();
}

// Add's path for the compact layout without its steps (BeginSample,
// Append, EndSample): AddBatch's loop, 10-20x fewer instructions per small
// sample.
Status VolumeBuilder::Impl::AddCompact(std::string_view path, std::span<const std::byte> bytes,
                                       uint32_t label) {
  if (LabelTooLarge(label)) {
    return LabelError(path.empty() ? "sample #" + std::to_string(compact_->count())
                                   : "sample '" + std::string(path) + "'",
                      label);
  }
  if (path.starts_with('/')) {
    return Status::InvalidArgument("bad sample path '" + std::string(path) +
                                   "': absolute (paths in a volume are relative)");
  }
  const uint32_t target = compact_->AtBlockStart() ? PickTarget() : compact_->block_target();
  TargetFile& tf = targets_[target];
  if (options_.align > 1) DLFS_RETURN_IF_ERROR(Pad(tf, options_.align));
  const uint64_t offset = tf.Tell();
  const uint32_t crc = crc32c::Value(bytes.data(), bytes.size());
  DLFS_RETURN_IF_ERROR(Write(tf, bytes));
  Status st = compact_->Add(static_cast<uint16_t>(target), offset, bytes.size(), crc, label, path);
  if (!st.ok()) {
    Rewind(tf, offset);
    return st;
  }
  layout_decided_ = true;
  data_bytes_ += bytes.size();
  if (label != format::kNone) max_label_plus_one_ = std::max(max_label_plus_one_, label + 1);
  return Status::Ok();
}
uint64_t VolumeBuilder::data_bytes() const { return impl_->data_bytes_; }
const ImagePrepStats& VolumeBuilder::image_stats() const { return impl_->image_stats_; }
uint64_t VolumeBuilder::dictionary_bytes() const {
  return impl_->options_.compress.dictionary.size();
}
uint64_t VolumeBuilder::class_count() const { return impl_->class_count(); }
const std::string& VolumeBuilder::path() const { return impl_->path_; }
const std::string& VolumeBuilder::temp_path() const { return impl_->targets_[0].temp_path; }
const std::vector<std::string>& VolumeBuilder::removed_temporaries() const {
  return impl_->removed_temporaries_;
}
std::vector<std::string> VolumeBuilder::target_paths() const {
  std::vector<std::string> out;
  for (const Impl::TargetFile& t : impl_->targets_) out.push_back(t.path);
  return out;
}
std::vector<std::string> VolumeBuilder::temp_paths() const {
  std::vector<std::string> out;
  for (const Impl::TargetFile& t : impl_->targets_) out.push_back(t.temp_path);
  return out;
}

}  // namespace dlfs
