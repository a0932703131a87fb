// MemoryTier: a loader's samples held in memory once they fit a budget.
//
// The tier covers the aligned byte runs of each target that hold the
// samples a loader reads (neighbours less than kMergeGap apart share a run),
// copied verbatim from the device: a sample is then a span into the tier,
// checked against its CRC32C like one read from the device. The runs are
// loaded in chunks of a few MiB — large reads, in the order the first epoch
// needs them — by the loader's I/O thread; a batch is served as soon as
// every chunk holding its samples has arrived, and from the second epoch on
// entirely from memory.
//
// A chunk that fails to load is re-read sample by sample, so that only
// samples whose own bytes cannot be read are marked failed; a batch holding
// one fails naming it. Failed samples are re-read once per epoch
// (BeginRetry).
//
// Thread safety: the loading calls (chunks, MarkLoaded, ...) come from one
// I/O thread; Wait, Sample and complete() from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "dlfs/status.h"
#include "dlfs/volume.h"

namespace dlfs::loader_internal {

class MemoryTier {
 public:
  static constexpr uint64_t kMergeGap = 64 << 10;
  static constexpr uint64_t kChunkBytes = 4 << 20;

  struct Chunk {
    uint32_t target;
    uint64_t offset;  // in the target, aligned
    uint64_t length;  // aligned
    std::byte* memory;
  };

  // A tier for the samples of `volume` listed in `subset` (all when empty),
  // with runs aligned to `alignment`; nullptr when they need more than
  // `budget` bytes or memory cannot be had. The memory is reserved here and
  // filled by the loads. `volume` must outlive the tier's loading calls.
  static std::shared_ptr<MemoryTier> Create(const Volume& volume, std::span<const uint64_t> subset,
                                            uint32_t alignment, uint64_t budget);

  uint64_t bytes() const { return bytes_; }
  // Keeps the tier's memory alive (a Batch's owner).
  std::shared_ptr<const void> memory_owner() const { return memory_; }

  // --- Loading (the I/O thread) ---
  const std::vector<Chunk>& chunks() const { return chunks_; }
  // Every chunk index, those holding the samples of `order` first, in the
  // order `order` first needs them.
  std::vector<size_t> NeedOrder(std::span<const uint64_t> order) const;
  // Indices of the tier's samples whose bytes lie (partly) in chunk `c`,
  // by offset.
  std::vector<uint64_t> SamplesIn(size_t c) const;
  // Where sample `index`'s aligned blocks go in memory; its target and
  // aligned device range. REQUIRES: the sample is in the tier.
  struct Extent {
    uint32_t target;
    uint64_t offset;
    uint64_t length;
    std::byte* memory;
  };
  Extent SampleExtent(uint64_t index) const;
  // Chunk `c` arrived; `failed` are its samples whose bytes could not be
  // read, and why.
  void MarkLoaded(size_t c, const std::map<uint64_t, Status>& failed);
  // Moves the failed samples to "being re-read" (Wait treats them as not
  // yet loaded) and returns them.
  std::vector<uint64_t> BeginRetry();
  // A retried sample was re-read: OK, or still failing.
  void MarkRetried(uint64_t index, const Status& status);

  // --- Serving (any thread) ---
  // True once every chunk is loaded and no sample failed: Wait is then
  // unnecessary.
  bool complete() const { return complete_.load(std::memory_order_acquire); }
  // Waits until the bytes of every sample in `indices` are loaded; then OK,
  // or the error naming those among them that could not be read.
  Status Wait(std::span<const uint64_t> indices) const;
  // Sample `index`'s bytes. REQUIRES: in the tier and loaded.
  std::span<const std::byte> Sample(uint64_t index) const;

 private:
  struct Run {
    uint64_t offset;  // aligned, in the target
    uint64_t length;
    uint64_t memory_offset;
    size_t first_chunk;
  };

  MemoryTier(const Volume& volume, uint32_t alignment) : volume_(volume), alignment_(alignment) {}
  const Run& RunOf(const SampleInfo& s) const;
  // Chunks [first, last] holding sample s.
  std::pair<size_t, size_t> ChunksOf(const SampleInfo& s) const;
  void UpdateComplete();  // REQUIRES: mu_ held

  const Volume& volume_;
  const uint32_t alignment_;
  std::vector<std::vector<Run>> runs_;  // per target, by offset
  std::vector<Chunk> chunks_;
  std::shared_ptr<std::byte> memory_;
  uint64_t bytes_ = 0;
  bool subset_ = false;
  std::vector<uint64_t> subset_sorted_;  // when subset_: its indices, ascending

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<uint8_t> loaded_;  // per chunk
  size_t loaded_count_ = 0;
  std::map<uint64_t, Status> failed_;  // sample -> why
  std::map<uint64_t, bool> retrying_;  // samples being re-read
  std::atomic<bool> complete_{false};
};

}  // namespace dlfs::loader_internal
