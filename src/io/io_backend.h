// Internal: the asynchronous primitive under every IoEngine. A backend moves
// single reads to the kernel (io_uring) or to worker threads (pread) and
// reports raw results with syscall semantics (bytes transferred or -errno).
// The completion loop in engine.cc turns those into whole-request outcomes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dlfs/io_engine.h"
#include "dlfs/status.h"

namespace dlfs::io_internal {

// The targets an engine reads, opened once.
struct Targets {
  std::vector<std::string> paths;
  std::vector<int> fds;      // -1 for an NBD target (and one not read here)
  std::vector<bool> remote;  // paths[t] is an NBD URI
  std::vector<bool> s3;      // paths[t] is an s3:// URL
  bool direct = false;       // every fd has O_DIRECT
  uint32_t alignment = 1;    // offset/length/memory alignment required
  std::string note;          // why direct I/O is off, if it is
  ~Targets();
};

// Opens every path read-only, with O_DIRECT when asked and supported; NBD
// URIs are not opened here (their backend connects).
Result<std::unique_ptr<Targets>> OpenTargets(const std::vector<std::string>& paths, bool direct);

struct Op {
  uint64_t tag;
  uint32_t target;
  uint64_t offset;
  uint32_t length;
  std::byte* buffer;
  uint32_t slot;  // ReadRequest::kNoSlot when not registered
};

struct Completion {
  uint64_t tag;
  int64_t result;  // bytes read, or -errno
  // A failure's own words, when the errno alone would not say what
  // happened ("s3://b/k: HTTP 403 ..."); "" for the errno's text.
  std::string detail = {};
};

// A new backend (NBD, SPDK) implements the first six methods; the
// engine's completion loop (engine.cc) does the rest.
class Backend {
 public:
  // REQUIRES: no op in flight (the engine drains them first).
  virtual ~Backend() = default;
  // Most ops that may be in flight at once.
  virtual uint32_t capacity() const = 0;
  // Queues one op. REQUIRES: fewer than capacity() ops in flight.
  virtual void Prepare(const Op& op) = 0;
  // Starts every prepared op.
  virtual Status Submit() = 0;
  // Starts every prepared op (as Submit), then blocks until at least one
  // started op completes, then appends every available completion.
  // REQUIRES: at least one op prepared or in flight.
  virtual Status Reap(std::vector<Completion>* out) = 0;
  virtual bool RegisterBuffer(uint32_t slot, std::span<std::byte> buffer) = 0;
  virtual std::string Describe() const = 0;
  // Appends the completions available now, without blocking. Optional: a
  // backend without it is only reaped by Reap.
  virtual Status Poll(std::vector<Completion>* /*out*/) { return Status::Ok(); }
  // An fd that polls readable when completions may be available (an
  // eventfd; the reader drains it), or -1. Lets another backend wait for
  // this one's completions together with its own sockets (NBD).
  virtual int NotifyFd() const { return -1; }
  // Setup flags in use, for reports (io_uring's SINGLE_ISSUER, ...).
  virtual std::vector<std::string> Flags() const { return {}; }
};

// io_uring backend; Unavailable (with the reason) when the kernel refuses.
Result<std::unique_ptr<Backend>> CreateUringBackend(const Targets& targets,
                                                    const EngineOptions& options);
// A read-only shared mapping of a whole file, one per file in the process
// (mmap_backend.cc), registered with map_guard where its table had room
// (`guarded`; an unguarded one is read with pread instead). base is null
// for an empty file. Acquire and Release pair up; the last Release unmaps.
struct MappedFile {
  const std::byte* base = nullptr;
  uint64_t size = 0;
  bool guarded = false;
};
Result<MappedFile> AcquireMapping(int fd, const std::string& path);
void ReleaseMapping(const MappedFile& file);

// Copies out of shared read-only mappings of the local targets (mmap_backend.cc).
Result<std::unique_ptr<Backend>> CreateMmapBackend(const Targets& targets,
                                                   const EngineOptions& options);
// With `notify`, the pool signals an eventfd (NotifyFd) on every completion.
Result<std::unique_ptr<Backend>> CreatePreadBackend(const Targets& targets,
                                                    const EngineOptions& options,
                                                    bool notify = false);
// Reads the targets that are NBD URIs (libnbd); `local`, when not null,
// reads the others and must have a NotifyFd. Unavailable without libnbd;
// an export that cannot be reached is an error naming its URI.
Result<std::unique_ptr<Backend>> CreateNbdBackend(const Targets& targets,
                                                  const EngineOptions& options,
                                                  std::unique_ptr<Backend> local);
// Reads the targets that are s3:// URLs (libcurl); `local`, when not null,
// reads the others and must have a NotifyFd. Errors name the URL.
Result<std::unique_ptr<Backend>> CreateS3Backend(const Targets& targets,
                                                 const EngineOptions& options,
                                                 std::unique_ptr<Backend> local);
// Wraps `inner`, altering completions as `faults` says.
std::unique_ptr<Backend> CreateFaultInjectingBackend(std::unique_ptr<Backend> inner,
                                                     const FaultInjection& faults,
                                                     uint32_t alignment);

}  // namespace dlfs::io_internal
