// The Loader: I/O threads that stream batch reads through their engines
// (loader_io.cc), and the caller's side that hands batches out in order and
// checks them (here). How batches are numbered: loader_impl.h.
#include "dlfs/loader.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <system_error>

#include "common/affinity.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "dlfs/launch.h"
#include "loader/batch_planner.h"
#include "loader/loader_impl.h"

namespace dlfs {

namespace {

// Samples smaller than this, on remote storage, are read from the node cache
// filled first (Create): a request per sample costs more than the bytes.
constexpr double kFillFirstSampleBytes = 64 * 1024;
// ... and only volumes of at most this many bytes (remote or local, for a
// volume the cache holds whole): the first batch waits for the whole fill
// (about 10-20 s at the 100-200 MB/s measured over NBD here), never a time
// that grows without bound with the volume. A larger one is filled beside
// the reads.
constexpr uint64_t kFillFirstMaxBytes = uint64_t{2} << 30;

// LoaderOptions::io_threads 0: how many I/O threads. A buffered read that
// hits the page cache is completed inside io_uring_enter, on the thread that
// submits it: the kernel's copy and page-cache lookup are that thread's CPU
// time, not the device's. With one I/O thread a cache-off Fashion-MNIST
// epoch was that thread's CPU (the caller waited 96 % of it); two made warm
// epochs 1.45x and cold first epochs 1.3x faster on 2 cores. Two only where
// this process has two cores to itself: ranks bound to a core each (mpirun
// -np 2 here) gained nothing measurable from two threads sharing it (-5 %
// with io_uring's buffered reads, +5 % with the mapping: noise). O_DIRECT and remote
// reads complete asynchronously, the device or server their limit: one.
uint32_t AutoIoThreads(const IoEngine& engine, bool direct_io) {
  const bool copies =
      engine.kind() == EngineKind::kMmap ||
      (engine.kind() == EngineKind::kUring && (!direct_io || engine.alignment() <= 1));
  if (!copies) return 1;
  int local = 1;
  if (Result<LaunchInfo> job = DetectLaunch(); job.ok()) local = std::max(job->local_world_size, 1);
  return AffinityCpus() / local >= 2 ? 2 : 1;
}

void AddSeconds(std::atomic<uint64_t>& ns, double seconds) {
  ns.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
}

// "limit 128.0 MB in FILE, 6.2 MB in use" or "MemAvailable 21.9 GB": where
// MemoryLimit::usable() comes from, for messages.
std::string MemoryWhere(const MemoryLimit& m) {
  if (m.cgroup_limit > 0 && (m.mem_available == 0 || m.usable() < m.mem_available)) {
    return "limit " + HumanBytes(static_cast<double>(m.cgroup_limit)) + " in " + m.cgroup + ", " +
           HumanBytes(static_cast<double>(m.cgroup_usage)) + " in use";
  }
  return "MemAvailable " + HumanBytes(static_cast<double>(m.mem_available));
}

}  // namespace

Loader::Impl::~Impl() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (fill_first_ && fill_) fill_->Stop();  // an I/O thread may wait for it
  for (auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
    // Batches the caller keeps may come back after the loader is gone.
    w->pool->SetOnRelease({});
  }
  fill_.reset();  // before the counters it asks for progress
  warmer_.reset();
}

void Loader::Impl::SetEpoch(uint64_t e) {
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

void Loader::Impl::SetPosition(uint64_t e, uint64_t k, std::shared_ptr<const EpochOrder> part) {
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
  if (fill_) fill_->Start();  // measures the reader's waits from here
}

SourceState Loader::Impl::Identity() const {
  SourceState s;
  s.volume_uuid = volume_->info().uuid;
  s.volume_samples = volume_->size();
  s.samples = options_.subset.Count(volume_->size());
  s.subset_crc = subset_crc_;
  s.sampler = options_.sampler;
  return s;
}

SourceState Loader::Impl::SaveState() const {
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

Status Loader::Impl::LoadState(const SourceState& state) {
  const std::string& who = volume_->path();
  DLFS_RETURN_IF_ERROR(CheckResumable(state, Identity(), who));
  ResumePoint at = PlanResume(state, options_.sampler);
  std::shared_ptr<const EpochOrder> part;
  uint64_t batches = batches_;
  if (!at.done.empty()) {
    Result<RankOrder> rest = sampler_.Ranked(at.epoch, at.done, options_.subset);
    if (!rest.ok()) {
      return Status::InvalidArgument(who +
                                     ": cannot resume from this state: " + rest.status().message());
    }
    const uint64_t b = options_.sampler.batch_size;
    batches = (rest->size() + b - 1) / b;
    auto o = std::make_shared<EpochOrder>();
    o->epoch = at.epoch;
    o->part = ++parts_made_;
    o->first_seq = batches_ - batches;  // the rest is never longer than an epoch
    o->ranked = std::move(rest).value();
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
      return Status::InvalidArgument(who +
                                     ": cannot resume from this state: it quarantines sample " +
                                     std::to_string(i) + " of " + std::to_string(volume_->size()));
    }
  }
  for (uint64_t i : state.quarantined) bad_samples_.Add(i, "left out by the state resumed from");
  {
    std::lock_guard lock(mu_);
    part_done_ = at.done;
  }
  orders_.Clear();  // an explicit order may differ after a resume
  SetPosition(at.epoch, at.batches, std::move(part));
  std::lock_guard lock(mu_);
  resume_pending_ = true;
  return Status::Ok();
}

Result<bool> Loader::Impl::Next(Batch* out) {
  if (!started_.load(std::memory_order_acquire)) SetEpoch(0);
  const double t0 = Now();
  std::unique_lock lock(mu_);
  resume_pending_ = false;
  if (!start_error_.ok()) return start_error_;
  if (consumer_ >= epoch_end_) return false;
  if (ready_.count(consumer_) == 0) {
    // An I/O thread waiting for a slab to come back reads this batch
    // anyway once the caller waits for it (loader_io.cc).
    caller_waiting_ = true;
    work_cv_.notify_all();
    ready_cv_.wait(lock, [&] { return ready_.count(consumer_) > 0; });
    caller_waiting_ = false;
  }
  auto node = ready_.extract(consumer_);
  ++consumer_;
  const bool epoch_ends = consumer_ == epoch_end_;
  const bool wait_for_fill = wait_for_fill_ && epoch_ends;
  if (wait_for_fill) wait_for_fill_ = false;
  lock.unlock();
  // The cache the user asked for is full by the end of the first epoch. One
  // the node decided to fill goes on beside the later epochs where it
  // leaves the reader's cores alone (waiting for it made Fashion-MNIST over
  // 5 epochs 1.18x slower than filling beside), else it is waited for when
  // the fill says (SequentialFill::readers_wait).
  using Wait = cache_internal::SequentialFill::ReadersWait;
  const Wait fill_wait = fill_ ? fill_->readers_wait() : Wait::kNo;
  if (wait_for_fill || fill_wait == Wait::kNow || (fill_wait == Wait::kAtEpochEnd && epoch_ends)) {
    fill_->WaitFilled();
  }
  work_cv_.notify_all();  // the window moved
  AddSeconds(next_wait_ns_, Now() - t0);
  Result<std::shared_ptr<Batch::Data>> r = std::move(node.mapped());
  if (!r.ok()) return r.status();
  return HandOut(std::move(r).value(), out);
}

Result<bool> Loader::Impl::HandOut(std::shared_ptr<Batch::Data> data, Batch* out) {
  const double t0 = Now();
  Status st;
  if (bad_samples_.active()) {
    st = bad_samples_.Check(data.get(), [this](Batch::Data* d) { return Check(d); });
  } else {
    st = Check(data.get());
  }
  AddSeconds(verify_ns_, Now() - t0);
  DLFS_RETURN_IF_ERROR(st);
  handed_bytes_.fetch_add(data->payload_bytes, std::memory_order_relaxed);
  *out = Batch(std::move(data));
  return true;
}

Status Loader::Impl::Check(Batch::Data* data) {
  if (!field_ids_.empty()) {
    return loader_internal::SplitFields(*volume_, field_ids_, options_.verify_checksums, data,
                                        nullptr, {}, cache_ && cache_->decoded());
  }
  if (options_.verify_checksums) {
    for (size_t i = 0; i < data->indices.size(); ++i) {
      if (i < data->checked.size() && data->checked[i]) continue;  // by the node cache
      DLFS_RETURN_IF_ERROR(volume_->CheckSample(data->indices[i], data->samples[i]));
    }
  }
  return Status::Ok();
}

SourceStats Loader::Impl::Stats() const {
  SourceStats s;
  for (const auto& w : workers_) {
    s.buffer_bytes += w->pool->bytes();
    s.io += w->engine->stats();
    ++s.engines;
  }
  s.verify_seconds = verify_ns_.load(std::memory_order_relaxed) / 1e9;
  s.next_wait_seconds = next_wait_ns_.load(std::memory_order_relaxed) / 1e9;
  if (cache_) {
    s.cache_budget = cache_budget_;
    const cache_internal::NodeCacheStats c = cache_->stats();
    s.cache_bytes = c.capacity;
    s.cache_used_bytes = c.used;
    s.cache_hits = c.hits;
    s.cache_hit_bytes = c.hit_bytes;
    s.cache_misses = c.misses;
    s.cache_fill_bytes = c.filled_bytes;
    s.cache_fill_seconds = c.fill_seconds;
    if (fill_) {
      const cache_internal::SequentialFill::Stats f = fill_->stats();
      s.cache_scan_bytes = f.bytes_read;
      s.cache_scan_seconds = f.scan_seconds;
      s.cache_fill_cpu_seconds = f.cpu_seconds;
      if (f.decided) s.cache_fill_plan = f.decision.reason + f.Outcome();
      if (f.memory_short) {
        s.cache_fill_plan +=
            std::string(s.cache_fill_plan.empty() ? "" : "; ") + "stopped: memory short";
      }
    }
    s.cache_sharers = c.sharers;
    s.cache_shared = c.shared;
  }
  s.setup_seconds = setup_seconds_;
  s.uring_flags = workers_.front()->engine->setup_flags();
  return s;
}

std::vector<uint64_t> Loader::Impl::RankIndices(uint64_t epoch) const {
  const uint64_t b = options_.sampler.batch_size;
  {
    std::lock_guard lock(mu_);
    if (part_ && part_->epoch == epoch) return part_->All(batches_, b);
  }
  if (options_.order) return options_.order(epoch)->indices;
  if (options_.batch_order) {
    loader_internal::EpochOrder o;
    o.epoch = epoch;
    o.per_batch = options_.batch_order;
    return o.All(batches_, b);
  }
  return sampler_.RankIndices(epoch, options_.subset);
}
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
  if (options.io_threads > 64) {
    return Status::InvalidArgument("io_threads must be between 1 and 64 (0: chosen)");
  }
  if (options.engine.queue_depth == 0) {
    return Status::InvalidArgument("queue_depth must be at least 1");
  }
  if (options.plan.max_read < 4096)
    return Status::InvalidArgument("max_read must be at least 4096");
  DLFS_RETURN_IF_ERROR(options.subset.Check(volume->size(), volume->path()));
  if (options.order && options.batch_order) {
    return Status::InvalidArgument("an explicit order is given either whole or by batch, not both");
  }
  const uint64_t n = options.subset.Count(volume->size());
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
  // Samples much smaller than a block: O_DIRECT would read several times
  // their bytes, the page cache's read-ahead brings their neighbours in.
  std::string read_note;
  // Read once, for the engine's choice and the plans below alike.
  const MemoryLimit memory = ReadMemoryLimit();
  DLFS_ASSIGN_OR_RETURN(
      std::unique_ptr<IoEngine> engine,
      loader_internal::CreateEngineForSamples(
          *volume, options.subset, options.auto_direct_io,
          loader_internal::PageWarmer::Warms(*volume, memory.usable()), &eo, &read_note));
  const uint32_t io_threads =
      options.io_threads > 0 ? options.io_threads : AutoIoThreads(*engine, eo.direct_io);
  for (uint32_t k = 0; k < io_threads; ++k) {
    if (k > 0) {
      DLFS_ASSIGN_OR_RETURN(engine, CreateEngine(volume->OpenTargetPaths(), eo));
    }
    auto w = std::make_unique<Loader::Impl::Worker>();
    w->pool =
        std::make_shared<SlabPool>(engine->alignment(), engine.get(), options.engine.buffer_slots);
    w->engine = std::move(engine);
    w->driver = std::make_unique<io_internal::ReadDriver>(*w->engine);
    w->index = k;
    impl->workers_.push_back(std::move(w));
  }
  const IoEngine& first = *impl->workers_.front()->engine;
  std::string description = first.description();
  if (!read_note.empty()) description += " (" + read_note + ")";

  // Memory: the batch buffers first (they are needed to read at all), then
  // the node cache's budget from what they leave.
  const loader_internal::SampleSizes sizes =
      loader_internal::MeasureSampleSizes(volume->directory(), options.subset);
  Result<loader_internal::BufferPlan> planned =
      loader_internal::PlanBuffers({.window = impl->window_,
                                    .threads = io_threads,
                                    .held = 2,
                                    .batch_size = options.sampler.batch_size,
                                    .mean_sample = sizes.mean,
                                    .largest_sample = sizes.largest,
                                    .sample_stddev = sizes.stddev,
                                    .alignment = first.alignment(),
                                    .usable = memory.usable(),
                                    .usable_from = MemoryWhere(memory)});
  if (!planned.ok()) return planned.status().WithContext(volume->path());
  const loader_internal::BufferPlan& plan = *planned;
  impl->window_ = plan.window;
  MemoryLimit after_buffers = memory;
  after_buffers.mem_available -= std::min(after_buffers.mem_available, plan.total);
  after_buffers.cgroup_usage += plan.total;

  const bool page_cached = !eo.direct_io || first.alignment() <= 1;
  if (page_cached) {
    impl->warmer_ = loader_internal::PageWarmer::ForVolume(impl->volume_, memory.usable(),
                                                           first.kind() == EngineKind::kMmap);
    if (impl->warmer_) {
      description += "; the first epoch reads the volume ahead into the page cache";
    }
  }

  std::string budget_note;
  cache_internal::NodeCacheOptions co;
  co.budget = ResolveCacheBudget(options.cache_budget, after_buffers, &budget_note);
  co.shared = options.cache_shared;
  // Reading fields: compressed ones are held decoded when every sample fits
  // so, and are then decompressed once per node instead of on every read.
  co.decoded = !impl->field_ids_.empty();
  impl->cache_budget_ = co.budget;
  impl->cache_ = NodeCache::Open(*volume, co, &impl->cache_note_);
  if (!budget_note.empty()) {
    impl->cache_note_ = budget_note + (impl->cache_note_.empty() ? "" : "; " + impl->cache_note_);
  }
  if (impl->cache_) {
    description += "; " + impl->cache_->Describe();
    Loader::Impl* raw = impl.get();
    // This rank's share of an epoch.
    const auto epoch_bytes =
        static_cast<uint64_t>(static_cast<double>(impl->sampler_.samples_per_rank()) * sizes.mean);
    auto fo = cache_internal::SequentialFill::Options::ForReader(
        options.cache_budget, options.planned_epochs, epoch_bytes, options.engine, [raw] {
          // The caller's time in the loader: its waits, and the checksums
          // of samples read, which cached ones (checked when cached) skip.
          // Without the checks, a warm mapped Fashion-MNIST epoch's saving
          // was counted at half what holding it saved.
          const uint64_t verify = raw->verify_ns_.load(std::memory_order_relaxed);
          return cache_internal::SequentialFill::ReaderProgress{
              (raw->next_wait_ns_.load(std::memory_order_relaxed) + verify) / 1e9,
              raw->handed_bytes_.load(std::memory_order_relaxed),
              (raw->io_cpu_ns_.load(std::memory_order_relaxed) + verify) / 1e9};
        });
    fo.page_cached = page_cached;
    fo.later_epochs_warm = page_cached && impl->warmer_ != nullptr;
    // Over remote storage (an NBD export, an S3 object) every sample read is
    // a request with its round trip and the server's per-request work, while
    // the fill reads the volume in large ranges: Fashion-MNIST (784 B) from
    // a Ceph RGW came at ~17,000 samples/s (a 4.2 s first epoch) where the
    // fill alone read it in about a second. When the cache holds the whole
    // volume and its samples are small, the fill goes first and the reads
    // wait for it, taking nothing from it.
    // So on a network or FUSE file system (a parallel file system's
    // client): Fashion-MNIST on an emulated one (4 ms per request) took
    // 2.42 s over 5 epochs with the fill beside the reads, against 2.19 s
    // with a budget given.
    const bool remote = !loader_internal::OnLocalDisks(*volume);
    if (remote && sizes.mean < kFillFirstSampleBytes &&
        volume->info().data_bytes <= kFillFirstMaxBytes && co.budget >= volume->info().data_bytes &&
        !options.engine.faults.any()) {
      fo.requested = true;
      fo.requested_as = "remote storage and small samples: filled before the first read";
      impl->fill_first_ = true;
      description +=
          "; fills the node cache before the first read (remote storage, small "
          "samples)";
    }
    // The caller's waits settle once the first read-ahead window is handed
    // out; two more windows are its steady state.
    const uint64_t batch_bytes = options.sampler.batch_size * sizes.mean;
    fo.settle_bytes = (impl->window_ + 1) * batch_bytes;
    fo.measure_bytes = 2 * impl->window_ * batch_bytes;
    fo.hold_when_it_fits = true;
    impl->fill_ = std::make_unique<cache_internal::SequentialFill>(impl->cache_, impl->volume_,
                                                                   std::move(fo));
    impl->wait_for_fill_ = impl->fill_->requested();
    // A volume held whole (the defaults' rule, or a budget given) of at most
    // kFillFirstMaxBytes is filled before the first read, local or not: one
    // sequential pass, with no random reads of the same bytes beside it.
    // Filled beside the first epoch instead, the 1.6 GB volume's 3-epoch
    // job took 1.16x and Fashion-MNIST's 5-epoch one 1.11x (one process;
    // 1.08-1.23x under mpirun; docs/benchmarks.md).
    if (!impl->fill_first_ && impl->fill_->requested() && impl->cache_->holds_all() &&
        volume->info().data_bytes <= kFillFirstMaxBytes && !options.engine.faults.any()) {
      impl->fill_first_ = true;
      description += "; fills the node cache before the first read (it holds the volume)";
    }
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
    // Held to the plan: the I/O thread waits for a slab to come back rather
    // than allocate another (loader_io.cc).
    w->pool->set_cap(w->pool->bytes());
    Loader::Impl* raw = impl.get();
    w->pool->SetOnRelease([raw] {
      { std::lock_guard lock(raw->mu_); }
      raw->work_cv_.notify_all();
    });
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
