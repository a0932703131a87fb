// CreateLoader(comm, ...) and the shard-local ShardLoader.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <optional>
#include <thread>

#include "cache/node_cache.h"
#include "cache/placement.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "dlfs/distributed.h"
#include "dlfs/memory.h"
#include "dlfs/sampler.h"
#include "io/read_driver.h"
#include "loader/batch_data.h"
#include "loader/batch_planner.h"
#include "loader/fields.h"
#include "loader/quarantine.h"

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

// ---------------------------------------------------------------------------

// A growable buffer of huge-page-backed memory (AllocateLarge): on VMs,
// faulting in fresh 4 KiB pages for every window cost more than moving the
// bytes, so buffers are also reused across windows.
struct Buffer {
  std::shared_ptr<std::byte> data;
  uint64_t capacity = 0;
  // Room for n bytes; when it must grow, for at least `hint` (the most an
  // epoch's windows may need: growing window by window faulted in fresh
  // buffers for several epochs).
  bool Reserve(uint64_t n, uint64_t hint = 0) {
    if (n <= capacity && data) return true;
    capacity = std::max<uint64_t>({n + n / 4, hint, 1});
    data = AllocateLarge(capacity);
    return data != nullptr;
  }
};

// The bytes of one window: what this rank read itself (own samples and the
// ones it serves) and what it received. Batches share ownership of it.
struct WindowBytes {
  Buffer local;
  Buffer received;
  Buffer absent;  // cluster cache: asked of an owner that did not have them
};

class ShardLoader::Impl {
 public:
  ~Impl() {
    Discard();
    int finalized = 0;
    MPI_Finalized(&finalized);
    topo_.reset();
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  Status Init(MPI_Comm comm, std::shared_ptr<Volume> volume, const ShardLoaderOptions& options) {
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

  // Collective. This node's cache (made by its first rank, then attached by
  // the others, so all agree on its size), every node's capacity, and the
  // placement: a pure function of those and of the first epoch's order, the
  // same on every rank, and a rule per sample (nothing stored per sample).
  // `layout` holds (node, first rank, ranks) per rank. A node without a
  // cache owns nothing; the job then reads from storage what no cache keeps.
  void OpenClusterCache(const std::vector<int>& layout) {
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
      engine_description_ += "; cluster cache: node " + std::to_string(topo_->node_index()) +
                             " of " + std::to_string(topo_->node_count()) + ", " +
                             cache_->Describe();
    }
    if (!note.empty()) engine_description_ += "; " + note;
  }

  void SetEpoch(uint64_t epoch) {
    // The loop after LoadState sets the restored epoch first: keep the
    // restored position.
    const bool keep = resume_pending_ && epoch == epoch_;
    resume_pending_ = false;
    if (keep) return;
    Discard();
    epoch_ = epoch;
    next_batch_ = 0;
    window_end_ = 0;
    order_ = sampler_->Ranked(epoch, options_.loader.subset);
    epoch_batches_ = sampler_->batches_per_epoch();
    done_.clear();
    window_hint_ = 0;
  }

  // The sample bytes a window of this rank holds with near certainty (four
  // standard deviations above the mean window): what its buffers are first
  // made for, so they rarely grow. Estimated: measuring every window would
  // read the directory entry of every sample of the epoch first.
  uint64_t LargeWindow() const {
    const uint64_t per_window = std::min<uint64_t>(
        uint64_t{options_.window_batches} * options_.loader.sampler.batch_size, order_.size());
    const double w = static_cast<double>(per_window);
    return static_cast<uint64_t>(w * sizes_.exact_mean + 4 * std::sqrt(w) * sizes_.stddev);
  }

  // What the order depends on, with no position.
  SourceState Identity() const {
    const LoaderOptions& o = options_.loader;
    SourceState s;
    s.volume_uuid = volume_->info().uuid;
    s.volume_samples = volume_->size();
    s.samples = o.subset.Count(volume_->size());
    s.subset_crc = subset_crc_;
    s.sampler = o.sampler;
    return s;
  }

  SourceState SaveState() const {
    SourceState s = Identity();
    s.epoch = epoch_;
    s.batches = next_batch_;
    s.done = done_;
    s.quarantined = bad_samples_->indices();
    return s;
  }

  // Collective: every rank resumes the same position (their windows must
  // line up), or every rank gets the error.
  Status LoadState(const SourceState& state) {
    // Node-local placement does not depend on the ranks' shares, so the rest
    // of an epoch splits among another number of ranks like a whole one.
    const std::string& who = volume_->path();
    Status st = CheckResumable(state, Identity(), who);
    for (uint64_t i : state.quarantined) {
      if (st.ok() && i >= volume_->size()) {
        st = Status::InvalidArgument(who +
                                     ": cannot resume from this state: it quarantines "
                                     "sample " +
                                     std::to_string(i) + " of " + std::to_string(volume_->size()));
      }
    }
    const ResumePoint at = PlanResume(state, options_.loader.sampler);
    RankOrder rest;
    if (st.ok() && !at.done.empty()) {
      Result<RankOrder> r = sampler_->Ranked(at.epoch, at.done, options_.loader.subset);
      if (r.ok()) {
        rest = std::move(r).value();
      } else {
        st = Status::InvalidArgument(who +
                                     ": cannot resume from this state: " + r.status().message());
      }
    }
    const uint64_t b = options_.loader.sampler.batch_size;
    const uint64_t batches =
        at.done.empty() ? sampler_->batches_per_epoch() : (rest.size() + b - 1) / b;
    if (st.ok() && at.batches > batches) {
      st = Status::InvalidArgument(who + ": cannot resume from this state: it says " +
                                   std::to_string(at.batches) + " batches were handed out of " +
                                   std::to_string(batches));
    }
    DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm_, st));
    DLFS_RETURN_IF_ERROR(
        AgreeOnValues(comm_, {{"the resumed epoch", std::to_string(at.epoch)},
                              {"the batches handed out", std::to_string(at.batches)},
                              {"the batches left", std::to_string(batches - at.batches)}}));
    for (uint64_t i : state.quarantined) bad_samples_->Add(i, "left out by the state resumed from");
    resume_pending_ = false;
    SetEpoch(at.epoch);
    if (!at.done.empty()) {
      order_ = std::move(rest);
      epoch_batches_ = batches;
      done_ = at.done;
    }
    next_batch_ = at.batches;  // the next Next() exchanges from here
    resume_pending_ = true;
    return Status::Ok();
  }

  Result<bool> Next(Batch* batch) {
    resume_pending_ = false;
    if (next_batch_ >= epoch_batches_) return false;
    if (next_batch_ >= window_end_) DLFS_RETURN_IF_ERROR(Exchange(next_batch_));
    const uint64_t k = next_batch_++;
    const uint64_t b = options_.loader.sampler.batch_size;
    const uint64_t begin = k * b, end = std::min<uint64_t>(begin + b, order_.size());

    auto data = std::make_shared<Batch::Data>();
    if (cache_) {
      // Samples found in the node cache point into its mapping: the batch
      // keeps it as well as the window's buffers.
      struct Owners {
        std::shared_ptr<WindowBytes> window;
        std::shared_ptr<cache_internal::NodeCache> cache;
      };
      data->owner = std::make_shared<Owners>(Owners{window_bytes_, cache_});
    } else {
      data->owner = window_bytes_;
    }
    data->epoch = epoch_;
    data->sequence = k;
    const SampleDirectory& dir = volume_->directory();
    for (uint64_t p = begin; p < end; ++p) {
      const uint64_t at = p - window_first_position_;
      const uint64_t index = window_indices_[at];
      if (!status_[at].ok()) {
        if (!options_.loader.skip_bad_samples) return status_[at];
        data->left_out.emplace_back(index, status_[at].message());  // quarantined below
        continue;
      }
      const auto bytes = samples_[at];
      data->device_bytes += storage_bytes_[at];
      data->peer_bytes += peer_bytes_[at];
      data->indices.push_back(index);
      data->labels.push_back(dir.sample(index).label);
      data->samples.push_back(bytes);
      data->payload_bytes += bytes.size();
    }
    auto check = [this](Batch::Data* d) {
      if (!field_ids_.empty()) {
        return loader_internal::SplitFields(*volume_, field_ids_, options_.loader.verify_checksums,
                                            d, decoded_buffers_.get());
      }
      if (options_.loader.verify_checksums) {
        for (size_t i = 0; i < d->indices.size(); ++i) {
          DLFS_RETURN_IF_ERROR(volume_->CheckSample(d->indices[i], d->samples[i]));
        }
      }
      return Status::Ok();
    };
    DLFS_RETURN_IF_ERROR(bad_samples_->active() ? bad_samples_->Check(data.get(), check)
                                                : check(data.get()));
    *batch = Batch(std::move(data));
    return true;
  }

  std::vector<BadSample> quarantine() const { return bad_samples_->records(); }

  uint64_t batches_per_epoch() const { return sampler_->batches_per_epoch(); }
  const ShardLoaderStats& stats() const { return stats_; }
  int ClusterOwner(uint64_t index) const {
    if (!options_.cluster_cache || index >= volume_->size()) return -1;
    return OwnerNode(index);
  }
  const std::string& engine_description() const { return engine_description_; }

 private:
  // The node that keeps (cluster cache) or stores (shard-local) `index`; -1
  // for a sample no node's cache keeps. The cluster cache's placement is by
  // the sample's position in the first epoch's order (O(1) each way).
  int OwnerNode(uint64_t index) const {
    if (options_.cluster_cache) {
      const std::optional<uint64_t> p = options_.loader.subset.PositionOf(index);
      if (!p || *p >= first_order_.size()) return -1;
      return placement_.Owner(first_order_.PositionOf(*p));
    }
    return static_cast<int>(volume_->directory().sample(index).target % node_first_.size());
  }

  // The rank of `node` this rank asks for its samples (spread by local rank,
  // so a node's ranks share the serving).
  int ServerOf(int node) const {
    return node_first_[node] + topo_->local_rank() % node_size_[node];
  }

  // Bytes a storage read of `index` moves (aligned to the engine).
  uint64_t DeviceBytes(uint64_t index) const {
    const SampleInfo s = volume_->directory().sample(index);
    const uint64_t a = std::max<uint32_t>(engine_->alignment(), 1);
    return (s.offset + s.length + a - 1) / a * a - s.offset / a * a;
  }

  // A position's source in Pending::where: a server rank, or one of these.
  static constexpr int kOwn = -1;     // read here from storage: own[slot]
  static constexpr int kCached = -2;  // in this node's cache: cached[slot]
  // The code a server sends for a sample its node's cache does not hold
  // (yet): the requester reads it from storage and hands it to the owner.
  static constexpr uint8_t kAbsent = 0xff;

  // A sample read by a rank that does not own it, for its owner's cache.
  struct Gift {
    int to;  // the owner node's rank this rank talks to
    uint64_t index;
    std::vector<std::byte> bytes;
  };

  // One window in flight: its plan (agreed with the other ranks) and the
  // read of its own and served samples, which runs on a thread while the
  // caller still consumes the previous window.
  struct Pending {
    uint64_t first_batch = 0, end_batch = 0;
    uint64_t first_position = 0, count = 0;
    std::vector<uint64_t> indices;                // the window's samples, in order
    std::vector<std::vector<uint64_t>> ask;       // per server: samples asked of it
    std::vector<std::pair<int, uint64_t>> where;  // per position: (server, kOwn or kCached; slot)
    std::vector<uint64_t> own, served;            // read here; asked of this rank
    std::vector<std::span<const std::byte>> cached;             // found in this node's cache
    std::vector<int> send_counts, recv_counts, sdispl, rdispl;  // of `ask` and `served`
    // Cluster cache: gifts to owners (by destination rank), and the samples
    // other ranks give this one (by source rank, gift_recv[r] from rank r).
    std::vector<Gift> gifts;
    std::vector<int> gift_send, gift_recv;
    std::vector<uint64_t> gifted;
    // Cluster cache: the served samples' bytes in this node's cache (empty:
    // not there).
    std::vector<std::span<const std::byte>> serve;
    std::shared_ptr<WindowBytes> bytes;
    std::vector<std::span<const std::byte>> got;  // own, then served (shard-local)
    std::vector<Status> got_status;
    double io_seconds = 0;
    uint64_t io_bytes = 0;
    std::thread reader;
  };

  // Plans batches [first, first + window): which samples come from where,
  // agreed with the other ranks (collective), and starts reading this
  // rank's storage part on a thread.
  std::unique_ptr<Pending> Plan(uint64_t first) {
    auto p = std::make_unique<Pending>();
    const uint64_t b = options_.loader.sampler.batch_size;
    p->first_batch = first;
    p->end_batch = std::min<uint64_t>(first + options_.window_batches, epoch_batches_);
    p->first_position = first * b;
    p->count = std::min<uint64_t>(p->end_batch * b, order_.size()) - p->first_position;
    // The window's samples, computed now (the order stores nothing).
    p->indices.resize(p->count);
    order_.Fill(p->first_position, p->count, p->indices.data());
    const int ranks = topo_->size();
    const int my_node = topo_->node_index();
    const bool cluster = options_.cluster_cache;

    p->ask.resize(ranks);
    p->where.resize(p->count);
    for (uint64_t i = 0; i < p->count; ++i) {
      const uint64_t index = p->indices[i];
      const int node = OwnerNode(index);
      if (cluster && node == my_node && cache_) {
        if (auto hit = cache_->Find(index)) {
          p->where[i] = {kCached, p->cached.size()};
          p->cached.push_back(*hit);
          continue;
        }
      }
      if (node == my_node || node < 0) {
        p->where[i] = {kOwn, p->own.size()};
        p->own.push_back(index);
      } else {
        const int server = ServerOf(node);
        p->where[i] = {server, p->ask[server].size()};
        p->ask[server].push_back(index);
      }
    }
    p->bytes = AcquireWindowBytes();
    Pending* raw = p.get();
    auto read = [this, raw, my_node, cluster] {
      std::vector<uint64_t> to_read = raw->own;
      if (!cluster) to_read.insert(to_read.end(), raw->served.begin(), raw->served.end());
      const double start = Now();
      const Status st = ReadLocal(to_read, cluster ? -1 : my_node, &raw->bytes->local, &raw->got,
                                  &raw->got_status, &raw->io_bytes);
      if (!st.ok()) {
        raw->got_status.assign(to_read.size(), st);
        raw->got.assign(to_read.size(), {});
      }
      raw->io_seconds = Now() - start;
    };
    // Cluster cache: the storage part is known already; read it while the
    // requests are exchanged. (The engine is used by that thread alone
    // until it is joined.)
    if (cluster) raw->reader = std::thread(read);

    // Gifts read in earlier windows go with this window's requests.
    p->gifts = std::move(pending_gifts_);
    pending_gifts_.clear();
    std::stable_sort(p->gifts.begin(), p->gifts.end(),
                     [](const Gift& x, const Gift& y) { return x.to < y.to; });
    p->gift_send.assign(ranks, 0);
    for (const Gift& g : p->gifts) ++p->gift_send[g.to];

    // Counts (requests and gifts per rank), then the sample ids. Non-blocking
    // collectives waited on politely: ranks that arrive early must not spin
    // on the cores the late ones need (more ranks than cores).
    std::vector<int> counts_out(2 * ranks), counts_in(2 * ranks);
    for (int r = 0; r < ranks; ++r) {
      counts_out[2 * r] = static_cast<int>(p->ask[r].size());
      counts_out[2 * r + 1] = p->gift_send[r];
    }
    MPI_Request request;
    MPI_Ialltoall(counts_out.data(), 2, MPI_INT, counts_in.data(), 2, MPI_INT, comm_, &request);
    WaitPolitely(&request);
    p->send_counts.assign(ranks, 0);
    p->recv_counts.assign(ranks, 0);
    p->sdispl.assign(ranks, 0);
    p->rdispl.assign(ranks, 0);
    p->gift_recv.assign(ranks, 0);
    std::vector<int> id_send(ranks), id_sdispl(ranks), id_recv(ranks), id_rdispl(ranks);
    std::vector<uint64_t> send_ids;
    size_t gift_at = 0;
    int asked_of_me = 0, total_in = 0;
    for (int r = 0; r < ranks; ++r) {
      p->send_counts[r] = counts_out[2 * r];
      p->recv_counts[r] = counts_in[2 * r];
      p->gift_recv[r] = counts_in[2 * r + 1];
      id_sdispl[r] = static_cast<int>(send_ids.size());
      send_ids.insert(send_ids.end(), p->ask[r].begin(), p->ask[r].end());
      for (int g = 0; g < p->gift_send[r]; ++g) send_ids.push_back(p->gifts[gift_at++].index);
      id_send[r] = static_cast<int>(send_ids.size()) - id_sdispl[r];
      p->rdispl[r] = asked_of_me;
      asked_of_me += p->recv_counts[r];
      id_rdispl[r] = total_in;
      id_recv[r] = p->recv_counts[r] + p->gift_recv[r];
      total_in += id_recv[r];
    }
    // Where each rank's asks start among all asks (the codes come back so).
    for (int r = 0, at = 0; r < ranks; ++r) {
      p->sdispl[r] = at;
      at += p->send_counts[r];
    }
    std::vector<uint64_t> in_ids(total_in);
    MPI_Ialltoallv(send_ids.data(), id_send.data(), id_sdispl.data(), MPI_UINT64_T, in_ids.data(),
                   id_recv.data(), id_rdispl.data(), MPI_UINT64_T, comm_, &request);
    WaitPolitely(&request);
    p->served.reserve(asked_of_me);
    for (int r = 0; r < ranks; ++r) {
      const uint64_t* from = in_ids.data() + id_rdispl[r];
      p->served.insert(p->served.end(), from, from + p->recv_counts[r]);
      p->gifted.insert(p->gifted.end(), from + p->recv_counts[r], from + id_recv[r]);
    }

    if (cluster) {
      // Served from this node's cache, never from storage.
      p->serve.resize(p->served.size());
      for (size_t k = 0; k < p->served.size(); ++k) {
        const uint64_t index = p->served[k];
        if (index < volume_->size() && OwnerNode(index) == my_node && cache_) {
          if (auto hit = cache_->Find(index)) p->serve[k] = *hit;
        }
      }
    } else {
      // Own samples and the ones asked of us, in one engine batch.
      raw->reader = std::thread(read);
    }
    return p;
  }

  // Makes batches [first, first + window) available: finishes (or plans and
  // reads) that window, plans and starts reading the next one, then swaps
  // the served samples (and the gifts) with the other ranks. Collective.
  Status Exchange(uint64_t first) {
    const double start = Now();
    if (!next_ || next_->first_batch != first) {
      Discard();
      next_ = Plan(first);
    }
    std::unique_ptr<Pending> p = std::move(next_);
    p->reader.join();
    stats_.io_seconds += p->io_seconds;
    stats_.storage_bytes += p->io_bytes;
    const bool cluster = options_.cluster_cache;
    // Read ahead: the next window's reads run during this exchange and while
    // this window is consumed. (The cluster cache plans it at the end: this
    // window's absent samples are read with the engine the next window's
    // reader thread uses.)
    if (options_.read_ahead && !cluster && p->end_batch < epoch_batches_) {
      next_ = Plan(p->end_batch);
    }
    const int ranks = topo_->size();
    const SampleDirectory& dir = volume_->directory();

    // Codes first (what each server can send), so byte counts are exact.
    uint64_t asked = 0;
    for (const auto& a : p->ask) asked += a.size();
    std::vector<uint8_t> out_codes(p->served.size()), in_codes(asked);
    for (size_t k = 0; k < p->served.size(); ++k) {
      if (cluster) {
        out_codes[k] = p->serve[k].empty() ? kAbsent : 0;
      } else {
        out_codes[k] = static_cast<uint8_t>(p->got_status[p->own.size() + k].code());
      }
    }
    MPI_Request request;
    MPI_Ialltoallv(out_codes.data(), p->recv_counts.data(), p->rdispl.data(), MPI_UINT8_T,
                   in_codes.data(), p->send_counts.data(), p->sdispl.data(), MPI_UINT8_T, comm_,
                   &request);
    WaitPolitely(&request);

    // To rank r: its samples this rank can send, then the gifts for r. From
    // rank r: the samples it can send, then its gifts.
    std::vector<int> byte_send(ranks, 0), bsdispl(ranks, 0), byte_recv(ranks, 0), brdispl(ranks);
    uint64_t out_bytes = 0, in_bytes = 0;
    Status st;
    for (size_t r = 0, gift = 0, gifted = 0; r < static_cast<size_t>(ranks); ++r) {
      uint64_t n = 0, m = 0;
      for (int j = 0; j < p->recv_counts[r]; ++j) {
        if (out_codes[p->rdispl[r] + j] == 0) n += dir.sample(p->served[p->rdispl[r] + j]).length;
      }
      for (int g = 0; g < p->gift_send[r]; ++g) n += p->gifts[gift++].bytes.size();
      for (size_t j = 0; j < p->ask[r].size(); ++j) {
        if (in_codes[p->sdispl[r] + j] == 0) m += dir.sample(p->ask[r][j]).length;
      }
      for (int g = 0; g < p->gift_recv[r]; ++g) {
        const uint64_t index = p->gifted[gifted++];
        m += index < volume_->size() ? dir.sample(index).length : 0;
      }
      if (n > INT_MAX || m > INT_MAX || out_bytes + n > INT_MAX || in_bytes + m > INT_MAX) {
        st = Status::InvalidArgument(
            "a shard exchange would move more than 2 GiB; use fewer window_batches");
        break;
      }
      bsdispl[r] = static_cast<int>(out_bytes);
      byte_send[r] = static_cast<int>(n);
      brdispl[r] = static_cast<int>(in_bytes);
      byte_recv[r] = static_cast<int>(m);
      out_bytes += n;
      in_bytes += m;
    }
    // The data phase: contiguous buffers and a blocking MPI_Alltoallv, so
    // Open MPI can use its single-copy path (CMA) and keeps driving progress.
    // (Served samples sent in place through hindexed datatypes went through
    // MPI's fragment pipeline, and polite waiting starved that pipeline.)
    if (window_hint_ == 0) window_hint_ = LargeWindow();
    if (st.ok() && (!send_buffer_.Reserve(out_bytes, window_hint_) ||
                    !p->bytes->received.Reserve(in_bytes, window_hint_))) {
      st = Status::Unavailable("out of memory for a shard window");
    }
    // All ranks skip the data phase together, or none does; the window's
    // batches then fail with the error and the next call moves on.
    st = AgreeOnStatus(comm_, st);
    window_first_position_ = p->first_position;
    window_indices_ = p->indices;
    window_end_ = p->end_batch;
    samples_.assign(p->count, {});
    status_.assign(p->count, Status::Ok());
    storage_bytes_.assign(p->count, 0);
    peer_bytes_.assign(p->count, 0);
    if (!st.ok()) {
      status_.assign(p->count, st);
      window_bytes_.reset();
      return Status::Ok();
    }
    std::byte* out = send_buffer_.data.get();
    for (size_t r = 0, gift = 0, at = 0; r < static_cast<size_t>(ranks); ++r) {
      for (int j = 0; j < p->recv_counts[r]; ++j) {
        const size_t k = p->rdispl[r] + j;
        if (out_codes[k] != 0) continue;
        const std::span<const std::byte> s = cluster ? p->serve[k] : p->got[p->own.size() + k];
        std::memcpy(out + at, s.data(), s.size());
        at += s.size();
      }
      for (int g = 0; g < p->gift_send[r]; ++g, ++gift) {
        std::memcpy(out + at, p->gifts[gift].bytes.data(), p->gifts[gift].bytes.size());
        at += p->gifts[gift].bytes.size();
      }
    }
    std::byte* received = p->bytes->received.data.get();
    MPI_Alltoallv(out, byte_send.data(), bsdispl.data(), MPI_BYTE, received, byte_recv.data(),
                  brdispl.data(), MPI_BYTE, comm_);

    // Where each asked sample landed; then the gifts, for this node's cache.
    std::vector<Fill> fills;
    std::vector<std::vector<uint64_t>> offset_in(ranks);
    for (size_t r = 0, gifted = 0; r < static_cast<size_t>(ranks); ++r) {
      uint64_t off = brdispl[r];
      for (size_t j = 0; j < p->ask[r].size(); ++j) {
        offset_in[r].push_back(off);
        if (in_codes[p->sdispl[r] + j] == 0) off += dir.sample(p->ask[r][j]).length;
      }
      for (int g = 0; g < p->gift_recv[r]; ++g) {
        const uint64_t index = p->gifted[gifted++];
        if (index >= volume_->size()) continue;
        const uint64_t length = dir.sample(index).length;
        if (cache_ && OwnerNode(index) == topo_->node_index()) {
          fills.push_back({index, {received + off, length}, true});
        }
        off += length;
      }
    }

    // Samples asked of an owner whose cache does not hold them yet: read
    // here, and handed to the owner with the next window's requests.
    std::vector<uint64_t> absent;
    std::vector<size_t> absent_at(p->count, SIZE_MAX);
    for (uint64_t i = 0; i < p->count; ++i) {
      const auto [server, slot] = p->where[i];
      if (server >= 0 && in_codes[p->sdispl[server] + slot] == kAbsent) {
        absent_at[i] = absent.size();
        absent.push_back(p->indices[i]);
      }
    }
    std::vector<std::span<const std::byte>> absent_got;
    std::vector<Status> absent_status;
    if (!absent.empty()) {
      const double io_start = Now();
      uint64_t io_bytes = 0;
      const Status read =
          ReadLocal(absent, -1, &p->bytes->absent, &absent_got, &absent_status, &io_bytes);
      if (!read.ok()) absent_status.assign(absent.size(), read);
      stats_.io_seconds += Now() - io_start;
      stats_.storage_bytes += io_bytes;
      stats_.absent_samples += absent.size();
    }

    // This window's samples in reading order.
    uint64_t peer = 0;
    for (uint64_t i = 0; i < p->count; ++i) {
      const uint64_t index = p->indices[i];
      const auto [server, slot] = p->where[i];
      if (server == kCached) {
        samples_[i] = p->cached[slot];
        stats_.cached_bytes += samples_[i].size();
        continue;
      }
      if (server == kOwn) {
        samples_[i] = p->got[slot];
        status_[i] = p->got_status[slot];
        storage_bytes_[i] = DeviceBytes(index);
        // Owned by this node: keep it (Admit checks it against the directory).
        if (cluster && cache_ && status_[i].ok() && OwnerNode(index) == topo_->node_index()) {
          fills.push_back({index, samples_[i], false});
        }
        continue;
      }
      const uint8_t code = in_codes[p->sdispl[server] + slot];
      if (code == kAbsent) {
        const size_t a = absent_at[i];
        samples_[i] = absent_got[a];
        status_[i] = absent_status[a];
        storage_bytes_[i] = DeviceBytes(index);
        // Only what the owner's cache would keep (a damaged sample would be
        // refused there, every epoch).
        if (status_[i].ok() && volume_->CheckSample(index, samples_[i]).ok()) {
          pending_gifts_.push_back({server, index, {samples_[i].begin(), samples_[i].end()}});
        }
        continue;
      }
      if (code == 0) {
        samples_[i] = {received + offset_in[server][slot], dir.sample(index).length};
        peer_bytes_[i] = dir.sample(index).length;
        peer += peer_bytes_[i];
      } else {
        status_[i] =
            Status(static_cast<StatusCode>(code),
                   volume_->path() + ": sample " + std::to_string(index) + " '" + dir.Path(index) +
                       "': rank " + std::to_string(server) + " (node " +
                       std::to_string(OwnerNode(index)) + ", which holds it) could not read it: " +
                       std::string(StatusCodeName(static_cast<StatusCode>(code))));
      }
    }
    window_bytes_ = p->bytes;
    if (!fills.empty()) FillCache(fills);
    stats_.local_samples += p->own.size();
    stats_.cached_samples += p->cached.size();
    stats_.remote_samples += asked;
    stats_.served_samples += p->served.size();
    stats_.bytes_received += in_bytes;
    stats_.bytes_sent += out_bytes;
    stats_.peer_bytes += peer;
    stats_.gifts_sent += p->gifts.size();
    ++stats_.exchanges;
    stats_.exchange_seconds += Now() - start;
    if (cache_) {
      const cache_internal::NodeCacheStats cs = cache_->stats();
      stats_.cache_capacity = cs.capacity;
      stats_.cache_used = cs.used;
    }
    if (options_.read_ahead && cluster && p->end_batch < epoch_batches_) {
      next_ = Plan(p->end_batch);
    }
    return Status::Ok();
  }

  // A sample for this node's cache.
  struct Fill {
    uint64_t index;
    std::span<const std::byte> bytes;
    bool gift;  // handed here by another node
  };

  // Copies `fills` into the node cache, on the caller's thread: a filler
  // thread (tried) competed with the ranks for cores and left most of the
  // first epoch's samples uncached for the second (docs/benchmarks.md, "The
  // cluster cache").
  void FillCache(const std::vector<Fill>& fills) {
    for (const Fill& f : fills) {
      if (cache_->Admit(f.index, f.bytes) && f.gift) ++stats_.gifts_kept;
    }
  }

  // Drops a window read ahead that will not be used (a new epoch).
  void Discard() {
    if (next_ && next_->reader.joinable()) next_->reader.join();
    // Its gifts were never sent: they go with the next window planned.
    if (next_) {
      for (Gift& g : next_->gifts) pending_gifts_.push_back(std::move(g));
    }
    next_.reset();
  }

  // A window buffer no batch uses any more, or a new one (at most a few are
  // kept: batches the caller still holds keep theirs alive).
  std::shared_ptr<WindowBytes> AcquireWindowBytes() {
    for (auto& w : pool_) {
      if (w.use_count() == 1) return w;
    }
    auto w = std::make_shared<WindowBytes>();
    if (pool_.size() < 3) pool_.push_back(w);
    return w;
  }

  // Reads `indices` from storage into `buf`; adds the bytes read to
  // *device_bytes. With node >= 0 (shard-local), a sample node `node` does
  // not hold fails.
  Status ReadLocal(const std::vector<uint64_t>& indices, int node, Buffer* buf,
                   std::vector<std::span<const std::byte>>* spans, std::vector<Status>* status,
                   uint64_t* device_bytes) {
    const SampleDirectory& dir = volume_->directory();
    const uint64_t a = std::max<uint32_t>(engine_->alignment(), 1);
    std::vector<ReadRequest> requests;
    std::vector<uint64_t> at(indices.size());
    uint64_t total = 0;
    for (size_t i = 0; i < indices.size(); ++i) {
      const SampleInfo s = dir.sample(indices[i]);
      const uint64_t from = s.offset / a * a;
      const uint64_t to = (s.offset + s.length + a - 1) / a * a;
      at[i] = total + (s.offset - from);
      total += to - from;
    }
    spans->assign(indices.size(), {});
    status->assign(indices.size(), Status::Ok());
    if (!buf->Reserve(total)) return Status::Unavailable("out of memory for a shard window");
    std::byte* base = buf->data.get();
    uint64_t cursor = 0;
    for (size_t i = 0; i < indices.size(); ++i) {
      const SampleInfo s = dir.sample(indices[i]);
      if (node >= 0 && OwnerNode(indices[i]) != node) {
        // Asked for a sample this node does not hold: the requester's
        // topology differs from ours (e.g. DLFS_RANKS_PER_NODE not set alike).
        (*status)[i] = Status::InvalidArgument("sample " + std::to_string(indices[i]) +
                                               " is not held by node " + std::to_string(node));
      }
      const uint64_t from = s.offset / a * a;
      const uint64_t to = (s.offset + s.length + a - 1) / a * a;
      requests.push_back({s.target, from, to - from, base + cursor, ReadRequest::kNoSlot});
      (*spans)[i] = {base + at[i], s.length};
      cursor += to - from;
    }
    std::vector<Status> results;
    DLFS_RETURN_IF_ERROR(driver_->Read(std::move(requests), &results));
    *device_bytes += total;
    for (size_t i = 0; i < results.size(); ++i) {
      if ((*status)[i].ok() && !results[i].ok()) {
        (*status)[i] =
            results[i].WithContext(volume_->path() + ": sample " + std::to_string(indices[i]) +
                                   " '" + dir.Path(indices[i]) + "'");
      }
    }
    return Status::Ok();
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::unique_ptr<NodeTopology> topo_;
  std::vector<int> node_first_, node_size_;
  std::shared_ptr<Volume> volume_;
  ShardLoaderOptions options_;
  std::vector<uint32_t> field_ids_;  // options_.loader.fields resolved
  std::unique_ptr<loader_internal::Quarantine> bad_samples_;
  const std::shared_ptr<loader_internal::DecodedBuffers> decoded_buffers_ =
      std::make_shared<loader_internal::DecodedBuffers>();
  std::optional<Sampler> sampler_;
  std::unique_ptr<IoEngine> engine_;
  std::unique_ptr<io_internal::ReadDriver> driver_;  // over engine_
  std::string engine_description_;

  uint64_t epoch_ = 0;
  uint64_t next_batch_ = 0;
  // Batches of this epoch: all of them, or of its rest after an elastic
  // resume (then done_ holds the parts read before).
  uint64_t epoch_batches_ = 0;
  std::vector<EpochSegment> done_;
  bool resume_pending_ = false;  // LoadState's position, not yet used or moved
  RankOrder order_;              // this rank's samples of the epoch, in order
  uint32_t subset_crc_ = 0;
  loader_internal::SampleSizes sizes_;  // of the samples read, estimated

  uint64_t window_first_position_ = 0;
  std::vector<uint64_t> window_indices_;  // its samples, in order
  uint64_t window_end_ = 0;               // first batch after the window
  std::shared_ptr<WindowBytes> window_bytes_;
  std::vector<std::shared_ptr<WindowBytes>> pool_;
  Buffer send_buffer_;             // served samples, packed per requester
  std::unique_ptr<Pending> next_;  // the next window, planned and being read
  std::vector<std::span<const std::byte>> samples_;
  std::vector<Status> status_;
  // Per window position: bytes read from storage, and received from a peer.
  std::vector<uint64_t> storage_bytes_, peer_bytes_;
  // Cluster cache: this node's cache, each sample's owner node (or -1),
  // and samples read for other owners, sent with the next window.
  std::shared_ptr<cache_internal::NodeCache> cache_;
  EpochPermutation first_order_;  // the first epoch's, which the placement follows
  cache_internal::Placement placement_;
  std::vector<uint64_t> node_capacity_;
  uint64_t window_hint_ = 0;  // LargeWindow() of this epoch; 0: not known yet
  std::vector<Gift> pending_gifts_;
  ShardLoaderStats stats_;
};

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
