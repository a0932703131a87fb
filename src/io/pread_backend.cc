// pread backend: a fixed pool of threads, one blocking pread(2) each. It is
// the portable engine and the fallback when io_uring is unavailable.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>

#include "io/io_backend.h"

namespace dlfs::io_internal {

namespace {

constexpr uint32_t kMaxThreads = 64;

class PreadBackend final : public Backend {
 public:
  PreadBackend(const Targets& targets, const EngineOptions& options, bool notify)
      : targets_(targets),
        capacity_(std::clamp<uint32_t>(options.queue_depth, 1, kMaxThreads)),
        caller_thread_(options.caller_thread && !notify) {
    if (caller_thread_) return;  // no pool
    if (notify) {
      notify_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      if (notify_fd_ < 0) error_ = "cannot create an eventfd for the pread pool";
    }
    try {
      for (uint32_t i = 0; i < capacity_; ++i) workers_.emplace_back([this] { Work(); });
    } catch (const std::system_error& e) {
      // Out of threads: run with those we got, or report none.
      if (workers_.empty()) error_ = std::string("cannot start pread threads: ") + e.what();
      capacity_ = static_cast<uint32_t>(workers_.size());
    }
  }

  const std::string& error() const { return error_; }

  ~PreadBackend() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
    if (notify_fd_ >= 0) ::close(notify_fd_);
  }

  int NotifyFd() const override { return notify_fd_; }

  uint32_t capacity() const override { return capacity_; }

  void Prepare(const Op& op) override { prepared_.push_back(op); }

  Status Submit() override {
    if (prepared_.empty()) return Status::Ok();
    if (caller_thread_) {
      for (const Op& op : prepared_) done_.push_back(Completion{op.tag, ReadOp(op)});
      prepared_.clear();
      return Status::Ok();
    }
    {
      std::lock_guard lock(mu_);
      queue_.insert(queue_.end(), prepared_.begin(), prepared_.end());
    }
    prepared_.clear();
    work_cv_.notify_all();
    return Status::Ok();
  }

  Status Reap(std::vector<Completion>* out) override {
    DLFS_RETURN_IF_ERROR(Submit());
    if (caller_thread_) return Poll(out);  // every read submitted is done
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return !done_.empty(); });
    out->insert(out->end(), done_.begin(), done_.end());
    done_.clear();
    return Status::Ok();
  }

  Status Poll(std::vector<Completion>* out) override {
    std::lock_guard lock(mu_);
    out->insert(out->end(), done_.begin(), done_.end());
    done_.clear();
    return Status::Ok();
  }

  bool RegisterBuffer(uint32_t, std::span<std::byte>) override { return false; }

  std::string Describe() const override {
    std::string s = "pread thread pool";
    s += targets_.direct ? ", O_DIRECT" : ", buffered (" + targets_.note + ")";
    s +=
        caller_thread_ ? ", on the caller's thread" : ", " + std::to_string(capacity_) + " threads";
    return s;
  }

 private:
  // The bytes read, or -errno.
  int64_t ReadOp(const Op& op) const {
    const ssize_t n =
        ::pread(targets_.fds[op.target], op.buffer, op.length, static_cast<off_t>(op.offset));
    return n < 0 ? -int64_t{errno} : int64_t{n};
  }

  void Work() {
    while (true) {
      Op op;
      {
        std::unique_lock lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        op = queue_.front();
        queue_.pop_front();
      }
      const int64_t result = ReadOp(op);
      {
        std::lock_guard lock(mu_);
        done_.push_back(Completion{op.tag, result});
      }
      done_cv_.notify_one();
      if (notify_fd_ >= 0) (void)::eventfd_write(notify_fd_, 1);
    }
  }

  const Targets& targets_;
  uint32_t capacity_;
  const bool caller_thread_;
  std::string error_;
  int notify_fd_ = -1;
  std::vector<Op> prepared_;  // touched only by the engine's thread
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Op> queue_;
  std::vector<Completion> done_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

Result<std::unique_ptr<Backend>> CreatePreadBackend(const Targets& targets,
                                                    const EngineOptions& options, bool notify) {
  auto b = std::make_unique<PreadBackend>(targets, options, notify);
  if (!b->error().empty()) return Status::Unavailable(b->error());
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace dlfs::io_internal
