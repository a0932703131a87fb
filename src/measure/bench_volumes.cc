#include "dlfs_tools/bench_volumes.h"

#include "dlfs/mixture.h"

namespace dlfs {

Result<VolumeBenchResult> BenchVolumes(const std::vector<std::string>& paths,
                                       const VolumeBenchOptions& options) {
  if (paths.empty()) return Status::InvalidArgument("no volume to read");
  std::vector<std::shared_ptr<Volume>> volumes;
  for (const std::string& path : paths) {
    DLFS_ASSIGN_OR_RETURN(std::shared_ptr<Volume> volume, Volume::Open(path, options.open));
    volumes.push_back(std::move(volume));
  }
  if (volumes.size() == 1 && (!options.weights.empty() || options.epoch_samples || options.cycle)) {
    return Status::InvalidArgument("weights, epoch_samples and cycle need several volumes");
  }
  if (volumes.size() > 1 && options.decode) {
    return Status::NotSupported("decode reads one volume, not a mixture");
  }
  VolumeBenchResult result;
  result.targets = volumes.front()->target_count();
  std::unique_ptr<BatchSource> source;
  const Loader* first = nullptr;
  if (volumes.size() > 1) {
    MixtureOptions m;
    m.weights =
        options.weights.empty() ? std::vector<double>(volumes.size(), 1.0) : options.weights;
    m.epoch_samples = options.epoch_samples;
    m.cycle = options.cycle;
    m.sampler = options.loader.sampler;
    DLFS_ASSIGN_OR_RETURN(std::unique_ptr<MixtureSource> mix,
                          MixtureSource::Create(volumes, m, options.loader));
    first = &mix->loader(0);
    source = std::move(mix);
  } else {
    DLFS_ASSIGN_OR_RETURN(std::unique_ptr<Loader> loader,
                          Loader::Create(volumes.front(), options.loader));
    first = loader.get();
    source = std::move(loader);
  }
  result.cache_note = first->cache_note();
  DecodeStage* stage = nullptr;
  if (options.decode) {
    DecodeStageOptions o = *options.decode;
    o.image.transform.seed = options.loader.sampler.seed;
    DLFS_ASSIGN_OR_RETURN(std::unique_ptr<DecodeStage> decoding,
                          DecodeStage::Create(std::move(source), volumes.front(), o));
    stage = decoding.get();
    source = std::move(decoding);
  }
  if (!result.cache_note.empty() && options.on_cache_note) {
    options.on_cache_note(result.cache_note);
  }
  std::vector<const Volume*> read;
  for (const auto& v : volumes) read.push_back(v.get());
  DLFS_ASSIGN_OR_RETURN(result.report, RunEpochs(*source, read, options.bench));
  if (stage != nullptr) {
    result.decode_threads = stage->decode_threads();
    result.channels = stage->channels();
    result.decode_stats = stage->stats();
  }
  return result;
}

}  // namespace dlfs
