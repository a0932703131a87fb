// Small POSIX helpers that turn errno into Status with the file's name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "dlfs/status.h"

namespace dlfs {

// Reads exactly n bytes at `offset`, retrying short reads and EINTR. Hitting
// end of file first is an IOError saying so (the file shrank or is truncated).
Status PreadFull(int fd, void* buf, size_t n, uint64_t offset, const std::string& path);

// Writes exactly n bytes at `offset`, retrying short writes and EINTR.
Status PwriteFull(int fd, const void* buf, size_t n, uint64_t offset, const std::string& path);

// Size in bytes of a regular file or block device.
Result<uint64_t> FileSize(int fd, const std::string& path);

// Whether anything (file, directory, dangling link) exists at `path`.
bool PathExists(const std::string& path);

// Flushes the directory entry of `path` (after a rename) to stable storage.
Status SyncParentDirectory(const std::string& path);

// A zeroed, page-aligned buffer of `n` bytes for large data (the directory
// region, loader and exchange buffers): anonymous memory with transparent
// huge pages requested, because filling hundreds of MB through 4 KiB
// first-touch faults costs more than reading it on VMs with shadow paging
// (docs/benchmarks.md). nullptr when out of memory.
std::shared_ptr<std::byte> AllocateLarge(size_t n);

// Closes fd on scope exit.
class ScopedFd {
 public:
  explicit ScopedFd(int fd = -1) : fd_(fd) {}
  ~ScopedFd();
  ScopedFd(ScopedFd&& o) noexcept : fd_(o.release()) {}
  ScopedFd& operator=(ScopedFd&& o) noexcept;
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }

 private:
  int fd_;
};

}  // namespace dlfs
