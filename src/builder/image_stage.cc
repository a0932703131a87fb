#include "builder/image_stage.h"

#include <algorithm>
#include <utility>

namespace dlfs::builder_internal {

namespace {

// Prepares the image fields of `s` in place; the first failure stops it.
void Prepare(ImageWorkspace& ws, const ImagePrepOptions& options, PrepSample& s) {
  for (PrepSample::Field& f : s.fields) {
    if (!f.image) continue;
    Result<PreparedImage> r = PrepareImage(ws, f.bytes, options, s.path, f.name);
    if (!r.ok()) {
      std::string where = s.source.empty() ? "" : s.source + ": ";
      where += "sample '" + s.path + "'";
      if (!f.name.empty()) where += " field '" + f.name + "'";
      s.status = Status(r.status().code(),
                        where + ": cannot prepare the image: " + r.status().message() +
                            " (set skip_unreadable to leave out images that cannot be prepared)");
      return;
    }
    f.result = std::move(*r);
    if (f.result.changed) f.bytes = std::move(f.result.bytes);
    f.result.bytes = {};
  }
}

}  // namespace

ImageStage::ImageStage(const ImagePrepOptions& options, uint32_t threads)
    : options_(options), window_(2 * uint64_t{std::max(threads, 1u)} + 2) {
  for (uint32_t t = 0; t < std::max(threads, 1u); ++t) threads_.emplace_back([this] { Work(); });
}

ImageStage::~ImageStage() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ImageStage::Submit(PrepSample sample) {
  {
    std::lock_guard lock(mu_);
    queue_.emplace_back(submitted_++, std::move(sample));
  }
  work_cv_.notify_one();
}

std::optional<PrepSample> ImageStage::TakeNext(bool wait) {
  if (in_flight() == 0) return std::nullopt;
  std::unique_lock lock(mu_);
  if (wait) done_cv_.wait(lock, [this] { return done_.contains(taken_); });
  auto it = done_.find(taken_);
  if (it == done_.end()) return std::nullopt;
  PrepSample s = std::move(it->second);
  done_.erase(it);
  ++taken_;
  return s;
}

void ImageStage::Work() {
  ImageWorkspace ws;  // this thread's decoders, encoders and buffers
  while (true) {
    std::pair<uint64_t, PrepSample> job;
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    Prepare(ws, options_, job.second);
    {
      std::lock_guard lock(mu_);
      done_.emplace(job.first, std::move(job.second));
    }
    done_cv_.notify_all();
  }
}

}  // namespace dlfs::builder_internal
