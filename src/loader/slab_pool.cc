#include "loader/slab_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "common/file_util.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace dlfs::loader_internal {

void Prefault(std::byte* p, uint64_t n) {
  if (p == nullptr || n == 0) return;
  // One call faults the whole range in (huge pages where the mapping asked
  // for them), far cheaper than a fault per page on VMs with shadow paging.
  if (::madvise(p, n, MADV_POPULATE_WRITE) == 0) return;
  const long page = ::sysconf(_SC_PAGESIZE);
  const uint64_t step = page > 0 ? static_cast<uint64_t>(page) : 4096;
  for (uint64_t at = 0; at < n; at += step) {
    *reinterpret_cast<volatile std::byte*>(p + at) = std::byte{0};
  }
}

BufferPlan PlanBuffers(const BufferRequest& r) {
  const uint64_t a = std::max<uint32_t>(r.alignment, 1);
  const uint64_t threads = std::max<uint32_t>(r.threads, 1);
  const auto per_thread = [&](uint64_t window) {
    return (window + threads - 1) / threads + r.held;
  };
  const auto total = [&](uint64_t window, uint64_t slab) {
    return per_thread(window) * threads * slab;
  };
  BufferPlan p;
  p.window = std::max<uint64_t>(r.window, 1);
  p.slab = (r.mean_sample + a) * r.batch_size / 4 * 5 + a;
  if (r.budget > 0 && total(p.window, p.slab) > r.budget) {
    p.slab = (r.mean_sample + a) * r.batch_size + a;
    while (p.window > 1 && total(p.window, p.slab) > r.budget) --p.window;
  }
  p.per_thread = static_cast<uint32_t>(per_thread(p.window));
  const auto mb = [](uint64_t bytes) { return std::to_string((bytes + (1 << 19)) >> 20) + " MB"; };
  if (r.budget > 0 && total(p.window, p.slab) > r.budget) {
    p.per_thread = 2;
    p.note = "batch buffers of " + mb(p.slab) + " each exceed the " + mb(r.budget) +
             " they may take (an eighth of the memory this process may use): reading one "
             "batch ahead, " +
             mb(p.per_thread * threads * p.slab) + " reserved";
  } else if (p.window < r.window) {
    p.note = "read-ahead shortened from " + std::to_string(r.window) + " to " +
             std::to_string(p.window) + (p.window == 1 ? " batch" : " batches") +
             " so that its buffers (" + mb(total(p.window, p.slab)) + ") fit in the " +
             mb(r.budget) + " they may take (an eighth of the memory this process may use)";
  }
  return p;
}

SlabPool::SlabPool(uint32_t alignment, IoEngine* engine, uint32_t slots)
    : alignment_(std::max<uint32_t>(alignment, 4096)), engine_(engine), slots_(slots) {}

bool SlabPool::Grow(Slab* slab, uint64_t bytes) {
  const uint64_t cap = (bytes + alignment_ - 1) / alignment_ * alignment_;
  // The old buffer goes first: a slab grows only while free, so its bytes
  // are not needed, and holding both at once would take twice a batch's
  // memory (for batches of large samples, more than a tight cgroup has).
  if (slab->memory) {
    if (slab->slot != ReadRequest::kNoSlot) engine_->RegisterBuffer(slab->slot, {});
    slab->memory.reset();
    slab->data = nullptr;
    std::lock_guard lock(mu_);
    bytes_ -= slab->capacity;
    slab->capacity = 0;
  }
  std::shared_ptr<std::byte> memory = AllocateLarge(cap);
  if (!memory) return false;
  Prefault(memory.get(), cap);
  {
    std::lock_guard lock(mu_);
    bytes_ += cap;
  }
  slab->memory = std::move(memory);
  slab->data = slab->memory.get();
  slab->capacity = cap;
  if (slab->slot != ReadRequest::kNoSlot &&
      !engine_->RegisterBuffer(slab->slot, {slab->data, cap})) {
    // Unpin the freed buffer the slot still names; reads of this slab go
    // without a fixed buffer from now on.
    engine_->RegisterBuffer(slab->slot, {});
    slab->slot = ReadRequest::kNoSlot;
  }
  return true;
}

bool SlabPool::Reserve(uint32_t count, uint64_t bytes) {
  for (uint32_t i = 0; i < count; ++i) {
    auto slab = std::make_unique<Slab>();
    {
      std::lock_guard lock(mu_);
      if (next_slot_ < slots_) slab->slot = next_slot_++;
    }
    if (!Grow(slab.get(), bytes)) return false;
    std::lock_guard lock(mu_);
    free_.push_back(std::move(slab));
  }
  return true;
}

std::shared_ptr<Slab> SlabPool::Acquire(uint64_t bytes) {
  std::unique_ptr<Slab> slab;
  {
    std::lock_guard lock(mu_);
    if (!free_.empty()) {
      // The smallest free slab that is large enough, else the largest
      // (which then grows least).
      auto best = free_.begin();
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        const uint64_t c = (*it)->capacity, b = (*best)->capacity;
        if (c >= bytes ? (b < bytes || c < b) : (b < bytes && c > b)) best = it;
      }
      slab = std::move(*best);
      free_.erase(best);
    }
  }
  if (!slab) {
    slab = std::make_unique<Slab>();
    std::lock_guard lock(mu_);
    if (next_slot_ < slots_) slab->slot = next_slot_++;
  }
  if (slab->capacity < bytes) {
    // An eighth to spare, so a run of slightly larger batches reallocates
    // rarely (not more: for batches of large samples every byte counts).
    if (!Grow(slab.get(), bytes + bytes / 8)) {
      std::lock_guard lock(mu_);
      free_.push_back(std::move(slab));
      return nullptr;
    }
  }
  auto self = shared_from_this();
  return std::shared_ptr<Slab>(slab.release(), [self](Slab* s) {
    std::lock_guard lock(self->mu_);
    self->free_.emplace_back(s);
  });
}

uint64_t SlabPool::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

}  // namespace dlfs::loader_internal
