// SlabPool: the batch buffers of one I/O thread, allocated, pre-faulted and
// registered with its engine before the first read, then recycled.
//
// A slab holds one batch's reads back to back (BatchPlanner lays them out);
// samples are spans into it. Slabs are handed out with a deleter that puts
// them back, and the pool outlives every batch that uses one (shared
// ownership), so a caller may keep a Batch after its Loader is destroyed.
//
// A pool may have a cap (set_cap): its bytes stay within it, so a reader
// asks Fits() before Acquire() and waits for a slab to come back when it
// does not (reading ahead less instead of allocating more); the on_release
// callback says when one did. Acquire() itself never refuses for the cap:
// a reader that cannot wait (the caller holds every other slab and waits
// for this batch) goes beyond it. Without a cap the pool grows when every
// slab is in use, and a batch larger than its slab grows that slab; both
// cost a first touch of new memory on the reading thread.
//
// Thread safety: Acquire, Fits and Reserve from the owning I/O thread (or
// before it starts); slabs may be released, and bytes() and Fits() read,
// from any thread. on_release runs on the thread that released the slab,
// holding no lock of the pool; SetOnRelease({}) returns once no call of the
// previous callback is running.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dlfs/io_engine.h"
#include "dlfs/status.h"

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

  // Keeps the pool's bytes within `cap` (0: no cap) for Fits().
  void set_cap(uint64_t cap);

  // Whether Acquire(bytes) stays within the cap: a free slab is large
  // enough, or free slabs can be given back to make room for one that is.
  bool Fits(uint64_t bytes) const;

  // A slab of at least `bytes`: a free one large enough, else one grown (and
  // re-registered), giving back free slabs first to stay within the cap
  // where that suffices. nullptr only if memory runs out.
  std::shared_ptr<Slab> Acquire(uint64_t bytes);

  // Called whenever a slab comes back (see the thread safety note above).
  void SetOnRelease(std::function<void()> on_release);

  // Bytes of every slab (free or in use).
  uint64_t bytes() const;

  // `bytes` rounded up as the pool sizes a slab.
  uint64_t Rounded(uint64_t bytes) const;

 private:
  // Sizes `slab` to `bytes` (fresh memory, pre-faulted, registered).
  bool Grow(Slab* slab, uint64_t bytes);
  // What Acquire(bytes) allocates for a slab that is too small: an eighth
  // to spare (so a run of slightly larger batches reallocates rarely; not
  // more, for batches of large samples every byte counts), less where the
  // cap allows only less; `own` is the capacity of the slab that grows.
  // REQUIRES: mu_ held.
  uint64_t GrowthLocked(uint64_t bytes, uint64_t own) const;
  void Released(Slab* slab);

  const uint32_t alignment_;
  IoEngine* const engine_;
  const uint32_t slots_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Slab>> free_;
  uint32_t next_slot_ = 0;
  std::vector<uint32_t> spare_slots_;  // of slabs given back to make room
  uint64_t bytes_ = 0;
  uint64_t cap_ = 0;
  std::mutex release_mu_;  // held while on_release_ runs or changes
  std::function<void()> on_release_;
};

// What a loader's batch buffers are: `window` batches read ahead, spread
// over `threads` I/O threads (a pool each), and `held` more per thread for
// the batches the caller and the cache's filler hold.
struct BufferRequest {
  uint64_t window = 1;
  uint32_t threads = 1;
  uint64_t held = 2;
  uint64_t batch_size = 1;
  // Of the samples a batch is drawn from (bytes): their mean, the largest,
  // and their standard deviation.
  uint64_t mean_sample = 0;
  uint64_t largest_sample = 0;
  double sample_stddev = 0;
  uint32_t alignment = 1;  // of the engine's reads
  // What the process may use (MemoryLimit::usable()); 0: no limit known.
  uint64_t usable = 0;
  std::string usable_from;  // where that comes from, for messages ("limit ... in FILE")
};

struct BufferPlan {
  uint64_t window = 1;      // batches to read ahead (at least 1)
  uint32_t per_thread = 0;  // slabs to reserve in each thread's pool, its cap
  uint64_t slab = 0;        // bytes of each, as SlabPool rounds them
  uint64_t total = 0;       // bytes of every slab of every thread
  std::string note;         // why the read-ahead is shorter than asked, or empty
};

// The batch buffers take at most an eighth of `usable`. They are slabs for
// a batch of mean-sized samples, a block each and a quarter to spare (a
// larger batch grows its slab). When they exceed the eighth, slabs become
// what a batch needs with near certainty instead (four standard deviations
// above the mean batch, and at least the largest sample among mean ones),
// then batches read ahead go, down to two slabs per thread: one batch read
// while the caller uses the previous one. Those two may take up to three quarters of `usable`
// (the note says they exceed the eighth). Beyond that: InvalidArgument
// saying what a batch needs and that a smaller batch_size (or fewer
// io_threads) lowers it. Pools are capped at per_thread slabs, so the plan
// is what the loader holds (see SlabPool).
Result<BufferPlan> PlanBuffers(const BufferRequest& r);

// Touches every page of [p, p + n) for writing, so later accesses take no
// page faults: MADV_POPULATE_WRITE where the kernel has it (5.14), else a
// write per page.
void Prefault(std::byte* p, uint64_t n);

}  // namespace dlfs::loader_internal
