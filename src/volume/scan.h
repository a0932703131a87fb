// VolumeScan: a volume's samples in storage order, read in large windows
// through a ReadDriver — what `dlfs verify` and the node cache's sequential
// fill share. Windows
// are numbered, so processes that share the work (the ranks of a node
// filling one cache) can claim them one by one and get the same windows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "dlfs/status.h"
#include "dlfs/volume.h"
#include "io/read_driver.h"

namespace dlfs::volume_internal {

class VolumeScan {
 public:
  // The samples of `volume` sorted by (target, offset) and cut into windows
  // of about `window_bytes` (a sample is never split; one larger than that
  // is a window of its own). O(n) where the samples are stored in index
  // order (the usual case), else O(n log n) and 8 bytes per sample kept.
  // A compact directory's samples lie in blocks, each on one target in
  // index order: its windows are runs of whole blocks of one target, made
  // from the block entries alone (O(blocks), no pass over the samples).
  VolumeScan(const Volume& volume, uint64_t window_bytes);

  // An engine for Read: the volume's targets read with pread through the
  // page cache (NBD exports with libnbd), one window at a time. `base`
  // gives the NBD options and a damaged range to inject; its periodic
  // faults are not taken (they exercise the loaders' reads).
  static Result<std::unique_ptr<IoEngine>> CreateEngine(const Volume& volume,
                                                        const EngineOptions& base = {});

  size_t windows() const { return starts_.size() - 1; }
  // Bytes read for window w (its samples' extent, gaps included).
  uint64_t window_bytes(size_t w) const { return extents_[w]; }
  // Where window w lies: its target and first byte.
  uint32_t window_target(size_t w) const;
  uint64_t window_offset(size_t w) const;

  // What Read hands each sample: its stored bytes, or the error reading
  // them (IOError naming the sample). `bytes` lies in Read's *buffer, valid
  // until it changes, when the window's read succeeded; a sample read on its
  // own (below) lives only until visit returns.
  using Visit =
      std::function<void(uint64_t index, std::span<const std::byte> bytes, const Status& read)>;
  // Reads window `w` through `driver` in one read into *buffer and visits
  // its samples in storage order. Where that read fails (EIO from a bad
  // range), each of its samples is read on its own (a second round of the
  // same job), so exactly those whose own bytes cannot be read get an
  // error. Returns the window read's status (the samples were visited
  // either way). REQUIRES: w < windows(); the driver's engine reads this
  // volume's targets (Volume::OpenTargetPaths) without alignment.
  Status Read(size_t w, io_internal::ReadDriver& driver, std::vector<std::byte>* buffer,
              const Visit& visit) const;

 private:
  const Volume& volume_;
  // The sample at position k of storage order.
  uint64_t index(uint64_t k) const { return order_.empty() ? k : order_[k]; }

  // Compact directories: window w is the pieces compact_pieces_[
  // compact_first_[w] .. compact_first_[w + 1] - 1] (whole blocks, or a run
  // of samples of a block larger than a window), all on one target, in
  // storage order, spanning compact_offsets_[w] + extents_[w].
  struct Piece {
    uint64_t block;
    uint64_t first;  // samples [first, end) of the block
    uint64_t end;
  };
  bool compact_ = false;
  std::vector<Piece> compact_pieces_;
  std::vector<size_t> compact_first_;
  std::vector<uint64_t> compact_offsets_;
  std::vector<uint32_t> compact_targets_;
  void ScanCompact(uint64_t window_bytes);
  class WindowJob;
  // fn(index, its place or the directory's error) for each sample of window
  // w, in storage order.
  template <typename Fn>
  void ForEachSample(size_t w, Fn&& fn) const;

  std::vector<uint64_t> order_;    // sample indices in storage order; empty: index order
  std::vector<size_t> starts_;     // window w: positions starts_[w] .. starts_[w + 1] - 1
  std::vector<uint64_t> extents_;  // window w's bytes
};

}  // namespace dlfs::volume_internal
