// RunBenchJob and GatherEpochIndices: the measurements of `dlfs bench` and
// `dlfs epoch` under mpirun.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "common/clock.h"
#include "dlfs/distributed.h"
#include "dlfs/sampler.h"
#include "dlfs_tools/bench_job.h"

namespace dlfs {

namespace {

// Reduces a struct made only of doubles field by field over `comm` (every
// rank gets the result), so reports travel as named fields.
template <typename T>
T AllReduceFields(MPI_Comm comm, const T& mine, MPI_Op op) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) % sizeof(double) == 0);
  T out{};
  MPI_Allreduce(&mine, &out, static_cast<int>(sizeof(T) / sizeof(double)), MPI_DOUBLE, op, comm);
  return out;
}

// What each rank measured of one epoch.
struct EpochFields {
  double samples, payload_bytes, device_bytes, peer_bytes, seconds, cpu_seconds;
};

// What each rank measured of the open and of the shard exchanges.
struct JobFields {
  double open_seconds, metadata_bytes_read, window_bytes, pss_bytes;
  double remote_samples, local_samples, served_samples, bytes_received, bytes_sent, exchanges;
  double storage_bytes, peer_bytes, cached_samples, absent_samples, gifts_sent, gifts_kept;
  double io_seconds, exchange_seconds;
};

Result<std::shared_ptr<Volume>> OpenForJob(MPI_Comm comm, const std::string& path,
                                           const BenchJobOptions& options, SharedOpenStats* stats) {
  VolumeOpenOptions o = options.open;
  if (options.shard_local) {
    DLFS_ASSIGN_OR_RETURN(NodeTopology topo, NodeTopology::Create(comm));
    o.open_only = ShardTargetsOfNode(topo.node_index(), topo.node_count());
  }
  if (!options.private_open) return OpenShared(comm, path, o, stats);
  const double start = Now();
  auto v = Volume::Open(path, o);
  stats->seconds = Now() - start;
  DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm, v.ok() ? Status::Ok() : v.status()));
  stats->metadata_bytes_read = (*v)->info().directory_bytes;
  return v;
}

}  // namespace

Result<std::vector<uint64_t>> GatherEpochIndices(MPI_Comm comm, const std::string& path,
                                                 const VolumeOpenOptions& open,
                                                 const SamplerOptions& sampler, uint64_t epoch,
                                                 uint64_t start, uint64_t count) {
  DLFS_ASSIGN_OR_RETURN(std::shared_ptr<Volume> volume, OpenShared(comm, path, open));
  return GatherEpochIndices(comm, *volume, sampler, epoch, start, count);
}

Result<std::vector<uint64_t>> GatherEpochIndices(MPI_Comm comm, const Volume& volume,
                                                 const SamplerOptions& sampler, uint64_t epoch,
                                                 uint64_t start, uint64_t count) {
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  // The order only: a Loader would also set up its engine, buffers and a
  // node cache (whose filler starts reading the volume).
  SamplerOptions s = sampler;
  s.rank = static_cast<uint32_t>(rank);
  s.world_size = static_cast<uint32_t>(world);
  Result<Sampler> order = Sampler::Create(volume.size(), s);
  DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm, order.ok() ? Status::Ok() : order.status()));
  // This rank's positions [start, start + count) only (every rank has as
  // many), computed per position.
  const RankOrder ranked = order->Ranked(epoch);
  const uint64_t first = std::min(start, ranked.size());
  const uint64_t take = std::min(count, ranked.size() - first);
  if (take > static_cast<uint64_t>(INT32_MAX) / static_cast<uint64_t>(world)) {
    return Status::InvalidArgument("cannot gather " + std::to_string(take) + " indices from " +
                                   std::to_string(world) + " ranks at once: ask for fewer (count)");
  }
  std::vector<uint64_t> mine(take);
  ranked.Fill(first, take, mine.data());
  const int n = static_cast<int>(mine.size());
  std::vector<uint64_t> all(rank == 0 ? size_t(n) * world : 0);
  MPI_Gather(mine.data(), n, MPI_UINT64_T, all.data(), n, MPI_UINT64_T, 0, comm);
  return all;
}

Result<BenchJobReport> RunBenchJob(MPI_Comm comm, const std::string& path,
                                   const BenchJobOptions& options) {
  int rank = 0;
  BenchJobReport report;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &report.ranks);

  SharedOpenStats open;
  MPI_Barrier(comm);
  const uint64_t pss_before = ProportionalSetSize();
  DLFS_ASSIGN_OR_RETURN(std::shared_ptr<Volume> volume, OpenForJob(comm, path, options, &open));
  MPI_Barrier(comm);  // every rank has touched the shared copy
  const double pss_open =
      static_cast<double>(ProportionalSetSize()) - static_cast<double>(pss_before);

  std::unique_ptr<BatchSource> source;
  ShardLoader* shard = nullptr;
  if (options.shard_local || options.source.cluster_cache) {
    DLFS_ASSIGN_OR_RETURN(std::unique_ptr<ShardLoader> s,
                          ShardLoader::Create(comm, volume, options.source));
    shard = s.get();
    source = std::move(s);
  } else {
    DLFS_ASSIGN_OR_RETURN(source, CreateLoader(comm, volume, options.source.loader));
  }
  report.bench.source = source->description();
  report.bench.cache = "as is";

  for (uint32_t e = 0; e < options.bench.epochs; ++e) {
    if (options.bench.drop_cache) {
      if (rank == 0 && !DropPageCache()) {
        std::fprintf(stderr, "dlfs: warning: could not drop the page cache (needs root)\n");
      }
      report.bench.cache = "dropped the page cache";
    }
    MPI_Barrier(comm);
    // Collective reading goes on to the epoch's end whatever fails.
    Result<EpochReport> r = RunEpoch(*source, e, /*read_through_errors=*/true);
    DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm, r.ok() ? Status::Ok() : r.status()));
    const EpochFields mine{static_cast<double>(r->samples),
                           static_cast<double>(r->payload_bytes),
                           static_cast<double>(r->device_bytes),
                           static_cast<double>(r->peer_bytes),
                           r->seconds,
                           r->cpu_seconds};
    const EpochFields sum = AllReduceFields(comm, mine, MPI_SUM);
    const EpochFields max = AllReduceFields(comm, mine, MPI_MAX);
    EpochReport job;
    job.epoch = e;
    job.samples = static_cast<uint64_t>(sum.samples);
    job.payload_bytes = static_cast<uint64_t>(sum.payload_bytes);
    job.device_bytes = static_cast<uint64_t>(sum.device_bytes);
    job.peer_bytes = static_cast<uint64_t>(sum.peer_bytes);
    job.seconds = max.seconds;
    job.cpu_seconds = sum.cpu_seconds;
    if (options.bench.on_epoch) options.bench.on_epoch(job);
    report.bench.total.Add(job);
    report.bench.epochs.push_back(job);
  }

  // Rank 0's fill plan, and how many ranks fill: the same on every rank.
  report.cache_plan = source->source_stats().cache_fill_plan;
  int filling = report.cache_plan.starts_with("fill") ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &filling, 1, MPI_INT, MPI_SUM, comm);
  report.ranks_filling = filling;
  int plan_chars = static_cast<int>(report.cache_plan.size());
  MPI_Bcast(&plan_chars, 1, MPI_INT, 0, comm);
  report.cache_plan.resize(static_cast<size_t>(plan_chars));
  MPI_Bcast(report.cache_plan.data(), plan_chars, MPI_CHAR, 0, comm);
  const ShardLoaderStats ss = shard ? shard->stats() : ShardLoaderStats{};
  const JobFields mine{open.seconds,
                       static_cast<double>(open.metadata_bytes_read),
                       static_cast<double>(open.window_bytes),
                       pss_open,
                       static_cast<double>(ss.remote_samples),
                       static_cast<double>(ss.local_samples),
                       static_cast<double>(ss.served_samples),
                       static_cast<double>(ss.bytes_received),
                       static_cast<double>(ss.bytes_sent),
                       static_cast<double>(ss.exchanges),
                       static_cast<double>(ss.storage_bytes),
                       static_cast<double>(ss.peer_bytes),
                       static_cast<double>(ss.cached_samples),
                       static_cast<double>(ss.absent_samples),
                       static_cast<double>(ss.gifts_sent),
                       static_cast<double>(ss.gifts_kept),
                       ss.io_seconds,
                       ss.exchange_seconds};
  const JobFields sum = AllReduceFields(comm, mine, MPI_SUM);
  const JobFields max = AllReduceFields(comm, mine, MPI_MAX);
  report.open_seconds_max = max.open_seconds;
  report.metadata_bytes_read = static_cast<uint64_t>(sum.metadata_bytes_read);
  report.directory_window_bytes = static_cast<uint64_t>(sum.window_bytes);
  report.directory_bytes = volume->info().directory_bytes;
  report.open_pss_bytes = sum.pss_bytes;
  report.shard.remote_samples = static_cast<uint64_t>(sum.remote_samples);
  report.shard.local_samples = static_cast<uint64_t>(sum.local_samples);
  report.shard.served_samples = static_cast<uint64_t>(sum.served_samples);
  report.shard.bytes_received = static_cast<uint64_t>(sum.bytes_received);
  report.shard.bytes_sent = static_cast<uint64_t>(sum.bytes_sent);
  report.shard.exchanges = static_cast<uint64_t>(sum.exchanges);
  report.shard.storage_bytes = static_cast<uint64_t>(sum.storage_bytes);
  report.shard.peer_bytes = static_cast<uint64_t>(sum.peer_bytes);
  report.shard.cached_samples = static_cast<uint64_t>(sum.cached_samples);
  report.shard.absent_samples = static_cast<uint64_t>(sum.absent_samples);
  report.shard.gifts_sent = static_cast<uint64_t>(sum.gifts_sent);
  report.shard.gifts_kept = static_cast<uint64_t>(sum.gifts_kept);
  report.shard.io_seconds = sum.io_seconds;
  report.shard.exchange_seconds = sum.exchange_seconds;
  report.shard_io_seconds_max = max.io_seconds;
  if (options.source.cluster_cache) {
    // Each node's cache as its first rank sees it.
    DLFS_ASSIGN_OR_RETURN(NodeTopology topo, NodeTopology::Create(comm));
    const uint64_t node_mine[3] = {static_cast<uint64_t>(topo.node_index()),
                                   topo.local_rank() == 0 ? ss.cache_capacity : 0,
                                   topo.local_rank() == 0 ? ss.cache_used : 0};
    std::vector<uint64_t> all(3 * static_cast<size_t>(report.ranks));
    MPI_Allgather(node_mine, 3, MPI_UINT64_T, all.data(), 3, MPI_UINT64_T, comm);
    report.node_cache_capacity.assign(topo.node_count(), 0);
    report.node_cache_bytes.assign(topo.node_count(), 0);
    for (int r = 0; r < report.ranks; ++r) {
      report.node_cache_capacity[all[3 * r]] += all[3 * r + 1];
      report.node_cache_bytes[all[3 * r]] += all[3 * r + 2];
    }
  }
  report.shard_exchange_seconds_max = max.exchange_seconds;
  return report;
}

}  // namespace dlfs
