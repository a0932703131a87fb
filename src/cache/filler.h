// CacheFiller: copies samples just read from the device into a NodeCache on
// a thread of its own, without ever making the reader wait.
//
// Readers (the Loader's I/O threads, SampleReader) Offer() the batches they
// read; the filler takes one at a time and skips what is offered while it
// is busy or resting, so a reader never blocks on it and at most one batch
// buffer is held. It runs at nice 19. Even so, on a 2-core VM a filler cost
// a loader-bound first epoch 14 % (0.69x with 4 ranks; docs/benchmarks.md,
// "The node cache"): page faults and fallocate in the kernel, memory
// bandwidth. So while the reader's caller waits for data (more than 5 % of
// the time since the last batch filled), filling may take 3 % of the wall
// time plus the time the cache has saved the reader since (its hit bytes at
// the device's measured time per byte): it pays for itself and speeds up as
// the cache fills. When the caller is busy elsewhere (training), it fills
// as fast as idle CPU allows.
//
// Thread safety: Offer from any thread; the destructor stops the thread
// (destroyed in a child of fork(), where the thread does not exist, it
// leaves it alone).
#pragma once

#include <sys/types.h>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "cache/node_cache.h"
#include "loader/batch_data.h"

namespace dlfs::cache_internal {

class CacheFiller {
 public:
  // What the reader has done so far: the seconds its caller waited for
  // data, and the bytes it read from the device. Called on the filler's
  // thread; must stay callable for the filler's life.
  struct Progress {
    double caller_wait_seconds = 0;
    uint64_t device_bytes = 0;
  };
  // `memory_short` says whether the job's memory is too short to grow the
  // cache now (MemoryShort() unless a test passes its own); asked at most
  // every 100 ms on the filler's thread. While it is, offered batches are
  // skipped: the cache never takes the last of a cgroup's memory from the
  // processes that share it (their batch buffers), whatever its budget.
  CacheFiller(std::shared_ptr<NodeCache> cache, std::function<Progress()> progress,
              std::function<bool()> memory_short = MemoryShort);
  ~CacheFiller();
  CacheFiller(const CacheFiller&) = delete;
  CacheFiller& operator=(const CacheFiller&) = delete;

  // Offers `read` (samples as read from the device: each sample's stored
  // bytes, indices in data->indices) unless the filler is busy; keeps it
  // (and so its buffer) until its samples are copied.
  void Offer(std::shared_ptr<const Batch::Data> read);

  // Whether the filler holds an offered batch (and so its buffer) now.
  bool holding() const;
  // Called on the filler's thread, holding none of its locks, each time it
  // lets go of a batch (holding() may have turned false). Set before the
  // first Offer.
  void set_on_release(std::function<void()> on_release) {
    state_->on_release = std::move(on_release);
  }

  // The default for memory_short: what this process may still use
  // (dlfs/memory.h) is under a quarter of its cgroup's limit, or under
  // 256 MiB of MemAvailable where no cgroup limits it.
  static bool MemoryShort();

  // Batches held at most: what a reader's buffer pool should allow for.
  static constexpr uint32_t kHeld = 1;

 private:
  // Everything the thread shares; leaked, not destroyed, in a child of
  // fork(), where the thread does not exist and the mutex and condition
  // variable may be held or waited on (destroying them can hang).
  struct State {
    std::shared_ptr<NodeCache> cache;
    std::function<Progress()> progress;
    std::function<bool()> memory_short;
    std::function<void()> on_release;
    mutable std::mutex mu;
    std::condition_variable cv;
    std::deque<std::shared_ptr<const Batch::Data>> queue;  // at most kHeld (or a resting marker)
    bool stop = false;
    std::thread thread;
  };
  static void Run(State& s);

  const pid_t pid_;
  std::unique_ptr<State> state_;
};

}  // namespace dlfs::cache_internal
