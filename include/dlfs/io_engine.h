// IoEngine: reads a batch of byte ranges from a volume's targets.
//
// Two engines sit behind one interface:
//   uring  io_uring (liburing) with O_DIRECT, fixed files and registered
//          buffers; the whole batch is submitted at once and completions are
//          matched by tag, keeping up to queue_depth reads in flight.
//   pread  a pool of threads calling pread(2); also the fallback where
//          io_uring or O_DIRECT is unavailable (e.g. tmpfs, seccomp).
// With EngineKind::kAuto the best available one is chosen and description()
// says what was chosen and why; a fallback is never silent.
//
// Both engines share one completion loop that resubmits short reads and
// -EAGAIN/-EINTR and turns an early end of file into an error, so a request
// either gets all its bytes or an error status — never partial data.
//
// Thread safety: an engine is used by one thread at a time (one ring per
// thread); create one engine per I/O thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dlfs/enum_names.h"
#include "dlfs/status.h"

namespace dlfs {

enum class EngineKind { kAuto, kUring, kPread };

inline constexpr EnumName<EngineKind> kEngineKindNames[] = {
    {EngineKind::kAuto, "auto"}, {EngineKind::kUring, "uring"}, {EngineKind::kPread, "pread"}};

std::string_view EngineKindName(EngineKind kind);  // "auto", "uring", "pread"
Result<EngineKind> ParseEngineKind(std::string_view name);

struct EngineOptions {
  EngineKind kind = EngineKind::kAuto;
  uint32_t queue_depth = 64;   // reads in flight (ring size; pread threads)
  bool direct_io = true;       // O_DIRECT where the file system supports it
  bool sqpoll = false;         // io_uring SQPOLL: a kernel thread polls (burns a core)
  uint32_t buffer_slots = 64;  // registered-buffer table size (uring)
};

// One read: `length` bytes at `offset` of target `target` into `buffer`.
// With O_DIRECT, offset, length and buffer must be multiples of alignment().
// `buffer_slot` names a buffer registered with RegisterBuffer that contains
// `buffer` (or kNoSlot).
struct ReadRequest {
  static constexpr uint32_t kNoSlot = 0xFFFFFFFFu;
  uint32_t target = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::byte* buffer = nullptr;
  uint32_t buffer_slot = kNoSlot;
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;

  // Reads every request, then returns. results[i] is request i's outcome:
  // OK with all its bytes in place, or an IOError naming the target file,
  // the offset and the errno. REQUIRES: results.size() == requests.size().
  // Returns non-OK only if the engine itself broke (the batch is then lost).
  virtual Status Read(std::span<const ReadRequest> requests, std::span<Status> results) = 0;

  // Makes `buffer` slot `slot` (< buffer_slots) for fixed-buffer reads,
  // replacing what the slot held. Returns false when the engine does not
  // register buffers (reads then work without a slot).
  virtual bool RegisterBuffer(uint32_t slot, std::span<std::byte> buffer) = 0;

  // Required alignment of offset, length and buffer address (1: none).
  virtual uint32_t alignment() const = 0;
  virtual EngineKind kind() const = 0;
  // Human-readable: what runs and why, e.g. "io_uring, O_DIRECT, fixed
  // files, registered buffers, queue depth 64".
  virtual const std::string& description() const = 0;
};

// Opens `target_paths` (read-only) and creates an engine per `options`.
// Unavailable if options.kind is forced and not supported here.
Result<std::unique_ptr<IoEngine>> CreateEngine(const std::vector<std::string>& target_paths,
                                               const EngineOptions& options);

}  // namespace dlfs
