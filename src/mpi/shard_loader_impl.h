// Internal: ShardLoader::Impl, the MPI shard loader's state, declared once
// and defined by concern:
//   shard_loader.cc    creating it: agreeing on the options, the engine,
//                      the cluster cache's placement
//   shard_batches.cc   epochs, resuming, and handing out batches (the
//                      quarantine's checks)
//   shard_plan.cc      planning a window: which sample comes from where
//   shard_exchange.cc  the exchange protocol: requests, served samples,
//                      gifts for the owners' caches
//   shard_reads.cc     reading this rank's part from storage
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cache/node_cache.h"
#include "cache/placement.h"
#include "common/file_util.h"
#include "dlfs/distributed.h"
#include "dlfs/io_engine.h"
#include "dlfs/mpi.h"
#include "dlfs/sampler.h"
#include "io/read_driver.h"
#include "loader/source_kit.h"

namespace dlfs {

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
  ~Impl();

  Status Init(MPI_Comm comm, std::shared_ptr<Volume> volume, const ShardLoaderOptions& options);

  // Collective. This node's cache (made by its first rank, then attached by
  // the others, so all agree on its size), every node's capacity, and the
  // placement: a pure function of those and of the first epoch's order, the
  // same on every rank, and a rule per sample (nothing stored per sample).
  // `layout` holds (node, first rank, ranks) per rank. A node without a
  // cache owns nothing; the job then reads from storage what no cache keeps.
  void OpenClusterCache(const std::vector<int>& layout);

  void SetEpoch(uint64_t epoch);

  // The sample bytes a window of this rank holds with near certainty (four
  // standard deviations above the mean window): what its buffers are first
  // made for, so they rarely grow. Estimated: measuring every window would
  // read the directory entry of every sample of the epoch first.
  uint64_t LargeWindow() const;

  // What the order depends on, with no position.
  SourceState Identity() const;

  SourceState SaveState() const;

  // Collective: every rank resumes the same position (their windows must
  // line up), or every rank gets the error.
  Status LoadState(const SourceState& state);

  Result<bool> Next(Batch* batch);

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
  int OwnerNode(uint64_t index) const;

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
  std::unique_ptr<Pending> Plan(uint64_t first);

  // Makes batches [first, first + window) available: finishes (or plans and
  // reads) that window, plans and starts reading the next one, then swaps
  // the served samples (and the gifts) with the other ranks. Collective.
  Status Exchange(uint64_t first);

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
  void Discard();

  // A window buffer no batch uses any more, or a new one (at most a few are
  // kept: batches the caller still holds keep theirs alive).
  std::shared_ptr<WindowBytes> AcquireWindowBytes();

  // Reads `indices` from storage into `buf`; adds the bytes read to
  // *device_bytes. With node >= 0 (shard-local), a sample node `node` does
  // not hold fails.
  Status ReadLocal(const std::vector<uint64_t>& indices, int node, Buffer* buf,
                   std::vector<std::span<const std::byte>>* spans, std::vector<Status>* status,
                   uint64_t* device_bytes);

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

}  // namespace dlfs
