// The Loader: I/O threads that stream batch reads through their engines,
// and the caller's side that hands batches out in order and checks them.
//
// Batches are numbered by ticket: ticket t of generation g is batch
// t % B of epoch base_epoch + t / B (B batches per epoch). SetEpoch(e)
// moving forward keeps the generation (tickets already read for epoch e
// stay useful); going back or restarting an epoch starts a new generation,
// and batches of older generations are dropped when their reads complete.
// I/O thread k reads tickets k, k + n, ... while they lie within
// prefetch_batches of the caller's next ticket, never waiting for a batch
// to complete before queueing the next one's reads: the engine always has
// work, and completions are matched to batches by tag.
#include "dlfs/loader.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "common/clock.h"
#include "common/file_util.h"
#include "loader/batch_data.h"
#include "loader/batch_read.h"
#include "loader/fields.h"
#include "loader/memory_tier.h"
#include "loader/slab_pool.h"

namespace dlfs {

uint64_t DefaultCacheBudget() {
  std::FILE* f = std::fopen("/proc/meminfo", "re");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb * 1024 / 4;
}

using loader_internal::BatchRead;
using loader_internal::MemoryTier;
using loader_internal::Slab;
using loader_internal::SlabPool;

namespace {

// Reads per batch are numbered in the low half of a tag, batches in the
// high half.
constexpr uint64_t kReadBits = 32;

// This rank's samples of one epoch.
struct EpochOrder {
  uint64_t epoch;
  std::vector<uint64_t> indices;
};

void AddSeconds(std::atomic<uint64_t>& ns, double seconds) {
  ns.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
}

}  // namespace

class Loader::Impl {
 public:
  struct Worker {
    std::unique_ptr<IoEngine> engine;
    std::shared_ptr<SlabPool> pool;
    std::thread thread;
    uint32_t index = 0;
  };

  // A batch whose reads are queued or in flight on one worker.
  struct InFlight {
    uint64_t gen, ticket, epoch, seq;
    std::shared_ptr<const EpochOrder> order;  // keeps the indices alive
    std::unique_ptr<BatchRead> read;
    std::shared_ptr<Slab> slab;
    double started;
    bool abandoned = false;  // its generation ended: drop it when done
  };

  Impl(std::shared_ptr<Volume> v, const LoaderOptions& o, Sampler s)
      : volume_(std::move(v)),
        options_(o),
        sampler_(std::move(s)),
        batches_(sampler_.batches_per_epoch()),
        window_(std::max<uint32_t>(o.prefetch_batches, 1)) {
    po_.read = options_.plan;
  }

  ~Impl() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& w : workers_) {
      if (w->thread.joinable()) w->thread.join();
    }
  }

  // --- The caller's side ---------------------------------------------------

  void SetEpoch(uint64_t e) {
    {
      std::lock_guard lock(mu_);
      // The loop after LoadState sets the restored epoch first: keep the
      // restored position.
      const bool keep = resume_pending_ && e == epoch_;
      resume_pending_ = false;
      if (keep) return;
    }
    SetPosition(e, 0);
  }

  // Makes batch `k` of epoch `e` the next one Next() hands out; the batches
  // before it are not read.
  void SetPosition(uint64_t e, uint64_t k) {
    std::vector<Result<std::shared_ptr<Batch::Data>>> dropped;  // destroyed outside the lock
    {
      std::lock_guard lock(mu_);
      StartThreadsLocked();
      const bool forward = batches_ > 0 && e >= base_epoch_ &&
                           e - base_epoch_ < ~uint64_t{0} / batches_ - 1 &&
                           (e - base_epoch_) * batches_ + k >= consumer_;
      if (forward) {
        const uint64_t target = (e - base_epoch_) * batches_ + k;
        while (!ready_.empty() && ready_.begin()->first < target) {
          dropped.push_back(std::move(ready_.begin()->second));
          ready_.erase(ready_.begin());
        }
        consumer_ = target;
      } else {
        ++gen_;
        base_epoch_ = e;
        consumer_ = k;
        for (auto& [t, r] : ready_) dropped.push_back(std::move(r));
        ready_.clear();
      }
      epoch_ = e;
      epoch_end_ = consumer_ - k + batches_;
      if (tier_) tier_retry_ = true;  // samples that failed to load get another read
    }
    work_cv_.notify_all();
  }

  // What the order depends on, with no position.
  SourceState Identity() const {
    SourceState s;
    s.volume_uuid = volume_->info().uuid;
    s.volume_samples = volume_->size();
    s.samples = options_.subset.empty() ? volume_->size() : options_.subset.size();
    s.subset_crc = subset_crc_;
    s.sampler = options_.sampler;
    return s;
  }

  SourceState SaveState() const {
    SourceState s = Identity();
    std::lock_guard lock(mu_);
    if (started_.load(std::memory_order_relaxed)) {
      s.epoch = epoch_;
      s.batches = consumer_ + batches_ - epoch_end_;
    }
    return s;
  }

  Status LoadState(const SourceState& state) {
    DLFS_RETURN_IF_ERROR(CheckResumable(state, Identity(), batches_, volume_->path()));
    SetPosition(state.epoch, state.batches);
    std::lock_guard lock(mu_);
    resume_pending_ = true;
    return Status::Ok();
  }

  Result<bool> Next(Batch* out) {
    if (!started_.load(std::memory_order_acquire)) SetEpoch(0);
    if (tier_) return NextFromTier(out);
    const double t0 = Now();
    std::unique_lock lock(mu_);
    resume_pending_ = false;
    if (!start_error_.ok()) return start_error_;
    if (consumer_ >= epoch_end_) return false;
    ready_cv_.wait(lock, [&] { return ready_.count(consumer_) > 0; });
    auto node = ready_.extract(consumer_);
    ++consumer_;
    lock.unlock();
    work_cv_.notify_all();  // the window moved
    AddSeconds(next_wait_ns_, Now() - t0);
    Result<std::shared_ptr<Batch::Data>> r = std::move(node.mapped());
    if (!r.ok()) return r.status();
    return HandOut(std::move(r).value(), out);
  }

  // Checks the batch (and splits its fields) on the caller's thread.
  Result<bool> HandOut(std::shared_ptr<Batch::Data> data, Batch* out) {
    const double t0 = Now();
    Status st;
    if (!field_ids_.empty()) {
      st =
          loader_internal::SplitFields(*volume_, field_ids_, options_.verify_checksums, data.get());
    } else if (options_.verify_checksums) {
      for (size_t i = 0; i < data->indices.size() && st.ok(); ++i) {
        st = volume_->CheckSample(data->indices[i], data->samples[i]);
      }
    }
    AddSeconds(verify_ns_, Now() - t0);
    DLFS_RETURN_IF_ERROR(st);
    *out = Batch(std::move(data));
    return true;
  }

  // Batches straight from memory; the first epoch waits for their chunks.
  Result<bool> NextFromTier(Batch* out) {
    uint64_t epoch, seq;
    {
      std::lock_guard lock(mu_);
      resume_pending_ = false;
      if (!start_error_.ok()) return start_error_;
      if (consumer_ >= epoch_end_) return false;
      epoch = base_epoch_ + consumer_ / batches_;
      seq = consumer_ % batches_;
      ++consumer_;
    }
    std::shared_ptr<const EpochOrder> order = OrderFor(epoch);
    const uint64_t b = options_.sampler.batch_size;
    const uint64_t first = seq * b;
    const uint64_t count = std::min<uint64_t>(b, order->indices.size() - first);
    const std::span<const uint64_t> indices(order->indices.data() + first, count);
    const double t0 = Now();
    const Status loaded = tier_->Wait(indices);
    const double waited = Now() - t0;
    AddSeconds(next_wait_ns_, waited);
    if (!loaded.ok()) return loaded;
    const SampleDirectory& dir = volume_->directory();
    auto data = std::make_shared<Batch::Data>();
    data->owner = tier_->memory_owner();
    data->epoch = epoch;
    data->sequence = seq;
    data->indices.assign(indices.begin(), indices.end());
    data->labels.resize(count);
    data->samples.resize(count);
    for (uint64_t k = 0; k < count; ++k) {
      data->samples[k] = tier_->Sample(indices[k]);
      data->labels[k] = dir.label(indices[k]);
      data->payload_bytes += data->samples[k].size();
    }
    data->io_seconds = waited;
    return HandOut(std::move(data), out);
  }

  SourceStats Stats() const {
    SourceStats s;
    for (const auto& w : workers_) {
      s.buffer_bytes += w->pool->bytes();
      if (tier_ && w->index > 0) continue;  // only the first loads the tier
      s.io += w->engine->stats();
      ++s.engines;
    }
    s.verify_seconds = verify_ns_.load(std::memory_order_relaxed) / 1e9;
    s.next_wait_seconds = next_wait_ns_.load(std::memory_order_relaxed) / 1e9;
    s.cache_bytes = tier_ ? tier_->bytes() : 0;
    s.setup_seconds = setup_seconds_;
    s.uring_flags = workers_.front()->engine->setup_flags();
    return s;
  }

  std::vector<uint64_t> RankIndices(uint64_t epoch) const {
    return sampler_.RankIndices(epoch, options_.subset);
  }

  // The order of `epoch`, computed once for every thread that needs it.
  std::shared_ptr<const EpochOrder> OrderFor(uint64_t epoch) {
    std::lock_guard lock(orders_mu_);
    for (const auto& o : orders_) {
      if (o->epoch == epoch) return o;
    }
    auto o = std::make_shared<EpochOrder>(EpochOrder{epoch, RankIndices(epoch)});
    orders_.push_back(o);
    if (orders_.size() > 4) orders_.pop_front();
    return o;
  }

  // --- The I/O threads -----------------------------------------------------

  // REQUIRES: mu_ held. Threads start with the first epoch and live as long
  // as the loader (a restart is a new generation, not new threads).
  void StartThreadsLocked() {
    if (started_.load(std::memory_order_relaxed)) return;
    started_.store(true, std::memory_order_release);
    const size_t n = tier_ ? 1 : workers_.size();  // one thread loads the tier
    for (size_t k = 0; k < n; ++k) {
      try {
        Worker* w = workers_[k].get();
        w->thread = std::thread([this, w] { tier_ ? LoadTier(*w) : Run(*w); });
      } catch (const std::system_error& e) {
        // Out of threads: fail every batch rather than wait for a reader
        // that does not exist.
        start_error_ = Status(StatusCode::kUnavailable,
                              std::string("cannot start an I/O thread: ") + e.what());
        break;
      }
    }
  }

  void Run(Worker& w) {
    const uint64_t n = tier_ ? 1 : workers_.size();
    uint64_t my_gen = ~uint64_t{0};
    uint64_t next = w.index;  // next ticket this thread starts
    uint64_t next_id = 0;
    std::unordered_map<uint64_t, std::unique_ptr<InFlight>> flying;  // by batch id
    std::vector<ReadCompletion> done;
    std::vector<ReadRequest> requests;
    while (true) {
      bool start = false;
      uint64_t ticket = 0, gen = 0, epoch = 0;
      {
        std::unique_lock lock(mu_);
        while (true) {
          if (stop_) break;
          if (gen_ != my_gen) {
            my_gen = gen_;
            next = w.index;
            for (auto& [id, b] : flying) b->abandoned = true;
            // Their reads not yet started need not be done at all.
            w.engine->Cancel([&](uint64_t tag) { return flying.count(tag >> kReadBits) > 0; });
          }
          if (next < consumer_) next += (consumer_ - next + n - 1) / n * n;  // skipped ahead
          start = batches_ > 0 && next < consumer_ + window_;
          if (start || w.engine->pending() > 0) break;
          work_cv_.wait(lock);
        }
        if (stop_) break;
        ticket = next;
        gen = my_gen;
        if (start) epoch = base_epoch_ + ticket / batches_;
      }
      Status st;
      if (start) {
        next += n;
        auto b = std::make_unique<InFlight>();
        b->gen = gen;
        b->ticket = ticket;
        b->epoch = epoch;
        b->seq = ticket % batches_;
        b->order = OrderFor(epoch);
        const uint64_t bs = options_.sampler.batch_size;
        const uint64_t first = b->seq * bs;
        const uint64_t count = std::min<uint64_t>(bs, b->order->indices.size() - first);
        loader_internal::PlanOptions po = po_;
        po.alignment = w.engine->alignment();
        b->read = std::make_unique<BatchRead>(
            *volume_, std::span<const uint64_t>(b->order->indices.data() + first, count), po);
        b->slab = w.pool->Acquire(b->read->buffer_bytes());
        if (!b->slab) {
          Publish(*b, Status::Unavailable(volume_->path() + ": out of memory for a batch of " +
                                          std::to_string(b->read->buffer_bytes()) + " bytes"));
        } else {
          b->started = Now();
          b->read->Start(b->slab->data, b->slab->slot, &requests);
          const uint64_t id = next_id++;
          Enqueue(w, id, requests);
          if (b->read->outstanding() == 0) {
            Finish(w, id, *b, &requests);
          } else {
            flying.emplace(id, std::move(b));
          }
          st = w.engine->Submit();
        }
        // Collect what has finished without waiting: more batches may be
        // started before the thread has to block.
        done.clear();
        if (st.ok()) st = w.engine->Reap(&done, 0);
      } else {
        done.clear();
        st = w.engine->Reap(&done, 1);
      }
      for (const ReadCompletion& c : done) {
        const uint64_t id = c.tag >> kReadBits;
        auto it = flying.find(id);
        if (it == flying.end()) continue;
        InFlight& b = *it->second;
        b.read->Complete(c.tag & ((uint64_t{1} << kReadBits) - 1), c.status);
        if (b.read->outstanding() == 0 && Finish(w, id, b, &requests)) flying.erase(it);
      }
      if (!st.ok()) {
        // The engine failed; every pending read completed with the error
        // (handled above), or the engine is broken and its reads may still
        // land: keep their buffers forever rather than reuse them.
        for (auto& [id, b] : flying) {
          Publish(*b, st);
          std::lock_guard lock(mu_);
          quarantine_.push_back(b->slab);
        }
        flying.clear();
      }
    }
    // Stopping: drop what has not started, wait for every read in flight
    // before the buffers go.
    w.engine->Cancel([](uint64_t) { return true; });
    while (w.engine->pending() > 0) {
      done.clear();
      if (!w.engine->Reap(&done, w.engine->pending()).ok()) {
        std::lock_guard lock(mu_);
        for (auto& [id, b] : flying) quarantine_.push_back(b->slab);
        break;
      }
    }
  }

  void Enqueue(Worker& w, uint64_t id, const std::vector<ReadRequest>& requests) {
    for (size_t r = 0; r < requests.size(); ++r) {
      w.engine->Enqueue(requests[r], (id << kReadBits) | r);
    }
  }

  // A round of batch `id` completed: queue its retries, or publish it.
  // True when the batch is done.
  bool Finish(Worker& w, uint64_t id, InFlight& b, std::vector<ReadRequest>* requests) {
    if (!b.abandoned && b.read->NextRound(requests)) {
      Enqueue(w, id, *requests);
      return false;
    }
    if (b.abandoned) return true;
    std::shared_ptr<const void> owner = b.slab;
    Publish(b, b.read->FinishData(std::move(owner), b.epoch, b.seq, Now() - b.started));
    return true;
  }

  void Publish(const InFlight& b, Result<std::shared_ptr<Batch::Data>> result) {
    {
      std::lock_guard lock(mu_);
      if (b.gen == gen_ && b.ticket >= consumer_) {
        ready_.emplace(b.ticket, std::move(result));
      }
    }
    ready_cv_.notify_all();
    // A batch not kept is destroyed here, its slab returning to the pool.
  }

  // The tier's loader: every chunk in the order the first epoch needs them
  // (from the batch it starts at: a resumed epoch needs its first batches
  // last), then retries of samples that failed, once per epoch.
  //
  // A chunk that fails is re-read in tiles: each sample's own blocks, a
  // block shared by neighbours once (tiles never overlap, so a failing
  // read cannot spoil bytes a successful one delivered). Only the samples
  // in failed tiles are marked failed. A later retry of a failed sample
  // reads into a scratch buffer and copies just the sample's bytes, since
  // its neighbours may by then be in use.
  void LoadTier(Worker& w) {
    uint64_t epoch, from;
    {
      std::lock_guard lock(mu_);
      epoch = epoch_;
      from = (consumer_ + batches_ - epoch_end_) * options_.sampler.batch_size;
      tier_retry_ = false;
    }
    const std::vector<uint64_t>& order = OrderFor(epoch)->indices;
    from = std::min<uint64_t>(from, order.size());
    std::vector<uint64_t> rotated(order.begin() + static_cast<ptrdiff_t>(from), order.end());
    rotated.insert(rotated.end(), order.begin(), order.begin() + static_cast<ptrdiff_t>(from));
    const std::vector<size_t> need = tier_->NeedOrder(rotated);
    const auto& chunks = tier_->chunks();
    for (size_t c : need) {
      const MemoryTier::Chunk& ch = chunks[c];
      w.engine->Enqueue({ch.target, ch.offset, ch.length, ch.memory, ReadRequest::kNoSlot}, c);
    }
    // Tags from chunks.size() on name the tile and retry reads.
    struct Tile {
      size_t chunk;                   // or kRetry
      std::vector<uint64_t> samples;  // whose bytes it holds
      std::shared_ptr<std::byte> scratch;
      std::byte* memory = nullptr;  // retry: where the sample's extent goes
    };
    constexpr size_t kRetry = ~size_t{0};
    std::unordered_map<uint64_t, Tile> tiles;
    std::map<size_t, std::pair<size_t, std::map<uint64_t, Status>>>
        splitting;  // chunk -> left, failed
    uint64_t next_tag = chunks.size();
    std::vector<ReadCompletion> done;
    auto split = [&](size_t c, const Status& why) {
      const MemoryTier::Chunk& ch = chunks[c];
      const std::vector<uint64_t> in = tier_->SamplesIn(c);
      std::vector<std::pair<uint64_t, uint64_t>> ranges;  // tiles' [from, to)
      uint64_t covered = ch.offset;
      for (uint64_t i : in) {
        const MemoryTier::Extent e = tier_->SampleExtent(i);
        const uint64_t from = std::max({e.offset, covered, ch.offset});
        const uint64_t to = std::min(e.offset + e.length, ch.offset + ch.length);
        if (from >= to) continue;
        ranges.emplace_back(from, to);
        covered = to;
      }
      if (in.size() <= 1 || ranges.size() <= 1) {
        std::map<uint64_t, Status> failed;
        for (uint64_t i : in) failed.emplace(i, why);
        tier_->MarkLoaded(c, failed);
        return;
      }
      splitting[c] = {ranges.size(), {}};
      for (const auto& [from, to] : ranges) {
        Tile t{c, {}, nullptr, nullptr};
        for (uint64_t i : in) {
          const MemoryTier::Extent e = tier_->SampleExtent(i);
          if (e.offset < to && from < e.offset + e.length) t.samples.push_back(i);
        }
        tiles.emplace(next_tag, std::move(t));
        w.engine->Enqueue(
            {ch.target, from, to - from, ch.memory + (from - ch.offset), ReadRequest::kNoSlot},
            next_tag++);
      }
    };
    auto retry = [&](uint64_t i) {
      const MemoryTier::Extent e = tier_->SampleExtent(i);
      Tile t{kRetry, {i}, AllocateLarge(e.length), e.memory};
      if (!t.scratch) {
        tier_->MarkRetried(i, Status::Unavailable(volume_->path() + ": out of memory"));
        return;
      }
      std::byte* buf = t.scratch.get();
      tiles.emplace(next_tag, std::move(t));
      w.engine->Enqueue({e.target, e.offset, e.length, buf, ReadRequest::kNoSlot}, next_tag++);
    };
    Status st = w.engine->Submit();
    while (st.ok()) {
      if (w.engine->pending() == 0) {
        std::unique_lock lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || tier_retry_; });
        if (stop_) break;
        tier_retry_ = false;
        lock.unlock();
        for (uint64_t i : tier_->BeginRetry()) retry(i);
        st = w.engine->Submit();
        continue;
      }
      {
        std::lock_guard lock(mu_);
        if (stop_) break;
      }
      done.clear();
      st = w.engine->Reap(&done, 1);
      for (const ReadCompletion& c : done) {
        if (c.tag < chunks.size()) {
          if (c.status.ok()) {
            tier_->MarkLoaded(c.tag, {});
          } else {
            split(c.tag, c.status);
          }
          continue;
        }
        auto it = tiles.find(c.tag);
        if (it == tiles.end()) continue;
        Tile t = std::move(it->second);
        tiles.erase(it);
        if (t.chunk == kRetry) {
          const uint64_t i = t.samples.front();
          if (c.status.ok()) {
            // Only the sample's own bytes: its neighbours may be in use.
            const SampleInfo s = volume_->directory().sample(i);
            const MemoryTier::Extent e = tier_->SampleExtent(i);
            std::memcpy(e.memory + (s.offset - e.offset), t.scratch.get() + (s.offset - e.offset),
                        s.length);
          }
          tier_->MarkRetried(i, c.status);
          continue;
        }
        auto& [left, failed] = splitting[t.chunk];
        if (!c.status.ok()) {
          for (uint64_t i : t.samples) failed.emplace(i, c.status);
        }
        if (--left == 0) {
          tier_->MarkLoaded(t.chunk, failed);
          splitting.erase(t.chunk);
        }
      }
      if (st.ok()) st = w.engine->Submit();
    }
    if (!st.ok()) {
      // The engine failed: whatever did not load is reported as such.
      for (size_t c = 0; c < chunks.size(); ++c) {
        std::map<uint64_t, Status> failed;
        for (uint64_t i : tier_->SamplesIn(c)) failed.emplace(i, st);
        tier_->MarkLoaded(c, failed);
      }
    }
    w.engine->Cancel([](uint64_t) { return true; });
    while (w.engine->pending() > 0) {
      done.clear();
      if (!w.engine->Reap(&done, w.engine->pending()).ok()) break;
    }
  }

  std::shared_ptr<Volume> volume_;
  LoaderOptions options_;
  Sampler sampler_;
  const pid_t pid_ = ::getpid();
  const uint64_t batches_;  // per epoch
  const uint64_t window_;   // batches read ahead of the caller
  loader_internal::PlanOptions po_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::shared_ptr<MemoryTier> tier_;
  const uint32_t subset_crc_ = SubsetCrc(options_.subset);
  std::vector<uint32_t> field_ids_;  // LoaderOptions::fields resolved; empty: whole samples
  const std::shared_ptr<loader_internal::DecodedBuffers> decoded_buffers_ =
      std::make_shared<loader_internal::DecodedBuffers>();
  double setup_seconds_ = 0;
  std::string description_;

  mutable std::mutex mu_;
  std::condition_variable ready_cv_;  // a batch became ready
  std::condition_variable work_cv_;   // the window moved, a new generation, or stop
  std::atomic<bool> started_{false};
  bool stop_ = false;
  uint64_t gen_ = 0;
  uint64_t base_epoch_ = 0;  // epoch of ticket 0 in this generation
  uint64_t consumer_ = 0;    // next ticket Next() hands out
  uint64_t epoch_ = 0;
  uint64_t epoch_end_ = 0;  // first ticket after the current epoch
  std::map<uint64_t, Result<std::shared_ptr<Batch::Data>>> ready_;
  Status start_error_;
  bool tier_retry_ = false;
  bool resume_pending_ = false;                    // LoadState's position, not yet used or moved
  std::vector<std::shared_ptr<Slab>> quarantine_;  // buffers a broken engine may still write

  std::mutex orders_mu_;
  std::deque<std::shared_ptr<const EpochOrder>> orders_;

  std::atomic<uint64_t> verify_ns_{0};
  std::atomic<uint64_t> next_wait_ns_{0};
};

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Loader::~Loader() {
  if (impl_ && ::getpid() != impl_->pid_) {
    // Destroyed in a child of fork() (e.g. garbage-collected in a DataLoader
    // worker): the I/O threads exist only in the parent, and the mutex and
    // condition variables are copies of the parent's, possibly with waiters
    // or an owner that is not here (destroying them can hang or throw).
    // Leave all of it alone: a leak of the child's copy.
    (void)impl_.release();
  }
}

Result<std::unique_ptr<Loader>> Loader::Create(std::shared_ptr<Volume> volume,
                                               const LoaderOptions& options) {
  if (!volume) return Status::InvalidArgument("no volume");
  // Without fields a batch holds each sample's stored extent, which for a
  // sample of several or compressed fields is not what a consumer expects.
  DLFS_ASSIGN_OR_RETURN(std::vector<uint32_t> field_ids,
                        loader_internal::ResolveFields(*volume, options.fields));
  if (options.io_threads == 0 || options.io_threads > 64) {
    return Status::InvalidArgument("io_threads must be between 1 and 64");
  }
  if (options.engine.queue_depth == 0) {
    return Status::InvalidArgument("queue_depth must be at least 1");
  }
  if (options.plan.max_read < 4096)
    return Status::InvalidArgument("max_read must be at least 4096");
  for (uint64_t i : options.subset) {
    if (i >= volume->size()) {
      return Status::InvalidArgument("subset index " + std::to_string(i) + " is out of range (" +
                                     volume->path() + " has " + std::to_string(volume->size()) +
                                     " samples)");
    }
  }
  const uint64_t n = options.subset.empty() ? volume->size() : options.subset.size();
  DLFS_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(n, options.sampler));
  const double t0 = Now();

  auto impl = std::make_unique<Impl>(volume, options, std::move(sampler));
  impl->field_ids_ = std::move(field_ids);
  // Every engine opens every target of the volume (as resolved and remapped
  // by Volume::Open). A batch's reads go to whichever targets hold its
  // samples, and one engine keeps them all in flight at once: with io_uring
  // that is one ring with every target as a fixed file, which already keeps
  // all devices busy — the kernel dispatches each read to its device's own
  // queue, and the ring only carries submissions and completions. A ring
  // per target would add threads and split queue_depth without adding
  // device parallelism; the pread engine likewise serves every target from
  // one thread pool. Each engine is used by its I/O thread only.
  EngineOptions eo = options.engine;
  eo.single_thread = true;
  for (uint32_t k = 0; k < options.io_threads; ++k) {
    DLFS_ASSIGN_OR_RETURN(std::unique_ptr<IoEngine> engine,
                          CreateEngine(volume->OpenTargetPaths(), eo));
    auto w = std::make_unique<Loader::Impl::Worker>();
    w->pool =
        std::make_shared<SlabPool>(engine->alignment(), engine.get(), options.engine.buffer_slots);
    w->engine = std::move(engine);
    w->index = k;
    impl->workers_.push_back(std::move(w));
  }
  const IoEngine& first = *impl->workers_.front()->engine;
  std::string description = first.description();

  const uint64_t budget =
      options.cache_budget == kAutoCacheBudget ? DefaultCacheBudget() : options.cache_budget;
  impl->tier_ = MemoryTier::Create(*volume, options.subset, first.alignment(), budget);
  if (impl->tier_) {
    description += "; memory tier of " + std::to_string(impl->tier_->bytes()) + " bytes";
  } else {
    // Batch buffers before the first read: enough for the batches in the
    // window and those the caller holds, spread over the I/O threads, each
    // sized for a batch of samples of the mean size plus a block of
    // alignment, with a quarter to spare.
    const uint64_t mean = volume->size() ? volume->info().data_bytes / volume->size() : 0;
    const uint64_t a = std::max<uint32_t>(first.alignment(), 1);
    const uint64_t slab = (mean + a) * options.sampler.batch_size / 4 * 5 + a;
    const uint64_t per_thread = (impl->window_ + options.io_threads - 1) / options.io_threads + 2;
    for (auto& w : impl->workers_) {
      if (!w->pool->Reserve(static_cast<uint32_t>(per_thread), slab)) {
        return Status::Unavailable(volume->path() + ": out of memory for " +
                                   std::to_string(per_thread) + " batch buffers of " +
                                   std::to_string(slab) + " bytes");
      }
    }
  }
  impl->description_ = std::move(description);
  impl->setup_seconds_ = Now() - t0;
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

void Loader::SetEpoch(uint64_t epoch) { impl_->SetEpoch(epoch); }
Result<bool> Loader::Next(Batch* batch) { return impl_->Next(batch); }
uint64_t Loader::batches_per_epoch() const { return impl_->batches_; }
uint64_t Loader::epoch() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->epoch_;
}
const Sampler& Loader::sampler() const { return impl_->sampler_; }
std::vector<uint64_t> Loader::RankIndices(uint64_t epoch) const {
  return impl_->RankIndices(epoch);
}
const Volume& Loader::volume() const { return *impl_->volume_; }
const std::string& Loader::description() const { return impl_->description_; }
SourceStats Loader::source_stats() const { return impl_->Stats(); }
Result<SourceState> Loader::SaveState() const { return impl_->SaveState(); }
Status Loader::LoadState(const SourceState& state) { return impl_->LoadState(state); }

}  // namespace dlfs
