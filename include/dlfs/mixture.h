// MixtureSource: batches drawn from several volumes with weights, e.g. 70 %
// web text and 30 % code, as one BatchSource.
//
//   MixtureOptions m;
//   m.weights = {0.7, 0.3};
//   m.sampler.batch_size = 256;
//   auto mix = MixtureSource::Create({web, code}, m, LoaderOptions{});
//   for (uint64_t e = 0; ...; ++e) { (*mix)->SetEpoch(e); while (*(*mix)->Next(&b)) ...; }
//
// The epoch: epoch_samples samples (default: the most the weights allow
// before a volume runs out, min over volumes of size / weight, weights
// normalised). Volume v contributes share_v = round(epoch_samples *
// weight_v) of them (largest remainders). Which position comes from which
// volume is a shuffle of those counts (the epoch order of dlfs/sampler.h
// over share slots: position t takes slot u = P(t), slots of volume v being
// the share_v after the earlier volumes'): exact shares per epoch, and in
// any window of the epoch the shares of a random draw without replacement
// (within binomial tolerance). Volume v's j-th slot holds sample j mod n_v
// of its own order (a permutation per epoch, shuffled unless
// sampler.shuffle is false), the permutation of pass j div n_v: with
// `cycle`, a volume with fewer samples than its share is read again, each
// pass a new permutation (passes interleave over the epoch); without,
// Create refuses it. All of it is a pure function of (seed, epoch),
// computed per position alike on every rank, with nothing of the epoch's
// size stored.
//
// Ranks, batches, padding, drop_last, resuming (also elastic) and the
// epoch's split are those of one volume's Loader over the epoch's positions
// (dlfs/sampler.h, dlfs/batch_source.h). Each volume is read by its own
// Loader (read-ahead, node cache, checks, fields, skip_bad_samples as in
// LoaderOptions); batch k of the mixture is batch k of every one of them,
// merged in position order. Batch::sources() says which volume each sample
// came from, Batch::index(i) is its index there.
//
// Thread safety: as any BatchSource (one thread drives it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dlfs/batch_source.h"
#include "dlfs/loader.h"
#include "dlfs/volume.h"

namespace dlfs {

struct MixtureOptions {
  std::vector<double> weights;  // one per volume, >= 0, not all 0
  uint64_t epoch_samples = 0;   // 0: until the first volume would run out
  bool cycle = false;           // a volume that runs out starts over
  SamplerOptions sampler;       // seed, shuffle, batch size, ranks, drop_last
};

class MixtureSource final : public BatchSource {
 public:
  // InvalidArgument for weights that are negative, not finite, all zero or
  // not one per volume; for an epoch no volume's share reaches one sample;
  // or (without cycle) a volume with fewer samples than its share, naming it.
  // `loader` applies to every volume's Loader (its sampler is ignored).
  static Result<std::unique_ptr<MixtureSource>> Create(std::vector<std::shared_ptr<Volume>> volumes,
                                                       const MixtureOptions& options,
                                                       const LoaderOptions& loader);
  ~MixtureSource() override;

  void SetEpoch(uint64_t epoch) override;
  Result<bool> Next(Batch* batch) override;
  uint64_t batches_per_epoch() const override;
  const std::string& description() const override;
  SourceStats source_stats() const override;
  Result<SourceState> SaveState() const override;
  Status LoadState(const SourceState& state) override;

  uint64_t epoch_samples() const;
  // Samples of each volume in an epoch (the weights' shares).
  const std::vector<uint64_t>& shares() const;
  // This rank's (volume, index) pairs of `epoch`, in reading order.
  std::vector<std::pair<uint32_t, uint64_t>> RankSamples(uint64_t epoch) const;
  // Each volume's loader (its quarantine(), cache_note()).
  const Loader& loader(size_t volume) const;

 private:
  class Impl;
  explicit MixtureSource(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dlfs
