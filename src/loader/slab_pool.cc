#include "loader/slab_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "common/file_util.h"
#include "dlfs/memory.h"

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

Result<BufferPlan> PlanBuffers(const BufferRequest& r) {
  const uint64_t a = std::max<uint32_t>(r.alignment, 1);
  const uint64_t page = std::max<uint64_t>(a, 4096);  // as SlabPool rounds
  const auto round = [&](uint64_t bytes) { return (bytes + page - 1) / page * page; };
  const uint64_t threads = std::max<uint32_t>(r.threads, 1);
  const uint64_t b = std::max<uint64_t>(r.batch_size, 1);
  const auto per_thread = [&](uint64_t window) {
    return (window + threads - 1) / threads + r.held;
  };
  const uint64_t budget = r.usable / 8;
  BufferPlan p;
  p.window = std::max<uint64_t>(r.window, 1);
  const uint64_t mean_batch = (r.mean_sample + a) * b + a;
  p.slab = round((r.mean_sample + a) * b / 4 * 5 + a);
  p.per_thread = static_cast<uint32_t>(per_thread(p.window));
  const auto total = [&] { return uint64_t{p.per_thread} * threads * p.slab; };
  if (budget == 0 || total() <= budget) {
    p.total = total();
    return p;
  }
  // Slabs of what a batch needs with near certainty instead of a quarter
  // more than the mean (usually less; more where samples vary widely).
  const double spread = 4 * std::sqrt(static_cast<double>(b)) * r.sample_stddev;
  const uint64_t largest = r.largest_sample > r.mean_sample
                               ? (r.largest_sample + a) + (r.mean_sample + a) * (b - 1) + a
                               : mean_batch;
  p.slab = round(std::max(mean_batch + static_cast<uint64_t>(spread), largest));
  while (p.window > 1 && total() > budget)
    p.per_thread = static_cast<uint32_t>(per_thread(--p.window));
  // Fewer slabs than the window and the held batches make the reader wait
  // for a slab to come back; two per thread still overlap reading a batch
  // with the use of the previous one.
  while (p.per_thread > 2 && total() > budget) --p.per_thread;
  p.total = total();
  const std::string what = "batch buffers, " + HumanBytes(static_cast<double>(p.total)) + " (" +
                           std::to_string(p.per_thread * threads) + " of " +
                           HumanBytes(static_cast<double>(p.slab)) + ")";
  const std::string may_use = HumanBytes(static_cast<double>(r.usable)) + " this process may use" +
                              (r.usable_from.empty() ? "" : " (" + r.usable_from + ")");
  const std::string eighth =
      HumanBytes(static_cast<double>(budget)) + " they may take, an eighth of the " + may_use;
  if (p.total <= budget) {
    p.note = "read-ahead shortened from " + std::to_string(r.window) + " to " +
             std::to_string(p.window) + (p.window == 1 ? " batch" : " batches") + " so that the " +
             what + ", fit in the " + eighth;
    return p;
  }
  if (p.total > r.usable / 4 * 3) {
    return Status::InvalidArgument(
        "a batch of " + std::to_string(b) + " samples needs a buffer of " +
        HumanBytes(static_cast<double>(p.slab)) + " and reading needs " +
        (threads > 1 ? "two per I/O thread (" : "two (") +
        HumanBytes(static_cast<double>(p.total)) +
        ": one batch read while the previous one is used), more than three quarters of the " +
        may_use + "; a smaller batch_size" + (threads > 1 ? " or fewer io_threads" : "") +
        " lowers it");
  }
  p.note = "the " + what + ", exceed the " + eighth + ": reading one batch ahead";
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

void SlabPool::set_cap(uint64_t cap) {
  std::lock_guard lock(mu_);
  cap_ = cap;
}

uint64_t SlabPool::Rounded(uint64_t bytes) const {
  return (bytes + alignment_ - 1) / alignment_ * alignment_;
}

uint64_t SlabPool::GrowthLocked(uint64_t bytes, uint64_t own) const {
  const uint64_t want = Rounded(bytes + bytes / 8);
  if (cap_ == 0) return want;
  uint64_t in_use = bytes_ - own;
  for (const auto& s : free_) in_use -= s->capacity;
  const uint64_t room = cap_ > in_use ? cap_ - in_use : 0;
  return std::max(Rounded(bytes), std::min(want, room / alignment_ * alignment_));
}

bool SlabPool::Fits(uint64_t bytes) const {
  std::lock_guard lock(mu_);
  uint64_t free_bytes = 0;
  for (const auto& s : free_) {
    if (s->capacity >= bytes) return true;
    free_bytes += s->capacity;
  }
  return cap_ == 0 || bytes_ - free_bytes + Rounded(bytes) <= cap_;
}

std::shared_ptr<Slab> SlabPool::Acquire(uint64_t bytes) {
  std::unique_ptr<Slab> slab;
  std::vector<std::unique_ptr<Slab>> given_back;  // freed outside the lock
  uint64_t grow_to = 0;
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
    if (!slab || slab->capacity < bytes) {
      const uint64_t own = slab ? slab->capacity : 0;
      grow_to = GrowthLocked(bytes, own);
      // Within a cap, free slabs make room: the smallest go first.
      if (cap_ > 0) {
        std::sort(free_.begin(), free_.end(),
                  [](const auto& x, const auto& y) { return x->capacity > y->capacity; });
        while (!free_.empty() && bytes_ - own + grow_to > cap_) {
          bytes_ -= free_.back()->capacity;
          if (free_.back()->slot != ReadRequest::kNoSlot)
            spare_slots_.push_back(free_.back()->slot);
          given_back.push_back(std::move(free_.back()));
          free_.pop_back();
        }
      }
    }
    if (!slab) {
      slab = std::make_unique<Slab>();
      if (!spare_slots_.empty()) {
        slab->slot = spare_slots_.back();
        spare_slots_.pop_back();
      } else if (next_slot_ < slots_) {
        slab->slot = next_slot_++;
      }
    }
  }
  for (auto& s : given_back) {
    // Its slot names the buffer about to be freed: unpin it first.
    if (s->slot != ReadRequest::kNoSlot) engine_->RegisterBuffer(s->slot, {});
  }
  given_back.clear();
  if (slab->capacity < bytes && !Grow(slab.get(), grow_to)) {
    std::lock_guard lock(mu_);
    free_.push_back(std::move(slab));
    return nullptr;
  }
  auto self = shared_from_this();
  return std::shared_ptr<Slab>(slab.release(), [self](Slab* s) { self->Released(s); });
}

void SlabPool::Released(Slab* slab) {
  {
    std::lock_guard lock(mu_);
    free_.emplace_back(slab);
  }
  std::lock_guard lock(release_mu_);
  if (on_release_) on_release_();
}

void SlabPool::SetOnRelease(std::function<void()> on_release) {
  std::lock_guard lock(release_mu_);
  on_release_ = std::move(on_release);
}

uint64_t SlabPool::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

}  // namespace dlfs::loader_internal
