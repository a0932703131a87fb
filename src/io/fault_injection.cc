// Backend decorator (EngineOptions::faults): rewrites completions to look like EIO, EAGAIN
// or short reads, so the completion loop's recovery paths run for real.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <unordered_map>

#include "io/io_backend.h"

namespace dlfs::io_internal {

namespace {

class FaultInjectingBackend final : public Backend {
 public:
  FaultInjectingBackend(std::unique_ptr<Backend> inner, const FaultInjection& f, uint32_t align)
      : inner_(std::move(inner)), faults_(f), align_(align) {}

  uint32_t capacity() const override { return inner_->capacity(); }
  void Prepare(const Op& op) override {
    if (faults_.eio_length != 0) ops_[op.tag] = op;
    inner_->Prepare(op);
  }
  Status Submit() override { return inner_->Submit(); }
  std::vector<std::string> Flags() const override { return inner_->Flags(); }
  bool RegisterBuffer(uint32_t slot, std::span<std::byte> b) override {
    return inner_->RegisterBuffer(slot, b);
  }
  std::string Describe() const override { return inner_->Describe() + ", fault injection"; }

  Status Reap(std::vector<Completion>* out) override {
    if (faults_.delay_us) ::usleep(faults_.delay_us);
    const size_t first = out->size();
    DLFS_RETURN_IF_ERROR(inner_->Reap(out));
    Alter(out, first);
    return Status::Ok();
  }

  Status Poll(std::vector<Completion>* out) override {
    const size_t first = out->size();
    DLFS_RETURN_IF_ERROR(inner_->Poll(out));
    Alter(out, first);
    return Status::Ok();
  }

 private:
  void Alter(std::vector<Completion>* out, size_t first) {
    for (size_t i = first; i < out->size(); ++i) {
      Completion& c = (*out)[i];
      if (faults_.eio_length != 0) {
        const auto it = ops_.find(c.tag);
        if (it != ops_.end()) {
          const Op& op = it->second;
          if (op.target == faults_.eio_target &&
              op.offset < faults_.eio_offset + faults_.eio_length &&
              faults_.eio_offset < op.offset + op.length) {
            c.result = -EIO;
          }
          ops_.erase(it);
        }
      }
      ++count_;
      auto every = [&](uint32_t n) { return n != 0 && count_ % n == 0; };
      if (every(faults_.eio_every)) {
        c.result = -EIO;
      } else if (every(faults_.eagain_every)) {
        c.result = -EAGAIN;
      } else if (every(faults_.short_every) && c.result > 0) {
        // Half the bytes, kept aligned so an O_DIRECT resubmission is valid.
        const int64_t half = c.result / 2 / align_ * align_;
        if (half > 0) c.result = half;
      }
    }
  }

  std::unique_ptr<Backend> inner_;
  FaultInjection faults_;
  uint32_t align_;
  uint64_t count_ = 0;
  std::unordered_map<uint64_t, Op> ops_;  // in flight, by tag (only for eio_length)
};

}  // namespace

std::unique_ptr<Backend> CreateFaultInjectingBackend(std::unique_ptr<Backend> inner,
                                                     const FaultInjection& faults,
                                                     uint32_t alignment) {
  return std::make_unique<FaultInjectingBackend>(std::move(inner), faults,
                                                 alignment ? alignment : 1);
}

}  // namespace dlfs::io_internal
