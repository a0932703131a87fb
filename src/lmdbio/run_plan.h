// Run planning: which byte ranges of data.mdb a read step reads, where they
// land in the node's window, and which reader reads which part.
//
// A run is a contiguous, 4 KiB-aligned byte range of data.mdb holding one or
// more wanted values; runs are placed one after another in the window, so a
// value's bytes sit in the window exactly as in the file and views need no
// copy. Pure functions, no MPI.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace dlfs::lmdbio {

inline constexpr uint64_t kAlign = 4096;          // run alignment: pages, and O_DIRECT's unit
inline constexpr uint64_t kMergeGap = 64 * 1024;  // values closer than this share one read

inline uint64_t AlignDown(uint64_t x) { return x & ~(kAlign - 1); }
inline uint64_t AlignUp(uint64_t x) { return (x + kAlign - 1) & ~(kAlign - 1); }

// Where one wanted value is: `offset` in data.mdb (or in the window), `length` bytes.
struct Extent {
  uint64_t offset;
  uint64_t length;
};

// A run: [file, file + length) of data.mdb, placed at `window` in the window.
struct Run {
  uint64_t file;
  uint64_t length;
  uint64_t window;
};

// Merges the extents (any order, duplicates allowed) into aligned runs,
// placed one after another from window offset `base`. Runs never extend
// past `file_size`.
std::vector<Run> PlanRuns(std::vector<Extent> extents, uint64_t file_size, uint64_t base);

// The window offset just past the last run (`base` when there is none).
uint64_t RunsEnd(const std::vector<Run>& runs, uint64_t base);

// Window offset of the value at file `offset`. REQUIRES: a run holds it.
uint64_t Locate(const std::vector<Run>& runs, uint64_t offset);

// The run of `runs` (sorted by file offset) holding file offset `offset`,
// or nullptr.
const Run* FindRun(const std::vector<Run>& runs, uint64_t offset);

// Part `k` of `readers` contiguous parts of [0, total): sizes differ by at
// most one, the larger parts first.
std::pair<uint64_t, uint64_t> ReaderPart(uint64_t total, uint32_t readers, uint32_t k);

// Reader `k`'s share of the runs of one step, which fill [0, total) of the
// window: the runs are cut into reads of at most `read_bytes` (and no more
// than an even share per reader), and each reader gets the reads that
// start in its contiguous share of the window.
std::vector<Run> ReaderShare(const std::vector<Run>& runs, uint64_t total, uint32_t readers,
                             uint32_t k, uint64_t read_bytes);

}  // namespace dlfs::lmdbio
