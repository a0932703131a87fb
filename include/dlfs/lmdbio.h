// LmdbioReader: reads an existing (Caffe) LMDB database from many MPI ranks,
// with the six LMDBIO optimizations as switchable modes. docs/lmdbio.md says
// how each mode works and when to pick it.
//
// Access pattern (Caffe's, as LMDBIO models it): records in key order form an
// endless stream that wraps at the end of the database. Iteration i consumes
// the global batch of B records at stream positions [i*B, (i+1)*B); rank r of
// P gets the b = B/P consecutive positions starting at i*B + r*b. Every mode
// returns exactly the same records, in the same order, as kBaseline.
//
// Modes (each adds one optimization to the one before, except kBaseline):
//   baseline            every rank opens the database with liblmdb (mmap) and
//                       walks the cursor, skipping the other ranks' records.
//   lmm                 one reader per node walks and copies its node's
//                       records into an MPI-3 shared window; the node's other
//                       ranks use them in place (no copy).
//   lmm-dm              `readers_per_node` readers per node. A portable
//                       cursor (the key of the next record) is passed from
//                       reader to reader, so nobody walks past records it
//                       does not read; each reader asks the kernel to
//                       prefetch the pages its next fetch is predicted to hit.
//   lmm-dio             readers copy with explicit reads (pread or io_uring,
//                       optionally O_DIRECT) of their byte ranges instead of
//                       touching the mmap.
//   lmm-dio-prov        the record map (exact byte range of every value) is
//                       parsed from data.mdb once, by one rank, and broadcast:
//                       no cursor and no mmap during training.
//   lmm-dio-prov-coal   each read step covers several iterations, with reads
//                       of about `coalesce_bytes`; the window serves the next
//                       iterations.
//   ...-coal-stag       readers take turns in groups of `stagger_group`, so
//                       at most that many read the file system at once.
//
// Only built with MPI (CMake target dlfs_mpi).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "dlfs/io_engine.h"
#include "dlfs/lmdbio_options.h"
#include "dlfs/status.h"

namespace dlfs {

// Seconds this rank spent, summed over Next() calls.
struct LmdbioTimes {
  double io = 0;     // explicit reads (dio modes)
  double copy = 0;   // memcpy from the mmap; includes the page faults it causes
  double wait = 0;   // barriers, and waiting for a cursor or a staggering turn
  double skip = 0;   // cursor walk, over own records and skipped ones
  double setup = 0;  // Open(): opening the database, building the record map
};

struct LmdbioCounters {
  uint64_t records = 0;         // records returned to this rank
  uint64_t record_bytes = 0;    // their bytes
  uint64_t read_bytes = 0;      // bytes this rank read or copied from the database
  uint64_t read_calls = 0;      // explicit reads or records copied from the map
  uint64_t skipped = 0;         // cursor steps over records this rank did not keep
  uint64_t read_steps = 0;      // Next() calls that read (coal reads once per several)
  uint64_t prefetch_bytes = 0;  // bytes lmm-dm asked the kernel to prefetch
};

class LmdbioReader {
 public:
  // Collective over `comm`: every rank must call it with the same path and
  // options. `path` is the LMDB directory or its data.mdb. Errors:
  // InvalidArgument (batch not a multiple of the ranks, bad option), NotFound
  // / IOError for the file, Corruption / NotSupported from the parser, and
  // the same status on every rank when any rank fails to open.
  // The ranks first check that they agree on the options that shape the
  // reads (all but prefetch, engine and direct_io), on the database (its
  // file size and meta page: the paths may differ, the contents may not)
  // and on the node layout (NodeTopology::Create); a difference is
  // InvalidArgument on every rank, naming the ranks and their values.
  static Result<std::unique_ptr<LmdbioReader>> Open(MPI_Comm comm, const std::string& path,
                                                    const LmdbioOptions& options);
  virtual ~LmdbioReader() = default;

  // Collective: advances to the next iteration and makes this rank's records
  // for it available. The views of the previous iteration become invalid.
  virtual Status Next() = 0;

  uint64_t iteration() const { return iteration_ - 1; }  // of the current records
  uint32_t count() const { return count_; }              // records this iteration (= B/P)
  // REQUIRES: j < count(). Valid until the next Next().
  std::span<const std::byte> record(uint32_t j) const { return records_[j]; }
  // Index (in key order) of record j: its stream position modulo entries().
  uint64_t record_index(uint32_t j) const { return (first_position_ + j) % entries_; }
  uint64_t entries() const { return entries_; }

  const LmdbioTimes& times() const { return times_; }
  const LmdbioCounters& counters() const { return counters_; }
  // e.g. "lmm-dio-prov-coal: 2 readers/node, 8 iterations per read step".
  const std::string& description() const { return description_; }

 protected:
  LmdbioReader() = default;

  uint64_t iteration_ = 0;  // iterations started
  uint32_t count_ = 0;
  uint64_t first_position_ = 0;
  uint64_t entries_ = 1;
  std::unique_ptr<std::span<const std::byte>[]> records_;
  LmdbioTimes times_;
  LmdbioCounters counters_;
  std::string description_;
};

}  // namespace dlfs
