// The completion loop shared by every engine, and CreateEngine().
#include <algorithm>
#include <cerrno>
#include <deque>

#include "dlfs/io_engine.h"
#include "io/io_backend.h"

namespace dlfs {

namespace {

using io_internal::Backend;
using io_internal::Completion;
using io_internal::Op;
using io_internal::Targets;

// A request retried this often without progress (EAGAIN storms) fails
// instead of spinning forever.
constexpr uint32_t kMaxRetries = 10000;

class Engine final : public IoEngine {
 public:
  Engine(std::unique_ptr<Targets> targets, std::unique_ptr<Backend> backend, EngineKind kind,
         std::string why)
      : targets_(std::move(targets)), backend_(std::move(backend)), kind_(kind) {
    description_ = backend_->Describe();
    if (!why.empty()) description_ += " [" + why + "]";
  }

  Status Read(std::span<const ReadRequest> reqs, std::span<Status> results) override {
    if (results.size() != reqs.size()) return Status::InvalidArgument("results size mismatch");
    if (!broken_.ok()) return broken_;
    done_.assign(reqs.size(), 0);
    retries_.assign(reqs.size(), 0);
    std::deque<uint64_t> ready;  // requests (re)awaiting submission
    for (uint64_t i = 0; i < reqs.size(); ++i) {
      results[i] = Status::Ok();
      if (reqs[i].target >= targets_->fds.size()) {
        results[i] = Status::InvalidArgument("read names target " + std::to_string(reqs[i].target));
      } else if (reqs[i].length > 0) {
        ready.push_back(i);
      }
    }
    uint32_t in_flight = 0;
    std::vector<Completion> completions;
    while (!ready.empty() || in_flight > 0) {
      while (!ready.empty() && in_flight < backend_->capacity()) {
        const uint64_t i = ready.front();
        ready.pop_front();
        const ReadRequest& r = reqs[i];
        const uint64_t left = r.length - done_[i];
        backend_->Prepare(Op{i, r.target, r.offset + done_[i],
                             static_cast<uint32_t>(std::min<uint64_t>(left, 1u << 30)),
                             r.buffer + done_[i], r.buffer_slot});
        ++in_flight;
      }
      Status st = backend_->Submit();
      completions.clear();
      if (st.ok()) st = backend_->Reap(&completions);
      if (!st.ok()) return Abandon(st, in_flight);
      for (const Completion& c : completions) {
        const uint64_t i = c.tag;
        if (i >= reqs.size() || in_flight == 0) {
          return Abandon(Status::IOError("I/O engine returned an unknown completion"), in_flight);
        }
        --in_flight;
        const ReadRequest& r = reqs[i];
        const uint64_t at = r.offset + done_[i];
        if (c.result == -EAGAIN || c.result == -EINTR) {
          if (++retries_[i] > kMaxRetries) {
            results[i] = Status::FromErrno(static_cast<int>(-c.result), Where(r, at));
          } else {
            ready.push_back(i);
          }
        } else if (c.result < 0) {
          results[i] = Status::FromErrno(static_cast<int>(-c.result), Where(r, at));
        } else if (c.result == 0) {
          results[i] = Status::IOError(Where(r, at) + ": unexpected end of file");
        } else {
          done_[i] += static_cast<uint64_t>(c.result);
          retries_[i] = 0;                              // progress: the retry budget is per stall
          if (done_[i] < r.length) ready.push_back(i);  // short read: read the rest
        }
      }
    }
    return Status::Ok();
  }

  bool RegisterBuffer(uint32_t slot, std::span<std::byte> buffer) override {
    return backend_->RegisterBuffer(slot, buffer);
  }
  uint32_t alignment() const override { return targets_->alignment; }
  EngineKind kind() const override { return kind_; }
  const std::string& description() const override { return description_; }

 private:
  // The backend failed with reads still in flight: they may yet write into
  // the caller's buffers, so wait them out before returning, and refuse all
  // later reads if even that is impossible (the buffers are then unsafe to
  // reuse, which the caller learns from every later Read failing).
  Status Abandon(const Status& cause, uint32_t in_flight) {
    std::vector<Completion> drained;
    while (in_flight > 0) {
      drained.clear();
      if (!backend_->Reap(&drained).ok()) {
        broken_ = cause.WithContext("I/O engine unusable after a failure");
        return broken_;
      }
      in_flight -= std::min<uint32_t>(in_flight, static_cast<uint32_t>(drained.size()));
    }
    return cause;
  }

  std::string Where(const ReadRequest& r, uint64_t at) const {
    return targets_->paths[r.target] + ": read of " + std::to_string(r.length) +
           " bytes at offset " + std::to_string(r.offset) +
           (at != r.offset ? " (at " + std::to_string(at) + ")" : "");
  }

  std::unique_ptr<Targets> targets_;
  std::unique_ptr<Backend> backend_;
  EngineKind kind_;
  std::string description_;
  std::vector<uint64_t> done_;
  std::vector<uint32_t> retries_;
  Status broken_;
};

}  // namespace

std::string_view EngineKindName(EngineKind kind) { return NameOf(kEngineKindNames, kind); }

Result<EngineKind> ParseEngineKind(std::string_view name) {
  return ParseEnum(kEngineKindNames, name, "engine");
}

Result<std::unique_ptr<IoEngine>> CreateEngine(const std::vector<std::string>& target_paths,
                                               const EngineOptions& options) {
  if (target_paths.empty()) return Status::InvalidArgument("no targets to read");
  DLFS_ASSIGN_OR_RETURN(std::unique_ptr<Targets> targets,
                        io_internal::OpenTargets(target_paths, options.direct_io));
  std::unique_ptr<Backend> backend;
  EngineKind kind = EngineKind::kPread;
  std::string why;
  if (options.kind != EngineKind::kPread) {
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
  if (const testing::FaultInjection* faults = testing::ActiveFaultInjection()) {
    backend =
        io_internal::CreateFaultInjectingBackend(std::move(backend), *faults, targets->alignment);
  }
  return std::unique_ptr<IoEngine>(
      new Engine(std::move(targets), std::move(backend), kind, std::move(why)));
}

}  // namespace dlfs
