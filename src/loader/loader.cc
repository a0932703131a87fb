#include "dlfs/loader.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "common/clock.h"
#include "common/file_util.h"
#include "loader/batch_data.h"
#include "loader/batch_planner.h"

namespace dlfs {

namespace loader_internal {

// A page-aligned buffer (AllocateLarge: huge pages where available) that one
// batch at a time reads into.
struct Slab {
  std::shared_ptr<std::byte> memory;
  std::byte* data = nullptr;
  uint64_t capacity = 0;
  uint32_t slot = ReadRequest::kNoSlot;  // registered-buffer slot in the owner's engine
  bool Allocate(uint64_t bytes) {
    memory = AllocateLarge(bytes);
    data = memory.get();
    capacity = memory ? bytes : 0;
    return memory != nullptr;
  }
};

// Per-I/O-thread pool of slabs. Slabs are handed out with a deleter that
// puts them back, and the pool outlives every batch that uses it (shared
// ownership), so a caller may keep a Batch after the Loader is destroyed.
class SlabPool : public std::enable_shared_from_this<SlabPool> {
 public:
  // Slabs are page-aligned (mmap), which covers every O_DIRECT alignment up
  // to the page size; sizes are rounded to `alignment`.
  explicit SlabPool(uint32_t alignment) : alignment_(std::max<uint32_t>(alignment, 4096)) {}

  // A slab of at least `bytes`, grown (and re-registered with `engine`)
  // when needed. nullptr only if memory runs out.
  std::shared_ptr<Slab> Acquire(uint64_t bytes, IoEngine* engine, uint32_t slots) {
    std::unique_ptr<Slab> slab;
    {
      std::lock_guard lock(mu_);
      if (!free_.empty()) {
        slab = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!slab) {
      slab = std::make_unique<Slab>();
      std::lock_guard lock(mu_);
      if (next_slot_ < slots) slab->slot = next_slot_++;
    }
    if (slab->capacity < bytes) {
      // Grow geometrically so a run of slightly larger batches reallocates rarely.
      const uint64_t cap =
          (std::max(bytes, slab->capacity * 3 / 2) + alignment_ - 1) / alignment_ * alignment_;
      slab->Allocate(cap);
      const bool registered = slab->slot != ReadRequest::kNoSlot && slab->data &&
                              engine->RegisterBuffer(slab->slot, {slab->data, cap});
      if (!registered && slab->slot != ReadRequest::kNoSlot) {
        // Unpin the freed buffer the slot still names; the slot stays ours.
        engine->RegisterBuffer(slab->slot, {});
        slab->slot = ReadRequest::kNoSlot;
      }
      if (!slab->data) return nullptr;
    }
    auto self = shared_from_this();
    return std::shared_ptr<Slab>(slab.release(), [self](Slab* s) {
      std::lock_guard lock(self->mu_);
      self->free_.emplace_back(s);
    });
  }

 private:
  const uint32_t alignment_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Slab>> free_;
  uint32_t next_slot_ = 0;
};

}  // namespace loader_internal

using loader_internal::SlabPool;

class Loader::Impl {
 public:
  struct Worker {
    std::unique_ptr<IoEngine> engine;
    std::shared_ptr<SlabPool> pool;
    std::thread thread;
  };

  std::shared_ptr<Volume> volume_;
  LoaderOptions options_;
  Sampler sampler_;
  std::vector<Worker> workers_;

  // Epoch state, guarded by mu_.
  std::mutex mu_;
  std::condition_variable ready_cv_;  // a batch became ready
  std::condition_variable space_cv_;  // the caller consumed one
  std::map<uint64_t, Result<Batch>> ready_;
  uint64_t epoch_ = 0;
  uint64_t next_ = 0;  // next batch the caller gets
  bool started_ = false;
  bool stop_ = false;
  std::vector<uint64_t> order_;  // this rank's samples for the epoch
  Status start_error_;
  loader_internal::PlanOptions po_;  // alignment set per engine

  Impl(std::shared_ptr<Volume> v, const LoaderOptions& o, Sampler s)
      : volume_(std::move(v)), options_(o), sampler_(std::move(s)) {
    po_.read = options_.plan;
  }

  ~Impl() { StopWorkers(); }

  void StopWorkers() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    space_cv_.notify_all();
    for (Worker& w : workers_) {
      if (w.thread.joinable()) w.thread.join();
    }
  }

  void Start(uint64_t epoch) {
    StopWorkers();
    std::lock_guard lock(mu_);
    stop_ = false;
    start_error_ = Status::Ok();
    ready_.clear();
    epoch_ = epoch;
    next_ = 0;
    started_ = true;
    order_ = RankIndices(epoch);
    for (size_t k = 0; k < workers_.size(); ++k) {
      try {
        workers_[k].thread = std::thread([this, k] { Run(k); });
      } catch (const std::system_error& e) {
        // Out of threads: fail every batch rather than wait for a reader
        // that does not exist.
        start_error_ = Status(StatusCode::kUnavailable,
                              std::string("cannot start an I/O thread: ") + e.what());
        break;
      }
    }
  }

  // I/O thread k reads batches k, k + n, k + 2n, ... staying at most
  // prefetch_batches ahead of the caller.
  void Run(size_t k) {
    Worker& w = workers_[k];
    const uint64_t batches = sampler_.batches_per_epoch();
    const uint64_t ahead = std::max<uint32_t>(options_.prefetch_batches, 1);
    loader_internal::BatchPlan plan;
    std::vector<ReadRequest> requests;
    std::vector<Status> results;
    for (uint64_t seq = k; seq < batches; seq += workers_.size()) {
      {
        std::unique_lock lock(mu_);
        space_cv_.wait(lock, [&] { return stop_ || seq < next_ + ahead; });
        if (stop_) return;
      }
      Result<Batch> batch = ReadBatch(w, seq, &plan, &requests, &results);
      {
        std::lock_guard lock(mu_);
        ready_.emplace(seq, std::move(batch));
      }
      ready_cv_.notify_all();
    }
  }

  Result<Batch> ReadBatch(Worker& w, uint64_t seq, loader_internal::BatchPlan* plan,
                          std::vector<ReadRequest>* requests, std::vector<Status>* results) {
    const SampleDirectory& dir = volume_->directory();
    const uint64_t b = options_.sampler.batch_size;
    const uint64_t first = seq * b;
    const uint64_t count = std::min<uint64_t>(b, order_.size() - first);
    const std::span<const uint64_t> indices(order_.data() + first, count);

    loader_internal::PlanOptions po = po_;
    po.alignment = w.engine->alignment();
    loader_internal::PlanBatch(dir, indices, po, plan);

    auto data = std::make_shared<Batch::Data>();
    std::shared_ptr<loader_internal::Slab> slab =
        w.pool->Acquire(plan->buffer_bytes, w.engine.get(), options_.engine.buffer_slots);
    if (!slab) {
      return Status::Unavailable(volume_->path() + ": out of memory for a batch of " +
                                 std::to_string(plan->buffer_bytes) + " bytes");
    }
    std::byte* base = slab->data;
    requests->clear();
    for (const auto& r : plan->reads) {
      requests->push_back(
          ReadRequest{r.target, r.offset, r.length, base + r.buffer_offset, slab->slot});
    }
    data->owner = std::move(slab);
    data->owns_bytes = true;  // a slab per batch, recycled only after its last copy
    results->assign(requests->size(), Status::Ok());
    const double t0 = Now();
    Status st = w.engine->Read(*requests, *results);
    data->io_seconds = Now() - t0;
    if (!st.ok()) return st.WithContext(volume_->path());

    data->epoch = epoch_;
    data->sequence = seq;
    data->indices.assign(indices.begin(), indices.end());
    data->labels.resize(count);
    data->samples.resize(count);
    data->payload_bytes = plan->sample_bytes;
    data->device_bytes = plan->buffer_bytes;
    const bool any_failed =
        std::any_of(results->begin(), results->end(), [](const Status& r) { return !r.ok(); });
    for (uint64_t i = 0; i < count; ++i) {
      const SampleInfo s = dir.sample(indices[i]);
      const uint64_t off = plan->sample_offsets[i];
      // Report a failed read against the first sample whose bytes it held.
      for (size_t r = 0; any_failed && r < plan->reads.size(); ++r) {
        const auto& pr = plan->reads[r];
        if (!(*results)[r].ok() && off < pr.buffer_offset + pr.length &&
            off + std::max<uint64_t>(s.length, 1) > pr.buffer_offset) {
          return (*results)[r].WithContext(SampleName(indices[i]));
        }
      }
      data->samples[i] = std::span<const std::byte>(base + off, s.length);
      data->labels[i] = s.label;
    }
    return Batch(std::move(data));
  }

  std::vector<uint64_t> RankIndices(uint64_t epoch) const {
    return sampler_.RankIndices(epoch, options_.subset);
  }

  std::string SampleName(uint64_t index) const {
    return volume_->path() + ": sample " + std::to_string(index) + " '" +
           volume_->directory().Path(index) + "'";
  }

  Result<bool> Next(Batch* out) {
    if (!started_) Start(0);
    if (!start_error_.ok()) return start_error_;
    std::unique_lock lock(mu_);
    if (next_ >= sampler_.batches_per_epoch()) return false;
    ready_cv_.wait(lock, [&] { return ready_.count(next_) > 0; });
    auto it = ready_.find(next_);
    Result<Batch> r = std::move(it->second);
    ready_.erase(it);
    ++next_;
    lock.unlock();
    space_cv_.notify_all();
    if (!r.ok()) return r.status();
    // Checksums are verified here, on the caller's thread, so the I/O thread
    // is already reading the next batches meanwhile.
    if (options_.verify_checksums) DLFS_RETURN_IF_ERROR(Verify(*r));
    *out = std::move(r).value();
    return true;
  }

  Status Verify(const Batch& b) const {
    for (size_t i = 0; i < b.size(); ++i) {
      DLFS_RETURN_IF_ERROR(volume_->CheckSample(b.index(i), b.sample(i)));
    }
    return Status::Ok();
  }
};

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Loader::~Loader() = default;

Result<std::unique_ptr<Loader>> Loader::Create(std::shared_ptr<Volume> volume,
                                               const LoaderOptions& options) {
  if (!volume) return Status::InvalidArgument("no volume");
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

  auto impl = std::make_unique<Impl>(volume, options, std::move(sampler));
  // Every engine opens every target of the volume (as resolved and remapped
  // by Volume::Open). A batch's reads go to whichever targets hold its
  // samples, and one engine keeps them all in flight at once: with io_uring
  // that is one ring with every target as a fixed file, which already keeps
  // all devices busy — the kernel dispatches each read to its device's own
  // queue, and the ring only carries submissions and completions. A ring
  // per target would add threads and split queue_depth without adding
  // device parallelism; the pread engine likewise serves every target from
  // one thread pool.
  for (uint32_t k = 0; k < options.io_threads; ++k) {
    DLFS_ASSIGN_OR_RETURN(std::unique_ptr<IoEngine> engine,
                          CreateEngine(volume->OpenTargetPaths(), options.engine));
    auto pool = std::make_shared<SlabPool>(engine->alignment());
    impl->workers_.push_back(Loader::Impl::Worker{std::move(engine), std::move(pool), {}});
  }
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

void Loader::SetEpoch(uint64_t epoch) { impl_->Start(epoch); }
Result<bool> Loader::Next(Batch* batch) { return impl_->Next(batch); }
uint64_t Loader::batches_per_epoch() const { return impl_->sampler_.batches_per_epoch(); }
uint64_t Loader::epoch() const { return impl_->epoch_; }
const Sampler& Loader::sampler() const { return impl_->sampler_; }
std::vector<uint64_t> Loader::RankIndices(uint64_t epoch) const {
  return impl_->RankIndices(epoch);
}
const Volume& Loader::volume() const { return *impl_->volume_; }
const std::string& Loader::description() const {
  return impl_->workers_.front().engine->description();
}

}  // namespace dlfs
