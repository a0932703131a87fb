// RunLmdbRead: the measurement and validation run behind `dlfs lmdb read`.
// Every rank of an MPI job reads a Caffe LMDB with an LmdbioReader for a
// number of iterations, digesting what it gets and, optionally, checking
// every record against the parser's record map; rank 0 then holds the whole
// job's report.
//
// Only built with MPI (CMake target dlfs_mpi).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dlfs/lmdbio.h"
#include "dlfs/lmdbio_options.h"
#include "dlfs/status.h"

namespace dlfs {

// What one rank measured over the run. Trivially copyable: rank 0 gathers
// it from every rank as bytes.
struct LmdbReadRankResult {
  LmdbioTimes times;
  LmdbioCounters counters;
  // From getrusage(RUSAGE_SELF) around the run (open included).
  double user_s = 0;
  double sys_s = 0;
  uint64_t voluntary_switches = 0;
  uint64_t involuntary_switches = 0;
  uint64_t mismatches = 0;  // records that differ from the record map (check)
  uint32_t digest = 0;      // CRC32C of the bytes of every record, in order
};

struct LmdbReadCheck {
  uint64_t mismatches = 0;  // all ranks
  uint32_t min_reads_per_record = 0;
  uint32_t max_reads_per_record = 0;
};

struct LmdbReadReport {
  // Set on every rank.
  std::string description;  // the reader's
  int rank = 0;
  int ranks = 1;
  uint64_t entries = 0;        // records in the database
  double wall_s = 0;           // the iterations, from a barrier to a barrier (open excluded)
  uint64_t mismatches = 0;     // all ranks (0 without check)
  std::string first_mismatch;  // this rank's first, e.g. "rank 2 iteration 5 record 3 (key ..)"

  // Rank 0 only (empty or zero elsewhere).
  std::vector<LmdbReadRankResult> per_rank;  // indexed by rank
  LmdbReadRankResult total;                  // field-wise sum over the ranks (digest: 0)
  double setup_s_max = 0;                    // the slowest rank's open
  // CRC32C over the ranks' digests in rank order: equal across modes for
  // the same job (same ranks, batch and iterations).
  uint32_t digest = 0;
  std::optional<LmdbReadCheck> check;  // with options.check
  // With options.counters_file: each numeric counter's increase over the
  // iterations, in the file's order, for those that changed; the values of
  // those that did not (settings such as pfs-emu's latency_us, or counters
  // that stayed put) in `unchanged`.
  std::vector<std::pair<std::string, double>> counters;
  std::vector<std::pair<std::string, double>> unchanged;
};

// Collective over `comm`: every rank calls it with the same options (and a
// path to the same database). The ranks first agree on `iterations`,
// `check`, `drop_cache` and whether there is a counters file
// (AgreeOnValues; only rank 0's file is read, only rank 0 drops the cache,
// with a warning on stderr when it cannot), then LmdbioReader::Open checks
// the rest. Errors
// are the same on every rank: those of LmdbioReader::Open and Next(), and
// of building the record map for check, and IOError / Corruption naming
// options.counters_file when it cannot be read or has no "name value"
// counter. Mismatches are not errors: they are counted in the report.
Result<LmdbReadReport> RunLmdbRead(MPI_Comm comm, const std::string& db,
                                   const LmdbReadOptions& options);

}  // namespace dlfs
