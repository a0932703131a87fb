#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "dlfs/nbd.h"
#include "dlfs/s3.h"
#include "io/io_backend.h"

namespace dlfs::io_internal {

namespace {
constexpr uint32_t kDefaultDirectAlignment = 4096;
}

Targets::~Targets() {
  for (int fd : fds) ::close(fd);
}

Result<std::unique_ptr<Targets>> OpenTargets(const std::vector<std::string>& paths, bool direct) {
  auto t = std::make_unique<Targets>();
  t->paths = paths;
  t->direct = direct;
  if (!direct) t->note = "direct I/O off";  // asked for, or chosen for small samples
  for (const std::string& path : paths) {
    t->remote.push_back(IsNbdUri(path));
    t->s3.push_back(IsS3Url(path));
    if (path.empty() || t->remote.back() || t->s3.back()) {
      // A target this process does not read (a shard held by another
      // node): no file; a read of it fails with EBADF, naming the target.
      // An NBD target: its backend connects.
      t->fds.push_back(-1);
      continue;
    }
    int fd = -1;
    if (t->direct) {
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
      if (fd < 0 && errno == EINVAL) {
        // The file system has no O_DIRECT (tmpfs on older kernels, some FUSE
        // file systems): read through the page cache instead, and say so.
        t->direct = false;
        t->note = "O_DIRECT is not supported for " + path;
      } else if (fd < 0) {
        return Status::FromErrno(errno, path);
      }
    }
    if (fd < 0) {
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return Status::FromErrno(errno, path);
    }
    t->fds.push_back(fd);
    if (t->direct) {
      struct statx stx;
      uint32_t align = kDefaultDirectAlignment;
      if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
          (stx.stx_mask & STATX_DIOALIGN) != 0 && stx.stx_dio_offset_align != 0) {
        align = std::max(stx.stx_dio_offset_align, stx.stx_dio_mem_align);
      }
      // Extents are widened to 4 KiB at least: it is the page size and what
      // NVMe devices prefer, and it keeps alignment stable across targets.
      t->alignment = std::max({t->alignment, align, kDefaultDirectAlignment});
    }
  }
  if (!t->direct) {
    // Some fds may have been opened with O_DIRECT before a later target
    // refused it; reopen all of them buffered so the engine is uniform.
    for (size_t i = 0; i < t->fds.size(); ++i) {
      if (t->fds[i] < 0) continue;
      const int fd = ::open(paths[i].c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return Status::FromErrno(errno, paths[i]);
      ::close(t->fds[i]);
      t->fds[i] = fd;
    }
    t->alignment = 1;
  }
  return t;
}

}  // namespace dlfs::io_internal
