// PageWarmer: where the loader reads a volume through the page cache (small
// samples, loader/batch_planner.h) and the volume is small beside the
// memory the job may use, its first epoch asks the kernel to read the whole
// volume ahead, each target's data region in file order on a thread of its
// own, so the epoch's small random reads find their pages there.
//
// Why: a 784-byte sample of an uncached page is a 4 KiB device request of
// its own, handled on the reading thread; Fashion-MNIST's 70,000 of them
// made a cold epoch 2-3x slower than a warm one. Read ahead in order, the
// same bytes reach the page cache in large requests while the loader
// reads, and the device still reads each byte once (the pages stay:
// the volume fits a quarter of the usable memory, which the page cache
// would give it anyway after the first epoch).
//
// Advisory: posix_fadvise(WILLNEED) per 128 KiB piece, so a failure only means
// the loader reads those pages itself; targets without a file descriptor
// (NBD) are skipped. Thread safety: Start and the destructor from the
// loader's threads; in a child of fork() the destructor leaves the parent's
// thread alone.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "dlfs/volume.h"

namespace dlfs::loader_internal {

class PageWarmer {
 public:
  // A warmer for `volume` where its sample bytes are at most a quarter of
  // `usable_memory` (dlfs/memory.h), else nullptr (its pages would push
  // out what the job needs, or one another before they are read), and
  // nullptr for a volume none of whose targets is a local file or device.
  // With `map`, the loader's engines read through the process's shared
  // mappings of the targets (the mmap engine): once the pass has asked for
  // every page, it maps them into those mappings in file order as they
  // arrive (MADV_POPULATE_READ), so the reads' copies take no faults.
  static std::unique_ptr<PageWarmer> ForVolume(std::shared_ptr<const Volume> volume,
                                               uint64_t usable_memory, bool map = false);
  // Whether ForVolume would make one (the loader chooses its engine by it).
  static bool Warms(const Volume& volume, uint64_t usable_memory);
  ~PageWarmer();
  PageWarmer(const PageWarmer&) = delete;
  PageWarmer& operator=(const PageWarmer&) = delete;

  // Starts the pass over the volume (once; later calls do nothing).
  void Start();
  // Bytes asked for so far (for reports and tests).
  uint64_t advised_bytes() const { return advised_.load(std::memory_order_relaxed); }
  // Waits until the pass is over (tests).
  void Join();

 private:
  PageWarmer(std::shared_ptr<const Volume> volume, bool map);
  void Run();
  // Maps target t's data region into the shared mapping, in file order.
  void Populate(uint32_t t);

  std::shared_ptr<const Volume> volume_;
  const bool map_;
  const pid_t pid_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> advised_{0};
  bool started_ = false;
  std::thread thread_;
};

}  // namespace dlfs::loader_internal
