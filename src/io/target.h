// Internal: one target — a file, a block device or an NBD export — behind one
// interface, so that the code reading or writing whole targets outside the
// I/O engine (Volume::Open and the volume's simple reads, verify, the
// builder) never asks which kind it holds. What differs by kind lives here:
// how a target is opened and named, how it is made durable, and how a new
// one becomes visible under its name (a file is written under a temporary
// name and renamed; an export, which has no names, is written in place).
//
// The I/O engine's hot path does not go through Target: it opens its
// targets itself (io_backend.h's Targets: O_DIRECT, registered files,
// libnbd's asynchronous API).
//
// Thread safety: Read, fd, size (after opening), kind and Close may be
// called from any number of threads at once, Close while reads run. The
// writing methods (kCreate) are for one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dlfs/nbd.h"
#include "dlfs/status.h"
#include "dlfs/target_kind.h"

namespace dlfs::io_internal {

enum class TargetMode {
  kRead,    // an existing target, read-only
  kCreate,  // a new target, written, made durable, then published (below)
};

struct TargetOptions {
  // Connecting to an NBD export and each command on it fail after this
  // many seconds (ETIMEDOUT naming the URI).
  double timeout_seconds = NbdOptions{}.timeout_seconds;
  // kRead: errors name this instead of the path ("target 1 (v.dlfs.t1)");
  // an NBD error, which names the URI already, gets it as context when it
  // differs. Empty: the path.
  std::string what;
  // kCreate: Publish may replace a file already at the path.
  bool overwrite = false;
};

class Target {
 public:
  virtual ~Target() = default;
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;

  // The path or URI the target was opened as: how messages name it.
  const std::string& name() const { return name_; }
  // Where its bytes are now, for messages about writing them: a created
  // file's temporary name until Publish, else name().
  virtual const std::string& location() const { return name_; }
  // What holds it, for descriptions (dlfs info); never needed to use it.
  virtual TargetKind kind() const = 0;
  // Bytes it holds. kRead: the file's, device's or export's size, or less
  // after FitTo. kCreate: 0 for a new file; an export's size (it keeps its
  // old contents until they are overwritten).
  virtual uint64_t size() const = 0;

  // Exactly n bytes at `offset`, or an error naming `what`: IOError with
  // the errno (end of file is one), ETIMEDOUT for an export that does not
  // answer in time. An NBD connection found lost is reconnected once.
  virtual Status Read(void* buf, size_t n, uint64_t offset, const std::string& what) const = 0;
  // The file descriptor, for callers that hand it to the kernel themselves
  // (splice, fadvise), or -1 when there is none (an NBD export).
  virtual int fd() const { return -1; }

  // ---- kRead

  // Says that the target ends at `bytes`, as its own superblock says. A
  // container that may be larger than the target written to it (an NBD
  // export, typically a whole device; docs/format.md §6.1) is read as its
  // first `bytes` from then on: size() becomes min(size(), bytes). A file
  // or device is exactly its target and keeps its size, so that a
  // difference is found by the caller's checks.
  virtual void FitTo(uint64_t /*bytes*/) {}
  // Hints that reads from now on are at random places (samples): a file
  // turns kernel readahead off, which would read neighbours nobody asked
  // for. Large reads stay large.
  virtual void ExpectRandomReads() {}
  // Makes every later Read fail. Safe while other threads read: a read in
  // flight completes or fails, but never reads another file (a descriptor's
  // number stays reserved until destruction). Calling it again does nothing.
  virtual void Close() = 0;

  // ---- kCreate (errors name location())

  // Writes exactly n bytes at `offset`.
  virtual Status Write(const void* buf, size_t n, uint64_t offset) = 0;
  // Makes the target `bytes` long. A file is cut (dropping what was written
  // past the end) or extended with zeros; a target that cannot change size
  // (an export) must hold at least `bytes`, else InvalidArgument
  // "<name>: export has N bytes, <needed_by> needs <bytes>"; bytes past the
  // end are left as they are.
  virtual Status Resize(uint64_t bytes, const std::string& needed_by) = 0;
  // Makes every write so far durable (a file: fsync; an export:
  // NBD_CMD_FLUSH, a no-op for a server whose writes are stable already).
  virtual Status Sync() = 0;
  // Makes the target visible under name(), complete. A file's temporary
  // name is renamed to it, never replacing an existing file unless
  // TargetOptions::overwrite (AlreadyExists "<name>: already exists (use
  // --force to replace it)"); an export, written in place, is visible
  // already. A failure leaves nothing published.
  virtual Status Publish() = 0;
  // Makes a Publish durable: a file's directory entry is synced; nothing for
  // an export (its bytes were synced).
  virtual Status SyncPublished() = 0;
  // Undoes a successful Publish, best effort (a publish that fails part way
  // rolls back): the target stops being one. A file's name is removed; a
  // target without a name of its own (an export) has its first
  // header_bytes zeroed and synced.
  virtual void Withdraw(size_t header_bytes) = 0;
  // Destroying a created target that was not published removes its
  // temporary file (an export keeps what was written).

 protected:
  explicit Target(std::string name) : name_(std::move(name)) {}

 private:
  std::string name_;
};

// Opens `path` — a file or block device path, or an NBD URI (dlfs/nbd.h) —
// in `mode`. kRead: read-only; NotFound / IOError with the errno for a file
// that cannot be opened, InvalidArgument for a directory or anything but a
// regular file or block device, and for an export the errors of an NBD
// connection (Unavailable without libnbd, IOError when unreachable or
// refused, InvalidArgument for a malformed URI). kCreate: a file is created
// empty under a temporary name beside `path` ("<path>.tmp.<pid>.<n>",
// O_EXCL, holding an F_OFD_SETLK write lock while it is open; AlreadyExists
// when no free name is found); an export is connected writable (IOError
// EROFS when it is read-only) and keeps its contents.
Result<std::unique_ptr<Target>> OpenTarget(const std::string& path, TargetMode mode,
                                           const TargetOptions& options = {});

// ---- Names of targets, before any is opened.

// Where target `stored` (as recorded in target 0's table) is for the volume
// whose target 0 was named `target0`: absolute paths and URIs as they are;
// relative paths from the directory holding target 0 as it was named, so a
// volume's files can be moved together. Relative to a URI there is no
// directory: the path stays relative (and fails to open, naming it).
std::string ResolveTargetPath(const std::string& target0, std::string_view stored);

// What target 0's table records for `target` of the volume whose target 0
// is `target0` (the inverse of ResolveTargetPath): a URI as given; a path
// relative to the directory holding target 0 when it lies at or below it,
// else absolute, both lexical (symlinks are not resolved). InvalidArgument
// when it is longer than `max_bytes` or names no usable file beside target 0.
Result<std::string> StoredTargetPath(const std::string& target0, const std::string& target,
                                     size_t max_bytes);

// A key equal for two names of the same target: a path made absolute and
// normal (lexically), a URI as given.
std::string TargetIdentity(const std::string& path);

// Whether a target created at `path` becomes visible at once and complete:
// a file by a rename, an s3:// object by completing its upload; false for
// one written in place (an NBD export). Target 0 names the volume and must
// be published so.
bool PublishedWhole(const std::string& path);

// The early check before creating a target at `path` (Publish enforces
// it): AlreadyExists "<path>: already exists (set overwrite to replace it)"
// when something exists there, unless `overwrite`; IOError EISDIR for a
// directory, whatever `overwrite` says (a volume never replaces one). An
// export, whose old contents are seen once connected, passes.
Status CheckNameFree(const std::string& path, bool overwrite);

// Removes the temporary files that creators of `path` killed before
// publishing left behind: "<path>.tmp.<pid>.<n>" whose process no longer
// runs on this host and whose lock nobody holds (a live creator on another
// node of a shared file system holds its lock; a dead one's is released).
// Files of other users and anything that is not a plain file are left
// alone. Returns one description per file removed; none for an export.
std::vector<std::string> RemoveStaleTemporaries(const std::string& path);

}  // namespace dlfs::io_internal
