#include "dlfs/volume.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/crc32c.h"
#include "common/file_util.h"
#include "format/format.h"
#include "format/superblock.h"

namespace dlfs {

namespace {

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace

Volume::~Volume() {
  for (int fd : fds_) ::close(fd);
}

Result<std::shared_ptr<Volume>> Volume::Open(const std::string& path) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return Status::FromErrno(errno, path);
  DLFS_ASSIGN_OR_RETURN(const uint64_t file_size, FileSize(fd.get(), path));
  if (file_size < 2 * uint64_t{format::kSuperblockSize}) {
    return Status::Corruption(path + ": not a dlfs volume (" + std::to_string(file_size) +
                              " bytes is too small to hold one)");
  }

  format::Superblock sb;
  DLFS_RETURN_IF_ERROR(PreadFull(fd.get(), &sb, sizeof sb, 0, path));
  Status st = format::CheckSuperblock(sb, file_size, path);
  if (!st.ok()) {
    // Tell the user whether the copy at the end could serve, but never use
    // it silently: a damaged primary means the file was changed behind us.
    if (st.code() == StatusCode::kCorruption &&
        std::memcmp(sb.magic, format::kSuperblockMagic, 8) == 0) {
      format::Superblock copy;
      if (PreadFull(fd.get(), &copy, sizeof copy, file_size - sizeof copy, path).ok() &&
          format::CheckSuperblock(copy, file_size, path).ok()) {
        return Status::Corruption(st.message() +
                                  " (the superblock copy at the end of the file is intact)");
      }
    }
    return st;
  }

  const format::RegionEntry* dir = format::FindRegion(sb, format::RegionKind::kDirectory);
  const format::RegionEntry* data = format::FindRegion(sb, format::RegionKind::kData);
  // The region was bounds-checked against the file size, so this allocation
  // is never larger than the file.
  std::shared_ptr<std::byte> region = AllocateLarge(dir->length);
  if (!region) return Status::Unavailable(path + ": cannot allocate the directory");
  DLFS_RETURN_IF_ERROR(PreadFull(fd.get(), region.get(), dir->length, dir->offset, path));
  const uint32_t crc = crc32c::Value(region.get(), dir->length);
  if (crc != dir->crc32c) {
    return Status::Corruption(path + ": directory checksum mismatch (stored " + Hex32(dir->crc32c) +
                              ", computed " + Hex32(crc) + ")");
  }
  SampleDirectory::Expected expected;
  expected.sample_count = sb.sample_count;
  expected.dir_count = sb.dir_count;
  expected.class_count = sb.class_count;
  expected.data_bytes = sb.data_bytes;
  expected.data_begin = data->offset;
  expected.data_end = data->offset + data->length;
  expected.data_alignment = sb.data_alignment;
  expected.target_count = sb.target_count;
  DLFS_ASSIGN_OR_RETURN(SampleDirectory directory,
                        SampleDirectory::Create(std::move(region), dir->length, expected, path));

  std::shared_ptr<Volume> v(new Volume());
  v->path_ = path;
  v->directory_ = std::move(directory);
  VolumeInfo& info = v->info_;
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
  info.targets.push_back(path);
  // Samples are read at random: kernel readahead around each would read
  // (and evict) neighbours nobody asked for. Large sequential reads, as in
  // verify, are unaffected.
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_RANDOM);
  v->fds_.push_back(fd.release());
  return v;
}

Status Volume::ReadInto(uint64_t index, std::span<std::byte> dst, bool verify) const {
  if (index >= directory_.size()) {
    return Status::InvalidArgument(path_ + ": sample index " + std::to_string(index) +
                                   " out of range (volume has " +
                                   std::to_string(directory_.size()) + " samples)");
  }
  const SampleInfo s = directory_.sample(index);
  if (dst.size() != s.length) {
    return Status::InvalidArgument(path_ + ": buffer of " + std::to_string(dst.size()) +
                                   " bytes for sample " + std::to_string(index) + " of " +
                                   std::to_string(s.length));
  }
  Status st = PreadFull(fds_[s.target], dst.data(), dst.size(), s.offset, path_);
  if (!st.ok()) return st.WithContext("sample " + std::to_string(index));
  return verify ? CheckSample(index, dst) : Status::Ok();
}

Status Volume::CheckSample(uint64_t index, std::span<const std::byte> bytes) const {
  const uint32_t stored = directory_.sample(index).crc32c;
  const uint32_t crc = crc32c::Value(bytes.data(), bytes.size());
  if (crc == stored) return Status::Ok();
  return Status::Corruption(path_ + ": sample " + std::to_string(index) + " '" +
                            directory_.Path(index) + "': checksum mismatch (stored " +
                            Hex32(stored) + ", computed " + Hex32(crc) + ")");
}

Result<std::vector<std::byte>> Volume::Read(uint64_t index, bool verify) const {
  if (index >= directory_.size()) return ReadInto(index, {}, verify);
  std::vector<std::byte> out(directory_.sample(index).length);
  DLFS_RETURN_IF_ERROR(ReadInto(index, out, verify));
  return out;
}

Status Volume::CheckBackupSuperblock() const {
  format::Superblock primary, copy;
  const int fd = fds_[0];
  DLFS_RETURN_IF_ERROR(PreadFull(fd, &primary, sizeof primary, 0, path_));
  DLFS_RETURN_IF_ERROR(PreadFull(fd, &copy, sizeof copy, info_.volume_size - sizeof copy, path_));
  if (std::memcmp(&primary, &copy, sizeof copy) != 0) {
    return Status::Corruption(path_ +
                              ": the superblock copy at the end of the file differs from "
                              "the primary");
  }
  return Status::Ok();
}

}  // namespace dlfs
