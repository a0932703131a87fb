// SlabPool: the batch buffers of one I/O thread, allocated, pre-faulted and
// registered with its engine before the first read, then recycled.
//
// A slab holds one batch's reads back to back (BatchPlanner lays them out);
// samples are spans into it. Slabs are handed out with a deleter that puts
// them back, and the pool outlives every batch that uses one (shared
// ownership), so a caller may keep a Batch after its Loader is destroyed.
// When every slab is in use (the caller holds many batches), the pool
// grows; a batch larger than its slab grows that slab. Both are rare after
// Reserve() and cost a first touch of new memory on the reading thread.
//
// Thread safety: Acquire and Reserve from the owning I/O thread (or before
// it starts); slabs may be released and bytes() read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dlfs/io_engine.h"

namespace dlfs::loader_internal {

// A page-aligned buffer (AllocateLarge: huge pages where available) that one
// batch at a time reads into.
struct Slab {
  std::shared_ptr<std::byte> memory;
  std::byte* data = nullptr;
  uint64_t capacity = 0;
  uint32_t slot = ReadRequest::kNoSlot;  // registered-buffer slot in the owner's engine
};

class SlabPool : public std::enable_shared_from_this<SlabPool> {
 public:
  // Slabs are page-aligned (mmap), which covers every O_DIRECT alignment up
  // to the page size; sizes are rounded to `alignment` (at least 4 KiB).
  // `engine` registers the slabs (slot i for the i-th, up to `slots`); it
  // must outlive the pool's use on the reading thread.
  SlabPool(uint32_t alignment, IoEngine* engine, uint32_t slots);

  // Allocates `count` more slabs of `bytes`, touches every page of them (so
  // reads and checksums never pay first-touch faults) and registers them.
  // False when memory runs out (the slabs made so far are kept).
  bool Reserve(uint32_t count, uint64_t bytes);

  // A slab of at least `bytes`, grown (and re-registered) when needed.
  // nullptr only if memory runs out.
  std::shared_ptr<Slab> Acquire(uint64_t bytes);

  // Bytes of every slab (free or in use).
  uint64_t bytes() const;

 private:
  // Sizes `slab` to `bytes` (fresh memory, pre-faulted, registered).
  bool Grow(Slab* slab, uint64_t bytes);

  const uint32_t alignment_;
  IoEngine* const engine_;
  const uint32_t slots_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Slab>> free_;
  uint32_t next_slot_ = 0;
  uint64_t bytes_ = 0;
};

// What a loader's batch buffers are: `window` batches read ahead, spread
// over `threads` I/O threads (a pool each), and `held` more per thread for
// the batches the caller and the cache's filler hold.
struct BufferRequest {
  uint64_t window = 1;
  uint32_t threads = 1;
  uint64_t held = 2;
  uint64_t batch_size = 1;
  uint64_t mean_sample = 0;  // bytes
  uint32_t alignment = 1;    // of the engine's reads
  uint64_t budget = 0;       // bytes the buffers may take; 0: no limit known
};

struct BufferPlan {
  uint64_t window = 1;      // batches to read ahead (at least 1)
  uint32_t per_thread = 0;  // slabs to reserve in each thread's pool
  uint64_t slab = 0;        // bytes of each
  std::string note;         // why the read-ahead is shorter than asked, or empty
};

// Slabs for a batch of mean-sized samples, a block of alignment each and a
// quarter to spare (a larger batch grows its slab). When they exceed the
// budget, the spare quarter goes first, then batches read ahead, down to
// one: with little memory the loader reads ahead less instead of being
// killed for its buffers; if even that does not fit, only the slabs for one
// batch in flight and one held are reserved (more are made when needed).
BufferPlan PlanBuffers(const BufferRequest& r);

// Touches every page of [p, p + n) for writing, so later accesses take no
// page faults: MADV_POPULATE_WRITE where the kernel has it (5.14), else a
// write per page.
void Prefault(std::byte* p, uint64_t n);

}  // namespace dlfs::loader_internal
