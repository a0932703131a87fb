// VolumeBuilder::Finish, step by step (docs/format.md §6): end the data
// regions, order and encode the directory, describe the volume, seal every
// target, then publish them, target 0 last.
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <numeric>

#include "builder/builder_impl.h"
#include "common/crc32c.h"
#include "format/superblock.h"

namespace dlfs {

namespace {

// docs/format.md §6 steps 5-7 (§6.1 for an export) on one target whose
// sealed superblock is `own`: sized to its volume_size (which drops what
// an aborted sample left past the end of a file, and checks an export is
// large enough), the data and then the copy at the end made durable, and
// the primary written last. A target whose primary is valid then has all
// of its bytes durable, even before it is published.
Status SealTarget(io_internal::Target& target, const format::Superblock& own) {
  DLFS_RETURN_IF_ERROR(
      target.Resize(own.volume_size, "target " + std::to_string(own.target_index)));
  DLFS_RETURN_IF_ERROR(target.Sync());
  DLFS_RETURN_IF_ERROR(target.Write(&own, sizeof own, own.volume_size - sizeof own));
  DLFS_RETURN_IF_ERROR(target.Sync());
  DLFS_RETURN_IF_ERROR(target.Write(&own, sizeof own, 0));
  return target.Sync();
}

}  // namespace

Status VolumeBuilder::Finish() {
  Impl& m = *impl_;
  if (m.closed_) return Status::InvalidArgument("builder already finished");
  Status st = m.Finish();
  m.closed_ = true;
  // Closed either way; one not published (Finish failed) takes its
  // temporary file with it.
  for (Impl::TargetFile& t : m.targets_) {
    t.behind.reset();  // its thread writes to the target
    t.target.reset();
  }
  return st;
}

// Finish in steps, each leaving the targets as the next expects. Any
// failure leaves no published target: VolumeBuilder::Finish then closes
// them, which removes the temporary files.
Status VolumeBuilder::Impl::Finish() {
  if (in_sample_) return Status::InvalidArgument("Finish with a sample still open");
  if (compact_) return FinishCompact();
  // Every sample back from image preparation (an error fails the volume,
  // and names every sample left out that no Add named).
  if (stage_) {
    DLFS_RETURN_IF_ERROR(TakePrepared(/*all=*/true));
    if (!unreported_.empty()) {
      Status first = NextUnreported();
      std::string message = first.message();
      for (; !unreported_.empty(); unreported_.pop_front()) {
        message += "; " + unreported_.front().message();
      }
      return Status(first.code(), message);
    }
  }
  // A volume smaller than the training set: trained on all of it.
  if (training_ && !samples_.empty()) DLFS_RETURN_IF_ERROR(TrainAndWrite());
  if (stage_) RemoveDropped();
  DLFS_ASSIGN_OR_RETURN(Layout layout, EndDataRegions());
  // Order: the canonical order, refusing paths no directory can hold.
  const format::DirectoryTree tree = Tree();
  incompat_flags_ = IncompatFlags(tree);
  DLFS_ASSIGN_OR_RETURN(const format::DirectoryOrder order, format::OrderDirectory(tree));
  // Encode: the directory region, after target 0's data.
  DLFS_RETURN_IF_ERROR(WriteDirectory(tree, order, &layout));
  // Seal: every target complete and durable under its temporary name ...
  DLFS_ASSIGN_OR_RETURN(const format::Superblock sb, Describe(layout));
  DLFS_RETURN_IF_ERROR(Seal(sb));
  // ... before any of them is published.
  return Publish();
}

// The compact layout (docs/format.md §10): the directory was collected while
// the samples streamed; it is laid out after target 0's data, then the
// volume is sealed and published as any other.
Status VolumeBuilder::Impl::FinishCompact() {
  DLFS_ASSIGN_OR_RETURN(Layout layout, EndDataRegions());
  TargetFile& target0 = targets_[0];
  DLFS_ASSIGN_OR_RETURN(
      const builder_internal::CompactWriter::Region region,
      compact_->Finish(class_names_, class_count(),
                       [&](std::span<const std::byte> bytes) { return Write(target0, bytes); }));
  layout.dir_length = region.length;
  layout.dir_crc32c = region.header_crc32c;
  compact_dir_count_ = region.dir_count;
  DLFS_RETURN_IF_ERROR(Pad(target0, format::kRegionAlignment));
  DLFS_RETURN_IF_ERROR(Flush(target0));
  DLFS_ASSIGN_OR_RETURN(const format::Superblock sb, Describe(layout));
  DLFS_RETURN_IF_ERROR(Seal(sb));
  return Publish();
}

Result<VolumeBuilder::Impl::Layout> VolumeBuilder::Impl::EndDataRegions() {
  // Every target's data region runs from 4096 to the end of its last sample;
  // target 0's directory region follows its data, on the next 4096 boundary.
  Layout layout;
  for (TargetFile& t : targets_) {
    layout.data_end.push_back(t.Tell());
    DLFS_RETURN_IF_ERROR(Pad(t, format::kRegionAlignment));
    DLFS_RETURN_IF_ERROR(Flush(t));
  }
  layout.dir_offset = targets_[0].Tell();
  return layout;
}

format::DirectoryTree VolumeBuilder::Impl::Tree() {
  format::DirectoryTree tree{names_, dirs_, samples_, class_names_, class_count()};
  if (stage_) {
    images_header_ = MakeImagesHeader();
    tree.images = &images_header_;
    tree.image_records = image_records_;
  }
  // A volume of whole raw samples (one unnamed raw field each) is format v1.
  bool v1 = field_names_.empty() || (field_names_.size() == 1 && field_names_[0].empty());
  for (const format::TreeField& f : fields_) v1 = v1 && f.codec == 0;
  for (const PendingSample& s : samples_) v1 = v1 && s.field_count == 1;
  if (v1) return tree;
  // Field ids become positions in the sorted name table (§4.8.2).
  std::vector<uint32_t> order(field_names_.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return field_names_[a] < field_names_[b]; });
  std::vector<uint32_t> new_id(order.size());
  std::vector<std::string> sorted;
  for (uint32_t k = 0; k < order.size(); ++k) {
    new_id[order[k]] = k;
    sorted.push_back(field_names_[order[k]]);
  }
  for (format::TreeField& f : fields_) f.field = new_id[f.field];
  for (format::TreeImage& r : image_records_) r.field = static_cast<uint16_t>(new_id[r.field]);
  field_names_ = std::move(sorted);
  field_ids_.clear();
  tree.with_fields = true;
  tree.field_names = field_names_;
  tree.fields = fields_;
  if (dict_used_) tree.dictionary = options_.compress.dictionary;
  return tree;
}

uint32_t VolumeBuilder::Impl::IncompatFlags(const format::DirectoryTree& tree) const {
  if (!tree.with_fields) return 0;
  uint32_t flags = format::kIncompatFields;
  for (const format::TreeField& f : fields_) {
    if (f.codec != 0) flags |= format::kIncompatZstd;
  }
  return flags;
}

Status VolumeBuilder::Impl::WriteDirectory(const format::DirectoryTree& tree,
                                           const format::DirectoryOrder& order, Layout* layout) {
  DLFS_ASSIGN_OR_RETURN(const std::vector<std::byte> region, format::EncodeDirectory(tree, order));
  layout->dir_length = region.size();
  layout->dir_crc32c = crc32c::Value(region.data(), region.size());
  TargetFile& target0 = targets_[0];
  DLFS_RETURN_IF_ERROR(Write(target0, region));
  DLFS_RETURN_IF_ERROR(Pad(target0, format::kRegionAlignment));
  return Flush(target0);
}

Result<format::Superblock> VolumeBuilder::Impl::Describe(const Layout& layout) const {
  // One superblock describes the whole volume; each target gets a copy that
  // differs only in target_index and volume_size (docs/format.md §2).
  format::Superblock sb{};
  if (::getrandom(sb.uuid, sizeof sb.uuid, 0) != sizeof sb.uuid) {
    return Status::FromErrno(errno, "getrandom");
  }
  sb.uuid[6] = (sb.uuid[6] & 0x0f) | 0x40;  // RFC 4122 version 4
  sb.uuid[8] = (sb.uuid[8] & 0x3f) | 0x80;
  sb.created_unix_ns =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  sb.incompat_flags = incompat_flags_;
  sb.compat_flags = stage_ ? format::kCompatImages : 0;
  sb.format_version = compact_ ? format::kFormatVersionCompact : format::kFormatVersion;
  sb.sample_count = compact_ ? compact_->count() : samples_.size();
  sb.dir_count = compact_ ? compact_dir_count_ : dirs_.size();
  sb.class_count = class_count();
  sb.data_bytes = data_bytes_;
  sb.data_alignment = options_.align;
  sb.target_count = static_cast<uint32_t>(targets_.size());
  // regions[0] = target 0's data, regions[1] = the directory (the layout of
  // single-target volumes), then the data regions of targets 1, 2, ...
  sb.region_count = 1 + sb.target_count;
  auto data_region = [&](uint32_t t) {
    return format::RegionEntry{
        static_cast<uint32_t>(format::RegionKind::kData), t, Layout::kDataOffset,
        layout.data_end[t] - Layout::kDataOffset,         0, 0};
  };
  sb.regions[0] = data_region(0);
  sb.regions[1] = {static_cast<uint32_t>(format::RegionKind::kDirectory),
                   0,
                   layout.dir_offset,
                   layout.dir_length,
                   layout.dir_crc32c,
                   0};
  for (uint32_t t = 1; t < sb.target_count; ++t) sb.regions[1 + t] = data_region(t);
  for (uint32_t t = 0; t < sb.target_count; ++t) {
    format::TargetEntry& e = sb.targets[t];
    e.size = targets_[t].Tell() + format::kSuperblockSize;
    e.path_length = static_cast<uint32_t>(targets_[t].stored_path.size());
    std::memcpy(e.path, targets_[t].stored_path.data(), e.path_length);
  }
  return sb;
}

Status VolumeBuilder::Impl::Seal(const format::Superblock& sb) {
  for (uint32_t t = 0; t < sb.target_count; ++t) {
    format::Superblock own = sb;
    own.target_index = t;
    own.volume_size = sb.targets[t].size;
    format::SealSuperblock(&own);
    DLFS_RETURN_IF_ERROR(SealTarget(*targets_[t].target, own));
  }
  return Status::Ok();
}

Status VolumeBuilder::Impl::Publish() {
  DLFS_RETURN_IF_ERROR(PublishAll());
  for (size_t t = targets_.size(); t-- > 0;) {
    DLFS_RETURN_IF_ERROR(targets_[t].target->SyncPublished());
  }
  return Status::Ok();
}

Status VolumeBuilder::Impl::PublishAll() {
  Status st;
  for (size_t t = targets_.size(); t-- > 0 && st.ok();) {
    st = targets_[t].target->Publish();
    targets_[t].published = st.ok();
  }
  if (st.ok()) return st;
  for (TargetFile& t : targets_) {
    if (t.published) t.target->Withdraw(format::kSuperblockSize);
    t.published = false;
  }
  return st;
}

}  // namespace dlfs
