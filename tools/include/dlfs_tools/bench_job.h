// Measuring an MPI job as `dlfs bench` does under mpirun (RunBenchJob):
// the tools' interface, beside dlfs/distributed.h (the users').
//
// Only built with MPI (CMake target dlfs_mpi).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dlfs/distributed.h"
#include "dlfs/shard_options.h"
#include "dlfs/status.h"
#include "dlfs/volume.h"
#include "dlfs_tools/bench.h"

namespace dlfs {

// Measuring a job, as `dlfs bench` does under mpirun.
struct BenchJobOptions {
  VolumeOpenOptions open;     // e.g. a target map
  bool private_open = false;  // every rank reads the metadata itself (vs OpenShared)
  bool shard_local = false;   // a ShardLoader over node-local targets instead of a Loader
  ShardLoaderOptions source;  // .loader configures the Loader; all of it the ShardLoader
  BenchOptions bench;         // read_through_errors is always on (reading is collective)
};

struct BenchJobReport {
  int ranks = 0;
  // Per epoch for the whole job: samples, bytes and CPU summed over ranks;
  // seconds of the slowest rank (the job's epoch lasts that long).
  BenchReport bench;
  double open_seconds_max = 0;
  uint64_t metadata_bytes_read = 0;  // from storage, all ranks
  uint64_t directory_window_bytes = 0;
  uint64_t directory_bytes = 0;  // one copy
  double open_pss_bytes = 0;     // growth of the proportional set size over all ranks
  ShardLoaderStats shard;        // summed over ranks (shard_local)
  double shard_io_seconds_max = 0;
  double shard_exchange_seconds_max = 0;
  // Cluster cache: each node's cache capacity and the bytes it holds at the
  // end (by node index); empty otherwise.
  std::vector<uint64_t> node_cache_capacity;
  std::vector<uint64_t> node_cache_bytes;
  // The node cache's fill (SourceStats::cache_fill_plan): rank 0's plan at
  // the end, and how many ranks decided to fill (the ranks of a node decide
  // from the same measurements, so they agree).
  std::string cache_plan;
  int ranks_filling = 0;
};

// Opens `path` (collectively unless private_open; each node only its own
// targets when shard_local), reads options.bench.epochs epochs on every rank,
// and reduces the measurements. Rank 0 drops the page cache before each
// epoch when asked (a warning on stderr when not allowed), and epochs start
// together. bench.on_epoch is called on every rank with the job's epoch.
// Collective; the same report, or the same error, on every rank.
Result<BenchJobReport> RunBenchJob(MPI_Comm comm, const std::string& path,
                                   const BenchJobOptions& options);

}  // namespace dlfs
