// Reading a volume from an MPI job: a loader whose rank and world come from a
// communicator, and the shard-local loader for volumes spread over the
// nodes' local storage. docs/deploy.md shows how to run them on a cluster.
//
// Only built with MPI (CMake target dlfs_mpi).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dlfs/batch_source.h"
#include "dlfs/loader.h"
#include "dlfs/mixture.h"
#include "dlfs/mpi.h"
#include "dlfs/shard_options.h"
#include "dlfs/status.h"
#include "dlfs/volume.h"

namespace dlfs {

// What a collective open did on this rank.
struct SharedOpenStats {
  uint64_t metadata_bytes_read = 0;  // superblocks and directory read from storage
  uint64_t window_bytes = 0;         // bytes of node region this rank made (a leader)
  double seconds = 0;
  // Why the directory is held per rank rather than per node (no region
  // could be made, e.g. /dev/shm full), or "".
  std::string note;
};

// Collective open of the volume whose target 0 is `path`. World rank 0
// alone reads the metadata (superblocks and directory) from storage and
// checks it; node leaders receive the directory with MPI_Bcast and publish
// it as their node's directory region (DirectorySharing::kNode in
// dlfs/volume.h: /dev/shm, per user, reference-counted), which the node's
// other ranks attach, and every rank opens the volume over that one copy:
// directory memory is per node, not per rank. The region is the one
// DirectorySharing::kNode opens use, so DataLoader workers and later
// processes on the node attach it too. Where no region can be made, each
// rank gets a copy of its own and stats->note says why. Every rank still
// opens the target files (to read samples) and runs the usual checks on
// the bytes it uses. The same error on every rank if any rank fails,
// including when the ranks disagree on the node layout
// (NodeTopology::Create).
//
// The returned Volume holds the node's copy; it needs no MPI to be
// released (the last process on the node to let go removes the region).
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

// A weighted mixture (dlfs/mixture.h) for this rank of `comm`: the
// mixture's rank and world_size are taken from the communicator, and the
// ranks check that they agree on the volumes (uuids and sample counts, in
// order), the weights, epoch_samples, cycle and the options that decide
// the order, as CreateLoader's do; InvalidArgument on every rank otherwise.
// The MixtureSource's own errors are returned on every rank (AgreeOnStatus).
Result<std::unique_ptr<MixtureSource>> CreateMixture(MPI_Comm comm,
                                                     std::vector<std::shared_ptr<Volume>> volumes,
                                                     MixtureOptions mixture,
                                                     const LoaderOptions& options);

// Counters of a ShardLoader, summed over its life.
struct ShardLoaderStats {
  uint64_t local_samples = 0;   // read from storage here for this rank's own batches
  uint64_t remote_samples = 0;  // asked of the node that holds (or caches) them
  uint64_t served_samples = 0;  // asked of this rank by other nodes
  uint64_t bytes_received = 0;  // sample bytes received over MPI (gifts included)
  uint64_t bytes_sent = 0;
  uint64_t exchanges = 0;
  uint64_t storage_bytes = 0;  // read from the volume's targets (aligned, all reads)
  uint64_t peer_bytes = 0;     // samples received from other nodes for this rank's batches
  // Cluster cache: samples found in this node's cache; asked of an owner
  // that did not hold them yet (then read from storage); read here and
  // handed to their owner, and handed here and kept.
  uint64_t cached_samples = 0;
  uint64_t cached_bytes = 0;  // bytes of the samples found in this node's cache
  uint64_t absent_samples = 0;
  uint64_t gifts_sent = 0;
  uint64_t gifts_kept = 0;
  // Levels: this node's cache, its capacity and the bytes in it now.
  uint64_t cache_capacity = 0;
  uint64_t cache_used = 0;
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
//
// Resuming (dlfs/batch_source.h): each rank saves its own state; LoadState
// is collective, the ranks must restore the same epoch and batch count
// (InvalidArgument on every rank otherwise, or when any rank's state does
// not fit its loader), and the first exchange starts at the restored batch:
// the batches before it are neither read nor exchanged. A state of another
// world size or batch size resumes elastically (every rank loads rank 0's):
// node-local placement depends on the sample, not on the ranks' shares, so
// the rest of the epoch is exchanged like a whole one.
//
// The cluster cache (ShardLoaderOptions::cluster_cache): the job's node
// caches form one cache of a volume that every rank can read (a parallel
// file system, NBD servers). Each sample has one owner node, computed the
// same on every rank with no communication (cache/placement.h: balanced by
// count within the capacities, a sample's owner is where the epoch-0 order
// first reads it when that node has room; what the nodes' budgets cannot
// hold has no owner), by a rule per sample: nothing is stored per sample.
// In each exchange a rank takes the samples its own node caches from the
// node cache, asks the owners for the others, and reads from storage only
// the samples no node keeps and those an owner does not hold yet — which it
// then hands to the owner with its next requests (the owner reading them
// itself would read them once more). Owners therefore fill in the order the
// job reads, and from the second epoch on storage serves only what does not
// fit. Every sample is checked against the directory (verify_checksums) by
// the rank that hands it out, whoever sent it; caches keep only samples that
// pass. Node caches are NodeCache regions (LoaderOptions::cache_budget, per
// node; cache_shared), one per fake node under DLFS_RANKS_PER_NODE.
// Memory per rank: the windows' samples; nothing per sample of the volume
// (a subset given as an unsorted list is sorted once to find positions).
class ShardLoader final : public BatchSource {
 public:
  // Collective over `comm`. The ranks agree, as CreateLoader's do, and also
  // on window_batches, read_ahead and the node layout; InvalidArgument on
  // every rank otherwise.
  static Result<std::unique_ptr<ShardLoader>> Create(MPI_Comm comm, std::shared_ptr<Volume> volume,
                                                     const ShardLoaderOptions& options);
  ~ShardLoader() override;

  // BatchSource; both are collective (see above).
  void SetEpoch(uint64_t epoch) override;
  Result<bool> Next(Batch* batch) override;
  uint64_t batches_per_epoch() const override;
  // The engine reading this node's targets.
  const std::string& description() const override;
  // Resuming (see above); LoadState is collective.
  Result<SourceState> SaveState() const override;
  Status LoadState(const SourceState& state) override;
  // Samples this rank left out as bad (LoaderOptions::skip_bad_samples, as
  // the Loader's; they are left out after the exchange, so every rank's
  // exchanges keep their sizes).
  std::vector<BadSample> quarantine() const;

  const ShardLoaderStats& stats() const;

  // cluster_cache: sample `index`'s owner node (-1: no node's cache keeps
  // it, or no cluster cache); the same on every rank. O(1).
  int cluster_owner(uint64_t index) const;

 private:
  class Impl;
  explicit ShardLoader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// What `dlfs epoch` prints under mpirun: opens `path` collectively
// (OpenShared), orders it as a Loader with `sampler` would (rank and world
// from `comm`, as CreateLoader sets them; no Loader is made), and gathers
// every rank's indices for `epoch` at positions [start, start + count) of
// its order (fewer past its end; every rank has as many) on rank 0 (rank by
// rank, each in reading order, rank r's starting at r times that many); the
// other ranks get an empty vector. Each rank computes only those positions.
// Collective; the same error on every rank (OpenShared's, or the
// lowest-ranked rank's bad sampler options).
Result<std::vector<uint64_t>> GatherEpochIndices(MPI_Comm comm, const std::string& path,
                                                 const VolumeOpenOptions& open,
                                                 const SamplerOptions& sampler, uint64_t epoch,
                                                 uint64_t start = 0, uint64_t count = ~uint64_t{0});
// The same on a volume every rank has opened (collectively): page after page
// without opening it again.
Result<std::vector<uint64_t>> GatherEpochIndices(MPI_Comm comm, const Volume& volume,
                                                 const SamplerOptions& sampler, uint64_t epoch,
                                                 uint64_t start = 0, uint64_t count = ~uint64_t{0});

}  // namespace dlfs
