#include "common/file_util.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace dlfs {

Status PreadFull(int fd, void* buf, size_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, path + ": read at offset " + std::to_string(offset));
    }
    if (r == 0) {
      return Status(StatusCode::kIOError,
                    path + ": unexpected end of file at offset " + std::to_string(offset));
    }
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

Status PwriteFull(int fd, const void* buf, size_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t r = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, path + ": write at offset " + std::to_string(offset));
    }
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

Result<uint64_t> FileSize(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, path);
  if (S_ISREG(st.st_mode)) return static_cast<uint64_t>(st.st_size);
  if (S_ISBLK(st.st_mode)) {
    uint64_t bytes = 0;
    if (::ioctl(fd, BLKGETSIZE64, &bytes) != 0) return Status::FromErrno(errno, path);
    return bytes;
  }
  if (S_ISDIR(st.st_mode)) return Status::InvalidArgument(path + ": is a directory");
  return Status::InvalidArgument(path + ": not a regular file or block device");
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

Status SyncParentDirectory(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  ScopedFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return Status::FromErrno(errno, dir);
  if (::fsync(fd.get()) != 0) return Status::FromErrno(errno, dir + ": fsync");
  return Status::Ok();
}

std::shared_ptr<std::byte> AllocateLarge(size_t n) {
  const size_t len = n == 0 ? 1 : n;
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  ::madvise(p, len, MADV_HUGEPAGE);  // advisory: ignored where THP is off
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(p),
                                    [len](std::byte* q) { ::munmap(q, len); });
}

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) ::close(fd_);
}

ScopedFd& ScopedFd::operator=(ScopedFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

}  // namespace dlfs
