#include "dlfs/decode_stage.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "common/file_util.h"
#include "decode/codecs.h"
#include "loader/source_kit.h"

namespace dlfs {

namespace {

constexpr size_t kSkippedExamples = 8;

// Output tensors, recycled: a batch's owner hands its buffer back here when
// the last Batch copy goes, so steady state allocates (and first-touches)
// nothing. Buffers outlive the stage through the owner's reference to the
// pool.
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  explicit BufferPool(size_t max_idle) : max_idle_(max_idle) {}

  // A buffer of at least `bytes`; null when out of memory.
  std::shared_ptr<const void> Acquire(size_t bytes) {
    std::shared_ptr<std::byte> mem;
    size_t capacity = 0;
    {
      std::lock_guard lock(mu_);
      for (size_t i = 0; i < idle_.size(); ++i) {
        if (idle_[i].second >= bytes) {
          mem = std::move(idle_[i].first);
          capacity = idle_[i].second;
          idle_.erase(idle_.begin() + static_cast<ptrdiff_t>(i));
          break;
        }
      }
    }
    if (!mem) {
      capacity = std::max<size_t>(bytes, 1);
      mem = AllocateLarge(capacity);
      if (!mem) return nullptr;
    }
    std::byte* p = mem.get();
    return std::shared_ptr<const void>(
        p, [pool = shared_from_this(), mem = std::move(mem), capacity](const void*) mutable {
          pool->Return(std::move(mem), capacity);
        });
  }

 private:
  void Return(std::shared_ptr<std::byte> mem, size_t capacity) {
    std::lock_guard lock(mu_);
    if (idle_.size() < max_idle_) idle_.emplace_back(std::move(mem), capacity);
  }

  const size_t max_idle_;
  std::mutex mu_;
  std::vector<std::pair<std::shared_ptr<std::byte>, size_t>> idle_;
};

// One input batch being decoded.
struct Job {
  Status input_error;  // the input's Next() failed for this batch
  Batch input;         // encoded samples; released by the worker that finishes
  std::vector<uint64_t> indices;
  std::vector<uint32_t> sources;  // a mixture's (Batch::sources), else empty
  std::vector<uint32_t> labels;
  uint64_t epoch = 0, sequence = 0, payload_bytes = 0, device_bytes = 0, peer_bytes = 0;
  double io_seconds = 0;
  std::shared_ptr<const void> buffer;
  std::byte* out = nullptr;
  size_t image_bytes = 0;
  std::vector<Status> errors;  // per sample; set only for failures
  std::atomic<size_t> next{0};
  std::atomic<size_t> remaining{0};
  std::atomic<bool> cancelled{false};
  bool done = false;  // guarded by Impl::mu_

  size_t size() const { return indices.size(); }
};

}  // namespace

class DecodeStage::Impl {
 public:
  Impl(std::unique_ptr<BatchSource> input, std::vector<std::shared_ptr<const Volume>> volumes,
       const DecodeStageOptions& options, ImagePipeline pipeline)
      : input_(std::move(input)),
        volumes_(std::move(volumes)),
        options_(options),
        pipeline_(std::move(pipeline)),
        pool_(std::make_shared<BufferPool>(options.prefetch_batches + 2)) {
    threads_ = options.decode_threads != 0 ? options.decode_threads
                                           : std::max(1u, std::thread::hardware_concurrency());
    switch (options.image.decode.color) {
      case ColorMode::kRgb:
        channels_ = 3;
        break;
      case ColorMode::kGray:
        channels_ = 1;
        break;
      case ColorMode::kAuto:
        break;
    }
    const TransformOptions& t = options.image.transform;
    const OutputOptions& o = options.image.output;
    description_ =
        "decode (" + std::to_string(threads_) + " threads, " + std::to_string(t.size) + "x" +
        std::to_string(t.size) + " " + std::string(NameOf(kCropModeNames, t.crop)) +
        (t.flip ? ", flip" : "") + ", " + std::string(NameOf(kDTypeNames, o.dtype)) + " " +
        std::string(NameOf(kOutputLayoutNames, o.layout)) + ") <- " + input_->description();
    for (uint32_t i = 0; i < threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  }

  ~Impl() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      for (auto& job : inflight_) job->cancelled = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  void SetEpoch(uint64_t epoch) {
    {
      std::lock_guard lock(mu_);
      for (auto& job : inflight_) job->cancelled = true;
      work_.clear();
    }
    // Workers still on a cancelled job skip its remaining samples; the job
    // (and its buffers) go when they let go of it.
    inflight_.clear();
    input_done_ = false;
    input_->SetEpoch(epoch);
  }

  // The input's position less the batches pulled from it but not yet
  // handed out (queued for decoding).
  Result<SourceState> SaveState() const {
    DLFS_ASSIGN_OR_RETURN(SourceState s, input_->SaveState());
    s.batches -= std::min<uint64_t>(s.batches, inflight_.size());
    return s;
  }

  Status LoadState(const SourceState& state) {
    DLFS_RETURN_IF_ERROR(input_->LoadState(state));
    {
      std::lock_guard lock(mu_);
      for (auto& job : inflight_) job->cancelled = true;
      work_.clear();
    }
    inflight_.clear();
    input_done_ = false;
    return Status::Ok();
  }

  Result<bool> Next(Batch* batch) {
    TopUp();
    if (inflight_.empty()) return false;
    std::shared_ptr<Job> job = std::move(inflight_.front());
    inflight_.pop_front();
    {
      std::unique_lock lock(mu_);
      done_cv_.wait(lock, [&] { return job->done; });
    }
    TopUp();  // keep the decode threads busy while the caller uses this batch
    return Finish(*job, batch);
  }

  uint64_t batches_per_epoch() const { return input_->batches_per_epoch(); }
  const std::string& description() const { return description_; }
  const ImagePipeline& pipeline() const { return pipeline_; }
  uint32_t channels() const { return channels_.load(); }
  uint32_t threads() const { return threads_; }
  BatchSource& input() { return *input_; }

  DecodeStats stats() const {
    std::lock_guard lock(stats_mu_);
    return stats_;
  }
  std::vector<BadSample> skipped_samples() const {
    std::lock_guard lock(stats_mu_);
    return skipped_samples_;
  }

 private:
  // Pulls input batches (on the caller's thread) until prefetch_batches are
  // queued or the epoch's input is exhausted.
  void TopUp() {
    while (!input_done_ && inflight_.size() < std::max(1u, options_.prefetch_batches)) {
      auto job = std::make_shared<Job>();
      Result<bool> more = input_->Next(&job->input);
      if (!more.ok()) {
        job->input_error = more.status();
        job->done = true;
        inflight_.push_back(std::move(job));
        continue;
      }
      if (!*more) {
        input_done_ = true;
        break;
      }
      Prepare(*job);
      {
        std::lock_guard lock(mu_);
        if (job->size() == 0 || !job->input_error.ok()) {
          job->done = true;
        } else {
          work_.push_back(job);
        }
      }
      inflight_.push_back(std::move(job));
      work_cv_.notify_all();
    }
  }

  void Prepare(Job& job) {
    const Batch& in = job.input;
    job.indices.assign(in.indices().begin(), in.indices().end());
    job.sources.assign(in.sources().begin(), in.sources().end());
    job.labels.assign(in.labels().begin(), in.labels().end());
    job.epoch = in.epoch();
    job.sequence = in.sequence();
    job.payload_bytes = in.payload_bytes();
    job.device_bytes = in.device_bytes();
    job.peer_bytes = in.peer_bytes();
    job.io_seconds = in.io_seconds();
    const size_t n = in.size();
    if (in.field_count() > 1) {
      // Its other fields would be dropped silently; the labels come from the
      // volume anyway.
      job.input_error = Status::InvalidArgument(
          "decode: the input batches hold " + std::to_string(in.field_count()) +
          " fields per sample; the decode stage decodes one image per sample: read only the "
          "image field (the fields option, one name)");
      return;
    }
    if (n == 0) return;
    if (channels_ == 0) ResolveChannels(in);
    job.image_bytes = pipeline_.OutputElements(channels_) * DTypeSize(options_.image.output.dtype);
    job.buffer = pool_->Acquire(job.image_bytes * n);
    if (!job.buffer) {
      job.input_error = Status::Unavailable("decode: out of memory for a batch tensor of " +
                                            std::to_string(job.image_bytes * n) + " bytes");
      return;
    }
    job.out = static_cast<std::byte*>(const_cast<void*>(job.buffer.get()));
    job.errors.resize(n);
    job.remaining = n;
  }

  // ColorMode::kAuto: the first sample that has a readable header decides.
  void ResolveChannels(const Batch& in) {
    for (size_t i = 0; i < in.size(); ++i) {
      Result<ImageInfo> info = ProbeImage(in.sample(i), options_.image.decode);
      if (info.ok()) {
        channels_ = pipeline_.OutputChannels(*info);
        return;
      }
    }
    channels_ = 3;
  }

  void WorkerLoop() {
    ImageWorkspace ws;
    const size_t chunk_cap = 8;
    while (true) {
      std::shared_ptr<Job> job;
      size_t first = 0, last = 0;
      {
        std::unique_lock lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !work_.empty(); });
        if (stop_) return;
        job = work_.front();
        const size_t n = job->size();
        const size_t chunk = std::clamp<size_t>(n / (2 * threads_), 1, chunk_cap);
        first = job->next.fetch_add(chunk);
        last = std::min(n, first + chunk);
        if (last >= n) work_.pop_front();
      }
      if (first >= last) continue;
      for (size_t i = first; i < last; ++i) {
        if (job->cancelled.load(std::memory_order_relaxed)) continue;
        DecodeOne(ws, *job, i);
      }
      if (job->remaining.fetch_sub(last - first) == last - first) {
        job->input = Batch();  // hand the encoded bytes back to the input now
        {
          std::lock_guard lock(mu_);
          job->done = true;
        }
        done_cv_.notify_all();
      }
    }
  }

  void DecodeOne(ImageWorkspace& ws, Job& job, size_t i) {
    const std::span<const std::byte> data = job.input.sample(i);
    Result<ImageInfo> info = decode_internal::Probe(ws.state(), data, options_.image.decode);
    Status st = info.status();
    if (st.ok()) {
      const SamplePlan plan = pipeline_.Plan(*info, job.epoch, job.indices[i]);
      st = pipeline_.Execute(ws, data, plan, channels_, job.out + i * job.image_bytes);
    }
    if (!st.ok()) job.errors[i] = SampleError(job, i, st);
  }

  // The volume sample i of `job` comes from, or null when unknown.
  const Volume* VolumeOf(const Job& job, size_t i) const {
    const size_t v = job.sources.empty() ? 0 : job.sources[i];
    const Volume* vol = v < volumes_.size() ? volumes_[v].get() : nullptr;
    return vol != nullptr && job.indices[i] < vol->size() ? vol : nullptr;
  }

  Status SampleError(const Job& job, size_t i, const Status& st) const {
    const uint64_t index = job.indices[i];
    std::string where = "sample " + std::to_string(index);
    if (const Volume* vol = VolumeOf(job, i)) {
      where = vol->path() + ": " + where + " (" + vol->directory().Path(index) + ")";
    }
    return Status(st.code(), "decode: " + where + ": " + st.message(), st.sys_errno());
  }

  Result<bool> Finish(Job& job, Batch* batch) {
    if (!job.input_error.ok()) return job.input_error;
    size_t kept = 0;
    const size_t n = job.size();
    uint64_t skipped = 0;
    std::vector<std::string> examples;
    for (size_t i = 0; i < n; ++i) {
      if (!job.errors[i].ok()) {
        if (!options_.skip_bad_samples) return job.errors[i];
        ++skipped;
        examples.push_back(job.errors[i].message());
        {
          std::lock_guard lock(stats_mu_);
          const Volume* vol = VolumeOf(job, i);
          skipped_samples_.push_back({job.indices[i],
                                      vol ? vol->directory().Path(job.indices[i]) : std::string(),
                                      vol ? vol->path() : std::string(), job.errors[i].message()});
        }
        continue;
      }
      // Close the gaps left by skipped samples (rare: only after a failure).
      if (kept != i) {
        std::memmove(job.out + kept * job.image_bytes, job.out + i * job.image_bytes,
                     job.image_bytes);
        job.indices[kept] = job.indices[i];
        if (!job.sources.empty()) job.sources[kept] = job.sources[i];
        job.labels[kept] = job.labels[i];
      }
      ++kept;
    }
    job.indices.resize(kept);
    if (!job.sources.empty()) job.sources.resize(kept);
    job.labels.resize(kept);
    {
      std::lock_guard lock(stats_mu_);
      stats_.images += kept;
      stats_.skipped += skipped;
      for (std::string& e : examples) {
        if (stats_.skipped_examples.size() < kSkippedExamples) {
          stats_.skipped_examples.push_back(std::move(e));
        }
      }
    }
    auto data = std::make_shared<Batch::Data>();
    data->owner = job.buffer;
    data->epoch = job.epoch;
    data->sequence = job.sequence;
    data->indices = std::move(job.indices);
    data->sources = std::move(job.sources);
    data->labels = std::move(job.labels);
    data->payload_bytes = job.payload_bytes;
    data->device_bytes = job.device_bytes;
    data->peer_bytes = job.peer_bytes;
    data->io_seconds = job.io_seconds;
    data->samples.reserve(kept);
    for (size_t i = 0; i < kept; ++i) {
      data->samples.emplace_back(job.out + i * job.image_bytes, job.image_bytes);
    }
    if (kept > 0) {
      const OutputOptions& o = options_.image.output;
      const int64_t s = options_.image.transform.size, c = channels_;
      data->tensor.data = job.out;
      data->tensor.dtype = o.dtype;
      data->tensor.shape = o.layout == OutputLayout::kNCHW
                               ? std::vector<int64_t>{static_cast<int64_t>(kept), c, s, s}
                               : std::vector<int64_t>{static_cast<int64_t>(kept), s, s, c};
    }
    *batch = Batch(std::move(data));
    return true;
  }

  std::unique_ptr<BatchSource> input_;
  // What the input reads: one volume, or a mixture's (by Batch::sources);
  // to name samples. Entries may be null.
  std::vector<std::shared_ptr<const Volume>> volumes_;
  const DecodeStageOptions options_;
  const ImagePipeline pipeline_;
  std::shared_ptr<BufferPool> pool_;
  uint32_t threads_ = 1;
  std::atomic<uint32_t> channels_{0};
  std::string description_;

  // Caller's thread only.
  std::deque<std::shared_ptr<Job>> inflight_;  // in batch order
  bool input_done_ = false;

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::shared_ptr<Job>> work_;  // jobs with samples not yet claimed
  bool stop_ = false;
  std::vector<std::thread> workers_;

  mutable std::mutex stats_mu_;
  DecodeStats stats_;
  std::vector<BadSample> skipped_samples_;  // stats_mu_
};

Result<std::unique_ptr<DecodeStage>> DecodeStage::Create(std::unique_ptr<BatchSource> input,
                                                         std::shared_ptr<const Volume> volume,
                                                         const DecodeStageOptions& options) {
  return Create(std::move(input), std::vector<std::shared_ptr<const Volume>>{std::move(volume)},
                options);
}

Result<std::unique_ptr<DecodeStage>> DecodeStage::Create(
    std::unique_ptr<BatchSource> input, std::vector<std::shared_ptr<const Volume>> volumes,
    const DecodeStageOptions& options) {
  if (input == nullptr) return Status::InvalidArgument("decode stage needs an input source");
  if (options.decode_threads > 1024) {
    return Status::InvalidArgument("decode_threads " + std::to_string(options.decode_threads) +
                                   " above 1024");
  }
  DLFS_ASSIGN_OR_RETURN(ImagePipeline pipeline, ImagePipeline::Create(options.image));
  return std::unique_ptr<DecodeStage>(new DecodeStage(
      std::make_unique<Impl>(std::move(input), std::move(volumes), options, std::move(pipeline))));
}

DecodeStage::DecodeStage(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DecodeStage::~DecodeStage() = default;
void DecodeStage::SetEpoch(uint64_t epoch) { impl_->SetEpoch(epoch); }
Result<bool> DecodeStage::Next(Batch* batch) { return impl_->Next(batch); }
Result<SourceState> DecodeStage::SaveState() const { return impl_->SaveState(); }
std::vector<BadSample> DecodeStage::skipped_samples() const { return impl_->skipped_samples(); }
Status DecodeStage::LoadState(const SourceState& state) { return impl_->LoadState(state); }
uint64_t DecodeStage::batches_per_epoch() const { return impl_->batches_per_epoch(); }
const std::string& DecodeStage::description() const { return impl_->description(); }
const ImagePipeline& DecodeStage::pipeline() const { return impl_->pipeline(); }
uint32_t DecodeStage::channels() const { return impl_->channels(); }
uint32_t DecodeStage::decode_threads() const { return impl_->threads(); }
DecodeStats DecodeStage::stats() const { return impl_->stats(); }
BatchSource& DecodeStage::input() { return impl_->input(); }

}  // namespace dlfs
