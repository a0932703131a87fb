// Test-only backend decorator: rewrites completions to look like EIO, EAGAIN
// or short reads, so the completion loop's recovery paths run for real.
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "io/io_backend.h"

namespace dlfs::io_internal {

namespace {

class FaultInjectingBackend final : public Backend {
 public:
  FaultInjectingBackend(std::unique_ptr<Backend> inner, const testing::FaultInjection& f,
                        uint32_t align)
      : inner_(std::move(inner)), faults_(f), align_(align) {}

  uint32_t capacity() const override { return inner_->capacity(); }
  void Prepare(const Op& op) override { inner_->Prepare(op); }
  Status Submit() override { return inner_->Submit(); }
  bool RegisterBuffer(uint32_t slot, std::span<std::byte> b) override {
    return inner_->RegisterBuffer(slot, b);
  }
  std::string Describe() const override { return inner_->Describe() + ", fault injection"; }

  Status Reap(std::vector<Completion>* out) override {
    if (faults_.delay_us) ::usleep(faults_.delay_us);
    const size_t first = out->size();
    DLFS_RETURN_IF_ERROR(inner_->Reap(out));
    for (size_t i = first; i < out->size(); ++i) {
      Completion& c = (*out)[i];
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
    return Status::Ok();
  }

 private:
  std::unique_ptr<Backend> inner_;
  testing::FaultInjection faults_;
  uint32_t align_;
  uint64_t count_ = 0;
};

}  // namespace

std::unique_ptr<Backend> CreateFaultInjectingBackend(std::unique_ptr<Backend> inner,
                                                     const testing::FaultInjection& faults,
                                                     uint32_t alignment) {
  return std::make_unique<FaultInjectingBackend>(std::move(inner), faults,
                                                 alignment ? alignment : 1);
}

}  // namespace dlfs::io_internal

namespace dlfs::testing {

namespace {
// Engines read it when created; scopes are set up by tests outside engine
// creation, so an atomic pointer is enough.
std::atomic<const FaultInjection*> g_active{nullptr};
}  // namespace

ScopedFaultInjection::ScopedFaultInjection(const FaultInjection& faults)
    : faults_(faults), previous_(g_active.exchange(&faults_)) {}

ScopedFaultInjection::~ScopedFaultInjection() { g_active.store(previous_); }

const FaultInjection* ActiveFaultInjection() { return g_active.load(); }

}  // namespace dlfs::testing
