#include "dlfs/volume.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include <sys/mman.h>

#include "common/crc32c.h"
#include "common/file_util.h"
#include "common/map_guard.h"
#include "format/compact_codec.h"
#include "format/format.h"
#include "format/superblock.h"
#include "format/zstd_field.h"
#include "io/target.h"
#include "directory/token_checks.h"
#include "volume/field_decode.h"
#include "volume/node_directory.h"

namespace dlfs {

namespace {

using io_internal::Target;

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace

Volume::~Volume() = default;

int Volume::target_fd(uint32_t t) const { return targets_[t] ? targets_[t]->fd() : -1; }

bool Volume::target_open(uint32_t t) const { return targets_[t] != nullptr; }

Status Volume::ReadTarget(uint32_t t, void* buf, size_t n, uint64_t offset,
                          const std::string& what) const {
  if (closed()) return Status::InvalidArgument(path_ + ": volume is closed");
  if (!targets_[t]) {
    return Status::Unavailable(what + ": target " + std::to_string(t) + " (" + info_.targets[t] +
                               ") is not open on this node");
  }
  return targets_[t]->Read(buf, n, offset, what);
}

Status Volume::ReadTokens(uint64_t first, uint64_t count, std::span<std::byte> dst,
                          bool verify) const {
  const SampleDirectory& d = directory_;
  const uint32_t w = d.token_width();
  if (w == 0) return Status::NotSupported(path_ + ": not a token volume");
  DLFS_ASSIGN_OR_RETURN(const tokens::ChunkRange r, tokens::CoveringChunks(d, first, count));
  if (dst.size() != count * w) {
    return Status::InvalidArgument(path_ + ": " + std::to_string(count) + " tokens of " +
                                   std::to_string(w) + " bytes into " + std::to_string(dst.size()) +
                                   " bytes");
  }
  if (count == 0) return Status::Ok();
  const uint64_t base = d.token_stream_offset();
  const uint64_t begin = first * w;  // the window, in stream bytes
  const uint64_t end = begin + dst.size();
  const std::string what =
      path_ + ": tokens [" + std::to_string(first) + ", " + std::to_string(first + count) + ")";
  if (!verify) return ReadTarget(0, dst.data(), dst.size(), base + begin, what);
  // The window straight into dst; the parts of its first and last chunks
  // around it beside (less than a chunk each), read with it in one read
  // when the whole is small.
  if (r.end - r.begin <= (1u << 20)) {
    std::vector<std::byte> all(r.end - r.begin);
    DLFS_RETURN_IF_ERROR(ReadTarget(0, all.data(), all.size(), base + r.begin, what));
    DLFS_RETURN_IF_ERROR(tokens::CheckTokenRange(d, r.begin, all, path_));
    std::memcpy(dst.data(), all.data() + (begin - r.begin), dst.size());
    return Status::Ok();
  }
  std::vector<std::byte> head(begin - r.begin), tail(r.end - end);
  if (!head.empty()) {
    DLFS_RETURN_IF_ERROR(ReadTarget(0, head.data(), head.size(), base + r.begin, what));
  }
  DLFS_RETURN_IF_ERROR(ReadTarget(0, dst.data(), dst.size(), base + begin, what));
  if (!tail.empty())
    DLFS_RETURN_IF_ERROR(ReadTarget(0, tail.data(), tail.size(), base + end, what));
  return tokens::CheckTokenPieces(d, r.begin, {head, dst, tail}, path_);
}

void Volume::Close() {
  if (closed_.exchange(true, std::memory_order_acq_rel)) return;
  // Safe while other threads read (Target::Close); later reads are refused
  // by closed().
  for (const auto& target : targets_) {
    if (target) target->Close();
  }
}

Result<std::map<uint32_t, std::string>> ParseTargetMap(std::string_view spec) {
  std::map<uint32_t, std::string> map;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == spec.npos ? std::string_view() : spec.substr(comma + 1);
    const size_t eq = item.find('=');
    const std::string_view id = item.substr(0, eq == item.npos ? 0 : eq);
    uint32_t t = 0;
    const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), t);
    if (eq == item.npos || id.empty() || ec != std::errc() || end != id.data() + id.size() ||
        eq + 1 == item.size()) {
      return Status::InvalidArgument("bad target map entry '" + std::string(item) +
                                     "' (expected TARGET=PATH, e.g. 1=/dev/nvme1n1)");
    }
    if (!map.emplace(t, std::string(item.substr(eq + 1))).second) {
      return Status::InvalidArgument("target map names target " + std::to_string(t) + " twice");
    }
  }
  return map;
}

namespace {

// Opens `path` (a file, device or NBD URI) read-only; errors name `name`.
Result<std::unique_ptr<Target>> OpenForReading(const std::string& path, const std::string& name,
                                               const NbdOptions& nbd) {
  return io_internal::OpenTarget(path, io_internal::TargetMode::kRead,
                                 {.timeout_seconds = nbd.timeout_seconds, .what = name});
}

// A target may be a container larger than the target written to it (an
// NBD export, typically a whole device): the target is the first
// volume_size bytes, as the superblock says (docs/format.md §6.1), when the
// superblock looks like one.
void FitToSuperblock(Target& target, const format::Superblock& sb) {
  if (sb.volume_size >= 2 * uint64_t{format::kSuperblockSize} &&
      std::memcmp(sb.magic, format::kSuperblockMagic, 8) == 0) {
    target.FitTo(sb.volume_size);
  }
}

// Reads the primary superblock of target `name` and runs docs/format.md §5
// checks 1-16 on it. When the primary is damaged, says whether the copy at
// the end is intact (naming `dlfs repair`) — but never uses it: a damaged
// primary means the file was changed behind us.
Status ReadSuperblock(Target& target, const std::string& name, format::Superblock* sb) {
  if (target.size() < 2 * uint64_t{format::kSuperblockSize}) {
    return Status::Corruption(name + ": not a dlfs volume (" + std::to_string(target.size()) +
                              " bytes is too small to hold one)");
  }
  DLFS_RETURN_IF_ERROR(target.Read(sb, sizeof *sb, 0, name));
  FitToSuperblock(target, *sb);
  const uint64_t size = target.size();
  Status st = format::CheckSuperblock(*sb, size, name);
  if (st.ok() || st.code() != StatusCode::kCorruption) return st;
  // A bad magic too: a flipped first byte is damage, not another file, when
  // the copy at the end is a dlfs superblock of this file.
  format::Superblock copy;
  if (target.Read(&copy, sizeof copy, size - sizeof copy, name).ok() &&
      format::CheckSuperblock(copy, size, name).ok()) {
    std::string what = st.message();
    if (std::memcmp(sb->magic, format::kSuperblockMagic, 8) != 0) {
      what = name + ": its primary superblock is damaged (bad magic)";
    }
    return Status::Corruption(what + "; the superblock copy at the end of the file is intact: " +
                              "`dlfs repair " + name + "` rewrites the primary from it");
  }
  return st;
}

// Takes target `name`'s superblock from `stored` (bytes handed over with the
// metadata of a collective open) and runs the same checks as ReadSuperblock.
Status LoadSuperblock(const std::vector<std::byte>& stored, Target& target, const std::string& name,
                      format::Superblock* sb) {
  if (stored.size() != sizeof *sb) {
    return Status::InvalidArgument(name + ": the superblock handed over has " +
                                   std::to_string(stored.size()) + " bytes, not " +
                                   std::to_string(sizeof *sb));
  }
  std::memcpy(sb, stored.data(), sizeof *sb);
  FitToSuperblock(target, *sb);
  return format::CheckSuperblock(*sb, target.size(), name);
}

// Target t's superblock: from the metadata handed over when it has one,
// else read from the target.
Status GetSuperblock(const VolumeMetadata* md, uint32_t t, Target& target, const std::string& name,
                     format::Superblock* sb) {
  return md != nullptr && !md->superblocks[t].empty()
             ? LoadSuperblock(md->superblocks[t], target, name, sb)
             : ReadSuperblock(target, name, sb);
}

std::vector<std::byte> SuperblockBytes(const format::Superblock& sb) {
  std::vector<std::byte> out(sizeof sb);
  std::memcpy(out.data(), &sb, sizeof sb);
  return out;
}

// docs/format.md §5 checks 18-23: target `t`, opened as `name`, belongs to
// the volume whose target 0 has superblock `sb0`.
Status CheckMemberTarget(const format::Superblock& sb0, const format::Superblock& sb, uint32_t t,
                         const std::string& name) {
  auto bad = [&](const std::string& what) { return Status::Corruption(name + ": " + what); };
  if (std::memcmp(sb.uuid, sb0.uuid, sizeof sb.uuid) != 0) {
    return bad("uuid " + format::FormatUuid(sb.uuid) + " differs from target 0's " +
               format::FormatUuid(sb0.uuid) + " — wrong file?");
  }
  if (sb.target_index != t) {
    return bad("is target " + std::to_string(sb.target_index) + " of the volume, not target " +
               std::to_string(t) + " — targets swapped?");
  }
  if (sb.volume_size != sb0.targets[t].size) {
    return bad("has " + std::to_string(sb.volume_size) + " bytes, but target 0's table says " +
               std::to_string(sb0.targets[t].size));
  }
  // Everything else (counts, regions, the whole target table) is the same
  // volume-wide description in every target.
  format::Superblock same = sb;
  same.target_index = sb0.target_index;
  same.volume_size = sb0.volume_size;
  same.crc32c = sb0.crc32c;
  if (std::memcmp(&same, &sb0, sizeof same) != 0) {
    return bad("superblock disagrees with target 0's (regions, counts or target table)");
  }
  return Status::Ok();
}

// What Volume::Open gathers, step by step, before the Volume exists.
struct OpenState {
  format::Superblock sb;  // target 0's
  std::vector<TargetInfo> infos;
  std::vector<std::unique_ptr<Target>> targets;  // null: not opened here (open_only)
  VolumeMetadata kept;                           // what metadata() returns
};

// Opens target 0 (`path`), takes its superblock and checks that it is
// target 0 and that the metadata handed over and the target map fit it.
Status OpenTargetZero(const std::string& path, const VolumeOpenOptions& options, OpenState* s) {
  DLFS_ASSIGN_OR_RETURN(std::unique_ptr<Target> target, OpenForReading(path, path, options.nbd));
  const VolumeMetadata* md = options.metadata;
  format::Superblock& sb = s->sb;
  if (md != nullptr && md->superblocks.empty()) {
    return Status::InvalidArgument(path + ": metadata handed over without superblocks");
  }
  DLFS_RETURN_IF_ERROR(md ? LoadSuperblock(md->superblocks[0], *target, path, &sb)
                          : ReadSuperblock(*target, path, &sb));
  if (md != nullptr && md->superblocks.size() != sb.target_count) {
    return Status::InvalidArgument(path + ": metadata handed over for " +
                                   std::to_string(md->superblocks.size()) +
                                   " targets, volume has " + std::to_string(sb.target_count));
  }
  s->kept.superblocks.push_back(SuperblockBytes(sb));
  if (sb.target_index != 0) {
    return Status::InvalidArgument(
        path + ": is target " + std::to_string(sb.target_index) + " of " +
        std::to_string(sb.target_count) + " of volume " + format::FormatUuid(sb.uuid) +
        "; open the volume through its target 0, which holds the directory");
  }
  for (const auto& [t, mapped] : options.target_map) {
    if (t == 0 || t >= sb.target_count) {
      return Status::InvalidArgument(
          path + ": target map names target " + std::to_string(t) + ", but the volume has " +
          (sb.target_count == 1
               ? std::string("only target 0")
               : "targets 1.." + std::to_string(sb.target_count - 1) + " besides target 0"));
    }
    if (mapped.empty()) {
      return Status::InvalidArgument("target map gives target " + std::to_string(t) +
                                     " an empty path");
    }
  }
  s->infos.resize(sb.target_count);
  s->infos[0].path = path;
  s->infos[0].size = target->size();  // an export's target may end before the export does
  s->targets.push_back(std::move(target));
  return Status::Ok();
}

// Opens target t > 0 where the target map or target 0's table says and
// checks that it belongs to the volume; or, when open_only leaves it out,
// only describes it from target 0's table.
Status OpenMemberTarget(const std::string& path, uint32_t t, const VolumeOpenOptions& options,
                        OpenState* s) {
  TargetInfo& ti = s->infos[t];
  ti.stored_path = std::string(format::TargetPath(s->sb.targets[t]));
  const auto mapped = options.target_map.find(t);
  ti.path = mapped != options.target_map.end()
                ? mapped->second
                : io_internal::ResolveTargetPath(path, ti.stored_path);
  if (!options.open_only.empty() &&
      std::find(options.open_only.begin(), options.open_only.end(), t) == options.open_only.end()) {
    ti.size = s->sb.targets[t].size;
    s->targets.emplace_back();
    s->kept.superblocks.emplace_back();
    return Status::Ok();
  }
  // Messages name the volume, then the target: "v.dlfs: target 1 (v.dlfs.t1): ...".
  const std::string name = "target " + std::to_string(t) + " (" + ti.path + ")";
  auto opened = OpenForReading(ti.path, name, options.nbd);
  if (!opened.ok()) return opened.status().WithContext(path);
  std::unique_ptr<Target> target = std::move(opened).value();
  format::Superblock tsb;
  Status st = GetSuperblock(options.metadata, t, *target, name, &tsb);
  ti.size = target->size();
  if (st.ok()) st = CheckMemberTarget(s->sb, tsb, t, name);
  if (!st.ok()) return st.WithContext(path);
  s->kept.superblocks.push_back(SuperblockBytes(tsb));
  s->targets.push_back(std::move(target));
  return Status::Ok();
}

// Reads the directory region from target 0 into `dst` and checks its CRC.
Status ReadDirectoryRegion(const std::string& path, const format::RegionEntry& dir, Target& target0,
                           std::byte* dst) {
  DLFS_RETURN_IF_ERROR(target0.Read(dst, dir.length, dir.offset, path));
  const uint32_t crc = crc32c::Value(dst, dir.length);
  if (crc != dir.crc32c) {
    return Status::Corruption(path + ": directory checksum mismatch (stored " + Hex32(dir.crc32c) +
                              ", computed " + Hex32(crc) + ")");
  }
  return Status::Ok();
}

// Maps target 0's directory region read-only (format v3: used in place, the
// page cache being the node's one copy); null when the target has no file
// descriptor to map (an NBD export) or the mapping fails.
std::shared_ptr<const std::byte> MapDirectoryRegion(const format::RegionEntry& dir,
                                                    Target& target0) {
  if (target0.fd() < 0 || dir.length == 0) return nullptr;
  void* p = mmap(nullptr, dir.length, PROT_READ, MAP_SHARED, target0.fd(),
                 static_cast<off_t>(dir.offset));
  if (p == MAP_FAILED) return nullptr;
  const uint64_t length = dir.length;
  // A file truncated (or a device failing) under the mapping would raise
  // SIGBUS on access; guarded, the access reads zeros and the directory
  // reports the volume as changed instead (common/map_guard.h).
  map_guard::Register(p, length);
  return std::shared_ptr<const std::byte>(static_cast<const std::byte*>(p),
                                          [length](const std::byte* q) {
                                            map_guard::Unregister(q);
                                            munmap(const_cast<std::byte*>(q), length);
                                          });
}

// The directory region as Open uses it, and where it came from.
struct LoadedDirectory {
  std::shared_ptr<const std::byte> bytes;
  bool validated = false;      // every check passed already (the collective open's)
  bool validated_crc = false;  // the checksum was checked already
  bool mapped = false;         // mapped from target 0 (format v3)
  std::string region;          // the node region holding it, or ""
  std::string note;            // why a node copy was asked for and not used
};

// The directory region: handed over with the metadata, the node's shared
// copy (DirectorySharing::kNode), or read from target 0 in one read; checked
// against its CRC unless it was validated already.
Result<LoadedDirectory> LoadDirectoryRegion(const std::string& path,
                                            const VolumeOpenOptions& options,
                                            const format::Superblock& sb,
                                            const format::RegionEntry& dir, Target& target0) {
  LoadedDirectory out;
  const VolumeMetadata* md = options.metadata;
  if (sb.format_version == format::kFormatVersionCompact) {
    // Used in place and checked block by block on use (docs/format.md §10):
    // never read whole here. Its header's CRC is the region entry's.
    if (md != nullptr && md->directory != nullptr && !md->directory_mapped) {
      out.bytes = md->directory;
      out.region = md->directory_region;
    } else if ((out.bytes = MapDirectoryRegion(dir, target0)) != nullptr) {
      out.mapped = true;
    } else if (options.directory_sharing == DirectorySharing::kNode) {
      const volume_internal::NodeDirectoryKey key{.uuid = format::FormatUuid(sb.uuid),
                                                  .bytes = dir.length,
                                                  .crc32c = dir.crc32c,
                                                  .node_name = options.node_name};
      auto node = volume_internal::GetNodeDirectory(
          key, [&](std::byte* dst) { return target0.Read(dst, dir.length, dir.offset, path); });
      if (node.ok()) {
        out.bytes = node->bytes;
        out.region = node->path;
      } else {
        out.note = "no node copy of the directory (" + node.status().message() +
                   "); a private copy instead";
      }
    }
    if (out.bytes == nullptr) {
      std::shared_ptr<std::byte> fresh = AllocateLarge(dir.length);
      if (!fresh) return Status::Unavailable(path + ": cannot allocate the directory");
      DLFS_RETURN_IF_ERROR(target0.Read(fresh.get(), dir.length, dir.offset, path));
      out.bytes = std::move(fresh);
    }
    if (dir.length >= sizeof(format::CompactHeader)) {
      format::CompactHeader h;
      std::memcpy(&h, out.bytes.get(), sizeof h);
      if (h.crc32c != dir.crc32c) {
        return Status::Corruption(path + ": directory header checksum " + Hex32(h.crc32c) +
                                  " differs from the superblock's " + Hex32(dir.crc32c));
      }
    }
    return out;
  }
  if (md != nullptr) {
    if (md->directory == nullptr || md->directory_bytes != dir.length) {
      return Status::InvalidArgument(path + ": directory handed over has " +
                                     std::to_string(md->directory_bytes) + " bytes, volume's has " +
                                     std::to_string(dir.length));
    }
    out.bytes = md->directory;
    out.validated = md->directory_validated;
    out.region = md->directory_region;
  } else if (options.directory_sharing == DirectorySharing::kNode) {
    const volume_internal::NodeDirectoryKey key{.uuid = format::FormatUuid(sb.uuid),
                                                .bytes = dir.length,
                                                .crc32c = dir.crc32c,
                                                .node_name = options.node_name};
    auto node = volume_internal::GetNodeDirectory(
        key, [&](std::byte* dst) { return ReadDirectoryRegion(path, dir, target0, dst); });
    if (node.ok() && crc32c::Value(node->bytes.get(), dir.length) != dir.crc32c) {
      // Changed since its maker checked it: not the volume's fault.
      out.note = "node copy of the directory " + node->path +
                 " refused (checksum mismatch); a private copy instead";
    } else if (node.ok()) {
      out.bytes = node->bytes;
      out.region = node->path;
      out.validated_crc = true;
    } else if (node.status().code() == StatusCode::kCorruption) {
      return node.status();  // what a private read would find too
    } else {
      out.note =
          "no node copy of the directory (" + node.status().message() + "); a private copy instead";
    }
  }
  if (out.bytes == nullptr) {
    // The region was bounds-checked against the file size, so this
    // allocation is never larger than the file.
    std::shared_ptr<std::byte> fresh = AllocateLarge(dir.length);
    if (!fresh) return Status::Unavailable(path + ": cannot allocate the directory");
    DLFS_RETURN_IF_ERROR(ReadDirectoryRegion(path, dir, target0, fresh.get()));
    out.bytes = std::move(fresh);
    return out;
  }
  const uint32_t crc =
      out.validated || out.validated_crc ? dir.crc32c : crc32c::Value(out.bytes.get(), dir.length);
  if (crc != dir.crc32c) {
    return Status::Corruption(path + ": directory checksum mismatch (stored " + Hex32(dir.crc32c) +
                              ", computed " + Hex32(crc) + ")");
  }
  return out;
}

// What the directory region must agree with: target 0's superblock.
SampleDirectory::Expected ExpectedDirectory(const OpenState& s, bool validated) {
  SampleDirectory::Expected expected;
  expected.sample_count = s.sb.sample_count;
  expected.dir_count = s.sb.dir_count;
  expected.class_count = s.sb.class_count;
  expected.data_bytes = s.sb.data_bytes;
  expected.data_alignment = s.sb.data_alignment;
  expected.already_validated = validated;
  expected.format_version = s.sb.format_version;
  expected.incompat_flags = s.sb.incompat_flags;
  expected.compat_flags = s.sb.compat_flags;
  for (const TargetInfo& ti : s.infos) {
    expected.data_regions.push_back({ti.data_offset, ti.data_offset + ti.data_length});
  }
  return expected;
}

// The volume as info() describes it; takes the target descriptions.
VolumeInfo DescribeVolume(OpenState& s) {
  const format::Superblock& sb = s.sb;
  const format::RegionEntry* dir = format::FindRegion(sb, format::RegionKind::kDirectory);
  const format::RegionEntry* data = format::FindDataRegion(sb, 0);
  VolumeInfo info;
  info.format_version = sb.format_version;
  info.uuid = format::FormatUuid(sb.uuid);
  info.created_unix_ns = sb.created_unix_ns;
  info.volume_size = sb.volume_size;
  info.sample_count = sb.sample_count;
  info.dir_count = sb.dir_count;
  info.class_count = sb.class_count;
  info.data_bytes = sb.data_bytes;
  info.data_offset = data->offset;
  info.data_length = data->length;
  info.directory_offset = dir->offset;
  info.directory_bytes = dir->length;
  info.data_alignment = sb.data_alignment;
  info.incompat_flags = sb.incompat_flags;
  info.compat_flags = sb.compat_flags;
  for (size_t t = 0; t < s.infos.size(); ++t) {
    s.infos[t].kind = s.targets[t] ? s.targets[t]->kind() : TargetKind::kNotOpen;
    info.targets.push_back(s.infos[t].path);
  }
  info.target_details = std::move(s.infos);
  return info;
}

}  // namespace

Result<std::shared_ptr<Volume>> Volume::Open(const std::string& path,
                                             const VolumeOpenOptions& options) {
  OpenState s;
  DLFS_RETURN_IF_ERROR(OpenTargetZero(path, options, &s));
  // The other targets first: a missing or wrong one is found before the
  // directory, the largest read, is done.
  for (uint32_t t = 1; t < s.sb.target_count; ++t) {
    DLFS_RETURN_IF_ERROR(OpenMemberTarget(path, t, options, &s));
  }
  for (uint32_t t = 0; t < s.sb.target_count; ++t) {
    const format::RegionEntry* data = format::FindDataRegion(s.sb, t);
    s.infos[t].data_offset = data->offset;
    s.infos[t].data_length = data->length;
  }

  const format::RegionEntry* dir = format::FindRegion(s.sb, format::RegionKind::kDirectory);
  DLFS_ASSIGN_OR_RETURN(LoadedDirectory loaded,
                        LoadDirectoryRegion(path, options, s.sb, *dir, *s.targets[0]));
  s.kept.directory = loaded.bytes;
  s.kept.directory_bytes = dir->length;
  s.kept.directory_mapped = loaded.mapped;
  DLFS_ASSIGN_OR_RETURN(SampleDirectory directory,
                        SampleDirectory::Create(std::move(loaded.bytes), dir->length,
                                                ExpectedDirectory(s, loaded.validated), path));

  std::shared_ptr<Volume> v(new Volume());
  if (!directory.dictionary().empty()) {
    auto dict = format::ZstdDictionary::Create(directory.dictionary(), 0);
    if (!dict.ok()) {
      return Status::Corruption(path + ": directory region: " + dict.status().message());
    }
    v->dictionary_ = *dict;
  }
  v->path_ = path;
  v->directory_ = std::move(directory);
  v->directory_region_ = std::move(loaded.region);
  v->directory_note_ = std::move(loaded.note);
  v->metadata_ = std::move(s.kept);
  v->info_ = DescribeVolume(s);
  for (std::unique_ptr<Target>& target : s.targets) {
    // Samples are read at random from here on; the directory, read above,
    // was one large read.
    if (target) target->ExpectRandomReads();
  }
  v->targets_ = std::move(s.targets);
  return v;
}

VolumeMetadata Volume::metadata() const { return metadata_; }

std::vector<std::string> Volume::OpenTargetPaths() const {
  std::vector<std::string> paths = info_.targets;
  for (uint32_t t = 0; t < targets_.size(); ++t) {
    if (!target_open(t)) paths[t].clear();
  }
  return paths;
}

Status Volume::ReadStoredInto(uint64_t index, std::span<std::byte> dst, bool verify) const {
  if (index >= directory_.size()) {
    return Status::InvalidArgument(path_ + ": sample index " + std::to_string(index) +
                                   " out of range (volume has " +
                                   std::to_string(directory_.size()) + " samples)");
  }
  DLFS_ASSIGN_OR_RETURN(const SampleInfo s, directory_.Locate(index));
  if (dst.size() != s.length) {
    return Status::InvalidArgument(path_ + ": buffer of " + std::to_string(dst.size()) +
                                   " bytes for sample " + std::to_string(index) + " of " +
                                   std::to_string(s.length));
  }
  if (closed()) return Status::InvalidArgument(path_ + ": volume is closed");
  if (!target_open(s.target)) {
    return Status::Unavailable(path_ + ": sample " + std::to_string(index) + " is on target " +
                               std::to_string(s.target) + " (" + info_.targets[s.target] +
                               "), which is not open on this node");
  }
  Status st = ReadTarget(s.target, dst.data(), dst.size(), s.offset, info_.targets[s.target]);
  // A Close() during the read leaves /dev/null, which ends every read early.
  if (!st.ok() && closed()) return Status::InvalidArgument(path_ + ": volume is closed");
  if (!st.ok()) return st.WithContext("sample " + std::to_string(index));
  return verify ? CheckSample(index, dst) : Status::Ok();
}

Status Volume::CheckSample(uint64_t index, std::span<const std::byte> bytes) const {
  DLFS_ASSIGN_OR_RETURN(const SampleInfo s, directory_.Locate(index));
  const uint32_t stored = s.crc32c;
  const uint32_t crc = crc32c::Value(bytes.data(), bytes.size());
  if (crc == stored) return Status::Ok();
  return Status::Corruption(path_ + ": sample " + std::to_string(index) + " '" +
                            directory_.Path(index) + "': checksum mismatch (stored " +
                            Hex32(stored) + ", computed " + Hex32(crc) + ")");
}

Result<std::vector<std::byte>> Volume::ReadStored(uint64_t index, bool verify) const {
  if (index >= directory_.size()) return ReadStoredInto(index, {}, verify);
  DLFS_ASSIGN_OR_RETURN(const SampleInfo s, directory_.Locate(index));
  std::vector<std::byte> out(s.length);
  DLFS_RETURN_IF_ERROR(ReadStoredInto(index, out, verify));
  return out;
}

Status Volume::PlainSamples() const {
  if (!directory_.has_field_records() || directory_.field_count() == 1) return Status::Ok();
  std::string names;
  for (uint32_t f = 0; f < directory_.field_count(); ++f) {
    names += (f > 0 ? ", '" : "'") + std::string(directory_.field_name(f)) + "'";
  }
  return Status::NotSupported(path_ + ": its samples have several fields (" + names +
                              "): name the fields to read (the fields option), or read one "
                              "field by name");
}

Result<uint64_t> Volume::SampleSize(uint64_t index) const {
  if (index >= directory_.size()) return ReadStoredInto(index, {}, false);  // the range error
  if (!directory_.has_field_records()) {
    DLFS_ASSIGN_OR_RETURN(const SampleInfo s, directory_.Locate(index));
    return uint64_t{s.length};
  }
  DLFS_RETURN_IF_ERROR(PlainSamples());
  const std::optional<FieldInfo> f = directory_.Field(index, 0);
  if (!f) {
    return Status::NotFound(path_ + ": sample " + std::to_string(index) + " '" +
                            directory_.Path(index) + "' has no field '" +
                            std::string(directory_.field_name(0)) + "'");
  }
  return uint64_t{f->decoded_length};
}

Status Volume::ReadInto(uint64_t index, std::span<std::byte> dst, bool verify) const {
  if (index >= directory_.size() || !directory_.has_field_records()) {
    return ReadStoredInto(index, dst, verify);
  }
  DLFS_ASSIGN_OR_RETURN(const uint64_t size, SampleSize(index));
  if (dst.size() != size) {
    return Status::InvalidArgument(path_ + ": buffer of " + std::to_string(dst.size()) +
                                   " bytes for sample " + std::to_string(index) + " of " +
                                   std::to_string(size));
  }
  const FieldInfo f = *directory_.Field(index, 0);
  const SampleInfo s = directory_.sample(index);
  if (closed() || !target_open(s.target)) return ReadStoredInto(index, {}, verify);  // its errors
  std::vector<std::byte> stored(f.stored_length);
  DLFS_RETURN_IF_ERROR(ReadTarget(s.target, stored.data(), stored.size(),
                                  s.offset + f.offset_in_sample, info_.targets[s.target])
                           .WithContext(FieldContext(index, f.field)));
  // The stored bytes' checks come first: the frame must declare dst's size.
  DLFS_RETURN_IF_ERROR(CheckFieldBeforeDecoding(*this, index, f, stored, verify));
  return DecodeField(index, f, stored, dst, /*verify=*/false);
}

Result<std::vector<std::byte>> Volume::Read(uint64_t index, bool verify) const {
  if (index >= directory_.size() || !directory_.has_field_records()) {
    return ReadStored(index, verify);
  }
  DLFS_RETURN_IF_ERROR(PlainSamples());
  return Read(index, directory_.field_name(0), verify);
}

Status Volume::CheckBackupSuperblock() const {
  if (closed()) return Status::InvalidArgument(path_ + ": volume is closed");
  for (uint32_t t = 0; t < targets_.size(); ++t) {
    if (!target_open(t)) continue;  // not opened here (open_only)
    const TargetInfo& ti = info_.target_details[t];
    const std::string name = t == 0 ? path_ : "target " + std::to_string(t) + " (" + ti.path + ")";
    format::Superblock primary, copy;
    DLFS_RETURN_IF_ERROR(ReadTarget(t, &primary, sizeof primary, 0, name));
    DLFS_RETURN_IF_ERROR(ReadTarget(t, &copy, sizeof copy, ti.size - sizeof copy, name));
    if (std::memcmp(&primary, &copy, sizeof copy) != 0) {
      return Status::Corruption(name +
                                ": the superblock copy at the end of the file differs from "
                                "the primary");
    }
  }
  return Status::Ok();
}

}  // namespace dlfs

namespace dlfs {

std::string Volume::FieldContext(uint64_t index, uint32_t field) const {
  std::string what =
      path_ + ": sample " + std::to_string(index) + " '" + directory_.Path(index) + "'";
  if (directory_.has_fields()) what += " field '" + std::string(directory_.field_name(field)) + "'";
  return what;
}

Status Volume::DecodeField(uint64_t index, const FieldInfo& f, std::span<const std::byte> stored,
                           std::span<std::byte> out, bool verify) const {
  const bool check_only = f.codec == FieldCodec::kNone && out.empty();
  if (stored.size() != f.stored_length || (out.size() != f.decoded_length && !check_only)) {
    return Status::InvalidArgument(
        FieldContext(index, f.field) + ": buffers of " + std::to_string(stored.size()) + " and " +
        std::to_string(out.size()) + " bytes for a field of " + std::to_string(f.stored_length) +
        " stored and " + std::to_string(f.decoded_length) + " decoded bytes");
  }
  if (verify) DLFS_RETURN_IF_ERROR(CheckFieldBeforeDecoding(*this, index, f, stored, true));
  switch (f.codec) {
    case FieldCodec::kNone:
      if (out.data() != stored.data() && !out.empty()) {
        std::memcpy(out.data(), stored.data(), out.size());
      }
      return Status::Ok();
    case FieldCodec::kZstd:
    case FieldCodec::kZstdDict: {
      const auto* dict = static_cast<const format::ZstdDictionary*>(dictionary_.get());
      if (f.codec == FieldCodec::kZstdDict && dict == nullptr) {
        return Status::Corruption(FieldContext(index, f.field) + ": needs a dictionary");
      }
      return format::ZstdDecode(stored, out, f.codec == FieldCodec::kZstdDict ? dict : nullptr,
                                FieldContext(index, f.field));
    }
  }
  return Status::Corruption(FieldContext(index, f.field) + ": unknown codec");
}

Result<std::vector<std::byte>> Volume::Read(uint64_t index, std::string_view field,
                                            bool verify) const {
  if (index >= directory_.size()) return ReadStored(index, verify);  // the range error
  DLFS_RETURN_IF_ERROR(directory_.Locate(index).status());           // a damaged block's error
  const std::optional<uint32_t> id = directory_.FindField(field);
  const std::optional<FieldInfo> f = id ? directory_.Field(index, *id) : std::nullopt;
  if (!f) {
    return Status::NotFound(path_ + ": sample " + std::to_string(index) + " '" +
                            directory_.Path(index) + "' has no field '" + std::string(field) + "'");
  }
  const SampleInfo s = directory_.sample(index);
  if (closed() || !target_open(s.target)) return ReadStored(index, verify);  // the same errors
  std::vector<std::byte> stored(f->stored_length);
  DLFS_RETURN_IF_ERROR(ReadTarget(s.target, stored.data(), stored.size(),
                                  s.offset + f->offset_in_sample, info_.targets[s.target])
                           .WithContext(FieldContext(index, f->field)));
  if (f->codec == FieldCodec::kNone) {
    DLFS_RETURN_IF_ERROR(DecodeField(index, *f, stored, stored, verify));
    return stored;
  }
  return DecodeFieldToVector(*this, index, *f, stored, verify);
}

Result<std::vector<std::pair<std::string, std::vector<std::byte>>>> Volume::ReadFields(
    uint64_t index, bool verify) const {
  DLFS_ASSIGN_OR_RETURN(const std::vector<std::byte> extent, ReadStored(index, false));
  std::vector<std::pair<std::string, std::vector<std::byte>>> out;
  for (const FieldInfo& f : directory_.Fields(index)) {
    DLFS_ASSIGN_OR_RETURN(
        std::vector<std::byte> bytes,
        DecodeFieldToVector(*this, index, f,
                            std::span(extent).subspan(f.offset_in_sample, f.stored_length),
                            verify));
    out.emplace_back(std::string(directory_.field_name(f.field)), std::move(bytes));
  }
  return out;
}

Status CheckFieldBeforeDecoding(const Volume& v, uint64_t index, const FieldInfo& f,
                                std::span<const std::byte> stored, bool verify) {
  if (verify) {
    const uint32_t crc = crc32c::Value(stored.data(), stored.size());
    if (crc != f.crc32c) {
      return Status::Corruption(v.FieldContext(index, f.field) + ": checksum mismatch (stored " +
                                Hex32(f.crc32c) + ", computed " + Hex32(crc) + ")");
    }
  }
  if (f.codec == FieldCodec::kNone) return Status::Ok();
  return format::ZstdCheckFrame(stored, f.decoded_length, v.FieldContext(index, f.field));
}

Result<std::vector<std::byte>> DecodeFieldToVector(const Volume& v, uint64_t index,
                                                   const FieldInfo& f,
                                                   std::span<const std::byte> stored, bool verify) {
  DLFS_RETURN_IF_ERROR(CheckFieldBeforeDecoding(v, index, f, stored, verify));
  std::vector<std::byte> out(f.decoded_length);
  DLFS_RETURN_IF_ERROR(v.DecodeField(index, f, stored, out, /*verify=*/false));
  return out;
}

}  // namespace dlfs
