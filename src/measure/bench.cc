#include "dlfs_tools/bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "common/clock.h"

namespace dlfs {

void EpochReport::Add(const EpochReport& other) {
  samples += other.samples;
  payload_bytes += other.payload_bytes;
  device_bytes += other.device_bytes;
  peer_bytes += other.peer_bytes;
  seconds += other.seconds;
  cpu_seconds += other.cpu_seconds;
  stats += other.stats;
}

Result<EpochReport> RunEpoch(BatchSource& source, uint64_t epoch, bool read_through_errors,
                             std::vector<double>* batch_io_seconds) {
  EpochReport r;
  r.epoch = epoch;
  const SourceStats s0 = source.source_stats();
  const double cpu0 = CpuSeconds();
  const double t0 = Now();
  source.SetEpoch(epoch);
  Status failed;
  Batch batch;
  while (true) {
    Result<bool> more = source.Next(&batch);
    if (!more.ok()) {
      if (!read_through_errors) return more.status();
      if (failed.ok()) failed = more.status();
      continue;
    }
    if (!*more) break;
    r.samples += batch.size();
    r.payload_bytes += batch.payload_bytes();
    r.device_bytes += batch.device_bytes();
    r.peer_bytes += batch.peer_bytes();
    if (batch_io_seconds != nullptr) batch_io_seconds->push_back(batch.io_seconds());
  }
  r.seconds = Now() - t0;
  r.cpu_seconds = CpuSeconds() - cpu0;
  r.stats = source.source_stats() - s0;
  if (!failed.ok()) return failed;
  return r;
}

Result<BenchReport> RunEpochs(BatchSource& source, const std::vector<const Volume*>& volumes,
                              const BenchOptions& options) {
  BenchReport report;
  report.source = source.description();
  report.cache = "as is";
  std::vector<double> latencies;
  for (uint32_t e = 0; e < options.epochs; ++e) {
    if (options.drop_cache) {
      for (const Volume* v : volumes) report.cache = EvictFromPageCache(*v);
    }
    DLFS_ASSIGN_OR_RETURN(EpochReport r,
                          RunEpoch(source, e, options.read_through_errors, &latencies));
    if (options.on_epoch) options.on_epoch(r);
    report.total.Add(r);
    report.epochs.push_back(r);
  }
  report.p50_batch_ms = Percentile(latencies, 0.5) * 1e3;
  report.p99_batch_ms = Percentile(latencies, 0.99) * 1e3;
  return report;
}

bool DropPageCache() {
  ::sync();
  std::FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w");
  if (f == nullptr) return false;
  const bool ok = std::fputs("3", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

std::string EvictFromPageCache(const Volume& volume) {
  if (DropPageCache()) return "dropped the page cache";
  for (uint32_t t = 0; t < volume.target_count(); ++t) {
    if (volume.target_fd(t) >= 0) ::posix_fadvise(volume.target_fd(t), 0, 0, POSIX_FADV_DONTNEED);
  }
  return "evicted the volume from the page cache (fadvise)";
}

uint64_t ProportionalSetSize() {
  std::FILE* f = std::fopen("/proc/self/smaps_rollup", "re");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "Pss: %lu kB", &kb) == 1) break;
  }
  std::fclose(f);
  return uint64_t{kb} * 1024;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t k = std::min(values.size() - 1, static_cast<size_t>(p * (values.size() - 1) + 0.5));
  return values[k];
}

}  // namespace dlfs
