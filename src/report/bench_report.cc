// The benchmark reports of dlfs_tools/report.h: `dlfs bench`, with and without
// --decode.
#include <nlohmann/json.hpp>

#include "dlfs/enum_names.h"
#include "dlfs/memory.h"
#include "dlfs_tools/report.h"
#include "report/report_util.h"

namespace dlfs {

using nlohmann::json;
using report_internal::Printf;

namespace {

// Where an epoch's time went (docs/benchmarks.md, "Where the time goes").
json PipelineJson(const EpochReport& e) {
  const SourceStats& s = e.stats;
  return {{"ring_empty_seconds", s.ring_empty_seconds()},
          {"ring_empty_fraction", e.seconds > 0 ? s.ring_empty_seconds() / e.seconds : 0},
          {"mean_reads_in_flight", e.mean_in_flight()},
          {"submit_seconds", s.io.submit_seconds},
          {"reap_wait_seconds", s.io.wait_seconds},
          {"verify_seconds", s.verify_seconds},
          {"next_wait_seconds", s.next_wait_seconds},
          {"device_reads", s.io.ops},
          {"read_requests", s.io.requests},
          {"submit_calls", s.io.submits},
          {"io_bytes", s.io.bytes},
          {"engines", s.engines}};
}

// The node cache in an epoch (or a run): what it served and what it cost.
json CacheJson(const EpochReport& e) {
  const SourceStats& s = e.stats;
  const uint64_t lookups = s.cache_hits + s.cache_misses;
  return {{"capacity_bytes", s.cache_bytes},
          {"used_bytes", s.cache_used_bytes},
          {"hits", s.cache_hits},
          {"hit_bytes", s.cache_hit_bytes},
          {"misses", s.cache_misses},
          {"hit_rate", lookups ? static_cast<double>(s.cache_hits) / lookups : 0.0},
          {"device_bytes", s.io.bytes},
          {"fill_bytes", s.cache_fill_bytes},
          {"fill_seconds", s.cache_fill_seconds},
          {"fill_s_per_gb",
           s.cache_fill_bytes ? s.cache_fill_seconds / (s.cache_fill_bytes / 1e9) : 0.0},
          {"scan_bytes", s.cache_scan_bytes},
          {"scan_seconds", s.cache_scan_seconds},
          {"fill_cpu_seconds", s.cache_fill_cpu_seconds},
          {"plan", s.cache_fill_plan},
          {"sharers", s.cache_sharers},
          {"shared", s.cache_shared}};
}

json EpochJson(const EpochReport& e) {
  return {{"epoch", e.epoch},
          {"samples", e.samples},
          {"seconds", e.seconds},
          {"samples_per_s", e.samples_per_s()},
          {"mb_per_s", e.mb_per_s()},
          {"cpu_s_per_gb", e.cpu_s_per_gb()},
          {"pipeline", PipelineJson(e)},
          {"cache", CacheJson(e)}};
}

json BenchJson(const std::vector<std::string>& paths, const LoaderOptions& o,
               const VolumeBenchResult& run) {
  const BenchReport& report = run.report;
  const EpochReport& t = report.total;
  json epochs = json::array();
  for (const EpochReport& e : report.epochs) epochs.push_back(EpochJson(e));
  const std::string first = paths.empty() ? "" : paths.front();
  return {{"volume", paths.size() == 1 ? json(first) : json(paths)},
          {"engine", report.source},
          {"targets", run.targets},
          {"batch", o.sampler.batch_size},
          {"queue_depth", o.engine.queue_depth},
          {"io_threads", o.io_threads > 0 ? o.io_threads : t.stats.engines},
          {"coalesce", o.plan.coalesce},
          {"verify", o.verify_checksums},
          {"fields", o.fields},
          {"page_cache", report.cache},
          {"samples", t.samples},
          {"payload_bytes", t.payload_bytes},
          {"device_bytes", t.device_bytes},
          {"seconds", t.seconds},
          {"samples_per_s", t.samples_per_s()},
          {"mb_per_s", t.mb_per_s()},
          {"cpu_seconds", t.cpu_seconds},
          {"cpu_s_per_gb", t.cpu_s_per_gb()},
          {"p50_batch_ms", report.p50_batch_ms},
          {"p99_batch_ms", report.p99_batch_ms},
          {"pipeline", PipelineJson(t)},
          {"memory",
           {{"buffer_pool_bytes", t.stats.buffer_bytes},
            {"cache_bytes", t.stats.cache_bytes},
            {"cache_budget", t.stats.cache_budget},
            {"cache_note", run.cache_note},
            {"setup_seconds", t.stats.setup_seconds}}},
          {"cache", CacheJson(t)},
          {"io_uring_flags", t.stats.uring_flags},
          {"epochs", epochs}};
}

std::string BenchText(const BenchReport& report, const LoaderOptions& o, bool drop_cache) {
  const EpochReport& t = report.total;
  std::string out = Printf("engine       %s\n", report.source.c_str());
  if (!o.fields.empty()) {
    std::string names;
    for (const std::string& f : o.fields) names += (names.empty() ? "" : ",") + f;
    out += Printf("fields       %s (payload: decoded bytes)\n", names.c_str());
  }
  if (drop_cache) out += Printf("cache        %s before each epoch\n", report.cache.c_str());
  out += Printf("samples/s    %.0f\n", t.samples_per_s());
  out += Printf("MB/s         %.1f (payload), %.1f (read from storage)\n", t.mb_per_s(),
                t.device_mb_per_s());
  out += Printf("CPU          %.3f s per GB delivered (user+sys)\n", t.cpu_s_per_gb());
  out +=
      Printf("batch I/O    p50 %.2f ms, p99 %.2f ms\n", report.p50_batch_ms, report.p99_batch_ms);
  const SourceStats& s = t.stats;
  std::string flags;
  for (const std::string& f : s.uring_flags) flags += (flags.empty() ? "" : ", ") + f;
  // Only where io_uring reads (not a pread pool, NBD or S3).
  if (!flags.empty() || report.source.find("io_uring") != std::string::npos) {
    out += Printf("io_uring     %s\n", flags.empty() ? "(no setup flags)" : flags.c_str());
  }
  out += Printf("pipeline     rings empty %.3f s of %.3f s, %.1f reads in flight on average\n",
                s.ring_empty_seconds(), t.seconds, t.mean_in_flight());
  out += Printf(
      "             submit %.3f s, waiting for completions %.3f s, verify %.3f s, "
      "Next() waiting %.3f s\n",
      s.io.submit_seconds, s.io.wait_seconds, s.verify_seconds, s.next_wait_seconds);
  const std::string cache = s.cache_bytes
                                ? HumanBytes(static_cast<double>(s.cache_bytes)) + " (" +
                                      HumanBytes(static_cast<double>(s.cache_used_bytes)) +
                                      " used, " + std::to_string(s.cache_sharers) + " process" +
                                      (s.cache_sharers == 1 ? "" : "es") + ")"
                                : "off";
  out += Printf("memory       batch buffers %s (pre-faulted in %.3f s), node cache %s\n",
                HumanBytes(static_cast<double>(s.buffer_bytes)).c_str(), s.setup_seconds,
                cache.c_str());
  if (s.cache_fill_bytes > 0) {
    out += Printf(
        "             cache filled %s: %.3f s reading %s in large windows, %.3f s copying "
        "(%.2f s/GB), %.3f CPU s\n",
        HumanBytes(static_cast<double>(s.cache_fill_bytes)).c_str(), s.cache_scan_seconds,
        HumanBytes(static_cast<double>(s.cache_scan_bytes)).c_str(), s.cache_fill_seconds,
        s.cache_fill_seconds / (s.cache_fill_bytes / 1e9), s.cache_fill_cpu_seconds);
  }
  if (!s.cache_fill_plan.empty()) {
    out += Printf("             cache plan: %s\n", s.cache_fill_plan.c_str());
  }
  return out;
}

std::string DecodeBenchReport(const std::string& path, const VolumeBenchOptions& options,
                              const VolumeBenchResult& run, ReportFormat format) {
  const BenchReport& report = run.report;
  const EpochReport& t = report.total;
  const double cpu_ms = t.samples ? t.cpu_seconds / t.samples * 1e3 : 0;
  const ImageOptions& image = options.decode->image;
  const TransformOptions& tr = image.transform;
  if (format == ReportFormat::kJson) {
    json epochs = json::array();
    for (const EpochReport& e : report.epochs) {
      epochs.push_back({{"epoch", e.epoch},
                        {"images", e.samples},
                        {"seconds", e.seconds},
                        {"images_per_s", e.samples_per_s()},
                        {"mb_per_s", e.mb_per_s()},
                        {"cpu_seconds", e.cpu_seconds}});
    }
    const OutputOptions& out = image.output;
    return report_internal::Dump({{"volume", path},
                                  {"source", report.source},
                                  {"batch", options.loader.sampler.batch_size},
                                  {"decode_threads", run.decode_threads},
                                  {"size", tr.size},
                                  {"crop", std::string(NameOf(kCropModeNames, tr.crop))},
                                  {"flip", tr.flip},
                                  {"dtype", std::string(NameOf(kDTypeNames, out.dtype))},
                                  {"layout", std::string(NameOf(kOutputLayoutNames, out.layout))},
                                  {"channels", run.channels},
                                  {"cache", report.cache},
                                  {"images", t.samples},
                                  {"skipped", run.decode_stats.skipped},
                                  {"payload_bytes", t.payload_bytes},
                                  {"device_bytes", t.device_bytes},
                                  {"seconds", t.seconds},
                                  {"images_per_s", t.samples_per_s()},
                                  {"samples_per_s", t.samples_per_s()},
                                  {"mb_per_s", t.mb_per_s()},
                                  {"cpu_seconds", t.cpu_seconds},
                                  {"cpu_ms_per_image", cpu_ms},
                                  {"cpu_s_per_gb", t.cpu_s_per_gb()},
                                  {"p50_batch_io_ms", report.p50_batch_ms},
                                  {"p99_batch_io_ms", report.p99_batch_ms},
                                  {"epochs", epochs}},
                                 2);
  }
  std::string out = Printf("source       %s\n", report.source.c_str());
  if (options.bench.drop_cache) {
    out += Printf("cache        %s before each epoch\n", report.cache.c_str());
  }
  out += Printf("images/s     %.0f (%ux%u, %u channels)\n", t.samples_per_s(), tr.size, tr.size,
                run.channels);
  out += Printf("CPU          %.3f ms per image (user+sys, all threads); %.3f s per GB read\n",
                cpu_ms, t.cpu_s_per_gb());
  out += Printf("MB/s         %.1f (encoded samples), %.1f (read from storage)\n", t.mb_per_s(),
                t.device_mb_per_s());
  out +=
      Printf("batch I/O    p50 %.2f ms, p99 %.2f ms\n", report.p50_batch_ms, report.p99_batch_ms);
  if (run.decode_stats.skipped > 0) {
    out += Printf("skipped      %llu undecodable samples, e.g.:\n",
                  static_cast<unsigned long long>(run.decode_stats.skipped));
    for (const std::string& e : run.decode_stats.skipped_examples) out += "  " + e + "\n";
  }
  return out;
}

}  // namespace

std::string FormatEpochLine(const EpochReport& e, bool decode) {
  if (decode) {
    return Printf(
        "epoch %llu: %llu images in %.2f s: %.0f images/s, %.1f MB/s read, %.3f CPU ms/image\n",
        static_cast<unsigned long long>(e.epoch), static_cast<unsigned long long>(e.samples),
        e.seconds, e.samples_per_s(), e.mb_per_s(),
        e.samples ? e.cpu_seconds / e.samples * 1e3 : 0.0);
  }
  const SourceStats& s = e.stats;
  std::string line =
      Printf("epoch %llu: %llu samples in %.2f s: %.0f samples/s, %.1f MB/s, %.3f CPU s/GB",
             static_cast<unsigned long long>(e.epoch), static_cast<unsigned long long>(e.samples),
             e.seconds, e.samples_per_s(), e.mb_per_s(), e.cpu_s_per_gb());
  // The epoch's own samples: what their batches read from the device
  // (the engines' counters would add reads ahead for the next epoch and
  // the cache's fill, and so not add up to the total's figure).
  if (s.cache_bytes > 0 && s.cache_used_bytes == 0 && s.cache_hits == 0) {
    line += Printf("; %s from the device, node cache empty (see its plan)",
                   HumanBytes(static_cast<double>(e.device_bytes)).c_str());
  } else if (s.cache_bytes > 0) {
    const uint64_t lookups = s.cache_hits + s.cache_misses;
    line += Printf("; cache hits %.0f %%, %s from the device, %s cached",
                   lookups ? 100.0 * s.cache_hits / lookups : 0.0,
                   HumanBytes(static_cast<double>(e.device_bytes)).c_str(),
                   HumanBytes(static_cast<double>(s.cache_used_bytes)).c_str());
  }
  return line + '\n';
}

std::string FormatVolumeBenchReport(const std::vector<std::string>& paths,
                                    const VolumeBenchOptions& options, const VolumeBenchResult& run,
                                    ReportFormat format) {
  if (options.decode) return DecodeBenchReport(paths.front(), options, run, format);
  if (format == ReportFormat::kJson) {
    return report_internal::Dump(BenchJson(paths, options.loader, run), 2);
  }
  return BenchText(run.report, options.loader, options.bench.drop_cache);
}

}  // namespace dlfs
