// DecodeStage: a BatchSource that turns another source's batches of encoded
// samples (a Loader, an MPI ShardLoader) into batches of decoded, augmented
// images — one dense tensor per batch, made on a pool of decode threads.
//
//   auto loader = dlfs::Loader::Create(vol, loader_options);
//   dlfs::DecodeStageOptions o;
//   o.image.transform = {.size = 224, .crop = dlfs::CropMode::kRandomResized, .flip = true};
//   auto stage = dlfs::DecodeStage::Create(std::move(*loader), vol, o);
//   (*stage)->SetEpoch(3);
//   dlfs::Batch batch;
//   while (*(*stage)->Next(&batch)) {            // (check errors in real code)
//     const dlfs::TensorView& t = batch.tensor(); // {N, 224, 224, 3} uint8
//     Train(t, batch.labels());
//   }
//
// Batches: batch k of an epoch holds the images of the input's batch k, in
// the same order, with the same indices and labels; tensor() is {N, H, W, C}
// (kNHWC) or {N, C, H, W} (kNCHW) with H = W = transform.size, and
// sample(i) is image i's slice of it. The images are the same whatever the
// number of decode threads: every random choice is a function of (seed,
// epoch, sample index) (dlfs/decode.h).
//
// Fields (format v2): the stage decodes sample(i), which is field 0 of an
// input read with LoaderOptions::fields; input batches of more than one
// field per sample are refused (Next() returns InvalidArgument): read only
// the image field, e.g. fields = {"jpg"} (labels come from the volume).
//
// Channels: with ColorMode::kAuto the first sample the stage sees decides
// them (3 if it is colour, 1 if gray) for the stage's whole life; other
// samples are converted to that. Set kRgb or kGray for data sets that mix.
//
// Pipelining: Next() runs on the caller's thread. It keeps up to
// prefetch_batches of the input's batches queued for the decode threads
// (pulling them from the input with the input's own Next(), on the caller's
// thread — so an MPI input keeps its calls on one thread), then waits for the
// oldest to be done. The decode threads never hold the GIL or any lock while
// decoding. The input's buffer of a batch is released as soon as the batch is
// decoded.
//
// Memory: output tensors come from a pool of buffers recycled when the last
// Batch copy referring to one is destroyed (even after the stage is gone);
// the pool keeps at most prefetch_batches + 2 idle buffers. A batch's tensor
// is the batch's alone: consumers may write into it.
//
// Errors: a sample that fails to decode makes Next() return an error for its
// batch naming the volume, the sample's index and path, and the problem
// (the next call continues with the following batch) — or, with
// skip_bad_samples, the sample is left out of its batch (which gets shorter)
// and counted in stats(). Errors of the input pass through unchanged.
//
// Thread safety: as any BatchSource, one thread drives it; stats() may be
// called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dlfs/batch_source.h"
#include "dlfs/decode.h"
#include "dlfs/status.h"
#include "dlfs/volume.h"

namespace dlfs {

struct DecodeStageOptions {
  ImageOptions image;
  uint32_t decode_threads = 0;    // 0: one per core (std::thread::hardware_concurrency)
  uint32_t prefetch_batches = 3;  // input batches queued for decoding ahead of the caller
  bool skip_bad_samples = false;  // leave undecodable samples out (counted) instead of failing
};

// Counters over the stage's life.
struct DecodeStats {
  uint64_t images = 0;   // decoded and handed out
  uint64_t skipped = 0;  // left out under skip_bad_samples
  // "volume: sample N 'path': problem" for the first few skipped samples.
  std::vector<std::string> skipped_examples;
};

class DecodeStage final : public BatchSource {
 public:
  // `input` is the source of encoded samples (the stage owns it). `volume`
  // is what the input reads, used only to name samples in errors (may be
  // null: samples are then named by index). InvalidArgument for bad options
  // (see ImagePipeline::Create); starts the decode threads.
  static Result<std::unique_ptr<DecodeStage>> Create(std::unique_ptr<BatchSource> input,
                                                     std::shared_ptr<const Volume> volume,
                                                     const DecodeStageOptions& options);
  // The same for an input that reads several volumes (a MixtureSource,
  // dlfs/mixture.h): sample i of a batch is named by volumes[sources()[i]];
  // output batches keep their sources().
  static Result<std::unique_ptr<DecodeStage>> Create(
      std::unique_ptr<BatchSource> input, std::vector<std::shared_ptr<const Volume>> volumes,
      const DecodeStageOptions& options);
  // Stops the decode threads; batches handed out stay valid.
  ~DecodeStage() override;

  // BatchSource. SetEpoch drops the batches queued for the old epoch.
  void SetEpoch(uint64_t epoch) override;
  Result<bool> Next(Batch* batch) override;
  // Resuming (dlfs/batch_source.h) through the input: the batches it read
  // ahead for decoding do not count as handed out; LoadState drops them.
  Result<SourceState> SaveState() const override;
  Status LoadState(const SourceState& state) override;
  // The samples left out as undecodable (skip_bad_samples), in the order
  // found; each keeps failing the same way, so a resumed run decides alike.
  std::vector<BadSample> skipped_samples() const;
  uint64_t batches_per_epoch() const override;
  // "decode (N threads, 224x224 random-resized, float32 NCHW) <- <input's>".
  const std::string& description() const override;

  const ImagePipeline& pipeline() const;
  // The output channel count: 1 or 3; 0 before the first batch under
  // ColorMode::kAuto.
  uint32_t channels() const;
  uint32_t decode_threads() const;
  DecodeStats stats() const;
  BatchSource& input();

 private:
  class Impl;
  explicit DecodeStage(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dlfs
