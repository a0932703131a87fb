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

SlabPool::SlabPool(uint32_t alignment, IoEngine* engine, uint32_t slots)
    : alignment_(std::max<uint32_t>(alignment, 4096)), engine_(engine), slots_(slots) {}

bool SlabPool::Grow(Slab* slab, uint64_t bytes) {
  const uint64_t cap = (bytes + alignment_ - 1) / alignment_ * alignment_;
  std::shared_ptr<std::byte> memory = AllocateLarge(cap);
  if (!memory) return false;
  Prefault(memory.get(), cap);
  {
    std::lock_guard lock(mu_);
    bytes_ += cap - slab->capacity;
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
    // Grow geometrically so a run of slightly larger batches reallocates rarely.
    if (!Grow(slab.get(), std::max(bytes, slab->capacity * 3 / 2))) {
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
