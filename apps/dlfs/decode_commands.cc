// `dlfs cat --decode` and `dlfs bench --decode`: the decode pipeline
// (dlfs/decode.h, dlfs/decode_stage.h) from the command line. The work is the
// library's; this file formats.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "dlfs/decode.h"
#include "dlfs/decode_stage.h"

namespace dlfs::cli {

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Status Named(const Volume& v, uint64_t index, const Status& st) {
  return st.WithContext(v.path() + ": sample " + std::to_string(index) + " (" +
                        v.directory().Path(index) + ")");
}

}  // namespace

int RunCatDecoded(const CatArgs& args, const Volume& volume, uint64_t index) {
  auto bytes = volume.Read(index, args.verify);
  if (!bytes.ok()) return Fail(bytes.status());
  ImageWorkspace ws;
  Image image;
  if (!args.transform) {
    auto decoded = DecodeImage(ws, *bytes, args.image.decode);
    if (!decoded.ok()) return Fail(Named(volume, index, decoded.status()));
    image = std::move(*decoded);
  } else {
    // The transforms as a training run would apply them to this sample in
    // this epoch, as 8-bit HWC pixels one can look at.
    ImageOptions o = args.image;
    o.output = {};
    auto pipeline = ImagePipeline::Create(o);
    if (!pipeline.ok()) return Fail(pipeline.status());
    std::vector<int64_t> shape;
    auto out = pipeline->Run(ws, *bytes, args.epoch, index, &shape);
    if (!out.ok()) return Fail(Named(volume, index, out.status()));
    image.height = static_cast<uint32_t>(shape[0]);
    image.width = static_cast<uint32_t>(shape[1]);
    image.channels = static_cast<uint32_t>(shape[2]);
    image.pixels.resize(out->size());
    std::memcpy(image.pixels.data(), out->data(), out->size());
  }
  if (EndsWith(args.output, ".png")) {
    auto png = EncodePng(image);
    if (!png.ok()) return Fail(png.status());
    return WriteOutput(args.output, *png);
  }
  return WriteOutput(args.output, std::as_bytes(std::span(image.pixels)));
}

int RunBenchDecoded(const BenchArgs& args, std::shared_ptr<Volume> volume) {
  const LoaderOptions& lo = args.source.loader;
  auto loader = Loader::Create(volume, lo);
  if (!loader.ok()) return Fail(loader.status());
  DecodeStageOptions o = args.decode_stage;
  o.image.transform.seed = lo.sampler.seed;  // one seed for the order and the crops
  auto stage = DecodeStage::Create(std::move(*loader), volume, o);
  if (!stage.ok()) return Fail(stage.status());
  BenchOptions bench = args.bench;
  if (!args.json) {
    bench.on_epoch = [](const EpochReport& e) {
      std::printf(
          "epoch %llu: %llu images in %.2f s: %.0f images/s, %.1f MB/s read, %.3f CPU ms/image\n",
          static_cast<unsigned long long>(e.epoch), static_cast<unsigned long long>(e.samples),
          e.seconds, e.samples_per_s(), e.mb_per_s(),
          e.samples ? e.cpu_seconds / e.samples * 1e3 : 0.0);
    };
  }
  auto report = RunEpochs(**stage, *volume, bench);
  if (!report.ok()) return Fail(report.status());
  const EpochReport& t = report->total;
  const DecodeStats stats = (*stage)->stats();
  const double cpu_ms = t.samples ? t.cpu_seconds / t.samples * 1e3 : 0;
  const TransformOptions& tr = o.image.transform;
  if (args.json) {
    using nlohmann::json;
    json epochs = json::array();
    for (const EpochReport& e : report->epochs) {
      epochs.push_back({{"epoch", e.epoch},
                        {"images", e.samples},
                        {"seconds", e.seconds},
                        {"images_per_s", e.samples_per_s()},
                        {"mb_per_s", e.mb_per_s()},
                        {"cpu_seconds", e.cpu_seconds}});
    }
    json j = {{"volume", args.volume.path},
              {"source", report->source},
              {"batch", lo.sampler.batch_size},
              {"decode_threads", (*stage)->decode_threads()},
              {"size", tr.size},
              {"crop", std::string(NameOf(kCropModeNames, tr.crop))},
              {"flip", tr.flip},
              {"dtype", std::string(NameOf(kDTypeNames, o.image.output.dtype))},
              {"layout", std::string(NameOf(kOutputLayoutNames, o.image.output.layout))},
              {"channels", (*stage)->channels()},
              {"cache", report->cache},
              {"images", t.samples},
              {"skipped", stats.skipped},
              {"payload_bytes", t.payload_bytes},
              {"device_bytes", t.device_bytes},
              {"seconds", t.seconds},
              {"images_per_s", t.samples_per_s()},
              {"samples_per_s", t.samples_per_s()},
              {"mb_per_s", t.mb_per_s()},
              {"cpu_seconds", t.cpu_seconds},
              {"cpu_ms_per_image", cpu_ms},
              {"cpu_s_per_gb", t.cpu_s_per_gb()},
              {"p50_batch_io_ms", report->p50_batch_ms},
              {"p99_batch_io_ms", report->p99_batch_ms},
              {"epochs", epochs}};
    std::cout << j.dump(2) << '\n';
    return kExitOk;
  }
  std::printf("source       %s\n", report->source.c_str());
  if (bench.drop_cache) std::printf("cache        %s before each epoch\n", report->cache.c_str());
  std::printf("images/s     %.0f (%ux%u, %u channels)\n", t.samples_per_s(), tr.size, tr.size,
              (*stage)->channels());
  std::printf("CPU          %.3f ms per image (user+sys, all threads); %.3f s per GB read\n",
              cpu_ms, t.cpu_s_per_gb());
  std::printf("MB/s         %.1f (encoded samples), %.1f (read from storage)\n", t.mb_per_s(),
              t.device_mb_per_s());
  std::printf("batch I/O    p50 %.2f ms, p99 %.2f ms\n", report->p50_batch_ms,
              report->p99_batch_ms);
  if (stats.skipped > 0) {
    std::printf("skipped      %llu undecodable samples, e.g.:\n",
                static_cast<unsigned long long>(stats.skipped));
    for (const std::string& e : stats.skipped_examples) std::printf("  %s\n", e.c_str());
  }
  return kExitOk;
}

}  // namespace dlfs::cli
