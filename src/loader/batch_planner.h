// BatchPlanner: turns a batch of sample indices into device reads.
//
// Each sample's extent is widened to the engine's alignment; extents are
// sorted by (target, offset); neighbours whose gap is at most coalesce_gap
// merge into one run while the run stays within max_read; a run larger than
// max_read (one huge sample) is split into max_read pieces. Without
// coalescing every sample gets its own read(s), even where extents share a
// block — that is the baseline coalescing is measured against. Runs are laid out
// back to back in one buffer, so every sample ends up as one contiguous span
// of it (zero-copy hand-out).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dlfs/directory.h"
#include "dlfs/loader.h"

namespace dlfs::loader_internal {

struct PlanOptions {
  uint32_t alignment = 4096;  // power of two; 1 = no widening
  ReadPlanOptions read;       // coalescing and the largest read (dlfs/loader.h)
};

struct PlannedRead {
  uint32_t target;
  uint64_t offset;         // in the target, aligned
  uint64_t length;         // aligned
  uint64_t buffer_offset;  // where it lands in the batch buffer
};

struct BatchPlan {
  std::vector<PlannedRead> reads;
  std::vector<uint64_t> sample_offsets;  // per input position: byte offset in the buffer
  std::vector<SampleInfo> info;          // per input position: where the sample is
  // Per input position: why the sample could not be located (a compact
  // directory block that fails its check; it gets no read), when any could
  // not; empty when every one was.
  std::vector<Status> unlocated;
  uint64_t buffer_bytes = 0;
  uint64_t sample_bytes = 0;  // payload (sum of sample lengths)
};

// Plans reads for `indices` (duplicates allowed). REQUIRES: every index is
// below dir.size(); options.alignment is a power of two dividing max_read.
// A sample whose directory block fails its check is planned no read and
// its error is in plan->unlocated.
void PlanBatch(const SampleDirectory& dir, std::span<const uint64_t> indices,
               const PlanOptions& options, BatchPlan* plan);

// What reading these samples one at a time with O_DIRECT costs against
// their bytes: the sum of each sample's extent widened to `alignment`, over
// the sum of their lengths (1 for aligned samples; about 6 for 784-byte
// samples packed densely in 4 KiB blocks). The samples: all of `dir`, or
// `subset`; at most 65,536 of them, evenly spread, are looked at.
double DirectReadAmplification(const SampleDirectory& dir, const SampleSubset& subset,
                               uint32_t alignment);

// The sizes of a loader's samples (all of `dir`, or `subset`), each
// rounded up to a multiple of `align`: their mean, the largest and their
// standard deviation. At most 65,536 samples evenly spread over them are
// looked at (all of them, below that), so that a loader of a billion
// samples starts as fast as one of a thousand: what buffers are planned
// for (a batch of larger samples grows its buffer).
struct SampleSizes {
  uint64_t mean = 0, largest = 0;
  double stddev = 0;
  double exact_mean = 0;  // unrounded
};
SampleSizes MeasureSampleSizes(const SampleDirectory& dir, const SampleSubset& subset,
                               uint64_t align = 1);

// At this amplification or above, reading through the page cache (whose
// read-ahead brings a densely packed volume's neighbouring samples in with
// each read) measured faster than O_DIRECT, cold, on this project's VM:
// 2.5x for 512-byte samples (amplification 9), 1.3x for 2 KiB (3); 4 KiB
// samples (2) read 1.15x faster with O_DIRECT (docs/benchmarks.md, "Small
// samples").
inline constexpr double kBufferedAbove = 2.5;

// Whether every target of `volume` is a device or a file on a local disk
// file system (ext4, XFS, Btrfs, F2FS, ZFS, tmpfs, overlayfs), where a page fault or a
// sample's read costs what a cached read does. Not a network or FUSE file
// system (a parallel file system's client), where each is a request with
// its round trip: Fashion-MNIST on an emulated one (tools/pfs-emu, 4 ms per
// request) took 18 s over 5 epochs through a mapping, whose faults come one
// at a time per thread, against 2.3 s with io_uring's buffered reads.
// Unknown file systems count as not local.
bool OnLocalDisks(const Volume& volume);

// An engine for `volume`'s targets with *options; where they ask for
// O_DIRECT and `auto_direct_io` holds and O_DIRECT would read kBufferedAbove
// times the samples' bytes (all, or `subset`) or more, a buffered one:
// *options then says direct_io false and *note why ("buffered reads: ...").
// With `map_buffered` too (the caller reads the volume ahead into the page
// cache: loader/page_warmer.h), an engine of kind kAuto over local targets
// becomes the mmap engine (dlfs/io_engine.h): *options says kMmap. Not
// without the read-ahead: a fault reads one page at a time on the reading
// thread, where io_uring keeps queue_depth reads of uncached pages in flight.
Result<std::unique_ptr<IoEngine>> CreateEngineForSamples(const Volume& volume,
                                                         const SampleSubset& subset,
                                                         bool auto_direct_io, bool map_buffered,
                                                         EngineOptions* options, std::string* note);

}  // namespace dlfs::loader_internal
