#include <fcntl.h>
#include <stdio.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <unordered_map>

#include "common/crc32c.h"
#include "common/file_util.h"
#include "dlfs/builder.h"
#include "format/format.h"
#include "format/superblock.h"

namespace dlfs {

namespace {

constexpr size_t kWriteBuffer = 8u << 20;

// Entry kept per added sample until Finish() sorts them into volume order.
struct PendingSample {
  uint64_t offset;
  uint32_t length;
  uint32_t crc32c;
  uint32_t label;
  uint32_t dir;          // builder-local directory id
  uint64_t name_offset;  // into names_
  uint32_t name_length;
};

struct PendingDir {
  uint32_t parent;
  uint64_t name_offset;
  uint32_t name_length;
};

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

}  // namespace

class VolumeBuilder::Impl {
 public:
  std::string path_;
  std::string temp_path_;
  Options options_;
  int fd_ = -1;
  bool finished_ = false;

  // Buffered append-only writer; bytes [buf_start_, buf_start_ + buf_.size())
  // are not yet in the file.
  std::vector<std::byte> buf_;
  uint64_t buf_start_ = format::kSuperblockSize;

  std::string names_;
  std::vector<PendingDir> dirs_{PendingDir{format::kNone, 0, 0}};
  std::unordered_map<std::string, uint32_t> dir_ids_{{"", 0}};
  std::vector<PendingSample> samples_;
  std::vector<std::string> class_names_;
  uint64_t data_bytes_ = 0;
  uint32_t max_label_plus_one_ = 0;

  bool in_sample_ = false;
  PendingSample cur_{};

  uint64_t Tell() const { return buf_start_ + buf_.size(); }

  Status Flush() {
    if (buf_.empty()) return Status::Ok();
    DLFS_RETURN_IF_ERROR(PwriteFull(fd_, buf_.data(), buf_.size(), buf_start_, temp_path_));
    buf_start_ += buf_.size();
    buf_.clear();
    return Status::Ok();
  }

  Status Write(std::span<const std::byte> data) {
    while (!data.empty()) {
      const size_t room = kWriteBuffer - buf_.size();
      const size_t n = std::min(room, data.size());
      buf_.insert(buf_.end(), data.begin(), data.begin() + n);
      data = data.subspan(n);
      if (buf_.size() == kWriteBuffer) DLFS_RETURN_IF_ERROR(Flush());
    }
    return Status::Ok();
  }

  // Moves the logical end back to `pos` (dropping a half-written sample).
  void Rewind(uint64_t pos) {
    if (pos >= buf_start_) {
      buf_.resize(pos - buf_start_);
    } else {
      buf_.clear();
      buf_start_ = pos;
    }
  }

  Status Pad(uint64_t align) {
    static const std::byte kZeros[4096] = {};
    uint64_t pad = format::AlignUp(Tell(), align) - Tell();
    while (pad > 0) {
      const uint64_t n = std::min<uint64_t>(pad, sizeof kZeros);
      DLFS_RETURN_IF_ERROR(Write({kZeros, n}));
      pad -= n;
    }
    return Status::Ok();
  }

  Result<uint32_t> DirId(std::string_view dir_path, std::string_view full) {
    auto it = dir_ids_.find(std::string(dir_path));
    if (it != dir_ids_.end()) return it->second;
    const size_t slash = dir_path.rfind('/');
    const std::string_view parent_path =
        slash == dir_path.npos ? std::string_view() : dir_path.substr(0, slash);
    const std::string_view name = slash == dir_path.npos ? dir_path : dir_path.substr(slash + 1);
    DLFS_RETURN_IF_ERROR(ValidateComponent(name, full));
    DLFS_ASSIGN_OR_RETURN(const uint32_t parent, DirId(parent_path, full));
    if (dirs_.size() >= format::kNone - 1) return Status::InvalidArgument("too many directories");
    const uint32_t id = static_cast<uint32_t>(dirs_.size());
    dirs_.push_back(PendingDir{parent, names_.size(), static_cast<uint32_t>(name.size())});
    names_.append(name);
    dir_ids_.emplace(std::string(dir_path), id);
    return id;
  }

  std::string_view Name(uint64_t off, uint32_t len) const {
    return std::string_view(names_).substr(off, len);
  }

  Status Finish();

  // Moves the finished temporary file to path_, never replacing an existing
  // file unless overwrite was asked for.
  Status Publish() {
    const auto exists = [&] {
      return Status::AlreadyExists(path_ + ": already exists (use --force to replace it)");
    };
    if (options_.overwrite) {
      if (::rename(temp_path_.c_str(), path_.c_str()) == 0) return Status::Ok();
      return Status::FromErrno(errno, "rename " + temp_path_ + " to " + path_);
    }
    if (::renameat2(AT_FDCWD, temp_path_.c_str(), AT_FDCWD, path_.c_str(), RENAME_NOREPLACE) == 0) {
      return Status::Ok();
    }
    if (errno == EEXIST) return exists();
    if (errno != EINVAL && errno != ENOSYS) {
      return Status::FromErrno(errno, "rename " + temp_path_ + " to " + path_);
    }
    // File systems without RENAME_NOREPLACE (some NFS and FUSE ones): link()
    // also fails rather than replace an existing name.
    if (::link(temp_path_.c_str(), path_.c_str()) != 0) {
      if (errno == EEXIST) return exists();
      return Status::FromErrno(errno, "link " + temp_path_ + " to " + path_);
    }
    ::unlink(temp_path_.c_str());
    return Status::Ok();
  }
};

VolumeBuilder::VolumeBuilder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

VolumeBuilder::~VolumeBuilder() {
  if (impl_->fd_ >= 0) ::close(impl_->fd_);
  if (!impl_->finished_ && !impl_->temp_path_.empty()) ::unlink(impl_->temp_path_.c_str());
}

Result<std::unique_ptr<VolumeBuilder>> VolumeBuilder::Create(const std::string& path,
                                                             Options options) {
  const uint32_t a = options.align;
  if (a == 0 || (a & (a - 1)) != 0 || a > format::kMaxDataAlignment) {
    return Status::InvalidArgument("alignment must be a power of two from 1 to 1 MiB, not " +
                                   std::to_string(a));
  }
  if (path.empty()) return Status::InvalidArgument("empty volume path");
  if (!options.overwrite && PathExists(path)) {
    return Status::AlreadyExists(path + ": already exists (use --force to replace it)");
  }
  auto impl = std::make_unique<Impl>();
  impl->path_ = path;
  impl->options_ = options;
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string tmp =
        path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      impl->fd_ = fd;
      impl->temp_path_ = std::move(tmp);
      break;
    }
    if (errno != EEXIST) return Status::FromErrno(errno, tmp);
  }
  if (impl->fd_ < 0) return Status::AlreadyExists(path + ": cannot pick a temporary file name");
  impl->buf_.reserve(kWriteBuffer);
  return std::unique_ptr<VolumeBuilder>(new VolumeBuilder(std::move(impl)));
}

void VolumeBuilder::SetClassNames(std::vector<std::string> names) {
  impl_->class_names_ = std::move(names);
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

Status VolumeBuilder::BeginSample(std::string_view path, uint32_t label) {
  Impl& m = *impl_;
  if (m.finished_ || m.fd_ < 0) return Status::InvalidArgument("builder already finished");
  if (m.in_sample_) return Status::InvalidArgument("BeginSample while a sample is open");
  if (label == format::kNone - 1) return Status::InvalidArgument("label out of range");
  const size_t slash = path.rfind('/');
  const std::string_view dir = slash == path.npos ? std::string_view() : path.substr(0, slash);
  const std::string_view name = slash == path.npos ? path : path.substr(slash + 1);
  DLFS_RETURN_IF_ERROR(ValidateComponent(name, path));
  DLFS_ASSIGN_OR_RETURN(const uint32_t dir_id, m.DirId(dir, path));
  if (m.samples_.size() >= format::kNone - 1) return Status::InvalidArgument("too many samples");
  DLFS_RETURN_IF_ERROR(m.Pad(m.options_.align));
  m.cur_ = PendingSample{
      m.Tell(), 0, 0, label, dir_id, m.names_.size(), static_cast<uint32_t>(name.size())};
  m.names_.append(name);
  m.in_sample_ = true;
  return Status::Ok();
}

Status VolumeBuilder::Append(std::span<const std::byte> data) {
  Impl& m = *impl_;
  if (!m.in_sample_) return Status::InvalidArgument("Append without BeginSample");
  if (data.size() > uint64_t{0xFFFFFFFFu} - m.cur_.length) {
    return Status::InvalidArgument("sample larger than 4 GiB - 1 bytes");
  }
  m.cur_.crc32c = crc32c::Extend(m.cur_.crc32c, data.data(), data.size());
  m.cur_.length += static_cast<uint32_t>(data.size());
  return m.Write(data);
}

Status VolumeBuilder::EndSample() {
  Impl& m = *impl_;
  if (!m.in_sample_) return Status::InvalidArgument("EndSample without BeginSample");
  m.in_sample_ = false;
  m.samples_.push_back(m.cur_);
  m.data_bytes_ += m.cur_.length;
  if (m.cur_.label != format::kNone) {
    m.max_label_plus_one_ = std::max(m.max_label_plus_one_, m.cur_.label + 1);
  }
  return Status::Ok();
}

void VolumeBuilder::AbortSample() {
  Impl& m = *impl_;
  if (!m.in_sample_) return;
  m.in_sample_ = false;
  m.names_.resize(m.cur_.name_offset);
  m.Rewind(m.cur_.offset);
}

Status VolumeBuilder::Finish() {
  Status st = impl_->Finish();
  impl_->finished_ = st.ok();
  if (impl_->fd_ >= 0) {
    ::close(impl_->fd_);
    impl_->fd_ = -1;
  }
  if (!st.ok()) ::unlink(impl_->temp_path_.c_str());
  return st;
}

Status VolumeBuilder::Impl::Finish() {
  if (fd_ < 0 || finished_) return Status::InvalidArgument("builder already finished");
  if (in_sample_) return Status::InvalidArgument("Finish with a sample still open");
  const uint64_t data_offset = format::kSuperblockSize;
  const uint64_t data_end = Tell();
  DLFS_RETURN_IF_ERROR(Pad(format::kRegionAlignment));
  DLFS_RETURN_IF_ERROR(Flush());
  const uint64_t dir_offset = Tell();

  // Breadth-first directory order with each directory's children sorted by
  // name (docs/format.md §4).
  std::vector<std::vector<uint32_t>> children(dirs_.size());
  for (uint32_t d = 1; d < dirs_.size(); ++d) children[dirs_[d].parent].push_back(d);
  auto dir_name = [&](uint32_t d) { return Name(dirs_[d].name_offset, dirs_[d].name_length); };
  std::vector<uint32_t> order{0};  // builder ids in volume order
  std::vector<uint32_t> new_id(dirs_.size());
  for (size_t i = 0; i < order.size(); ++i) {
    new_id[order[i]] = static_cast<uint32_t>(i);
    auto& c = children[order[i]];
    std::sort(c.begin(), c.end(),
              [&](uint32_t a, uint32_t b) { return dir_name(a) < dir_name(b); });
    order.insert(order.end(), c.begin(), c.end());
  }

  std::vector<uint32_t> perm(samples_.size());
  for (uint32_t i = 0; i < perm.size(); ++i) perm[i] = i;
  auto sample_name = [&](uint32_t s) {
    return Name(samples_[s].name_offset, samples_[s].name_length);
  };
  std::sort(perm.begin(), perm.end(), [&](uint32_t a, uint32_t b) {
    const uint32_t da = new_id[samples_[a].dir], db = new_id[samples_[b].dir];
    if (da != db) return da < db;
    return sample_name(a) < sample_name(b);
  });

  auto full_path = [&](uint32_t dir, std::string_view leaf) {
    std::string p(leaf);
    for (; dir != 0; dir = dirs_[dir].parent) p.insert(0, std::string(dir_name(dir)) + "/");
    return p;
  };
  for (size_t i = 1; i < perm.size(); ++i) {
    const PendingSample& a = samples_[perm[i - 1]];
    const PendingSample& b = samples_[perm[i]];
    if (a.dir == b.dir && sample_name(perm[i - 1]) == sample_name(perm[i])) {
      return Status::InvalidArgument("two samples have the path '" +
                                     full_path(b.dir, sample_name(perm[i])) + "'");
    }
  }

  // Lay out the region: header, samples, dirs, classes, strings.
  const uint64_t n = samples_.size(), nd = dirs_.size();
  const uint64_t nc = std::max<uint64_t>(class_names_.size(), max_label_plus_one_);
  format::DirectoryHeader h{};
  h.magic = format::kDirectoryMagic;
  h.header_size = format::kDirectoryHeaderSize;
  h.sample_count = n;
  h.dir_count = nd;
  h.class_count = nc;
  h.sample_entry_size = sizeof(format::SampleEntry);
  h.dir_entry_size = sizeof(format::DirEntry);
  h.class_entry_size = sizeof(format::ClassEntry);
  h.samples_offset = format::kDirectoryHeaderSize;
  h.dirs_offset = h.samples_offset + n * sizeof(format::SampleEntry);
  h.classes_offset = h.dirs_offset + nd * sizeof(format::DirEntry);
  h.strings_offset = h.classes_offset + nc * sizeof(format::ClassEntry);

  std::string pool;
  pool.reserve(names_.size());
  auto intern = [&](std::string_view s) -> Result<uint32_t> {
    if (pool.size() + s.size() >= format::kNone) {
      return Status::InvalidArgument("names exceed the 4 GiB string pool of format v1");
    }
    const uint32_t off = static_cast<uint32_t>(pool.size());
    pool.append(s);
    return off;
  };

  std::vector<format::DirEntry> dir_entries(nd);
  std::vector<uint32_t> first_sample(nd, 0), sample_count(nd, 0);
  for (uint32_t s : perm) ++sample_count[new_id[samples_[s].dir]];
  for (uint64_t k = 1; k < nd; ++k) first_sample[k] = first_sample[k - 1] + sample_count[k - 1];
  uint32_t next_child = 1;
  for (uint64_t k = 0; k < nd; ++k) {
    const uint32_t old = order[k];
    format::DirEntry& e = dir_entries[k];
    e.parent = k == 0 ? format::kNone : new_id[dirs_[old].parent];
    DLFS_ASSIGN_OR_RETURN(e.name_offset, intern(dir_name(old)));
    e.name_length = static_cast<uint16_t>(dirs_[old].name_length);
    e.first_child = next_child;
    e.child_count = static_cast<uint32_t>(children[old].size());
    next_child += e.child_count;
    e.first_sample = first_sample[k];
    e.sample_count = sample_count[k];
  }

  std::vector<format::SampleEntry> sample_entries(n);
  for (uint64_t i = 0; i < n; ++i) {
    const PendingSample& p = samples_[perm[i]];
    format::SampleEntry& e = sample_entries[i];
    e.offset = p.offset;
    e.length = p.length;
    e.crc32c = p.crc32c;
    e.label = p.label;
    e.parent = new_id[p.dir];
    DLFS_ASSIGN_OR_RETURN(e.name_offset, intern(sample_name(perm[i])));
    e.name_length = static_cast<uint16_t>(p.name_length);
    e.target = 0;
  }
  // A sub-directory and a sample with one name would make a path ambiguous.
  for (uint64_t k = 0; k < nd; ++k) {
    for (uint32_t c : children[order[k]]) {
      const auto first = sample_entries.begin() + first_sample[k];
      const auto name_of = [&](const format::SampleEntry& e) {
        return std::string_view(pool).substr(e.name_offset, e.name_length);
      };
      if (std::ranges::binary_search(first, first + sample_count[k], dir_name(c), {}, name_of)) {
        return Status::InvalidArgument("'" + full_path(dirs_[c].parent, dir_name(c)) +
                                       "' is both a sample and a directory");
      }
    }
  }

  std::vector<format::ClassEntry> class_entries(nc);
  for (uint64_t c = 0; c < nc; ++c) {
    const std::string name = c < class_names_.size() ? class_names_[c] : std::to_string(c);
    DLFS_ASSIGN_OR_RETURN(class_entries[c].name_offset, intern(name));
    class_entries[c].name_length = static_cast<uint32_t>(name.size());
  }
  h.string_bytes = pool.size();

  std::vector<std::byte> region(h.strings_offset + pool.size());
  auto put = [&](uint64_t off, const void* src, size_t len) {
    if (len) std::memcpy(region.data() + off, src, len);
  };
  put(0, &h, sizeof h);
  put(h.samples_offset, sample_entries.data(), n * sizeof(format::SampleEntry));
  put(h.dirs_offset, dir_entries.data(), nd * sizeof(format::DirEntry));
  put(h.classes_offset, class_entries.data(), nc * sizeof(format::ClassEntry));
  put(h.strings_offset, pool.data(), pool.size());
  const uint32_t region_crc = crc32c::Value(region.data(), region.size());
  DLFS_RETURN_IF_ERROR(Write(region));
  DLFS_RETURN_IF_ERROR(Pad(format::kRegionAlignment));
  DLFS_RETURN_IF_ERROR(Flush());
  const uint64_t volume_size = Tell() + format::kSuperblockSize;

  format::Superblock sb{};
  if (::getrandom(sb.uuid, sizeof sb.uuid, 0) != sizeof sb.uuid) {
    return Status::FromErrno(errno, "getrandom");
  }
  sb.uuid[6] = (sb.uuid[6] & 0x0f) | 0x40;  // RFC 4122 version 4
  sb.uuid[8] = (sb.uuid[8] & 0x3f) | 0x80;
  sb.volume_size = volume_size;
  sb.created_unix_ns =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  sb.sample_count = n;
  sb.dir_count = nd;
  sb.class_count = nc;
  sb.data_bytes = data_bytes_;
  sb.data_alignment = options_.align;
  sb.target_index = 0;
  sb.target_count = 1;
  sb.region_count = 2;
  sb.regions[0] = {static_cast<uint32_t>(format::RegionKind::kData),
                   0,
                   data_offset,
                   data_end - data_offset,
                   0,
                   0};
  sb.regions[1] = {static_cast<uint32_t>(format::RegionKind::kDirectory),
                   0,
                   dir_offset,
                   region.size(),
                   region_crc,
                   0};
  sb.targets[0].size = volume_size;
  format::SealSuperblock(&sb);

  // Drop anything an aborted sample left past the end and make everything
  // else durable before the primary superblock: a file whose primary is
  // valid then has all of its bytes on disk, even before the rename.
  if (::ftruncate(fd_, static_cast<off_t>(volume_size)) != 0) {
    return Status::FromErrno(errno, temp_path_ + ": ftruncate");
  }
  DLFS_RETURN_IF_ERROR(PwriteFull(fd_, &sb, sizeof sb, volume_size - sizeof sb, temp_path_));
  if (::fdatasync(fd_) != 0) return Status::FromErrno(errno, temp_path_ + ": fdatasync");
  DLFS_RETURN_IF_ERROR(PwriteFull(fd_, &sb, sizeof sb, 0, temp_path_));
  if (::fsync(fd_) != 0) return Status::FromErrno(errno, temp_path_ + ": fsync");
  DLFS_RETURN_IF_ERROR(Publish());
  return SyncParentDirectory(path_);
}

uint64_t VolumeBuilder::sample_count() const { return impl_->samples_.size(); }
uint64_t VolumeBuilder::data_bytes() const { return impl_->data_bytes_; }
uint64_t VolumeBuilder::class_count() const {
  return std::max<uint64_t>(impl_->class_names_.size(), impl_->max_label_plus_one_);
}
const std::string& VolumeBuilder::path() const { return impl_->path_; }
const std::string& VolumeBuilder::temp_path() const { return impl_->temp_path_; }

}  // namespace dlfs
