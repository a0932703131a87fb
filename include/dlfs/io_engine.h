// IoEngine: reads byte ranges from a volume's targets.
//
// Two engines sit behind one interface:
//   uring  io_uring (liburing) with O_DIRECT, fixed files and registered
//          buffers; many reads are submitted per system call and
//          completions are matched by tag, keeping up to queue_depth reads
//          in flight.
//   pread  a pool of threads calling pread(2); also the fallback where
//          io_uring or O_DIRECT is unavailable (e.g. tmpfs, seccomp).
//   nbd    targets named by NBD URIs (dlfs/nbd.h), read with libnbd's
//          asynchronous API, queue_depth reads in flight over
//          NbdOptions::connections connections per target; chosen whenever
//          a target is a URI (a volume's local targets are then read by a
//          pread pool inside the same engine).
//   s3     targets named by s3:// URLs (dlfs/s3.h), ranged GETs with libcurl.
//   mmap   copies out of a shared read-only mapping of each target (the
//          page cache), on the reading thread; never O_DIRECT. What the
//          Loader chooses (with kAuto) for samples it reads through the page
//          cache: a cached buffered read costs a system call, a lookup and
//          the kernel's copy, a copy out of a mapping only the copy (a warm
//          Fashion-MNIST epoch 2x faster). Local files and devices only.
// With EngineKind::kAuto the best available one is chosen and description()
// says what was chosen and why; a fallback is never silent.
//
// Two ways to use one:
//   Read()                 a batch of requests, returning when all are done
//                          (the simple, synchronous form);
//   Enqueue/Submit/Reap    a stream: requests are queued as they become
//                          known and the engine keeps queue_depth of them in
//                          flight, so the device never idles between
//                          batches (what the Loader does).
// Both share one completion loop that resubmits short reads and
// -EAGAIN/-EINTR and turns an early end of file into an error, so a request
// either gets all its bytes or an error status — never partial data.
//
// Thread safety: an engine is used by one thread at a time (one ring per
// thread); create one engine per I/O thread. stats() may be called from any
// thread. With EngineOptions::single_thread, "one at a time" becomes "one
// thread only" once the first read was queued.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dlfs/enum_names.h"
#include "dlfs/nbd.h"
#include "dlfs/s3.h"
#include "dlfs/status.h"

namespace dlfs {

enum class EngineKind { kAuto, kUring, kPread, kNbd, kS3, kMmap };

inline constexpr EnumName<EngineKind> kEngineKindNames[] = {
    {EngineKind::kAuto, "auto"}, {EngineKind::kUring, "uring"}, {EngineKind::kPread, "pread"},
    {EngineKind::kNbd, "nbd"},   {EngineKind::kS3, "s3"},       {EngineKind::kMmap, "mmap"}};

std::string_view EngineKindName(EngineKind kind);  // "auto", "uring", "pread", "nbd", ...
Result<EngineKind> ParseEngineKind(std::string_view name);

// Faults injected below the completion loop, so that its recovery paths
// (retries, splitting failed reads, errors naming samples) can be driven
// through the real code: by tests, and by anyone rehearsing how a job copes
// with a failing device. All zero (the default): none. Counting is over the
// completions one engine sees, starting at 1; each engine counts its own.
struct FaultInjection {
  uint32_t eio_every = 0;     // every Nth completion fails with EIO
  uint32_t short_every = 0;   // every Nth completion transfers only half its bytes
  uint32_t eagain_every = 0;  // every Nth completion fails with EAGAIN (retried)
  uint32_t delay_us = 0;      // sleep before reaping each completion
  // A damaged range of a device: every read overlapping bytes
  // [eio_offset, eio_offset + eio_length) of target eio_target fails with
  // EIO, however often it is retried (eio_length 0: none).
  uint32_t eio_target = 0;
  uint64_t eio_offset = 0;
  uint64_t eio_length = 0;

  bool any() const { return eio_every || short_every || eagain_every || delay_us || eio_length; }
};

struct EngineOptions {
  EngineKind kind = EngineKind::kAuto;
  uint32_t queue_depth = 64;   // reads in flight (ring size; pread threads)
  bool direct_io = true;       // O_DIRECT where the file system supports it
  bool sqpoll = false;         // io_uring SQPOLL: a kernel thread polls (burns a core)
  uint32_t buffer_slots = 64;  // registered-buffer table size (uring)
  // Promise that only one thread ever queues, submits and reaps reads (it
  // may differ from the thread that created the engine and registered its
  // buffers). Lets io_uring use IORING_SETUP_SINGLE_ISSUER and
  // DEFER_TASKRUN where the kernel has them. The Loader sets it for the
  // engines its I/O threads own.
  bool single_thread = false;
  // pread engine: each read runs on the thread that submits it, no pool.
  // For one large read at a time (the node cache's fill): a hand-off to a
  // pool thread would only delay it, and its time would not be the
  // reading thread's own (what the fill measures). Not with NBD targets.
  bool caller_thread = false;
  // NBD targets: connections per target, per-read timeout, reconnects.
  NbdOptions nbd;
  // s3:// targets: per-request timeout, retries and their backoff.
  S3Options s3;
  // Not for production reads: see FaultInjection.
  FaultInjection faults;
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

// The outcome of one request of the streaming interface.
struct ReadCompletion {
  uint64_t tag = 0;  // as given to Enqueue
  Status status;     // as Read's results: OK with every byte in place, or why not
};

// Where an engine's time went since it was created (or, as a difference of
// two snapshots, over an interval). Read while reads run it is a consistent
// enough snapshot for reports, not an exact cut.
struct EngineStats {
  uint64_t requests = 0;         // requests finished (OK or not)
  uint64_t ops = 0;              // reads issued to the device, resubmissions included
  uint64_t submits = 0;          // submission system calls (uring) or hand-offs (pread)
  uint64_t bytes = 0;            // bytes transferred
  double submit_seconds = 0;     // preparing and submitting reads
  double wait_seconds = 0;       // blocked waiting for completions
  double empty_seconds = 0;      // wall time with no read in flight
  double in_flight_seconds = 0;  // integral of reads in flight over time
  double wall_seconds = 0;       // time covered
  // Mean reads in flight over the time covered.
  double mean_in_flight() const { return wall_seconds > 0 ? in_flight_seconds / wall_seconds : 0; }
  EngineStats& operator+=(const EngineStats& o);
  EngineStats operator-(const EngineStats& earlier) const;
};

class IoEngine {
 public:
  // Waits for reads still in flight (their buffers may be freed after).
  virtual ~IoEngine() = default;

  // Reads every request, then returns. results[i] is request i's outcome:
  // OK with all its bytes in place, or an IOError naming the target file,
  // the offset and the errno. REQUIRES: results.size() == requests.size(),
  // and nothing queued through Enqueue is pending. Returns non-OK only if
  // the engine itself broke (the batch is then lost).
  virtual Status Read(std::span<const ReadRequest> requests, std::span<Status> results) = 0;

  // Streaming interface. Enqueue queues `request` under `tag` (any value;
  // tags need not be unique but then cannot be told apart). The engine
  // starts queued requests in order, up to queue_depth at once, on Submit()
  // and Reap(). REQUIRES: the buffer stays valid and untouched until the
  // request's completion has been reaped.
  virtual void Enqueue(const ReadRequest& request, uint64_t tag) = 0;
  // Starts as many queued requests as fit (one system call for many).
  virtual Status Submit() = 0;
  // Appends the outcome of finished requests to *out, first waiting until
  // at least `min_complete` of them have finished (0: only what has finished
  // already; no more than pending() are waited for). Keeps the queue
  // depth filled from the queue before it returns. Non-OK only if the
  // engine broke: every pending request has then completed with that error.
  virtual Status Reap(std::vector<ReadCompletion>* out, size_t min_complete) = 0;
  // Requests enqueued and not yet reaped.
  virtual uint64_t pending() const = 0;
  // Requests still queued (not handed to the device) whose tag `which`
  // accepts complete at once with a Cancelled status, reaped as usual;
  // reads already in flight are not affected.
  virtual void Cancel(const std::function<bool(uint64_t tag)>& which) = 0;

  // Counters and timers since the engine was created; any thread.
  virtual EngineStats stats() const = 0;
  // io_uring setup flags in use ("SINGLE_ISSUER", "DEFER_TASKRUN",
  // "COOP_TASKRUN", "SQPOLL", ...), detected when the ring was created;
  // empty for the pread engine.
  virtual const std::vector<std::string>& setup_flags() const = 0;

  // Makes `buffer` slot `slot` (< buffer_slots) for fixed-buffer reads,
  // replacing what the slot held. Returns false when the engine does not
  // register buffers (reads then work without a slot). With single_thread,
  // call it before the first read or from the reading thread.
  virtual bool RegisterBuffer(uint32_t slot, std::span<std::byte> buffer) = 0;

  // Required alignment of offset, length and buffer address (1: none).
  virtual uint32_t alignment() const = 0;
  virtual EngineKind kind() const = 0;
  // Human-readable: what runs and why, e.g. "io_uring, O_DIRECT, fixed
  // files, registered buffers, queue depth 64".
  virtual const std::string& description() const = 0;
};

// Opens `target_paths` (read-only) and creates an engine per `options`.
// Unavailable if options.kind is forced and not supported here. When a
// path is an NBD URI the engine is an nbd one (whatever options.kind says,
// unless it is kNbd without any URI: InvalidArgument), and an export that
// cannot be reached is an error naming its URI.
Result<std::unique_ptr<IoEngine>> CreateEngine(const std::vector<std::string>& target_paths,
                                               const EngineOptions& options);

}  // namespace dlfs
