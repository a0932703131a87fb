// LmdbioReader::Open: the ranks agree on the options, the database and the
// node layout, then the mode's reader is opened (readers.h lists them).
#include "dlfs/lmdbio.h"

#include "common/clock.h"
#include "dlfs/lmdb.h"
#include "dlfs/mpi.h"
#include "lmdbio/lmdbio_features.h"
#include "lmdbio/readers.h"

namespace dlfs {

namespace {

// Every rank must read with the same schedule: these options decide which
// collectives a reader calls and how many records each rank gets.
std::vector<NamedValue> ScheduleOf(const LmdbioOptions& o) {
  return {{"mode", std::string(LmdbioModeName(o.mode))},
          {"batch size", std::to_string(o.batch_size)},
          {"readers per node", std::to_string(o.readers_per_node)},
          {"coalesce bytes", std::to_string(o.coalesce_bytes)},
          {"max coalesce iterations", std::to_string(o.max_coalesce_iters)},
          {"planned iterations", std::to_string(o.planned_iterations)},
          {"stagger group", std::to_string(o.stagger_group)}};
}

// The database as the meta page describes it; paths may differ between
// ranks (each node may see the file under its own mount), contents may not.
std::string IdentityOf(const LmdbStats& s) {
  return std::to_string(s.file_size) + " bytes, txnid " + std::to_string(s.txnid) + ", " +
         std::to_string(s.entries) + " entries, last page " + std::to_string(s.last_page) +
         ", page size " + std::to_string(s.page_size);
}

Status CheckOptions(const LmdbioOptions& options, int ranks) {
  if (options.batch_size == 0 || options.batch_size % ranks != 0) {
    return Status::InvalidArgument("batch size " + std::to_string(options.batch_size) +
                                   " is not a positive multiple of the " + std::to_string(ranks) +
                                   " ranks");
  }
  if (options.coalesce_bytes == 0 || options.stagger_group == 0) {
    return Status::InvalidArgument("coalesce size and stagger group must be positive");
  }
  return Status::Ok();
}

// Collective over `comm`: what every mode checks before opening. The same
// status on every rank.
Result<NodeTopology> AgreeOnJob(MPI_Comm comm, const std::string& path,
                                const LmdbioOptions& options) {
  int ranks = 1;
  MPI_Comm_size(comm, &ranks);
  DLFS_RETURN_IF_ERROR(AgreeOnValues(comm, ScheduleOf(options)));
  DLFS_RETURN_IF_ERROR(CheckOptions(options, ranks));
  auto meta = ReadLmdbMeta(path);
  DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm, meta.ok() ? Status::Ok() : meta.status()));
  DLFS_RETURN_IF_ERROR(AgreeOnValues(comm, {{"the database", IdentityOf(*meta)}}));
  // Every mode checks the node layout (the baseline does not use it), so a
  // misconfigured job fails the same way whatever the mode.
  return NodeTopology::Create(comm);
}

}  // namespace

Result<std::unique_ptr<LmdbioReader>> LmdbioReader::Open(MPI_Comm comm, const std::string& path,
                                                         const LmdbioOptions& options) {
  const double start = Now();
  // A private communicator: the reader's messages never meet the caller's.
  MPI_Comm own = MPI_COMM_NULL;
  MPI_Comm_dup(comm, &own);
  auto topo = AgreeOnJob(own, path, options);
  if (!topo.ok()) {
    MPI_Comm_free(&own);
    return topo.status();
  }
  const lmdbio::LmdbioFeatures features = lmdbio::FeaturesOf(options);
  Result<std::unique_ptr<LmdbioReader>> reader =
      !features.shared_window ? lmdbio::OpenBaselineReader(own, path, options)
      : features.record_map_from_parser
          ? lmdbio::OpenMapWindowReader(own, std::move(*topo), path, options, features)
          : lmdbio::OpenCursorWindowReader(own, std::move(*topo), path, options, features);
  if (reader.ok()) (*reader)->times_.setup = Now() - start;
  return reader;
}

}  // namespace dlfs
