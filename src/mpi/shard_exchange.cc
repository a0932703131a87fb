// ShardLoader::Impl: the exchange of a window with the other ranks.
#include "mpi/shard_loader_impl.h"

#include <algorithm>
#include <cstring>

#include "common/clock.h"

namespace dlfs {

Status ShardLoader::Impl::Exchange(uint64_t first) {
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

void ShardLoader::Impl::Discard() {
  if (next_ && next_->reader.joinable()) next_->reader.join();
  // Its gifts were never sent: they go with the next window planned.
  if (next_) {
    for (Gift& g : next_->gifts) pending_gifts_.push_back(std::move(g));
  }
  next_.reset();
}

}  // namespace dlfs
