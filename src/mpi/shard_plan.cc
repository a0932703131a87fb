// ShardLoader::Impl: planning a window (which sample comes from where).
#include "mpi/shard_loader_impl.h"

#include <algorithm>

#include "common/clock.h"

namespace dlfs {

int ShardLoader::Impl::OwnerNode(uint64_t index) const {
  if (options_.cluster_cache) {
    const std::optional<uint64_t> p = options_.loader.subset.PositionOf(index);
    if (!p || *p >= first_order_.size()) return -1;
    return placement_.Owner(first_order_.PositionOf(*p));
  }
  return static_cast<int>(volume_->directory().sample(index).target % node_first_.size());
}

std::unique_ptr<ShardLoader::Impl::Pending> ShardLoader::Impl::Plan(uint64_t first) {
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

}  // namespace dlfs
