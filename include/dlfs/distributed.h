// Reading a volume from an MPI job: a loader whose rank and world come from a
// communicator, and the shard-local loader for volumes spread over the
// nodes' local storage. docs/deploy.md shows how to run them on a cluster.
//
// Only built with MPI (CMake target dlfs_mpi).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "dlfs/loader.h"
#include "dlfs/mpi.h"
#include "dlfs/status.h"
#include "dlfs/volume.h"

namespace dlfs {

// What a collective open did on this rank.
struct SharedOpenStats {
  uint64_t metadata_bytes_read = 0;  // superblocks and directory read from storage
  uint64_t window_bytes = 0;         // shared-window memory this rank allocated
  double seconds = 0;
};

// Collective open of the volume whose target 0 is `path`. World rank 0 alone
// reads the metadata (superblocks and directory) from storage and checks it;
// node leaders receive the directory with MPI_Bcast straight into an MPI-3
// shared window of their node (MPI_Win_allocate_shared), and every rank opens
// the volume over that window in place: directory memory is per node, not
// per rank. Every rank still opens the target files (to read samples) and
// runs the usual checks on the bytes it uses. The same error on every rank
// if any rank fails, including when the ranks disagree on the node layout
// (NodeTopology::Create).
//
// The window lives as long as the returned Volume (and anything holding it,
// such as a Loader). Releasing it frees the window, which is collective over
// the node: drop the last reference on every rank of the node, before
// MPI_Finalize.
Result<std::shared_ptr<Volume>> OpenShared(MPI_Comm comm, const std::string& path,
                                           const VolumeOpenOptions& options = {},
                                           SharedOpenStats* stats = nullptr);

// The targets node `node_index` of `node_count` holds in shard-local mode:
// those with t mod node_count == node_index (target 0 is always opened as
// well: it holds the directory). For VolumeOpenOptions::open_only.
std::vector<uint32_t> ShardTargetsOfNode(int node_index, int node_count);

// A Loader for this rank of `comm`: options.rank and options.world_size are
// taken from the communicator. Collective: the ranks check that they agree on
// the volume (uuid and size) and the options that decide the permutation
// (sample count, seed, shuffle, batch size, drop_last), so every rank reads
// the same permutation and gets the same number of batches; InvalidArgument
// on every rank otherwise, naming the ranks and their values.
Result<std::unique_ptr<Loader>> CreateLoader(MPI_Comm comm, std::shared_ptr<Volume> volume,
                                             LoaderOptions options);

struct ShardLoaderOptions {
  LoaderOptions loader;  // rank and world_size are taken from the communicator
  // Batches whose remote samples are fetched in one exchange; the exchange
  // for the next window happens when the current one is used up.
  uint32_t window_batches = 8;
  // Plan the next window and read its local part on a thread while the
  // current one is consumed. Off by default: on the only machine measured
  // (2 cores, 4 ranks) it made epochs 2.5x slower, the thread competing
  // with the exchange and checksums (docs/benchmarks.md). Worth trying where
  // cores are spare and storage latency is high.
  bool read_ahead = false;
};

// Counters of a ShardLoader, summed over its life.
struct ShardLoaderStats {
  uint64_t local_samples = 0;   // read from this node's own target
  uint64_t remote_samples = 0;  // fetched from the node that holds them
  uint64_t served_samples = 0;  // read here for other nodes
  uint64_t bytes_received = 0;  // sample bytes received over MPI
  uint64_t bytes_sent = 0;
  uint64_t exchanges = 0;
  double io_seconds = 0;        // reading from storage (own and served samples)
  double exchange_seconds = 0;  // in MPI exchanges, waiting included
};

// Shard-local reading: target t of the volume lives on node t mod nodes
// (pack with `--targets N` for N nodes and copy target t to node t's local
// storage), and each node reads only its own target. Open the volume with
// open_only = ShardTargetsOfNode(...) so a node needs only its own target
// (and target 0) on its storage. A rank gets the samples
// of other nodes from them over MPI: since the permutation is known, each
// exchange fetches every remote sample of the next window_batches batches at
// once (one MPI_Alltoallv for the requests, one for the bytes), so the global
// shuffle stays exact while each node stores only its part. With
// read_ahead, windows are planned one ahead and their local reads run on a
// thread, overlapping with the caller's use of the window before; MPI is
// only called from the caller's thread.
//
// Batches are byte-identical to those of a Loader with the same options.
// Next() and SetEpoch() are collective: every rank calls them the same
// number of times (the sampler gives every rank the same number of batches).
// A sample the owner cannot read makes the requester's Next() fail for that
// batch with an error naming the sample and the owner; the next call goes on.
class ShardLoader {
 public:
  // Collective over `comm`. The ranks agree, as CreateLoader's do, and also
  // on window_batches, read_ahead and the node layout; InvalidArgument on
  // every rank otherwise.
  static Result<std::unique_ptr<ShardLoader>> Create(MPI_Comm comm, std::shared_ptr<Volume> volume,
                                                     const ShardLoaderOptions& options);
  ~ShardLoader();

  void SetEpoch(uint64_t epoch);
  // As Loader::Next.
  Result<bool> Next(Batch* batch);

  uint64_t batches_per_epoch() const;
  const ShardLoaderStats& stats() const;
  const std::string& engine_description() const;

  class Impl;

 private:
  explicit ShardLoader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dlfs
