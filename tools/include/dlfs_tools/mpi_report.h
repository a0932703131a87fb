// The reports of the MPI runs, as `dlfs bench` under mpirun and `dlfs lmdb
// read` print them (dlfs_tools/report.h says what every report promises). In
// library dlfs_mpi_report (dlfs_report and dlfs_mpi), built with the CLI and
// MPI, not installed.
#pragma once

#include <string>

#include "dlfs/distributed.h"
#include "dlfs_tools/bench_job.h"
#include "dlfs_tools/lmdb_read.h"
#include "dlfs_tools/report.h"

namespace dlfs {

// How a `dlfs bench` job under mpirun read, beside what RunBenchJob measured.
struct BenchJobSetup {
  std::string volume;
  uint32_t batch = 0;          // per rank
  bool shard_local = false;    // BenchJobOptions::shard_local
  bool private_open = false;   // BenchJobOptions::private_open
  bool cluster_cache = false;  // ShardLoaderOptions::cluster_cache
};
// The line rank 0 prints after each epoch of a job of `ranks` ranks (text).
std::string FormatJobEpochLine(const EpochReport& epoch, int ranks);
// The job: samples/s of all ranks, the open's cost and (shard-local) the
// exchanges; JSON adds each epoch.
std::string FormatBenchJobReport(const BenchJobReport& report, const BenchJobSetup& setup,
                                 ReportFormat format);

// `dlfs lmdb read` of `db` with `options`: the job, a table of the ranks,
// the digest, time, CPU, bytes, counters and the check.
std::string FormatLmdbReadReport(const std::string& db, const LmdbReadOptions& options,
                                 const LmdbReadReport& report, ReportFormat format);

}  // namespace dlfs
