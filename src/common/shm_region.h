// Named shared-memory regions of one user on one node: the files in /dev/shm
// ($DLFS_CACHE_DIR) through which the processes of a node share what they
// would otherwise each hold — the node cache (src/cache/node_cache.h) and a
// volume's directory (src/volume/node_directory.h).
//
// The rules every region follows:
// - Named "dlfs-<uid>-..." and made exclusively: a temporary name
//   (".NAME.PID.N", mode 0600), complete before link(2) puts it in place, so
//   a name that exists is a finished region and two makers cannot both win.
// - Attached only when it is a regular file owned by this user, mode 0600
//   (a region another user made under our name is refused).
// - Every process using a region holds a shared flock() on it; the last to
//   let go (the one whose exclusive lock succeeds) removes it. A region
//   nobody holds (its job was killed) is removed by the next SweepStale of
//   this user; a temporary file whose maker still runs is left alone.
// - Memory is allocated with fallocate() before it is written, so a full
//   /dev/shm is an error at that point rather than a SIGBUS later.
//
// What a region holds, and how far a process trusts it, is its owner's
// business: these helpers only manage files.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "dlfs/status.h"

namespace dlfs::shm {

// Where regions live: `dir` when not empty, else $DLFS_CACHE_DIR, else /dev/shm.
std::string RegionDir(const std::string& dir);

// "dlfs-<uid>-": the start of every region name of this user.
std::string UserPrefix();

// Removes this user's regions in `dir` that no process holds, and temporary
// files whose maker is gone.
void SweepStale(const std::string& dir);

// A region file this process holds (a shared flock for as long as it is
// open). Move-only; destroying it is Release().
class Region {
 public:
  Region() = default;
  Region(Region&& other) noexcept;
  Region& operator=(Region&& other) noexcept;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region();

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  uint64_t bytes() const { return bytes_; }
  bool valid() const { return fd_ >= 0; }

  // Lets go of the region; when no other process holds it, removes it. In a
  // child of fork(), which shares the parent's lock, only closes.
  void Release();

 private:
  friend Result<std::optional<Region>> Attach(const std::string&, const std::string&, uint64_t);
  friend Result<Region> Create(const std::string&, const std::string&, uint64_t, uint64_t,
                               const std::function<Status(int fd)>&);
  int fd_ = -1;
  pid_t pid_ = 0;  // the process that opened it
  std::string path_;
  uint64_t bytes_ = 0;
};

// Opens dir/name for reading and writing when it exists and may be used: a
// regular file owned by this user, mode 0600, of at least min_bytes.
// nullopt when there is no such name (also when it was being removed by its
// last user, or replaced, until a few retries pass). InvalidArgument
// "refused (...)" naming the reason otherwise; IOError for a system error.
Result<std::optional<Region>> Attach(const std::string& dir, const std::string& name,
                                     uint64_t min_bytes);

// Makes dir/name: a temporary file of `bytes` bytes whose first `reserve`
// are allocated up front (IOError ENOSPC when the file system cannot hold
// them), written by init(fd) and then linked into place. AlreadyExists when
// another process published the name first (Attach theirs); init's error,
// or IOError for a system error, otherwise. The temporary file is gone
// either way.
Result<Region> Create(const std::string& dir, const std::string& name, uint64_t bytes,
                      uint64_t reserve, const std::function<Status(int fd)>& init);

// Runs `body` holding an exclusive flock on dir/.NAME.lock, which is made
// when missing: the processes of a node that would all build the same
// region take turns, so the first builds it and the others find it. The
// lock only saves work; Create's link stays what decides. When the lock
// file cannot be made, runs `body` without it.
Status WithBuildLock(const std::string& dir, const std::string& name,
                     const std::function<Status()>& body);

}  // namespace dlfs::shm
