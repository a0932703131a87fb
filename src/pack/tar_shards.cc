#include "pack/tar_shards.h"

#include <archive_entry.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

namespace dlfs::pack_internal {

std::string_view WebDatasetKey(std::string_view path) {
  const size_t slash = path.rfind('/');
  const size_t start = slash == path.npos ? 0 : slash + 1;
  const size_t dot = path.find('.', start);
  return dot == path.npos ? path : path.substr(0, dot);
}

std::string_view WebDatasetExtension(std::string_view path) {
  return path.substr(WebDatasetKey(path).size());
}

std::string TarMemberTypeName(const TarMember& m) {
  switch (m.type) {
    case TarMemberType::kFile:
      return "regular file";
    case TarMemberType::kHardLink:
      return "hard link";
    case TarMemberType::kDirectory:
      return "directory";
    case TarMemberType::kSymlink:
      return "symbolic link";
    case TarMemberType::kOther:
      break;
  }
  return "special file (FIFO or device)";
}

Status CheckTarMemberPath(const std::string& shard, std::string_view path) {
  auto bad = [&](const char* why) {
    return Status::InvalidArgument(shard + ": member '" + std::string(path) + "' " + why +
                                   "; dlfs stores member paths as they are and refuses this one");
  };
  if (path.starts_with('/')) return bad("has an absolute path");
  for (size_t pos = 0; pos <= path.size();) {
    size_t end = path.find('/', pos);
    if (end == path.npos) end = path.size();
    if (path.substr(pos, end - pos) == "..") return bad("has a '..' component");
    pos = end + 1;
  }
  return Status::Ok();
}

namespace {

constexpr uint64_t kMaxBlock = 1 << 20;

std::string StripDotSlash(const char* p) {
  std::string s = p != nullptr ? p : "";
  while (s.starts_with("./")) s.erase(0, 2);
  return s;
}

}  // namespace

TarShardReader::TarShardReader(std::string path, uint32_t shard_index)
    : path_(std::move(path)), shard_(shard_index), a_(nullptr, archive_read_free) {}

TarShardReader::~TarShardReader() = default;

Status TarShardReader::Error(const std::string& what) const {
  const char* msg = a_ ? archive_error_string(a_.get()) : nullptr;
  const int err = a_ ? archive_errno(a_.get()) : 0;
  std::string text = path_ + ": ";
  if (!what.empty()) text += what + ": ";
  text += msg ? msg : "unreadable tar archive";
  return Status(err == ENOENT ? StatusCode::kNotFound : StatusCode::kIOError, std::move(text), err);
}

Status TarShardReader::Open() {
  a_.reset(archive_read_new());
  if (!a_) return Status::Unavailable(path_ + ": cannot allocate a tar reader");
  archive_read_support_filter_all(a_.get());
  archive_read_support_format_tar(a_.get());
  next_ordinal_ = 0;
  data_read_ = 0;
  current_ = TarMember{};
  struct stat st;
  if (::stat(path_.c_str(), &st) != 0) return Status::FromErrno(errno, path_);
  file_size_ = S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0;
  // Reads of 1 MiB, or of the whole file when it is smaller: a small shard
  // need not allocate (and, under ASan, poison) a 1 MiB buffer per open.
  const uint64_t block =
      file_size_ == 0 ? kMaxBlock
                      : std::clamp<uint64_t>((file_size_ + 4095) / 4096 * 4096, 4096, kMaxBlock);
  if (archive_read_open_filename(a_.get(), path_.c_str(), block) != ARCHIVE_OK) return Error();
  return Status::Ok();
}

Result<bool> TarShardReader::Next(TarMember* m) {
  if (!a_) DLFS_RETURN_IF_ERROR(Open());
  archive_entry* entry = nullptr;
  const int r = archive_read_next_header(a_.get(), &entry);
  if (r == ARCHIVE_EOF) return false;
  if (r < ARCHIVE_WARN) return Error();
  // Known once the first header was read: whether the bytes are filtered.
  compressed_ = archive_filter_count(a_.get()) > 1;
  TarMember& cur = current_;
  cur = TarMember{};
  cur.shard = shard_;
  cur.ordinal = next_ordinal_++;
  cur.path = StripDotSlash(archive_entry_pathname(entry));
  const int64_t size = archive_entry_size(entry);
  cur.size = size > 0 ? static_cast<uint64_t>(size) : 0;
  const char* hardlink = archive_entry_hardlink(entry);
  const mode_t type = archive_entry_filetype(entry);
  if (hardlink != nullptr && cur.size == 0) {
    // A hard link without data of its own (GNU and POSIX tar): its bytes
    // are those of the earlier member it names.
    cur.type = TarMemberType::kHardLink;
    cur.link = StripDotSlash(hardlink);
  } else if (hardlink != nullptr || type == AE_IFREG) {
    cur.type = TarMemberType::kFile;  // a pax hard link with data counts as a file
  } else if (type == AE_IFDIR) {
    cur.type = TarMemberType::kDirectory;
  } else if (type == AE_IFLNK) {
    cur.type = TarMemberType::kSymlink;
  } else {
    cur.type = TarMemberType::kOther;
  }
  data_read_ = 0;
  // An uncompressed archive must hold what a header declares: the data
  // follows the header, so it cannot end beyond the file. (A compressed one
  // is checked as it is read: Read fails where the data ends.)
  if (!compressed_ && file_size_ > 0) {
    const int64_t at = archive_read_header_position(a_.get());
    const uint64_t room = at >= 0 ? file_size_ - std::min<uint64_t>(file_size_, at) : file_size_;
    if (cur.size > room) {
      return Status::Corruption(path_ + ": member '" + cur.path + "' declares " +
                                std::to_string(cur.size) + " bytes, but the archive has only " +
                                std::to_string(room) + " bytes from its header on");
    }
  }
  *m = cur;
  return true;
}

Result<size_t> TarShardReader::Read(std::span<std::byte> dst) {
  if (!a_) return Status::InvalidArgument(path_ + ": Read before Next");
  const uint64_t left = current_.size - data_read_;
  if (left == 0) return size_t{0};
  const size_t want = static_cast<size_t>(std::min<uint64_t>(left, dst.size()));
  size_t got = 0;
  while (got < want) {  // archive_read_data may return less than asked
    const la_ssize_t n = archive_read_data(a_.get(), dst.data() + got, want - got);
    if (n < 0) return Error("member '" + current_.path + "'");
    if (n == 0) {
      return Status::Corruption(path_ + ": member '" + current_.path + "' is truncated (" +
                                std::to_string(data_read_ + got) + " of " +
                                std::to_string(current_.size) + " bytes)");
    }
    got += static_cast<size_t>(n);
  }
  data_read_ += got;
  return got;
}

Result<TarMember> TarShardReader::SeekTo(uint64_t ordinal) {
  if (!a_ || next_ordinal_ > ordinal) DLFS_RETURN_IF_ERROR(Open());
  TarMember m;
  while (next_ordinal_ <= ordinal) {
    DLFS_ASSIGN_OR_RETURN(const bool more, Next(&m));
    if (!more) {
      return Status::Corruption(path_ + ": has no member " + std::to_string(ordinal) +
                                " any more (changed while being packed?)");
    }
  }
  return m;
}

Result<TarKeyIndex> TarKeyIndex::Build(const std::vector<std::string>& shards) {
  TarKeyIndex index;
  for (uint32_t s = 0; s < shards.size(); ++s) {
    TarShardReader reader(shards[s], s);
    TarMember m;
    while (true) {
      DLFS_ASSIGN_OR_RETURN(const bool more, reader.Next(&m));
      if (!more) break;
      if (m.type != TarMemberType::kDirectory && !m.path.empty()) index.Add(std::move(m));
    }
  }
  return index;
}

uint32_t TarKeyIndex::Add(TarMember member) {
  const uint32_t id = static_cast<uint32_t>(members_.size());
  const std::string key(WebDatasetKey(member.path));
  auto [it, fresh] = by_key_.try_emplace(key);
  if (fresh) keys_.push_back(key);
  it->second.push_back(id);
  members_.push_back(std::move(member));
  return id;
}

std::span<const uint32_t> TarKeyIndex::MembersOf(std::string_view key) const {
  const auto it = by_key_.find(std::string(key));
  if (it == by_key_.end()) return {};
  return it->second;
}

}  // namespace dlfs::pack_internal
