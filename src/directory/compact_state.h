// Internal to src/directory: what a SampleDirectory over a compact (format
// v3) directory region keeps — the decoded layout and which blocks have been
// checked. Blocks are checked the first time anything reads them (sample
// records, names, name order; the tree as a whole), and a block that fails
// is refused each time it is used, never read.
//
// Thread safety: any number of threads may use one CompactState; the
// checked-block bitmaps are atomic (two threads may both check a block the
// first time, with the same result).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dlfs/directory.h"
#include "dlfs/status.h"
#include "format/compact_codec.h"

namespace dlfs::directory_internal {

// One bit per block: set once the block passed its check.
class CheckedBits {
 public:
  explicit CheckedBits(uint64_t blocks) : words_((blocks + 63) / 64) {
    if (words_ > 0) bits_ = std::make_unique<std::atomic<uint64_t>[]>(words_);
  }
  bool Get(uint64_t b) const {
    return (bits_[b >> 6].load(std::memory_order_acquire) >> (b & 63)) & 1;
  }
  void Set(uint64_t b) {
    bits_[b >> 6].fetch_or(uint64_t{1} << (b & 63), std::memory_order_release);
  }

 private:
  uint64_t words_;
  std::unique_ptr<std::atomic<uint64_t>[]> bits_;
};

class CompactState {
 public:
  CompactState(std::shared_ptr<const std::byte> region, uint64_t size,
               const format::CompactLayout& layout, const SampleDirectory::Expected& expected,
               std::string volume_path)
      : region_(std::move(region)),
        size_(size),
        l_(layout),
        expected_(expected),
        path_(std::move(volume_path)),
        intact_(layout.tokens() ? layout.block_count() : 0),
        samples_ok_(layout.block_count()),
        names_ok_(layout.has_names() ? layout.block_count() : 0),
        order_ok_(layout.order != nullptr ? layout.block_count() : 0) {}

  const format::CompactLayout& layout() const { return l_; }
  uint64_t size() const { return l_.sample_count(); }
  uint64_t region_size() const { return size_; }
  const std::string& path() const { return path_; }

  // Sample i's extent, CRC and label; checks its block on first use.
  Result<SampleInfo> Locate(uint64_t i) const;
  // Locate for many samples, their blocks and records prefetched first.
  void LocateMany(std::span<const uint64_t> indices, std::span<SampleInfo> out,
                  std::vector<Status>* failed) const;
  // Checks block b of samples on first use; in a token volume also that it
  // follows block b - 1 (whose own check it needs) and, the last one, that
  // it ends with the token stream (docs/format.md §10.11).
  Status CheckSamples(uint64_t block) const;

  // ---- Token volumes (layout().tokens(); docs/format.md §10.11)
  // The first token of `document` (document == size(): the token count).
  Result<uint64_t> DocumentStart(uint64_t document) const;
  // The document holding token `token`: binary searches over the block
  // entries, then over the block's ends.
  Result<uint64_t> DocumentAt(uint64_t token) const;
  // The CRC32C of the stream's chunk `chunk`.
  Result<uint32_t> TokenCheck(uint64_t chunk) const;

  // Sample i's full path ("cat/sub/b.jpg"); checks its name block on first
  // use. REQUIRES: layout().has_names().
  Result<std::string_view> PathOf(uint64_t i) const;
  // The index of the sample at name position p (p itself when names are
  // sorted). REQUIRES: has_names(), p < size().
  Result<uint64_t> IndexAt(uint64_t position) const;
  // The sample whose full path is `path` (normalized), or nullopt.
  Result<std::optional<uint64_t>> FindSample(std::string_view path) const;

  // The tree, checked once on first use.
  Status CheckTree() const;
  // The directory whose path is `path` (normalized; "" is the root).
  Result<std::optional<uint64_t>> FindDir(std::string_view path) const;
  // Directory d's children, in name order. REQUIRES: CheckTree() passed.
  std::vector<uint64_t> Children(uint64_t d) const;
  // Up to `max` of the name positions of the samples directly in directory
  // d, skipping the first `from` of them. REQUIRES: CheckTree() passed.
  std::vector<uint64_t> OwnPositions(uint64_t d, uint64_t from, uint64_t max) const;

  // Corruption when the mapping this directory reads has faulted (the
  // volume file shrank or its device failed while open): from then on its
  // bytes are zeros, not the file's.
  Status Intact() const;

  // Every check a reader makes on use, on everything, plus the name order
  // being strictly increasing across blocks (dlfs verify).
  Status CheckAll() const;

 private:
  std::shared_ptr<const std::byte> region_;
  uint64_t size_;
  format::CompactLayout l_;
  SampleDirectory::Expected expected_;
  std::string path_;
  // Token volumes: blocks that passed their own check (CheckSampleBlock),
  // before their links to their neighbours are checked.
  mutable CheckedBits intact_;
  Status CheckIntact(uint64_t block) const;
  mutable CheckedBits samples_ok_;
  mutable CheckedBits names_ok_;
  mutable CheckedBits order_ok_;
  mutable std::once_flag tree_once_;
  mutable Status tree_status_;
};

}  // namespace dlfs::directory_internal
