// Loader::Impl's I/O threads: each streams the reads of the batches within
// the window through its own engine and publishes finished batches
// (loader_impl.h says how batches are numbered).
#include <system_error>
#include <unordered_map>

#include "common/clock.h"
#include "loader/loader_impl.h"

namespace dlfs {

void Loader::Impl::StartThreadsLocked() {
  if (started_.load(std::memory_order_relaxed)) return;
  started_.store(true, std::memory_order_release);
  if (warmer_) warmer_->Start();
  for (size_t k = 0; k < workers_.size(); ++k) {
    try {
      Worker* w = workers_[k].get();
      w->thread = std::thread([this, w] { Run(*w); });
    } catch (const std::system_error& e) {
      // Out of threads: fail every batch rather than wait for a reader
      // that does not exist.
      start_error_ =
          Status(StatusCode::kUnavailable, std::string("cannot start an I/O thread: ") + e.what());
      break;
    }
  }
}

void Loader::Impl::Run(Worker& w) {
  // The fill reads the volume first (Create says when): no read of ours
  // competes with it, and then every sample is in the cache.
  if (fill_first_) fill_->WaitFilled();
  const uint64_t n = workers_.size();
  uint64_t my_gen = ~uint64_t{0};
  uint64_t next = w.index;  // next ticket this thread starts
  io_internal::ReadDriver& driver = *w.driver;
  std::unordered_map<uint64_t, std::unique_ptr<InFlight>> flying;  // by the driver's job id
  // A batch planned but waiting for room in the pool (its cap, the loader's
  // memory plan): read once a slab comes back, or once the caller waits for
  // it (then the caller holds every other slab: waiting would never end).
  std::unique_ptr<InFlight> stalled;
  std::vector<uint64_t> done;  // jobs the driver finished
  // This thread's CPU, for the fill's plan while it decides (a clock read
  // is a system call: not for every batch of the run).
  const bool sample_cpu = fill_ && fill_->deciding();
  double cpu_seen = sample_cpu ? ThreadCpuSeconds() : 0;
  while (true) {
    if (sample_cpu && fill_->deciding()) {
      const double cpu = ThreadCpuSeconds();
      io_cpu_ns_.fetch_add(static_cast<uint64_t>((cpu - cpu_seen) * 1e9),
                           std::memory_order_relaxed);
      cpu_seen = cpu;
    }
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
          stalled.reset();
          // Their reads not yet started need not be done at all.
          driver.Cancel([&](uint64_t id) { return flying.count(id) > 0; });
        }
        if (stalled && stalled->ticket < consumer_) stalled.reset();       // skipped
        if (next < consumer_) next += (consumer_ - next + n - 1) / n * n;  // skipped ahead
        if (stalled) {
          start = w.pool->Fits(stalled->read->buffer_bytes()) ||
                  (caller_waiting_ && stalled->ticket == consumer_);
        } else {
          start = batches_ > 0 && next < consumer_ + window_ && !PastPlannedEnd(next);
        }
        if (start || driver.in_flight() > 0) break;
        work_cv_.wait(lock);
      }
      if (stop_) break;
      ticket = next;
      gen = my_gen;
      if (start && !stalled) epoch = base_epoch_ + ticket / batches_;
      part = part_;
    }
    Status st;
    if (start) {
      std::unique_ptr<InFlight> b = std::move(stalled);
      if (!b) {
        next += n;
        b = std::make_unique<InFlight>();
        b->gen = gen;
        b->ticket = ticket;
        b->epoch = epoch;
        b->seq = ticket % batches_;
        b->order = orders_.Get(epoch, std::move(part));
        // This batch's samples, computed now: the order stores nothing of
        // the epoch's size.
        Status order_st = b->order->error;
        if (order_st.ok()) {
          order_st = b->order->Batch(b->seq, options_.sampler.batch_size, &b->indices);
        }
        if (!order_st.ok()) {
          Publish(*b, order_st);
          continue;
        }
        const uint64_t count = b->indices.size();
        std::span<const uint64_t> to_read = b->indices;
        if (cache_) {
          // Samples the node cache holds are not read.
          b->cached.resize(count);
          if (cache_->sparse()) {
            // Nothing (or too little) to find: a node that decided not to
            // fill, or a fill just begun. No lookups; the few samples held
            // are read as the others are.
            b->misses.assign(b->indices.begin(), b->indices.end());
            cache_->CountMisses(count);
          } else {
            for (uint64_t k = 0; k < count; ++k) {
              b->cached[k] = cache_->Find(b->indices[k]);
              if (!b->cached[k]) b->misses.push_back(b->indices[k]);
            }
          }
          to_read = b->misses;
        }
        loader_internal::PlanOptions po = po_;
        po.alignment = w.engine->alignment();
        b->read = std::make_unique<BatchRead>(*volume_, to_read, po);
        if (!to_read.empty() && !w.pool->Fits(b->read->buffer_bytes())) {
          stalled = std::move(b);  // the loop above decides when to read it
          continue;
        }
      }
      const bool nothing_to_read = cache_ ? b->misses.empty() : b->indices.empty();
      b->slab = nothing_to_read ? nullptr : w.pool->Acquire(b->read->buffer_bytes());
      if (nothing_to_read) {
        Finish(*b);  // wholly cached
      } else if (!b->slab) {
        Publish(*b, Status::Unavailable(volume_->path() + ": out of memory for a batch of " +
                                        std::to_string(b->read->buffer_bytes()) + " bytes"));
      } else {
        b->read->SetBuffer(b->slab->data, b->slab->slot);
        BatchRead* job = b->read.get();
        flying.emplace(driver.Start(job), std::move(b));
      }
    }
    // Without waiting when a batch was started (more may be started before
    // the thread has to block); else for at least one batch.
    done.clear();
    st = driver.Poll(/*wait=*/!start, &done);
    for (uint64_t id : done) {
      auto it = flying.find(id);
      if (it == flying.end()) continue;
      Finish(*it->second);
      flying.erase(it);
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
  if (!driver.Drain().ok()) {
    std::lock_guard lock(mu_);
    for (auto& [id, b] : flying) quarantine_.push_back(b->slab);
  }
}

void Loader::Impl::Finish(InFlight& b) {
  if (b.abandoned) return;
  std::shared_ptr<const void> owner = b.slab;
  Result<std::shared_ptr<Batch::Data>> data = b.read->FinishData(
      std::move(owner), b.epoch, b.seq, b.read->seconds(), options_.skip_bad_samples);
  if (data.ok() && cache_) data = WithCached(b, std::move(data).value());
  Publish(b, std::move(data));
}

std::shared_ptr<Batch::Data> Loader::Impl::WithCached(const InFlight& b,
                                                      std::shared_ptr<Batch::Data> read) {
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
    data->checked.push_back(b.cached[k].has_value());
    data->indices.push_back(b.indices[k]);
    data->samples.push_back(bytes);
    data->labels.push_back(dir.label(b.indices[k]));
    data->payload_bytes += bytes.size();
  }
  return data;
}

void Loader::Impl::Publish(const InFlight& b, Result<std::shared_ptr<Batch::Data>> result) {
  {
    std::lock_guard lock(mu_);
    if (b.gen == gen_ && b.ticket >= consumer_) {
      ready_.emplace(b.ticket, std::move(result));
    }
  }
  ready_cv_.notify_all();
  // A batch not kept is destroyed here, its slab returning to the pool.
}

}  // namespace dlfs
