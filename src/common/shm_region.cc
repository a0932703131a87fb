#include "common/shm_region.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace dlfs::shm {

namespace {

Status SystemError(const std::string& what) {
  const int e = errno;
  return Status::IOError(what + ": " + std::strerror(e), e);
}

// A temporary region (".NAME.PID.N") whose maker still runs: it locks the
// file only once it is created, so the lock cannot tell.
bool CreatorAlive(const std::string& tmp_name) {
  const size_t last = tmp_name.rfind('.');
  const size_t before =
      last == std::string::npos || last == 0 ? std::string::npos : tmp_name.rfind('.', last - 1);
  if (before == std::string::npos) return false;
  char* end = nullptr;
  const long pid = std::strtol(tmp_name.c_str() + before + 1, &end, 10);
  if (end != tmp_name.c_str() + last || pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

bool SameFile(const std::string& path, const struct stat& st) {
  struct stat now {};
  return ::stat(path.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev;
}

}  // namespace

std::string RegionDir(const std::string& dir) {
  if (!dir.empty()) return dir;
  const char* env = std::getenv("DLFS_CACHE_DIR");
  return env != nullptr && *env != '\0' ? env : "/dev/shm";
}

std::string UserPrefix() { return "dlfs-" + std::to_string(::geteuid()) + "-"; }

void SweepStale(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  const uid_t uid = ::geteuid();
  const std::string mine = UserPrefix();
  const std::string mine_hidden = "." + mine;  // temporary files and build locks
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const bool hidden = name.rfind(mine_hidden, 0) == 0;
    if (name.rfind(mine, 0) != 0 && !hidden) continue;
    if (hidden && CreatorAlive(name)) continue;
    const std::string path = dir + "/" + name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_uid == uid && S_ISREG(st.st_mode) &&
        ::flock(fd, LOCK_EX | LOCK_NB) == 0 && SameFile(path, st)) {
      ::unlink(path.c_str());
    }
    ::close(fd);
  }
  ::closedir(d);
}

Region::Region(Region&& other) noexcept
    : fd_(other.fd_), pid_(other.pid_), path_(std::move(other.path_)), bytes_(other.bytes_) {
  other.fd_ = -1;
}

Region& Region::operator=(Region&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = other.fd_;
    pid_ = other.pid_;
    path_ = std::move(other.path_);
    bytes_ = other.bytes_;
    other.fd_ = -1;
  }
  return *this;
}

Region::~Region() { Release(); }

void Region::Release() {
  if (fd_ < 0) return;
  // A child of fork() shares the parent's open file and so its lock: taking
  // it exclusively would convert the parent's.
  struct stat st {};
  if (::getpid() == pid_ && ::flock(fd_, LOCK_EX | LOCK_NB) == 0 && ::fstat(fd_, &st) == 0 &&
      SameFile(path_, st)) {
    ::unlink(path_.c_str());
  }
  ::close(fd_);
  fd_ = -1;
}

Result<std::optional<Region>> Attach(const std::string& dir, const std::string& name,
                                     uint64_t min_bytes) {
  const std::string path = dir + "/" + name;
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      if (errno == ENOENT) return std::optional<Region>();
      return SystemError(path + ": cannot open");
    }
    Region r;
    r.fd_ = fd;
    r.pid_ = ::getpid();
    r.path_ = path;
    struct stat st {};
    std::string refuse;
    if (::fstat(fd, &st) != 0) return SystemError(path + ": fstat");
    if (!S_ISREG(st.st_mode)) {
      refuse = "not a regular file";
    } else if (st.st_uid != ::geteuid()) {
      refuse = "owned by uid " + std::to_string(st.st_uid) + ", not " + std::to_string(::geteuid());
    } else if ((st.st_mode & 077) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      refuse = std::string("mode ") + mode + " lets others in";
    } else if (static_cast<uint64_t>(st.st_size) < min_bytes) {
      refuse = "too small (" + std::to_string(st.st_size) + " bytes)";
    }
    if (!refuse.empty()) {
      ::close(r.fd_);
      r.fd_ = -1;  // not ours to remove
      return Status::InvalidArgument(path + ": refused (" + refuse + ")");
    }
    if (::flock(fd, LOCK_SH | LOCK_NB) != 0 || !SameFile(path, st)) {
      // Its last user is removing it (holding the lock exclusively), or it
      // was removed while we locked it.
      ::close(r.fd_);
      r.fd_ = -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    r.bytes_ = static_cast<uint64_t>(st.st_size);
    return std::optional<Region>(std::move(r));
  }
  return std::optional<Region>();
}

Result<Region> Create(const std::string& dir, const std::string& name, uint64_t bytes,
                      uint64_t reserve, const std::function<Status(int fd)>& init) {
  static std::atomic<uint64_t> serial{0};
  const std::string path = dir + "/" + name;
  for (int attempt = 0; attempt < 5; ++attempt) {
    const std::string tmp = dir + "/." + name + "." + std::to_string(::getpid()) + "." +
                            std::to_string(serial.fetch_add(1));
    const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return SystemError(tmp + ": cannot create");
    Region r;
    r.fd_ = fd;
    r.pid_ = ::getpid();
    r.path_ = path;
    r.bytes_ = bytes;
    Status st;
    if (::fchmod(fd, 0600) != 0 || ::flock(fd, LOCK_SH) != 0 ||
        ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      st = SystemError(tmp + ": cannot set up");
    } else if (reserve > 0 && ::fallocate(fd, 0, 0, static_cast<off_t>(reserve)) != 0) {
      st = SystemError(tmp + ": cannot allocate " + std::to_string(reserve) + " bytes");
    } else {
      st = init(fd);
    }
    if (st.ok() && ::link(tmp.c_str(), path.c_str()) == 0) {
      ::unlink(tmp.c_str());
      return r;
    }
    const int link_errno = errno;
    ::unlink(tmp.c_str());
    ::close(r.fd_);
    r.fd_ = -1;
    if (!st.ok()) return st;
    // ENOENT: our temporary file was swept away under us (by a process that
    // could not see that we run, e.g. in another PID namespace): again.
    if (link_errno == ENOENT) continue;
    if (link_errno == EEXIST) return Status::AlreadyExists(path + ": made by another process");
    errno = link_errno;
    return SystemError(path + ": cannot link");
  }
  return Status::IOError(path + ": its temporary file kept disappearing");
}

Status WithBuildLock(const std::string& dir, const std::string& name,
                     const std::function<Status()>& body) {
  const std::string path = dir + "/." + name + ".lock";
  // SweepStale removes a lock file nobody holds, so the file we opened may
  // be gone (or replaced) by the time we hold its lock: a lock on a removed
  // file excludes nobody who opens the name afterwards. Only the lock of
  // the file still in place counts; while we hold it, no sweep removes it.
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_uid != ::geteuid() || !S_ISREG(st.st_mode)) {
      if (fd >= 0) ::close(fd);
      return body();
    }
    int locked;
    while ((locked = ::flock(fd, LOCK_EX)) != 0 && errno == EINTR) {
    }
    if (locked != 0 || !SameFile(path, st)) {
      ::close(fd);
      if (locked != 0) return body();  // no locks here: as without the file
      continue;
    }
    Status result = body();
    ::close(fd);  // releases the lock
    return result;
  }
  return body();  // the lock only saves work
}

}  // namespace dlfs::shm
