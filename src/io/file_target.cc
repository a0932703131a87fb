// Files and block devices as targets: read through a descriptor; created
// under a temporary name beside the destination and published by rename
// (docs/format.md §6).
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>

#include "common/file_util.h"
#include "io/target_kinds.h"

namespace dlfs::io_internal {

namespace {

// Takes (or tests) a write lock on the whole file behind `fd`: an open file
// description lock, held until the descriptor is closed, released by the
// kernel when its process dies (SIGKILL included).
bool LockWhole(int fd) {
  struct flock lk {};
  lk.l_type = F_WRLCK;
  lk.l_whence = SEEK_SET;
  return ::fcntl(fd, F_OFD_SETLK, &lk) == 0;
}

// If `name` is "<base>.tmp.<pid>.<n>", the pid; else 0.
pid_t TemporaryOwner(std::string_view name, std::string_view base) {
  if (!name.starts_with(base) || !name.substr(base.size()).starts_with(".tmp.")) return 0;
  std::string_view rest = name.substr(base.size() + 5);
  const size_t dot = rest.find('.');
  if (dot == rest.npos || dot == 0 || dot + 1 == rest.size()) return 0;
  const auto digits = [](std::string_view d) {
    return d.find_first_not_of("0123456789") == d.npos;
  };
  if (!digits(rest.substr(0, dot)) || !digits(rest.substr(dot + 1)) || dot > 9) return 0;
  return static_cast<pid_t>(std::stol(std::string(rest.substr(0, dot))));
}

class FileTarget final : public Target {
 public:
  FileTarget(std::string path, int fd, TargetKind kind, uint64_t size)
      : Target(std::move(path)), fd_(fd), kind_(kind), size_(size) {}

  // A created target: `fd` is the temporary file `temp`.
  FileTarget(std::string path, int fd, std::string temp, bool overwrite)
      : Target(std::move(path)), fd_(fd), temp_(std::move(temp)), overwrite_(overwrite) {}

  ~FileTarget() override {
    if (fd_ >= 0) ::close(fd_);
    if (!temp_.empty() && !published_) ::unlink(temp_.c_str());
  }

  const std::string& location() const override {
    return temp_.empty() || published_ ? name() : temp_;
  }
  // What a failed write names: the volume being created, not its temporary
  // file, which is gone by the time the error is read (the builder removes
  // it when it gives up).
  std::string Writing() const {
    if (temp_.empty() || published_) return name();
    return name() + " (being written; its temporary file is removed on failure)";
  }
  TargetKind kind() const override { return kind_; }
  uint64_t size() const override { return size_; }
  int fd() const override { return fd_; }

  Status Read(void* buf, size_t n, uint64_t offset, const std::string& what) const override {
    return PreadFull(fd_, buf, n, offset, what);
  }

  void ExpectRandomReads() override { ::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM); }

  void Close() override {
    if (closed_.exchange(true, std::memory_order_acq_rel)) return;
    // Not close(): another thread may be inside pread on the descriptor, and
    // a number freed now could be reused for an unrelated file before that
    // thread (or a caller of fd()) uses it. Pointing it at /dev/null drops
    // the reference to the target at once and keeps the number.
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd < 0) return;  // the caller refuses reads anyway; closed on destruction
    ::dup3(null_fd, fd_, O_CLOEXEC);
    ::close(null_fd);
  }

  Status Write(const void* buf, size_t n, uint64_t offset) override {
    DLFS_RETURN_IF_ERROR(PwriteFull(fd_, buf, n, offset, Writing()));
    size_ = std::max<uint64_t>(size_, offset + n);
    return Status::Ok();
  }

  Status Resize(uint64_t bytes, const std::string& /*needed_by*/) override {
    if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0) {
      return Status::FromErrno(errno, Writing() + ": ftruncate");
    }
    size_ = bytes;
    return Status::Ok();
  }

  // fsync, not fdatasync: a created file is synced before it is published,
  // and everything about it, not only what reading it back needs, is then
  // durable; the cost is the same once its size has changed.
  Status Sync() override {
    if (::fsync(fd_) != 0) return Status::FromErrno(errno, Writing() + ": fsync");
    return Status::Ok();
  }

  Status Publish() override {
    if (temp_.empty()) return Status::InvalidArgument(name() + ": not created here");
    const auto exists = [&] {
      return Status::AlreadyExists(name() + ": already exists (set overwrite to replace it)");
    };
    const std::string what = "rename " + temp_ + " to " + name();
    if (overwrite_) {
      if (::rename(temp_.c_str(), name().c_str()) != 0) return Status::FromErrno(errno, what);
      published_ = true;
      return Status::Ok();
    }
    if (::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, name().c_str(), RENAME_NOREPLACE) == 0) {
      published_ = true;
      return Status::Ok();
    }
    if (errno == EEXIST) return exists();
    if (errno != EINVAL && errno != ENOSYS) return Status::FromErrno(errno, what);
    // File systems without RENAME_NOREPLACE (some NFS and FUSE ones): link()
    // also fails rather than replace an existing name.
    if (::link(temp_.c_str(), name().c_str()) != 0) {
      if (errno == EEXIST) return exists();
      return Status::FromErrno(errno, "link " + temp_ + " to " + name());
    }
    published_ = true;
    ::unlink(temp_.c_str());
    return Status::Ok();
  }

  Status SyncPublished() override { return SyncParentDirectory(name()); }

  void Withdraw(size_t /*header_bytes*/) override {
    if (!published_) return;
    ::unlink(name().c_str());
    published_ = false;
  }

 private:
  int fd_;
  TargetKind kind_ = TargetKind::kFile;
  uint64_t size_ = 0;
  std::atomic<bool> closed_{false};
  std::string temp_;  // kCreate: the temporary name, until published
  bool overwrite_ = false;
  bool published_ = false;
};

Result<std::unique_ptr<Target>> OpenForReading(const std::string& path, const std::string& what) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return Status::FromErrno(errno, what);
  DLFS_ASSIGN_OR_RETURN(const uint64_t size, FileSize(fd.get(), what));
  struct stat st {};
  const TargetKind kind = ::fstat(fd.get(), &st) == 0 && S_ISBLK(st.st_mode)
                              ? TargetKind::kBlockDevice
                              : TargetKind::kFile;
  return std::unique_ptr<Target>(new FileTarget(path, fd.release(), kind, size));
}

Result<std::unique_ptr<Target>> Create(const std::string& path, bool overwrite) {
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string tmp =
        path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
    // O_RDWR: the lock below needs a descriptor open for writing.
    const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      // Held while the target is open: RemoveStaleTemporaries in another
      // process leaves this file alone, even if it cannot see our pid.
      (void)LockWhole(fd);
      return std::unique_ptr<Target>(new FileTarget(path, fd, std::move(tmp), overwrite));
    }
    if (errno != EEXIST) {
      // Named by the file the caller asked for, not the temporary one.
      const int err = errno;
      const std::string dir = std::filesystem::path(path).parent_path().string();
      struct stat st {};
      if (err == ENOENT || err == ENOTDIR) {
        if (!dir.empty() && (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))) {
          const Status base = Status::FromErrno(err, path);
          return Status(base.code(),
                        path + ": cannot create it: directory " + dir +
                            (err == ENOTDIR ? " is not a directory" : " does not exist"),
                        err);
        }
      }
      return Status::FromErrno(err, path + " (creating " + tmp + ")");
    }
  }
  return Status::AlreadyExists(path + ": cannot pick a temporary file name");
}

}  // namespace

Result<std::unique_ptr<Target>> OpenFileTarget(const std::string& path, TargetMode mode,
                                               const TargetOptions& options) {
  if (mode == TargetMode::kCreate) return Create(path, options.overwrite);
  return OpenForReading(path, options.what.empty() ? path : options.what);
}

std::vector<std::string> RemoveStaleFileTemporaries(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  const fs::path p(path);
  const std::string base = p.filename().string();
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const pid_t pid = TemporaryOwner(name, base);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // running (or not ours to ask)
    const std::string tmp = (p.parent_path().empty() ? fs::path(name) : p.parent_path() / name);
    ScopedFd fd(::open(tmp.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    struct stat st;
    if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (st.st_uid != ::geteuid() && ::geteuid() != 0) continue;
    if (!LockWhole(fd.get())) continue;  // in use, or the file system cannot tell
    if (::unlink(tmp.c_str()) == 0) {
      removed.push_back(tmp + " (left by process " + std::to_string(pid) + ", " +
                        std::to_string(st.st_size) + " bytes)");
    }
  }
  return removed;
}

}  // namespace dlfs::io_internal
