// Internal to src/builder: the threads that prepare images while a
// VolumeBuilder writes (VolumeBuilder::Options::images, dlfs/image_prep.h).
//
// The builder hands over each finished sample whole (its fields' bytes) in
// the order added; the threads prepare its image fields (PrepareImage) in
// any order; the builder takes the results back in the order added, so the
// volume does not depend on the number of threads or their timing.
//
// Thread safety: Submit, TakeNext and in_flight are called from the
// builder's thread only; the workers touch nothing but the queue, the
// results and their own workspace.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dlfs/image_prep.h"
#include "dlfs/status.h"

namespace dlfs::builder_internal {

// One sample on its way through the stage.
struct PrepSample {
  uint64_t sample = 0;  // its number in the builder (order added)
  std::string path;     // its path in the volume (kProportion's choice, messages)
  std::string source;   // where it came from, for messages ("" if unknown)
  struct Field {
    uint64_t index = 0;  // into the builder's fields_
    std::string name;
    bool image = false;            // IsImageField(name): prepared; other fields pass through
    std::vector<std::byte> bytes;  // as added; the prepared bytes once done
    uint64_t given_bytes = 0;      // bytes.size() as added
    // Image fields, once done: what became of them.
    PreparedImage result;
  };
  std::vector<Field> fields;
  Status status;  // once done: the first image field that could not be prepared
};

class ImageStage {
 public:
  // Starts `threads` (>= 1) workers preparing with `options`.
  ImageStage(const ImagePrepOptions& options, uint32_t threads);
  // Stops the workers; samples not taken back are dropped.
  ~ImageStage();
  ImageStage(const ImageStage&) = delete;
  ImageStage& operator=(const ImageStage&) = delete;

  void Submit(PrepSample sample);
  // The oldest sample not taken back yet, once it is done: waits for it
  // when `wait`, else nullopt if it is not done (or none is in flight).
  std::optional<PrepSample> TakeNext(bool wait);
  // Samples submitted and not taken back.
  uint64_t in_flight() const { return submitted_ - taken_; }
  // How many the builder lets be in flight before it waits: enough to keep
  // every thread busy while it writes.
  uint64_t window() const { return window_; }

 private:
  void Work();

  const ImagePrepOptions options_;
  const uint64_t window_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable work_cv_;                    // a job was queued, or stop
  std::condition_variable done_cv_;                    // a job is done
  std::deque<std::pair<uint64_t, PrepSample>> queue_;  // (sequence, sample)
  std::map<uint64_t, PrepSample> done_;                // by sequence
  bool stop_ = false;
  uint64_t submitted_ = 0;  // builder's thread only
  uint64_t taken_ = 0;      // builder's thread only
};

}  // namespace dlfs::builder_internal
