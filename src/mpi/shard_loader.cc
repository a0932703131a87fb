// CreateLoader(comm, ...), CreateMixture(comm, ...), and creating the
// shard-local ShardLoader (shard_loader_impl.h lists the files of the rest).
#include "mpi/shard_loader_impl.h"

#include <climits>

#include "common/clock.h"
#include "dlfs/memory.h"

namespace dlfs {

namespace {

// What every rank must agree on so all read the same permutation and get
// the same number of batches: the volume (by uuid and sample count; paths
// may differ between nodes) and the options that decide the permutation.
std::vector<NamedValue> PermutationKey(const Volume& volume, const LoaderOptions& o) {
  const uint64_t n = o.subset.Count(volume.size());
  const SamplerOptions& s = o.sampler;
  return {
      {"the volume", volume.info().uuid + " with " + std::to_string(volume.size()) + " samples"},
      {"the sample count", std::to_string(n)},
      {"seed", std::to_string(s.seed)},
      {"shuffle", s.shuffle ? "on" : "off"},
      {"batch size", std::to_string(s.batch_size)},
      {"drop_last", s.drop_last ? "on" : "off"}};
}

}  // namespace

std::vector<uint32_t> ShardTargetsOfNode(int node_index, int node_count) {
  std::vector<uint32_t> out;
  for (uint32_t t = 0; t < 8; ++t) {  // format::kMaxTargets
    if (node_count > 0 && static_cast<int>(t % node_count) == node_index) out.push_back(t);
  }
  return out;
}

Result<std::unique_ptr<Loader>> CreateLoader(MPI_Comm comm, std::shared_ptr<Volume> volume,
                                             LoaderOptions options) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  options.sampler.rank = static_cast<uint32_t>(rank);
  options.sampler.world_size = static_cast<uint32_t>(size);
  DLFS_RETURN_IF_ERROR(AgreeOnValues(comm, PermutationKey(*volume, options)));
  return Loader::Create(std::move(volume), options);
}

Result<std::unique_ptr<MixtureSource>> CreateMixture(MPI_Comm comm,
                                                     std::vector<std::shared_ptr<Volume>> volumes,
                                                     MixtureOptions mixture,
                                                     const LoaderOptions& options) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  mixture.sampler.rank = static_cast<uint32_t>(rank);
  mixture.sampler.world_size = static_cast<uint32_t>(size);
  std::string vols, weights;
  for (const auto& v : volumes) {
    vols += (vols.empty() ? "" : ", ") + v->info().uuid + " with " + std::to_string(v->size()) +
            " samples";
  }
  for (double w : mixture.weights) weights += (weights.empty() ? "" : ",") + std::to_string(w);
  const SamplerOptions& s = mixture.sampler;
  DLFS_RETURN_IF_ERROR(
      AgreeOnValues(comm, {{"the volumes", vols},
                           {"weights", weights},
                           {"epoch_samples", std::to_string(mixture.epoch_samples)},
                           {"cycle", mixture.cycle ? "on" : "off"},
                           {"seed", std::to_string(s.seed)},
                           {"shuffle", s.shuffle ? "on" : "off"},
                           {"batch size", std::to_string(s.batch_size)},
                           {"drop_last", s.drop_last ? "on" : "off"}}));
  auto made = MixtureSource::Create(std::move(volumes), mixture, options);
  DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm, made.ok() ? Status::Ok() : made.status()));
  return made;
}

ShardLoader::Impl::~Impl() {
  Discard();
  int finalized = 0;
  MPI_Finalized(&finalized);
  topo_.reset();
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

Status ShardLoader::Impl::Init(MPI_Comm comm, std::shared_ptr<Volume> volume,
                               const ShardLoaderOptions& options) {
  MPI_Comm_dup(comm, &comm_);
  DLFS_ASSIGN_OR_RETURN(NodeTopology topo, NodeTopology::Create(comm_));
  topo_ = std::make_unique<NodeTopology>(std::move(topo));
  volume_ = std::move(volume);
  options_ = options;
  LoaderOptions& o = options_.loader;
  o.sampler.rank = static_cast<uint32_t>(topo_->rank());
  o.sampler.world_size = static_cast<uint32_t>(topo_->size());
  std::vector<NamedValue> key = PermutationKey(*volume_, o);
  // Exchanges must line up.
  key.push_back({"window_batches", std::to_string(options_.window_batches)});
  key.push_back({"read_ahead", options_.read_ahead ? "on" : "off"});
  key.push_back({"cluster_cache", options_.cluster_cache ? "on" : "off"});
  DLFS_RETURN_IF_ERROR(AgreeOnValues(comm_, key));
  // Checked after agreeing, so every rank returns the same error.
  if (options_.window_batches == 0 || o.sampler.batch_size == 0) {
    return Status::InvalidArgument("window_batches and batch_size must be positive");
  }
  if (!topo_->contiguous()) {
    return Status::InvalidArgument(
        "the shard loader needs each node's ranks to be consecutive world ranks "
        "(mpirun --map-by slot)");
  }

  // Where each node's ranks are, so requests can be spread over them.
  const int nodes = topo_->node_count();
  node_first_.assign(nodes, 0);
  node_size_.assign(nodes, 0);
  std::vector<int> mine = {topo_->node_index(), topo_->node_first_rank(), topo_->local_size()};
  std::vector<int> all(3 * static_cast<size_t>(topo_->size()));
  MPI_Allgather(mine.data(), 3, MPI_INT, all.data(), 3, MPI_INT, comm_);
  for (int r = 0; r < topo_->size(); ++r) {
    node_first_[all[3 * r]] = all[3 * r + 1];
    node_size_[all[3 * r]] = all[3 * r + 2];
  }

  const uint64_t n = o.subset.Count(volume_->size());
  Status st;
  auto sampler = Sampler::Create(n, o.sampler);
  auto fields = loader_internal::ResolveFields(*volume_, o.fields);
  if (!fields.ok()) {
    st = fields.status();
  } else if (sampler.ok()) {
    field_ids_ = std::move(*fields);
    // Bad samples are left out when a batch is handed out, after the
    // exchange: every rank's exchanges keep their sizes.
    bad_samples_ = std::make_unique<loader_internal::Quarantine>(*volume_, o.skip_bad_samples,
                                                                 o.max_bad_samples);
    st = bad_samples_->ListAhead(o.quarantine);
    sampler_.emplace(std::move(*sampler));
    subset_crc_ = SubsetCrc(o.subset);
    // The sizes of the samples read, estimated (window buffers, placement).
    sizes_ = loader_internal::MeasureSampleSizes(volume_->directory(), o.subset);
    auto engine = CreateEngine(volume_->OpenTargetPaths(), o.engine);
    if (engine.ok()) {
      engine_ = std::move(*engine);
      driver_ = std::make_unique<io_internal::ReadDriver>(*engine_);
      engine_description_ = engine_->description();
    } else {
      st = engine.status();
    }
  } else {
    st = sampler.status();
  }
  // Every rank fails alike, or none does.
  int ok = st.ok() ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, comm_);
  if (!st.ok()) return st;
  if (!all_ok) return Status::Unavailable("another rank could not create its shard loader");
  if (options_.cluster_cache) OpenClusterCache(all);
  SetEpoch(0);
  return Status::Ok();
}

void ShardLoader::Impl::OpenClusterCache(const std::vector<int>& layout) {
  const LoaderOptions& o = options_.loader;
  const int ranks = topo_->size();
  uint64_t budget = 0;
  std::string budget_note;
  if (topo_->local_rank() == 0) {
    budget = ResolveCacheBudget(o.cache_budget, ReadMemoryLimit(), &budget_note);
  }
  MPI_Bcast(&budget, 1, MPI_UINT64_T, 0, topo_->node());
  cache_internal::NodeCacheOptions co;
  co.budget = budget;
  co.shared = o.cache_shared;
  // Its own region, never the plain loader's (which may hold other samples
  // and would fill the room placement counts on); one per fake node.
  co.name_suffix = "-node" + std::to_string(topo_->node_index());
  std::string note;
  if (topo_->local_rank() == 0) cache_ = cache_internal::NodeCache::Open(*volume_, co, &note);
  BarrierPolitely(topo_->node());
  if (topo_->local_rank() != 0) cache_ = cache_internal::NodeCache::Open(*volume_, co, &note);
  if (!budget_note.empty()) note = budget_note + (note.empty() ? "" : "; " + note);

  // A node's capacity: the least of its ranks' (a rank that could not
  // attach the node's region keeps a private one).
  const uint64_t mine = cache_ ? cache_->stats().capacity : 0;
  std::vector<uint64_t> each(ranks);
  MPI_Allgather(&mine, 1, MPI_UINT64_T, each.data(), 1, MPI_UINT64_T, comm_);
  std::vector<uint64_t> capacity(topo_->node_count(), UINT64_MAX);
  std::vector<int> rank_node(ranks);
  for (int r = 0; r < ranks; ++r) {
    rank_node[r] = layout[3 * r];
    capacity[rank_node[r]] = std::min(capacity[rank_node[r]], each[r]);
  }
  node_capacity_ = capacity;
  first_order_ = sampler_->Order(0);
  const loader_internal::SampleSizes cached = loader_internal::MeasureSampleSizes(
      volume_->directory(), o.subset, cache_internal::CachedBytes(1));
  // The estimate's own error (a sample of the volume) is allowed for too.
  placement_ = cache_internal::Placement(sampler_->sample_count(), rank_node, capacity,
                                         cached.exact_mean * 1.01, cached.stddev);
  if (cache_) {
    engine_description_ += "; cluster cache: node " + std::to_string(topo_->node_index()) + " of " +
                           std::to_string(topo_->node_count()) + ", " + cache_->Describe();
  }
  if (!note.empty()) engine_description_ += "; " + note;
}

ShardLoader::ShardLoader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardLoader::~ShardLoader() = default;

Result<std::unique_ptr<ShardLoader>> ShardLoader::Create(MPI_Comm comm,
                                                         std::shared_ptr<Volume> volume,
                                                         const ShardLoaderOptions& options) {
  auto impl = std::make_unique<Impl>();
  DLFS_RETURN_IF_ERROR(impl->Init(comm, std::move(volume), options));
  return std::unique_ptr<ShardLoader>(new ShardLoader(std::move(impl)));
}

void ShardLoader::SetEpoch(uint64_t epoch) { impl_->SetEpoch(epoch); }
Result<bool> ShardLoader::Next(Batch* batch) { return impl_->Next(batch); }
uint64_t ShardLoader::batches_per_epoch() const { return impl_->batches_per_epoch(); }
const ShardLoaderStats& ShardLoader::stats() const { return impl_->stats(); }
int ShardLoader::cluster_owner(uint64_t index) const { return impl_->ClusterOwner(index); }
const std::string& ShardLoader::description() const { return impl_->engine_description(); }
Result<SourceState> ShardLoader::SaveState() const { return impl_->SaveState(); }
Status ShardLoader::LoadState(const SourceState& state) { return impl_->LoadState(state); }
std::vector<BadSample> ShardLoader::quarantine() const { return impl_->quarantine(); }

}  // namespace dlfs
