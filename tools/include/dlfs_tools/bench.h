// Measuring a batch source: full epochs timed, with throughput and CPU cost,
// as `dlfs bench` reports them (docs/benchmarks.md says how each figure is
// used). The CLI and the Python module only format what these return.
//
// Thread safety: RunEpoch/RunEpochs drive the source from the calling thread
// (the source's own threads keep reading); the page-cache helpers are safe
// to call from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dlfs/batch_source.h"
#include "dlfs/status.h"
#include "dlfs/volume.h"

namespace dlfs {

// One epoch (or the sum of several) as measured by one process, or reduced
// over a job's ranks.
struct EpochReport {
  uint64_t epoch = 0;
  uint64_t samples = 0;
  uint64_t payload_bytes = 0;  // sample bytes delivered
  uint64_t device_bytes = 0;   // bytes read from storage (alignment, gaps)
  uint64_t peer_bytes = 0;     // received from other nodes' caches (cluster cache)
  double seconds = 0;          // wall clock
  double cpu_seconds = 0;      // user + system, this process (all its threads)
  // Where the time went (BatchSource::source_stats over the epoch; zeros
  // for sources that do not count): time with the rings empty, reads in
  // flight, submit/wait/verify time, buffer and tier memory.
  SourceStats stats;

  double samples_per_s() const { return seconds > 0 ? samples / seconds : 0; }
  double mb_per_s() const { return seconds > 0 ? payload_bytes / seconds / 1e6 : 0; }
  double device_mb_per_s() const { return seconds > 0 ? device_bytes / seconds / 1e6 : 0; }
  // CPU seconds per GB of samples delivered (0 when nothing was delivered).
  double cpu_s_per_gb() const { return payload_bytes ? cpu_seconds / (payload_bytes / 1e9) : 0; }
  // Mean reads in flight over the epoch (all engines together).
  double mean_in_flight() const { return seconds > 0 ? stats.io.in_flight_seconds / seconds : 0; }
  // Adds `other`'s counts and times (epochs one after the other).
  void Add(const EpochReport& other);
};

struct BenchOptions {
  uint32_t epochs = 1;
  // Before each epoch, empty the page cache so the epoch reads from storage:
  // all of it where allowed (root), else the volume's targets
  // (posix_fadvise DONTNEED).
  bool drop_cache = false;
  // Go on reading to the end of an epoch after a failed batch, and report
  // the first failure then. Collective sources (the MPI ShardLoader) need
  // this: every rank must call Next() equally often.
  bool read_through_errors = false;
  // Called after each epoch, e.g. to print it.
  std::function<void(const EpochReport&)> on_epoch;
};

struct BenchReport {
  std::string source;  // BatchSource::description()
  std::string cache;   // what was done to the page cache, or "as is"
  std::vector<EpochReport> epochs;
  EpochReport total;  // all epochs
  // Per batch, from submitting its reads to the last completion.
  double p50_batch_ms = 0;
  double p99_batch_ms = 0;
};

// Reads epoch `epoch` of `source` to its end. `batch_io_seconds`, when
// given, receives each batch's Batch::io_seconds(). The first failed batch's
// error is returned (at once, or after the epoch with read_through_errors).
Result<EpochReport> RunEpoch(BatchSource& source, uint64_t epoch, bool read_through_errors,
                             std::vector<double>* batch_io_seconds = nullptr);

// Reads options.epochs epochs (0, 1, ...) of `source`, which reads
// `volumes` (drop_cache evicts them all).
Result<BenchReport> RunEpochs(BatchSource& source, const std::vector<const Volume*>& volumes,
                              const BenchOptions& options);
inline Result<BenchReport> RunEpochs(BatchSource& source, const Volume& volume,
                                     const BenchOptions& options) {
  return RunEpochs(source, std::vector<const Volume*>{&volume}, options);
}

// Syncs, then drops the whole page cache; false when not allowed (not root).
bool DropPageCache();
// Empties the page cache of `volume`'s data: all of it when allowed, else
// the volume's targets. Returns what was done, for reports.
std::string EvictFromPageCache(const Volume& volume);

// This process's proportional set size in bytes (shared pages divided among
// the processes mapping them), from /proc/self/smaps_rollup; 0 where that is
// unavailable. Summed over a job's ranks it is what the job's memory costs.
uint64_t ProportionalSetSize();

// The value at fraction `p` (0..1) of `values` (nearest rank); 0 when empty.
double Percentile(std::vector<double> values, double p);

}  // namespace dlfs
