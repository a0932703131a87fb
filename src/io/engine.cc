// The completion loop shared by every engine, and CreateEngine().
//
// Requests live in slots while queued or in flight; a slot's index is the
// tag its device reads carry, so completions map back to requests whatever
// order they arrive in. The same loop serves Read() (a batch, then wait)
// and the streaming interface (the Loader queues whole epochs through it).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <deque>

#include "common/clock.h"
#include "dlfs/io_engine.h"
#include "io/io_backend.h"

namespace dlfs {

EngineStats& EngineStats::operator+=(const EngineStats& o) {
  requests += o.requests;
  ops += o.ops;
  submits += o.submits;
  bytes += o.bytes;
  submit_seconds += o.submit_seconds;
  wait_seconds += o.wait_seconds;
  empty_seconds += o.empty_seconds;
  in_flight_seconds += o.in_flight_seconds;
  wall_seconds += o.wall_seconds;
  return *this;
}

EngineStats EngineStats::operator-(const EngineStats& e) const {
  EngineStats d;
  d.requests = requests - e.requests;
  d.ops = ops - e.ops;
  d.submits = submits - e.submits;
  d.bytes = bytes - e.bytes;
  d.submit_seconds = submit_seconds - e.submit_seconds;
  d.wait_seconds = wait_seconds - e.wait_seconds;
  d.empty_seconds = empty_seconds - e.empty_seconds;
  d.in_flight_seconds = in_flight_seconds - e.in_flight_seconds;
  d.wall_seconds = wall_seconds - e.wall_seconds;
  return d;
}

namespace {

using io_internal::Backend;
using io_internal::Completion;
using io_internal::Op;
using io_internal::Targets;

// A request retried this often without progress (EAGAIN storms) fails
// instead of spinning forever.
constexpr uint32_t kMaxRetries = 10000;

// Counters written by the engine's thread and read by any: relaxed atomics
// of nanoseconds, so a report never races with the reads it describes.
struct AtomicStats {
  std::atomic<uint64_t> requests{0}, ops{0}, submits{0}, bytes{0};
  std::atomic<uint64_t> submit_ns{0}, wait_ns{0}, empty_ns{0}, in_flight_ns{0};
  std::atomic<uint64_t> last_ns{0};    // when in_flight last changed
  std::atomic<uint32_t> in_flight{0};  // reads in flight since then
  uint64_t created_ns = 0;
};

uint64_t Ns(double seconds) { return static_cast<uint64_t>(seconds * 1e9); }

void Add(std::atomic<uint64_t>& a, uint64_t v) {
  a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
}

class Engine final : public IoEngine {
 public:
  Engine(std::unique_ptr<Targets> targets, std::unique_ptr<Backend> backend, EngineKind kind,
         std::string why)
      : targets_(std::move(targets)), backend_(std::move(backend)), kind_(kind) {
    description_ = backend_->Describe();
    if (!why.empty()) description_ += " [" + why + "]";
    flags_ = backend_->Flags();
    stats_.created_ns = stats_.last_ns = Ns(Now());
  }

  ~Engine() override {
    if (::getpid() != pid_) {
      // Destroyed in a child of fork(): the backend's threads (pread) do
      // not exist here and its ring is the parent's; leave both alone.
      (void)backend_.release();
      return;
    }
    // Reads still in flight would write into buffers their owner is about
    // to free: wait them out (the Loader drains before this; this is the
    // net for other callers).
    std::vector<Completion> drained;
    while (in_flight_ > 0) {
      drained.clear();
      if (!backend_->Reap(&drained).ok()) break;
      in_flight_ -= std::min<uint32_t>(in_flight_, static_cast<uint32_t>(drained.size()));
    }
  }

  Status Read(std::span<const ReadRequest> reqs, std::span<Status> results) override {
    if (results.size() != reqs.size()) return Status::InvalidArgument("results size mismatch");
    if (pending_ != 0) {
      return Status::InvalidArgument("Read() while streamed requests are pending");
    }
    if (!broken_.ok()) return broken_;
    for (uint64_t i = 0; i < reqs.size(); ++i) Enqueue(reqs[i], i);
    std::vector<ReadCompletion> done;
    done.reserve(reqs.size());
    while (pending_ > 0) {
      // On failure everything pending has completed with the error: the
      // batch is lost.
      DLFS_RETURN_IF_ERROR(Reap(&done, pending_));
    }
    for (ReadCompletion& c : done) results[c.tag] = std::move(c.status);
    return Status::Ok();
  }

  void Enqueue(const ReadRequest& r, uint64_t tag) override {
    ++pending_;
    if (!broken_.ok()) {
      finished_.push_back({tag, broken_});
    } else if (r.target >= targets_->fds.size()) {
      finished_.push_back(
          {tag, Status::InvalidArgument("read names target " + std::to_string(r.target))});
    } else if (r.length == 0) {
      finished_.push_back({tag, Status::Ok()});
    } else {
      uint32_t s;
      if (!free_slots_.empty()) {
        s = free_slots_.back();
        free_slots_.pop_back();
      } else {
        s = static_cast<uint32_t>(slots_.size());
        slots_.emplace_back();
      }
      slots_[s] = Slot{r, tag, 0, 0, true};
      ready_.push_back(s);
    }
  }

  Status Submit() override {
    if (!broken_.ok()) return broken_;
    if (Prepare() == 0) return Status::Ok();
    const double t0 = Now();
    Status st = backend_->Submit();
    Add(stats_.submit_ns, Ns(Now() - t0));
    Add(stats_.submits, 1);
    if (!st.ok()) return Fail(st);
    return Status::Ok();
  }

  Status Reap(std::vector<ReadCompletion>* out, size_t min_complete) override {
    size_t got = Deliver(out);
    if (!broken_.ok()) return broken_;
    min_complete = std::min<uint64_t>(min_complete, got + pending_);
    while (got < min_complete && (in_flight_ > 0 || !ready_.empty())) {
      const bool prepared = Prepare() > 0;
      completions_.clear();
      // One system call both starts what was prepared and waits.
      const double t0 = Now();
      Status st = backend_->Reap(&completions_);
      const double t1 = Now();
      Add(stats_.wait_ns, Ns(t1 - t0));
      if (prepared) Add(stats_.submits, 1);
      if (st.ok()) st = Process();
      if (!st.ok()) return FailAndDeliver(st, out);
      got += Deliver(out);
    }
    // Take what else has finished, and keep the device busy before going
    // back to the caller (who may now spend a while with what it got).
    completions_.clear();
    if (in_flight_ > 0) {
      Status st = backend_->Poll(&completions_);
      if (st.ok()) st = Process();
      if (!st.ok()) return FailAndDeliver(st, out);
      Deliver(out);
    }
    Status st = Submit();
    if (!st.ok()) Deliver(out);
    return st;
  }

  uint64_t pending() const override { return pending_; }

  void Cancel(const std::function<bool(uint64_t tag)>& which) override {
    std::deque<uint32_t> keep;
    for (uint32_t s : ready_) {
      if (which(slots_[s].tag)) {
        Finish(s, Status::Cancelled("read cancelled before it started"));
      } else {
        keep.push_back(s);
      }
    }
    ready_.swap(keep);
  }

  EngineStats stats() const override {
    const uint64_t now = Ns(Now());
    const uint64_t last = stats_.last_ns.load(std::memory_order_relaxed);
    const uint32_t n = stats_.in_flight.load(std::memory_order_relaxed);
    const uint64_t open = now > last ? now - last : 0;  // the interval not yet accounted
    auto s = [](uint64_t ns) { return static_cast<double>(ns) / 1e9; };
    EngineStats e;
    e.requests = stats_.requests.load(std::memory_order_relaxed);
    e.ops = stats_.ops.load(std::memory_order_relaxed);
    e.submits = stats_.submits.load(std::memory_order_relaxed);
    e.bytes = stats_.bytes.load(std::memory_order_relaxed);
    e.submit_seconds = s(stats_.submit_ns.load(std::memory_order_relaxed));
    e.wait_seconds = s(stats_.wait_ns.load(std::memory_order_relaxed));
    e.empty_seconds = s(stats_.empty_ns.load(std::memory_order_relaxed) + (n == 0 ? open : 0));
    e.in_flight_seconds = s(stats_.in_flight_ns.load(std::memory_order_relaxed) + n * open);
    e.wall_seconds = s(now - stats_.created_ns);
    return e;
  }

  const std::vector<std::string>& setup_flags() const override { return flags_; }

  bool RegisterBuffer(uint32_t slot, std::span<std::byte> buffer) override {
    return backend_->RegisterBuffer(slot, buffer);
  }
  uint32_t alignment() const override { return targets_->alignment; }
  EngineKind kind() const override { return kind_; }
  const std::string& description() const override { return description_; }

 private:
  struct Slot {
    ReadRequest req;
    uint64_t tag;
    uint64_t done;     // bytes in place so far
    uint32_t retries;  // EAGAIN/EINTR since the last progress
    bool live;         // queued or in flight (else on free_slots_)
  };

  // Moves queued reads to the backend up to its capacity; how many.
  uint32_t Prepare() {
    uint32_t n = 0;
    while (!ready_.empty() && in_flight_ + n < backend_->capacity()) {
      const uint32_t s = ready_.front();
      ready_.pop_front();
      const Slot& sl = slots_[s];
      const uint64_t left = sl.req.length - sl.done;
      backend_->Prepare(Op{s, sl.req.target, sl.req.offset + sl.done,
                           static_cast<uint32_t>(std::min<uint64_t>(left, 1u << 30)),
                           sl.req.buffer + sl.done, sl.req.buffer_slot});
      ++n;
    }
    if (n > 0) {
      SetInFlight(in_flight_ + n);
      Add(stats_.ops, n);
    }
    return n;
  }

  // Turns backend completions into request outcomes (finished_) or
  // resubmissions (ready_).
  Status Process() {
    if (completions_.empty()) return Status::Ok();
    bool known = completions_.size() <= in_flight_;
    for (const Completion& c : completions_) {
      known = known && c.tag < slots_.size() && slots_[c.tag].live;
    }
    if (!known) return Status::IOError("I/O engine returned an unknown completion");
    SetInFlight(in_flight_ - static_cast<uint32_t>(completions_.size()));
    for (const Completion& c : completions_) {
      const uint32_t s = static_cast<uint32_t>(c.tag);
      Slot& sl = slots_[s];
      const ReadRequest& r = sl.req;
      const uint64_t at = r.offset + sl.done;
      if (c.result == -EAGAIN || c.result == -EINTR) {
        if (++sl.retries > kMaxRetries) {
          Finish(s, Status::FromErrno(static_cast<int>(-c.result), Where(r, at)));
        } else {
          ready_.push_back(s);
        }
      } else if (c.result < 0 && !c.detail.empty()) {
        const int e = static_cast<int>(-c.result);
        const std::string what = Where(r, at) + ": " + c.detail;
        Finish(s, e == ENOENT ? Status::NotFound(what) : Status::IOError(what, e));
      } else if (c.result < 0) {
        Finish(s, Status::FromErrno(static_cast<int>(-c.result), Where(r, at)));
      } else if (c.result == 0) {
        Finish(s, Status::IOError(Where(r, at) + ": unexpected end of file"));
      } else {
        sl.done += static_cast<uint64_t>(c.result);
        Add(stats_.bytes, static_cast<uint64_t>(c.result));
        sl.retries = 0;  // progress: the retry budget is per stall
        if (sl.done < r.length) {
          ready_.push_back(s);  // short read: read the rest
        } else {
          Finish(s, Status::Ok());
        }
      }
    }
    return Status::Ok();
  }

  void Finish(uint32_t s, Status st) {
    finished_.push_back({slots_[s].tag, std::move(st)});
    slots_[s].live = false;
    free_slots_.push_back(s);
  }

  size_t Deliver(std::vector<ReadCompletion>* out) {
    const size_t n = finished_.size();
    for (ReadCompletion& c : finished_) out->push_back(std::move(c));
    finished_.clear();
    pending_ -= n;
    Add(stats_.requests, n);
    return n;
  }

  void SetInFlight(uint32_t n) {
    const uint64_t now = Ns(Now());
    const uint64_t last = stats_.last_ns.load(std::memory_order_relaxed);
    const uint64_t dt = now > last ? now - last : 0;
    if (in_flight_ == 0) Add(stats_.empty_ns, dt);
    Add(stats_.in_flight_ns, dt * in_flight_);
    stats_.last_ns.store(now, std::memory_order_relaxed);
    stats_.in_flight.store(n, std::memory_order_relaxed);
    in_flight_ = n;
  }

  Status FailAndDeliver(const Status& cause, std::vector<ReadCompletion>* out) {
    const Status st = Fail(cause);
    Deliver(out);
    return st;
  }

  // The backend failed. Reads still in flight may yet write into their
  // buffers, so wait them out; then every pending request completes with
  // the error. If even waiting is impossible the engine is broken: the
  // buffers are unsafe to reuse, which the caller learns from every later
  // call failing.
  Status Fail(const Status& cause) {
    std::vector<Completion> drained;
    while (in_flight_ > 0) {
      drained.clear();
      if (!backend_->Reap(&drained).ok()) {
        broken_ = cause.WithContext("I/O engine unusable after a failure");
        break;
      }
      SetInFlight(in_flight_ -
                  std::min<uint32_t>(in_flight_, static_cast<uint32_t>(drained.size())));
    }
    for (uint32_t s = 0; s < slots_.size(); ++s) {
      if (slots_[s].live) Finish(s, cause);
    }
    ready_.clear();
    return broken_.ok() ? cause : broken_;
  }

  std::string Where(const ReadRequest& r, uint64_t at) const {
    return targets_->paths[r.target] + ": read of " + std::to_string(r.length) +
           " bytes at offset " + std::to_string(r.offset) +
           (at != r.offset ? " (at " + std::to_string(at) + ")" : "");
  }

  std::unique_ptr<Targets> targets_;
  std::unique_ptr<Backend> backend_;
  EngineKind kind_;
  const pid_t pid_ = ::getpid();  // the process that created the engine
  std::string description_;
  std::vector<std::string> flags_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::deque<uint32_t> ready_;            // slots awaiting (re)submission
  std::vector<ReadCompletion> finished_;  // outcomes not yet handed out
  std::vector<Completion> completions_;   // scratch
  uint32_t in_flight_ = 0;
  uint64_t pending_ = 0;
  Status broken_;
  AtomicStats stats_;
};

}  // namespace

std::string_view EngineKindName(EngineKind kind) { return NameOf(kEngineKindNames, kind); }

Result<EngineKind> ParseEngineKind(std::string_view name) {
  return ParseEnum(kEngineKindNames, name, "engine");
}

Result<std::unique_ptr<IoEngine>> CreateEngine(const std::vector<std::string>& target_paths,
                                               const EngineOptions& options) {
  if (target_paths.empty()) return Status::InvalidArgument("no targets to read");
  const bool mmap = options.kind == EngineKind::kMmap;
  DLFS_ASSIGN_OR_RETURN(std::unique_ptr<Targets> targets,
                        io_internal::OpenTargets(target_paths, options.direct_io && !mmap));
  std::unique_ptr<Backend> backend;
  EngineKind kind = EngineKind::kPread;
  std::string why;
  const bool any_remote =
      std::find(targets->remote.begin(), targets->remote.end(), true) != targets->remote.end();
  const bool any_s3 = std::find(targets->s3.begin(), targets->s3.end(), true) != targets->s3.end();
  if (any_remote && any_s3) {
    return Status::InvalidArgument("a volume's targets are NBD exports or S3 objects, not both");
  }
  if ((any_s3 || any_remote) && mmap) {
    return Status::InvalidArgument("engine mmap reads local files and devices, not " +
                                   std::string(any_s3 ? "s3:// objects" : "NBD exports"));
  }
  if (any_s3 || any_remote) {
    // NBD exports and S3 objects are read by their backend whatever the
    // engine kind; the volume's local targets (if any) by a pread pool that
    // can wake the backend's poll() (io_uring's completions cannot join it
    // portably). The pool gets the local targets' share of the queue depth
    // (a thread per read in flight), not all of it: a volume mostly on
    // remote targets does not need 64 threads for its one local target.
    std::unique_ptr<Backend> local;
    const size_t n = targets->fds.size();
    size_t local_count = 0;
    for (size_t t = 0; t < n; ++t) local_count += targets->fds[t] >= 0 ? 1 : 0;
    if (local_count > 0) {
      EngineOptions lo = options;
      lo.queue_depth = static_cast<uint32_t>(
          std::max<uint64_t>(1, (uint64_t{options.queue_depth} * local_count + n - 1) / n));
      DLFS_ASSIGN_OR_RETURN(local, io_internal::CreatePreadBackend(*targets, lo, true));
    }
    if (any_s3) {
      DLFS_ASSIGN_OR_RETURN(backend,
                            io_internal::CreateS3Backend(*targets, options, std::move(local)));
      kind = EngineKind::kS3;
    } else {
      DLFS_ASSIGN_OR_RETURN(backend,
                            io_internal::CreateNbdBackend(*targets, options, std::move(local)));
      kind = EngineKind::kNbd;
    }
  } else if (mmap) {
    DLFS_ASSIGN_OR_RETURN(backend, io_internal::CreateMmapBackend(*targets, options));
    kind = EngineKind::kMmap;
  } else if (options.kind == EngineKind::kNbd) {
    return Status::InvalidArgument("engine nbd asked for, but no target is an NBD URI");
  } else if (options.kind == EngineKind::kS3) {
    return Status::InvalidArgument("engine s3 asked for, but no target is an s3:// URL");
  }
  if (!backend && options.kind != EngineKind::kPread) {
    auto uring = io_internal::CreateUringBackend(*targets, options);
    if (uring.ok()) {
      backend = std::move(uring).value();
      kind = EngineKind::kUring;
    } else if (options.kind == EngineKind::kUring) {
      return uring.status();
    } else {
      why = "fell back to pread: " + uring.status().message();
    }
  }
  if (!backend) {
    DLFS_ASSIGN_OR_RETURN(backend, io_internal::CreatePreadBackend(*targets, options));
  }
  if (options.faults.any()) {
    backend = io_internal::CreateFaultInjectingBackend(std::move(backend), options.faults,
                                                       targets->alignment);
  }
  return std::unique_ptr<IoEngine>(
      new Engine(std::move(targets), std::move(backend), kind, std::move(why)));
}

}  // namespace dlfs
