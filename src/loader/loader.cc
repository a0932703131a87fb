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
#include <set>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "cache/filler.h"
#include "cache/node_cache.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "loader/batch_data.h"
#include "loader/batch_read.h"
#include "loader/fields.h"
#include "loader/quarantine.h"
#include "loader/slab_pool.h"

namespace dlfs {

using cache_internal::NodeCache;
using loader_internal::BatchRead;
using loader_internal::Slab;
using loader_internal::SlabPool;

namespace {

// Reads per batch are numbered in the low half of a tag, batches in the
// high half.
constexpr uint64_t kReadBits = 32;

// This rank's samples of one epoch, or of the rest of it after the parts
// earlier jobs read (an elastic resume): then they are the epoch's last
// batches, from batch first_seq on, and `part` tells them apart.
struct EpochOrder {
  uint64_t epoch;
  uint64_t part = 0;  // 0: the whole epoch; else the resume that made it
  uint64_t first_seq = 0;
  std::vector<uint64_t> indices;
  // Where each batch starts in indices (LoaderOptions::order); empty:
  // every batch_size.
  std::vector<uint64_t> starts;
  Status error;  // an explicit order that does not fit: every batch fails with it
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
    std::span<const uint64_t> indices;        // the batch's, in order
    // With a node cache: the bytes of the samples it holds (empty span for
    // the others), and the samples to read, in batch order.
    std::vector<std::optional<std::span<const std::byte>>> cached;
    std::vector<uint64_t> misses;
    std::unique_ptr<BatchRead> read;
    std::shared_ptr<Slab> slab;
    double started;
    bool abandoned = false;  // its generation ended: drop it when done
  };

  Impl(std::shared_ptr<Volume> v, const LoaderOptions& o, Sampler s)
      : volume_(std::move(v)),
        options_(o),
        sampler_(std::move(s)),
        batches_(o.order ? o.order_batches : sampler_.batches_per_epoch()),
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
    filler_.reset();  // before the engines it asks for their bytes
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
    SetPosition(e, 0, nullptr);
  }

  // Makes batch `k` of epoch `e` the next one Next() hands out; the batches
  // before it are not read. With `part`: epoch e is the rest after an
  // elastic resume (k counts from its first batch), read in a new
  // generation.
  void SetPosition(uint64_t e, uint64_t k, std::shared_ptr<const EpochOrder> part) {
    std::vector<Result<std::shared_ptr<Batch::Data>>> dropped;  // destroyed outside the lock
    {
      std::lock_guard lock(mu_);
      StartThreadsLocked();
      part_ = std::move(part);
      if (part_) k += part_->first_seq;
      const bool forward = !part_ && batches_ > 0 && e >= base_epoch_ &&
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
      if (part_ && part_->epoch == epoch_) {
        s.done = part_done_;
        s.batches -= part_->first_seq;
      }
    }
    s.quarantined = bad_samples_.indices();
    return s;
  }

  Status LoadState(const SourceState& state) {
    const std::string& who = volume_->path();
    DLFS_RETURN_IF_ERROR(CheckResumable(state, Identity(), who));
    ResumePoint at = PlanResume(state, options_.sampler);
    std::shared_ptr<const EpochOrder> part;
    uint64_t batches = batches_;
    if (!at.done.empty()) {
      Result<std::vector<uint64_t>> rest = sampler_.RankIndices(at.epoch, at.done, options_.subset);
      if (!rest.ok()) {
        return Status::InvalidArgument(
            who + ": cannot resume from this state: " + rest.status().message());
      }
      const uint64_t b = options_.sampler.batch_size;
      batches = (rest->size() + b - 1) / b;
      auto o = std::make_shared<EpochOrder>();
      o->epoch = at.epoch;
      o->part = ++parts_made_;
      o->first_seq = batches_ - batches;  // the rest is never longer than an epoch
      o->indices = std::move(rest).value();
      part = std::move(o);
    }
    if (at.batches > batches) {
      return Status::InvalidArgument(who + ": cannot resume from this state: it says " +
                                     std::to_string(at.batches) + " batches were handed out of " +
                                     (part ? "the rest of an epoch of " : "an epoch of ") +
                                     std::to_string(batches));
    }
    for (uint64_t i : state.quarantined) {
      if (i >= volume_->size()) {
        return Status::InvalidArgument(
            who + ": cannot resume from this state: it quarantines sample " + std::to_string(i) +
            " of " + std::to_string(volume_->size()));
      }
    }
    for (uint64_t i : state.quarantined) bad_samples_.Add(i, "left out by the state resumed from");
    {
      std::lock_guard lock(mu_);
      part_done_ = at.done;
    }
    {
      std::lock_guard lock(orders_mu_);  // an explicit order may differ after a resume
      orders_.clear();
    }
    SetPosition(at.epoch, at.batches, std::move(part));
    std::lock_guard lock(mu_);
    resume_pending_ = true;
    return Status::Ok();
  }

  Result<bool> Next(Batch* out) {
    if (!started_.load(std::memory_order_acquire)) SetEpoch(0);
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
    if (bad_samples_.active()) {
      st = bad_samples_.Check(data.get(), [this](Batch::Data* d) { return Check(d); });
    } else {
      st = Check(data.get());
    }
    AddSeconds(verify_ns_, Now() - t0);
    DLFS_RETURN_IF_ERROR(st);
    *out = Batch(std::move(data));
    return true;
  }

  // Checksums (verify_checksums) and fields of every sample of `data`.
  Status Check(Batch::Data* data) {
    if (!field_ids_.empty()) {
      return loader_internal::SplitFields(*volume_, field_ids_, options_.verify_checksums, data);
    }
    if (options_.verify_checksums) {
      for (size_t i = 0; i < data->indices.size(); ++i) {
        DLFS_RETURN_IF_ERROR(volume_->CheckSample(data->indices[i], data->samples[i]));
      }
    }
    return Status::Ok();
  }

  SourceStats Stats() const {
    SourceStats s;
    for (const auto& w : workers_) {
      s.buffer_bytes += w->pool->bytes();
      s.io += w->engine->stats();
      ++s.engines;
    }
    s.verify_seconds = verify_ns_.load(std::memory_order_relaxed) / 1e9;
    s.next_wait_seconds = next_wait_ns_.load(std::memory_order_relaxed) / 1e9;
    if (cache_) {
      const cache_internal::NodeCacheStats c = cache_->stats();
      s.cache_bytes = c.capacity;
      s.cache_used_bytes = c.used;
      s.cache_hits = c.hits;
      s.cache_misses = c.misses;
      s.cache_fill_bytes = c.filled_bytes;
      s.cache_fill_seconds = c.fill_seconds;
      s.cache_sharers = c.sharers;
      s.cache_shared = c.shared;
    }
    s.setup_seconds = setup_seconds_;
    s.uring_flags = workers_.front()->engine->setup_flags();
    return s;
  }

  std::vector<uint64_t> RankIndices(uint64_t epoch) const {
    {
      std::lock_guard lock(mu_);
      if (part_ && part_->epoch == epoch) return part_->indices;
    }
    if (options_.order) return options_.order(epoch)->indices;
    return sampler_.RankIndices(epoch, options_.subset);
  }

  // The order of `epoch`, computed once for every thread that needs it.
  // `part`: the rest of the epoch after an elastic resume, when set.
  std::shared_ptr<const EpochOrder> OrderFor(uint64_t epoch,
                                             std::shared_ptr<const EpochOrder> part) {
    if (part && part->epoch == epoch) return part;
    std::lock_guard lock(orders_mu_);
    for (const auto& o : orders_) {
      if (o->epoch == epoch) return o;
    }
    std::shared_ptr<EpochOrder> o;
    if (options_.order) {
      std::shared_ptr<const LoaderOrder> given = options_.order(epoch);
      o = std::make_shared<EpochOrder>();
      o->epoch = epoch;
      bool fits = given && given->batch_starts.size() == batches_ + 1 &&
                  given->batch_starts.front() == 0 &&
                  given->batch_starts.back() == given->indices.size();
      for (size_t k = 1; fits && k < given->batch_starts.size(); ++k) {
        fits = given->batch_starts[k - 1] <= given->batch_starts[k];
      }
      for (size_t k = 0; fits && k < given->indices.size(); ++k) {
        fits = given->indices[k] < volume_->size();
      }
      if (fits) {
        o->indices = given->indices;
        o->starts = given->batch_starts;
      } else {
        o->error = Status::InvalidArgument(
            volume_->path() + ": the explicit order of epoch " + std::to_string(epoch) +
            " does not fit (batch starts must rise from 0 to its size over " +
            std::to_string(batches_) + " batches; indices below " +
            std::to_string(volume_->size()) + ")");
        o->starts.assign(batches_ + 1, 0);
      }
    } else {
      o = std::make_shared<EpochOrder>(
          EpochOrder{epoch, 0, 0, sampler_.RankIndices(epoch, options_.subset)});
    }
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
    for (size_t k = 0; k < workers_.size(); ++k) {
      try {
        Worker* w = workers_[k].get();
        w->thread = std::thread([this, w] { Run(*w); });
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
    const uint64_t n = workers_.size();
    uint64_t my_gen = ~uint64_t{0};
    uint64_t next = w.index;  // next ticket this thread starts
    uint64_t next_id = 0;
    std::unordered_map<uint64_t, std::unique_ptr<InFlight>> flying;  // by batch id
    std::vector<ReadCompletion> done;
    std::vector<ReadRequest> requests;
    while (true) {
      bool start = false;
      uint64_t ticket = 0, gen = 0, epoch = 0;
      std::shared_ptr<const EpochOrder> part;
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
        part = part_;
      }
      Status st;
      if (start) {
        next += n;
        auto b = std::make_unique<InFlight>();
        b->gen = gen;
        b->ticket = ticket;
        b->epoch = epoch;
        b->seq = ticket % batches_;
        b->order = OrderFor(epoch, std::move(part));
        if (!b->order->error.ok()) {
          Publish(*b, b->order->error);
          continue;
        }
        const uint64_t bs = options_.sampler.batch_size;
        const uint64_t first = b->order->starts.empty() ? (b->seq - b->order->first_seq) * bs
                                                        : b->order->starts[b->seq];
        const uint64_t count = b->order->starts.empty()
                                   ? std::min<uint64_t>(bs, b->order->indices.size() - first)
                                   : b->order->starts[b->seq + 1] - first;
        b->indices = std::span<const uint64_t>(b->order->indices.data() + first, count);
        std::span<const uint64_t> to_read = b->indices;
        if (cache_) {
          // Samples the node cache holds are not read.
          b->cached.resize(count);
          for (uint64_t k = 0; k < count; ++k) {
            b->cached[k] = cache_->Find(b->indices[k]);
            if (!b->cached[k]) b->misses.push_back(b->indices[k]);
          }
          to_read = b->misses;
        }
        loader_internal::PlanOptions po = po_;
        po.alignment = w.engine->alignment();
        b->read = std::make_unique<BatchRead>(*volume_, to_read, po);
        b->slab = to_read.empty() ? nullptr : w.pool->Acquire(b->read->buffer_bytes());
        if (to_read.empty()) {
          // Wholly cached: nothing to read.
          b->started = Now();
          Finish(w, ~uint64_t{0}, *b, &requests);
        } else if (!b->slab) {
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
    Result<std::shared_ptr<Batch::Data>> data = b.read->FinishData(
        std::move(owner), b.epoch, b.seq, Now() - b.started, options_.skip_bad_samples);
    if (data.ok() && cache_) data = WithCached(b, std::move(data).value());
    Publish(b, std::move(data));
    return true;
  }

  // The batch in its order: the samples read (`read`, in b.misses' order)
  // and those the node cache holds. Offers the read ones to the filler.
  std::shared_ptr<Batch::Data> WithCached(const InFlight& b, std::shared_ptr<Batch::Data> read) {
    if (!b.misses.empty() && filler_) filler_->Offer(read);
    if (b.misses.size() == b.indices.size()) return read;
    auto data = std::make_shared<Batch::Data>();
    // Cached bytes are shared: the batch keeps the region mapped and is
    // read-only (owns_bytes false).
    struct Owners {
      std::shared_ptr<const void> slab;
      std::shared_ptr<NodeCache> cache;
    };
    data->owner = std::make_shared<Owners>(Owners{read->owner, cache_});
    data->epoch = b.epoch;
    data->sequence = b.seq;
    data->io_seconds = read->io_seconds;
    data->device_bytes = read->device_bytes;
    data->left_out = read->left_out;
    const SampleDirectory& dir = volume_->directory();
    data->indices.reserve(b.indices.size());
    data->samples.reserve(b.indices.size());
    data->labels.reserve(b.indices.size());
    // The samples read are b.misses in order, less those left out unread.
    for (size_t k = 0, r = 0; k < b.indices.size(); ++k) {
      std::span<const std::byte> bytes;
      if (b.cached[k]) {
        bytes = *b.cached[k];
      } else if (r < read->indices.size() && read->indices[r] == b.indices[k]) {
        bytes = read->samples[r++];
      } else {
        continue;
      }
      data->indices.push_back(b.indices[k]);
      data->samples.push_back(bytes);
      data->labels.push_back(dir.label(b.indices[k]));
      data->payload_bytes += bytes.size();
    }
    return data;
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

  std::shared_ptr<Volume> volume_;
  LoaderOptions options_;
  Sampler sampler_;
  const pid_t pid_ = ::getpid();
  const uint64_t batches_;  // per epoch
  uint64_t window_;         // batches read ahead of the caller (set by Open, then fixed)
  loader_internal::PlanOptions po_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::shared_ptr<NodeCache> cache_;  // null: none
  std::string cache_note_;
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
  bool resume_pending_ = false;  // LoadState's position, not yet used or moved
  // The rest of an epoch after an elastic resume (its epoch's tickets before
  // first_seq are never read), and the parts read before it; kept until
  // another position is set.
  std::shared_ptr<const EpochOrder> part_;
  std::vector<EpochSegment> part_done_;
  uint64_t parts_made_ = 0;

  // Samples left out as bad (skip_bad_samples, LoaderOptions::quarantine).
  loader_internal::Quarantine bad_samples_{*volume_, options_.skip_bad_samples,
                                           options_.max_bad_samples};
  std::vector<std::shared_ptr<Slab>> quarantine_;  // buffers a broken engine may still write

  std::mutex orders_mu_;
  std::deque<std::shared_ptr<const EpochOrder>> orders_;

  std::atomic<uint64_t> verify_ns_{0};
  std::atomic<uint64_t> next_wait_ns_{0};

  // Copies the samples read into the node cache (null without a cache).
  std::unique_ptr<cache_internal::CacheFiller> filler_;
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
  // Without fields, a volume of one compressed field hands out that field
  // decoded; one of several fields is refused (no single sample bytes).
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
  DLFS_RETURN_IF_ERROR(impl->bad_samples_.ListAhead(options.quarantine));
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

  // Memory: the batch buffers first (they are needed to read at all), then
  // the node cache's budget from what they leave.
  const MemoryLimit memory = ReadMemoryLimit();
  const loader_internal::BufferPlan plan = loader_internal::PlanBuffers(
      {.window = impl->window_,
       .threads = options.io_threads,
       .held = 2 + (options.cache_budget != 0 ? cache_internal::CacheFiller::kHeld : 0),
       .batch_size = options.sampler.batch_size,
       .mean_sample = volume->size() ? volume->info().data_bytes / volume->size() : 0,
       .alignment = first.alignment(),
       .budget = memory.usable() / 8});
  impl->window_ = plan.window;
  MemoryLimit after_buffers = memory;
  const uint64_t buffers = uint64_t{plan.per_thread} * options.io_threads * plan.slab;
  after_buffers.mem_available -= std::min(after_buffers.mem_available, buffers);
  after_buffers.cgroup_usage += buffers;

  std::string budget_note;
  cache_internal::NodeCacheOptions co;
  co.budget = ResolveCacheBudget(options.cache_budget, after_buffers, &budget_note);
  co.shared = options.cache_shared;
  impl->cache_ = NodeCache::Open(*volume, co, &impl->cache_note_);
  if (!budget_note.empty()) {
    impl->cache_note_ = budget_note + (impl->cache_note_.empty() ? "" : "; " + impl->cache_note_);
  }
  if (impl->cache_) {
    description += "; " + impl->cache_->Describe();
    Loader::Impl* raw = impl.get();
    impl->filler_ = std::make_unique<cache_internal::CacheFiller>(impl->cache_, [raw] {
      cache_internal::CacheFiller::Progress p;
      p.caller_wait_seconds = raw->next_wait_ns_.load(std::memory_order_relaxed) / 1e9;
      for (const auto& w : raw->workers_) p.device_bytes += w->engine->stats().bytes;
      return p;
    });
  }
  if (!plan.note.empty()) {
    impl->cache_note_ += (impl->cache_note_.empty() ? "" : "; ") + plan.note;
  }
  for (auto& w : impl->workers_) {
    if (!w->pool->Reserve(plan.per_thread, plan.slab)) {
      return Status::Unavailable(volume->path() + ": out of memory for " +
                                 std::to_string(plan.per_thread) + " batch buffers of " +
                                 std::to_string(plan.slab) + " bytes");
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
const std::string& Loader::cache_note() const { return impl_->cache_note_; }
SourceStats Loader::source_stats() const { return impl_->Stats(); }
Result<SourceState> Loader::SaveState() const { return impl_->SaveState(); }
std::vector<BadSample> Loader::quarantine() const { return impl_->bad_samples_.records(); }
Status Loader::LoadState(const SourceState& state) { return impl_->LoadState(state); }

}  // namespace dlfs
