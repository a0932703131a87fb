#include "builder/spill_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace dlfs::builder_internal {

namespace {

constexpr size_t kBuffer = size_t{1} << 20;

// Beside the volume (its file system has room for it), or for a volume
// written to an NBD export or an s3:// object, in $TMPDIR (/tmp): the
// records of the directory, about 10 bytes per sample, not the data.
std::string DirectoryOf(const std::string& path) {
  if (path.find("://") != std::string::npos) {
    const char* tmp = std::getenv("TMPDIR");
    return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

Result<std::unique_ptr<SpillFile>> SpillFile::Create(const std::string& near_path) {
  const std::string dir = DirectoryOf(near_path);
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    // File systems without O_TMPFILE: a named file, unlinked at once.
    std::string templ = dir + "/.dlfs-spill-XXXXXX";
    fd = ::mkostemp(templ.data(), O_CLOEXEC);
    if (fd < 0) return Status::FromErrno(errno, "temporary file in " + dir);
    ::unlink(templ.c_str());
  }
  return std::unique_ptr<SpillFile>(new SpillFile(fd, "temporary file in " + dir));
}

SpillFile::~SpillFile() {
  Unmap();
  ::close(fd_);
}

void SpillFile::Unmap() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

Status SpillFile::Flush() {
  size_t done = 0;
  while (done < buf_.size()) {
    const ssize_t n =
        ::pwrite(fd_, buf_.data() + done, buf_.size() - done, static_cast<off_t>(flushed_ + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, where_);
    }
    done += static_cast<size_t>(n);
  }
  flushed_ += buf_.size();
  buf_.clear();
  return Status::Ok();
}

Status SpillFile::Append(std::span<const std::byte> data) {
  if (buf_.capacity() < kBuffer) buf_.reserve(kBuffer);
  while (!data.empty()) {
    const size_t n = std::min(kBuffer - buf_.size(), data.size());
    buf_.insert(buf_.end(), data.begin(), data.begin() + n);
    data = data.subspan(n);
    size_ += n;
    if (buf_.size() == kBuffer) DLFS_RETURN_IF_ERROR(Flush());
  }
  return Status::Ok();
}

Status SpillFile::WriteAt(const void* data, size_t n, uint64_t offset) {
  DLFS_RETURN_IF_ERROR(Flush());
  const auto* p = static_cast<const std::byte*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::pwrite(fd_, p + done, n - done, static_cast<off_t>(offset + done));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, where_);
    }
    done += static_cast<size_t>(w);
  }
  size_ = std::max<uint64_t>(size_, offset + n);
  flushed_ = std::max<uint64_t>(flushed_, offset + n);
  return Status::Ok();
}

Result<const std::byte*> SpillFile::Map() {
  DLFS_RETURN_IF_ERROR(Flush());
  Unmap();
  if (size_ == 0) return static_cast<const std::byte*>(nullptr);
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mapping a " + where_);
  map_ = p;
  map_bytes_ = size_;
  return static_cast<const std::byte*>(p);
}

Status SpillFile::CopyTo(uint64_t offset, uint64_t n,
                         const std::function<Status(std::span<const std::byte>)>& sink) {
  DLFS_RETURN_IF_ERROR(Flush());
  constexpr uint64_t kPiece = uint64_t{8} << 20;
  std::vector<std::byte> piece(static_cast<size_t>(std::min(n, kPiece)));
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min(n, kPiece));
    const ssize_t got = ::pread(fd_, piece.data(), want, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, where_);
    }
    if (got == 0) return Status::IOError(where_ + ": shorter than written");
    DLFS_RETURN_IF_ERROR(sink({piece.data(), static_cast<size_t>(got)}));
    offset += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
  return Status::Ok();
}

}  // namespace dlfs::builder_internal
