// io_uring backend: one ring, fixed files, optionally registered buffers and
// SQPOLL. Each op's tag travels in the SQE's user_data; completions are
// matched by it, never by order.
//
// All targets of a volume share the ring (each is a fixed file, indexed by
// target id). The ring is only the submission/completion channel: reads to
// different files or devices proceed in parallel in the block layer, so up
// to queue_depth reads spread over all targets are in flight together.
#include <liburing.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "io/io_backend.h"

namespace dlfs::io_internal {

namespace {

class UringBackend final : public Backend {
 public:
  UringBackend(const Targets& targets, const EngineOptions& options)
      : targets_(targets), options_(options) {}

  ~UringBackend() override {
    if (initialized_) io_uring_queue_exit(&ring_);
  }

  Status Init() {
    capacity_ = std::max<uint32_t>(1, options_.queue_depth);
    // The newest setup first; a kernel that does not know a flag refuses
    // the ring with EINVAL, and the next, older, combination is tried.
    // SINGLE_ISSUER + DEFER_TASKRUN (6.1) run completion work only when the
    // one reading thread asks for completions: no interrupts of it, no
    // locking. COOP_TASKRUN (5.19) likewise avoids interrupting the thread
    // while it computes. A single-thread ring is created disabled, so that
    // the thread creating it may register files and buffers; the reading
    // thread enables it, becoming its only issuer (EnableOnce).
    struct Attempt {
      unsigned flags;
      std::vector<std::string> names;
    };
    std::vector<Attempt> attempts;
    if (options_.sqpoll) {
      // SQPOLL excludes the task-run modes.
      if (options_.single_thread) {
        attempts.push_back(
            {IORING_SETUP_SQPOLL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_R_DISABLED,
             {"SQPOLL", "SINGLE_ISSUER"}});
      }
      attempts.push_back({IORING_SETUP_SQPOLL, {"SQPOLL"}});
    } else {
      constexpr unsigned kCoop = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
      if (options_.single_thread) {
        attempts.push_back(
            {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED,
             {"SINGLE_ISSUER", "DEFER_TASKRUN"}});
        attempts.push_back({IORING_SETUP_SINGLE_ISSUER | kCoop | IORING_SETUP_R_DISABLED,
                            {"SINGLE_ISSUER", "COOP_TASKRUN"}});
      }
      attempts.push_back({kCoop, {"COOP_TASKRUN"}});
    }
    attempts.push_back({0, {}});
    int rc = -EINVAL;
    for (const Attempt& a : attempts) {
      io_uring_params params{};
      params.flags = a.flags;
      if (a.flags & IORING_SETUP_SQPOLL) params.sq_thread_idle = 1000;
      rc = io_uring_queue_init_params(capacity_, &ring_, &params);
      if (rc == 0) {
        flags_ = a.names;
        setup_ = a.flags;
        break;
      }
      if (rc != -EINVAL) break;  // not a matter of flags: io_uring itself is refused
    }
    if (rc < 0) {
      return Status(StatusCode::kUnavailable,
                    std::string("io_uring unavailable: ") + std::strerror(-rc), -rc);
    }
    initialized_ = true;
    disabled_ = (setup_ & IORING_SETUP_R_DISABLED) != 0;
    // Both registrations are optimisations: without them reads still work.
    fixed_files_ = io_uring_register_files(&ring_, targets_.fds.data(),
                                           static_cast<unsigned>(targets_.fds.size())) == 0;
    if (options_.buffer_slots > 0) {
      registered_buffers_ = io_uring_register_buffers_sparse(&ring_, options_.buffer_slots) == 0;
    }
    return Status::Ok();
  }

  uint32_t capacity() const override { return capacity_; }

  void Prepare(const Op& op) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {  // cannot happen below capacity; flush defensively
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    const int fd = fixed_files_ ? static_cast<int>(op.target) : targets_.fds[op.target];
    const bool fixed_buf = registered_buffers_ && op.slot < options_.buffer_slots &&
                           slot_registered_.size() > op.slot && slot_registered_[op.slot];
    if (fixed_buf) {
      io_uring_prep_read_fixed(sqe, fd, op.buffer, op.length, op.offset, static_cast<int>(op.slot));
    } else {
      io_uring_prep_read(sqe, fd, op.buffer, op.length, op.offset);
    }
    if (fixed_files_) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, op.tag);
  }

  Status Submit() override {
    DLFS_RETURN_IF_ERROR(EnableOnce());
    while (true) {
      const int rc = io_uring_submit(&ring_);
      if (rc >= 0) return Status::Ok();
      if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) {
        // The kernel is short of resources or our CQ is full: making room by
        // reaping is the caller's next step, so report success here and let
        // the next Reap flush what is still queued.
        return Status::Ok();
      }
      return Status::FromErrno(-rc, "io_uring_submit");
    }
  }

  Status Reap(std::vector<Completion>* out) override {
    DLFS_RETURN_IF_ERROR(EnableOnce());
    io_uring_cqe* cqe = nullptr;
    // Submit anything still queued and wait for one completion. EINTR means
    // try again; EAGAIN/EBUSY mean the kernel is briefly short of resources.
    for (int busy = 0;;) {
      const int rc = io_uring_submit_and_wait(&ring_, 1);
      if (rc >= 0) break;
      if (io_uring_peek_cqe(&ring_, &cqe) == 0) break;
      if (rc == -EAGAIN || rc == -EBUSY) {
        if (++busy > 20000) {  // about a second without the kernel taking work
          return Status::FromErrno(-rc, "io_uring_submit_and_wait keeps failing");
        }
        ::usleep(50);
      } else if (rc != -EINTR) {
        return Status::FromErrno(-rc, "io_uring_submit_and_wait");
      }
    }
    while (io_uring_peek_cqe(&ring_, &cqe) != 0) {
      const int w = io_uring_wait_cqe(&ring_, &cqe);
      if (w == 0) break;
      if (w != -EINTR) return Status::FromErrno(-w, "io_uring_wait_cqe");
    }
    Collect(out);
    return Status::Ok();
  }

  Status Poll(std::vector<Completion>* out) override {
    DLFS_RETURN_IF_ERROR(EnableOnce());
    if (setup_ & IORING_SETUP_DEFER_TASKRUN) {
      // Completions are posted only when the issuer asks for them.
      const int rc = io_uring_get_events(&ring_);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
        return Status::FromErrno(-rc, "io_uring_get_events");
      }
    } else {
      io_uring_cqe* cqe = nullptr;
      io_uring_peek_cqe(&ring_, &cqe);  // flushes task work (TASKRUN_FLAG) or overflow
    }
    Collect(out);
    return Status::Ok();
  }

  std::vector<std::string> Flags() const override {
    std::vector<std::string> f = flags_;
    if (ring_fd_registered_) f.push_back("registered ring fd");
    return f;
  }

  bool RegisterBuffer(uint32_t slot, std::span<std::byte> buffer) override {
    if (!registered_buffers_ || slot >= options_.buffer_slots) return false;
    iovec iov{buffer.data(), buffer.size()};
    __u64 tag = 0;
    const int rc = io_uring_register_buffers_update_tag(&ring_, slot, &iov, &tag, 1);
    if (slot_registered_.size() <= slot) slot_registered_.resize(slot + 1, false);
    slot_registered_[slot] = rc == 1 && !buffer.empty();
    return slot_registered_[slot];
  }

  std::string Describe() const override {
    std::string s = "io_uring";
    s += targets_.direct ? ", O_DIRECT" : ", buffered (" + targets_.note + ")";
    if (fixed_files_) s += ", fixed files";
    if (registered_buffers_) s += ", registered buffers";
    for (const std::string& f : flags_) {
      if (f != "SQPOLL") s += ", " + f;
    }
    if (options_.sqpoll) s += ", SQPOLL";
    s += ", queue depth " + std::to_string(capacity_);
    return s;
  }

 private:
  // A single-issuer ring is enabled by its first user, which the kernel
  // then holds to be its only issuer; registering the ring's fd (per
  // thread) saves a file lookup on every system call.
  Status EnableOnce() {
    if (!disabled_) return Status::Ok();
    // liburing 2.3 declares io_uring_enable_rings but does not export it:
    // the system call it wraps.
    if (::syscall(__NR_io_uring_register, ring_.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0) <
        0) {
      return Status::FromErrno(errno, "io_uring_register(ENABLE_RINGS)");
    }
    disabled_ = false;
    ring_fd_registered_ = io_uring_register_ring_fd(&ring_) == 1;
    return Status::Ok();
  }

  void Collect(std::vector<Completion>* out) {
    io_uring_cqe* cqe = nullptr;
    unsigned head;
    unsigned n = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      out->push_back(Completion{io_uring_cqe_get_data64(cqe), cqe->res});
      ++n;
    }
    io_uring_cq_advance(&ring_, n);
  }

  const Targets& targets_;
  EngineOptions options_;
  io_uring ring_{};
  bool initialized_ = false;
  bool fixed_files_ = false;
  bool registered_buffers_ = false;
  std::vector<bool> slot_registered_;
  uint32_t capacity_ = 0;
  unsigned setup_ = 0;              // IORING_SETUP_* in use
  std::vector<std::string> flags_;  // their names
  bool disabled_ = false;           // created with R_DISABLED, not enabled yet
  bool ring_fd_registered_ = false;
};

}  // namespace

Result<std::unique_ptr<Backend>> CreateUringBackend(const Targets& targets,
                                                    const EngineOptions& options) {
  auto b = std::make_unique<UringBackend>(targets, options);
  DLFS_RETURN_IF_ERROR(b->Init());
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace dlfs::io_internal
