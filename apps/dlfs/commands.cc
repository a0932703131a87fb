#include "commands.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/file_util.h"
#include "dlfs/builder.h"
#include "dlfs/lmdb.h"
#include "dlfs/loader.h"
#include "dlfs/mount.h"
#include "dlfs/pack.h"
#include "dlfs/sampler.h"
#include "dlfs/verify.h"
#include "dlfs/volume.h"

namespace dlfs::cli {

namespace {

using nlohmann::json;

int Fail(const Status& st) {
  std::fprintf(stderr, "dlfs: %s\n", st.message().c_str());
  return kExitError;
}

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

// Progress lines go to stderr and only to a terminal, overwritten in place.
bool ShowProgress(bool quiet) { return !quiet && ::isatty(STDERR_FILENO); }

std::atomic<bool> g_cancel{false};
extern "C" void OnSignal(int) { g_cancel.store(true); }

Result<std::vector<std::string>> ParseClassNames(const std::string& spec) {
  std::vector<std::string> names;
  if (spec.empty()) return names;
  if (spec[0] == '@') {
    std::ifstream in(spec.substr(1));
    if (!in) return Status::FromErrno(errno, spec.substr(1));
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      names.push_back(line);
    }
    return names;
  }
  size_t pos = 0;
  while (true) {
    const size_t comma = spec.find(',', pos);
    names.push_back(spec.substr(pos, comma == spec.npos ? spec.npos : comma - pos));
    if (comma == spec.npos) break;
    pos = comma + 1;
  }
  return names;
}

// Opens a volume for a verb; `target_map` is the --target-map text.
Result<std::shared_ptr<Volume>> OpenVolume(const std::string& path, const std::string& target_map) {
  VolumeOpenOptions options;
  DLFS_ASSIGN_OR_RETURN(options.target_map, ParseTargetMap(target_map));
  return Volume::Open(path, options);
}

struct TargetUsage {
  uint64_t samples = 0;
  uint64_t bytes = 0;  // sample bytes
};

// Samples and sample bytes per target: one pass over the directory.
std::vector<TargetUsage> CountTargetUsage(const Volume& vol) {
  std::vector<TargetUsage> usage(vol.target_count());
  const SampleDirectory& d = vol.directory();
  for (uint64_t i = 0; i < d.size(); ++i) {
    const SampleInfo s = d.sample(i);
    ++usage[s.target].samples;
    usage[s.target].bytes += s.length;
  }
  return usage;
}

json TargetsJson(const Volume& vol) {
  const std::vector<TargetUsage> usage = CountTargetUsage(vol);
  json out = json::array();
  for (size_t t = 0; t < usage.size(); ++t) {
    const TargetInfo& ti = vol.info().target_details[t];
    out.push_back({{"index", t},
                   {"path", ti.path},
                   {"stored_path", ti.stored_path},
                   {"size", ti.size},
                   {"samples", usage[t].samples},
                   {"bytes", usage[t].bytes}});
  }
  return out;
}

json SampleJson(const SampleDirectory& d, uint64_t i) {
  const SampleInfo s = d.sample(i);
  json j = {{"path", d.Path(i)}, {"index", i}, {"size", s.length}};
  if (s.label == kNoLabel) {
    j["label"] = nullptr;
  } else {
    j["label"] = s.label;
    j["class"] = std::string(d.class_name(s.label));
  }
  return j;
}

void PrintSample(const SampleDirectory& d, uint64_t i, bool as_json) {
  if (as_json) {
    std::cout << SampleJson(d, i).dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
    return;
  }
  const SampleInfo s = d.sample(i);
  const std::string label = s.label == kNoLabel ? "-" : std::to_string(s.label);
  std::cout << i << '\t' << s.length << '\t' << label << '\t' << d.Path(i) << '\n';
}

// Lists every sample below directory `k`, depth first in name order.
void ListRecursive(const SampleDirectory& d, uint64_t k, bool as_json) {
  const DirInfo info = d.dir(k);
  for (uint64_t i = info.first_sample; i < uint64_t{info.first_sample} + info.sample_count; ++i) {
    PrintSample(d, i, as_json);
  }
  for (uint64_t c = info.first_child; c < uint64_t{info.first_child} + info.child_count; ++c) {
    ListRecursive(d, c, as_json);
  }
}

}  // namespace

int RunPack(const PackArgs& args) {
  PackOptions options;
  auto from = ParseSourceKind(args.from);
  if (!from.ok()) return Fail(from.status());
  options.from = *from;
  options.align = args.align;
  options.overwrite = args.force;
  options.skip_unreadable = args.skip_unreadable;
  options.lmdb_payload_only = args.datum_payload;
  // --target-path alone implies the count; with --targets both must agree.
  options.targets = args.targets.value_or(1 + static_cast<uint32_t>(args.target_paths.size()));
  if (!args.target_paths.empty() && options.targets != args.target_paths.size() + 1) {
    return Fail(Status::InvalidArgument("--targets " + std::to_string(options.targets) + " needs " +
                                        std::to_string(options.targets - 1) +
                                        " --target-path options (or none), not " +
                                        std::to_string(args.target_paths.size())));
  }
  options.target_paths = args.target_paths;
  auto names = ParseClassNames(args.class_names);
  if (!names.ok()) return Fail(names.status());
  options.class_names = std::move(*names);
  options.cancel = &g_cancel;
  const bool progress = ShowProgress(args.quiet);
  if (progress) {
    options.on_progress = [](const PackProgress& p) {
      std::fprintf(stderr, "\r  packed %llu samples, %s, %s/s%s   ",
                   static_cast<unsigned long long>(p.samples), HumanBytes(p.bytes).c_str(),
                   HumanBytes(p.seconds > 0 ? p.bytes / p.seconds : 0).c_str(),
                   p.skipped ? (", skipped " + std::to_string(p.skipped)).c_str() : "");
    };
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  auto stats = Pack(args.source, args.output, options);
  if (progress) std::fprintf(stderr, "\r\033[K");
  if (!stats.ok()) return Fail(stats.status());
  std::printf("packed %llu samples (%s, %llu classes) from %s source %s into %s in %.2f s\n",
              static_cast<unsigned long long>(stats->samples), HumanBytes(stats->bytes).c_str(),
              static_cast<unsigned long long>(stats->classes),
              std::string(SourceKindName(stats->from)).c_str(), args.source.c_str(),
              args.output.c_str(), stats->seconds);
  if (options.targets > 1) {
    std::string list;
    for (uint32_t t = 0; t < options.targets; ++t) {
      list += t == 0                         ? args.output
              : options.target_paths.empty() ? VolumeBuilder::DefaultTargetPath(args.output, t)
                                             : options.target_paths[t - 1];
      list += t + 1 < options.targets ? ", " : "";
    }
    std::printf("%u targets: %s\n", options.targets, list.c_str());
  }
  if (stats->skipped > 0) {
    std::printf("skipped %llu unreadable sources, e.g.:\n",
                static_cast<unsigned long long>(stats->skipped));
    for (const std::string& e : stats->skipped_examples) std::printf("  %s\n", e.c_str());
  }
  return kExitOk;
}

int RunInfo(const InfoArgs& args) {
  auto vol = OpenVolume(args.volume, args.target_map);
  if (!vol.ok()) return Fail(vol.status());
  const VolumeInfo& info = (*vol)->info();
  const SampleDirectory& d = (*vol)->directory();
  std::vector<std::string> classes;
  for (uint64_t c = 0; c < d.class_count(); ++c) classes.emplace_back(d.class_name(c));
  if (args.json) {
    json j = {{"path", args.volume},
              {"format_version", info.format_version},
              {"uuid", info.uuid},
              {"samples", info.sample_count},
              {"directories", info.dir_count},
              {"bytes", info.data_bytes},
              {"volume_bytes", info.volume_size},
              {"directory_bytes", info.directory_bytes},
              {"alignment", info.data_alignment},
              {"classes", info.class_count},
              {"class_names", classes},
              {"targets", info.targets},
              {"target_details", TargetsJson(**vol)},
              {"created_unix_ns", info.created_unix_ns}};
    std::cout << j.dump(2, ' ', false, json::error_handler_t::replace) << '\n';
    return kExitOk;
  }
  const double per_sample =
      info.sample_count ? static_cast<double>(info.directory_bytes) / info.sample_count : 0;
  std::printf("volume       %s\n", args.volume.c_str());
  std::printf("format       dlfs v%u, uuid %s\n", info.format_version, info.uuid.c_str());
  std::printf("samples      %llu in %llu directories\n",
              static_cast<unsigned long long>(info.sample_count),
              static_cast<unsigned long long>(info.dir_count));
  uint64_t file_bytes = 0;
  for (const TargetInfo& ti : info.target_details) file_bytes += ti.size;
  std::printf("data         %s in samples, %s %s\n", HumanBytes(info.data_bytes).c_str(),
              HumanBytes(file_bytes).c_str(),
              info.target_details.size() == 1
                  ? "file"
                  : ("in " + std::to_string(info.target_details.size()) + " files").c_str());
  std::printf("directory    %s (%.1f bytes per sample)\n", HumanBytes(info.directory_bytes).c_str(),
              per_sample);
  std::printf("alignment    %u\n", info.data_alignment);
  // Per target: its file, its size, and the samples it holds (a balanced
  // multi-target volume has about equal bytes on each).
  const std::vector<TargetUsage> usage = CountTargetUsage(**vol);
  std::printf("targets      %zu\n", info.target_details.size());
  for (size_t t = 0; t < info.target_details.size(); ++t) {
    const TargetInfo& ti = info.target_details[t];
    std::printf("  %-10zu %s: %s file, %llu samples, %s%s\n", t, ti.path.c_str(),
                HumanBytes(ti.size).c_str(), static_cast<unsigned long long>(usage[t].samples),
                HumanBytes(usage[t].bytes).c_str(), t == 0 ? " + the directory" : "");
  }
  std::printf("classes      %llu", static_cast<unsigned long long>(info.class_count));
  for (size_t c = 0; c < classes.size() && c < 20; ++c) {
    std::printf("%s%zu=%s", c == 0 ? ": " : ", ", c, classes[c].c_str());
  }
  std::printf("%s\n", classes.size() > 20 ? ", ..." : "");
  return kExitOk;
}

int RunLs(const LsArgs& args) {
  auto vol = OpenVolume(args.volume, args.target_map);
  if (!vol.ok()) return Fail(vol.status());
  const SampleDirectory& d = (*vol)->directory();
  auto entry = d.Resolve(args.dir);
  if (!entry.ok()) return Fail(entry.status().WithContext(args.volume));
  if (!entry->is_dir) {
    PrintSample(d, entry->index, args.json);
    return kExitOk;
  }
  if (args.recursive) {
    ListRecursive(d, entry->index, args.json);
    return kExitOk;
  }
  const DirInfo info = d.dir(entry->index);
  for (uint64_t c = info.first_child; c < uint64_t{info.first_child} + info.child_count; ++c) {
    const DirInfo child = d.dir(c);
    if (args.json) {
      json j = {{"path", d.DirPath(c)},
                {"type", "dir"},
                {"samples", child.sample_count},
                {"subdirs", child.child_count}};
      std::cout << j.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
    } else {
      std::cout << d.DirPath(c) << "/\n";
    }
  }
  for (uint64_t i = info.first_sample; i < uint64_t{info.first_sample} + info.sample_count; ++i) {
    PrintSample(d, i, args.json);
  }
  return kExitOk;
}

int RunCat(const CatArgs& args) {
  auto vol = OpenVolume(args.volume, args.target_map);
  if (!vol.ok()) return Fail(vol.status());
  uint64_t index = 0;
  if (args.index) {
    index = *args.index;
  } else {
    auto found = (*vol)->directory().Lookup(args.path);
    if (!found.ok()) return Fail(found.status().WithContext(args.volume));
    index = *found;
  }
  auto bytes = (*vol)->Read(index, !args.no_verify);
  if (!bytes.ok()) return Fail(bytes.status());
  const std::byte* p = bytes->data();
  size_t left = bytes->size();
  while (left > 0) {
    const ssize_t n = ::write(STDOUT_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Fail(Status::FromErrno(errno, "stdout"));
    p += n;
    left -= static_cast<size_t>(n);
  }
  return kExitOk;
}

int RunVerify(const VerifyArgs& args) {
  auto vol = OpenVolume(args.volume, args.target_map);
  if (!vol.ok()) return Fail(vol.status());
  VerifyOptions options;
  options.on_bad_sample = [](uint64_t, const Status& problem) {
    std::fprintf(stderr, "%sdlfs: %s\n", ::isatty(STDERR_FILENO) ? "\r\033[K" : "",
                 problem.message().c_str());
  };
  const uint64_t total = (*vol)->size();
  if (ShowProgress(args.quiet)) {
    options.on_progress = [total](const VerifyReport& r) {
      std::fprintf(stderr, "\r  verified %llu of %llu samples",
                   static_cast<unsigned long long>(r.samples_checked),
                   static_cast<unsigned long long>(total));
    };
  }
  VerifyReport report;
  Status st = VerifyVolume(**vol, options, &report);
  if (ShowProgress(args.quiet)) std::fprintf(stderr, "\r\033[K");
  if (!st.ok()) return Fail(st);
  if (!report.backup_superblock.ok()) {
    std::fprintf(stderr, "dlfs: %s\n", report.backup_superblock.message().c_str());
  }
  std::printf("%s: %llu samples, %s checked in %.2f s: %llu bad%s\n", args.volume.c_str(),
              static_cast<unsigned long long>(report.samples_checked),
              HumanBytes(report.bytes_checked).c_str(), report.seconds,
              static_cast<unsigned long long>(report.bad_samples),
              report.backup_superblock.ok() ? "" : ", superblock copy damaged");
  return report.bad_samples == 0 && report.backup_superblock.ok() ? kExitOk : kExitDamaged;
}

int RunEpoch(const EpochArgs& args) {
  if (LaunchedByMpirun()) return RunEpochMpi(args);
  auto vol = OpenVolume(args.volume, args.target_map);
  if (!vol.ok()) return Fail(vol.status());
  SamplerOptions so;
  so.shuffle = !args.no_shuffle;
  so.seed = args.seed;
  so.rank = args.rank;
  so.world_size = args.world;
  so.batch_size = args.batch;
  so.drop_last = args.drop_last;
  auto sampler = Sampler::Create((*vol)->size(), so);
  if (!sampler.ok()) return Fail(sampler.status());
  std::string out;
  for (uint64_t i : sampler->RankIndices(args.epoch)) {
    out += std::to_string(i);
    out += '\n';
    if (out.size() > (1 << 16)) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return kExitOk;
}

namespace {

// Empties the page cache so the next epoch reads from the device: all of it
// when we may (root), else just this volume's pages.
std::string DropCache(const Volume& vol) {
  if (DropPageCache()) return "dropped the page cache";
  for (uint32_t t = 0; t < vol.target_count(); ++t) {
    ::posix_fadvise(vol.target_fd(t), 0, 0, POSIX_FADV_DONTNEED);
  }
  return "evicted the volume from the page cache (fadvise)";
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[k];
}

}  // namespace

int RunBench(const BenchArgs& args) {
  if (LaunchedByMpirun()) return RunBenchMpi(args);
  if (args.shard_local || args.private_open) {
    return Fail(Status::InvalidArgument("--shard-local and --private-open need mpirun"));
  }
  auto vol = OpenVolume(args.volume, args.target_map);
  if (!vol.ok()) return Fail(vol.status());
  auto o = BenchLoaderOptions(args);
  if (!o.ok()) return Fail(o.status());
  auto loader = Loader::Create(*vol, *o);
  if (!loader.ok()) return Fail(loader.status());

  json epochs = json::array();
  std::vector<double> latencies;
  uint64_t total_samples = 0, total_bytes = 0, total_device = 0;
  double total_seconds = 0, total_cpu = 0;
  std::string cache_note;
  for (uint32_t e = 0; e < args.epochs; ++e) {
    if (args.drop_cache) cache_note = DropCache(**vol);
    const double cpu0 = CpuSeconds();
    const double t0 = Now();
    (*loader)->SetEpoch(e);
    uint64_t samples = 0, bytes = 0, device = 0;
    Batch batch;
    while (true) {
      auto more = (*loader)->Next(&batch);
      if (!more.ok()) return Fail(more.status());
      if (!*more) break;
      samples += batch.size();
      bytes += batch.payload_bytes();
      device += batch.device_bytes();
      latencies.push_back(batch.io_seconds());
    }
    const double secs = Now() - t0;
    const double cpu = CpuSeconds() - cpu0;
    epochs.push_back({{"epoch", e},
                      {"samples", samples},
                      {"seconds", secs},
                      {"samples_per_s", samples / secs},
                      {"mb_per_s", bytes / secs / 1e6},
                      {"cpu_s_per_gb", bytes ? cpu / (bytes / 1e9) : 0.0}});
    if (!args.json) {
      std::printf("epoch %u: %llu samples in %.2f s: %.0f samples/s, %.1f MB/s, %.3f CPU s/GB\n", e,
                  static_cast<unsigned long long>(samples), secs, samples / secs,
                  bytes / secs / 1e6, bytes ? cpu / (bytes / 1e9) : 0.0);
    }
    total_samples += samples;
    total_bytes += bytes;
    total_device += device;
    total_seconds += secs;
    total_cpu += cpu;
  }
  const double sps = total_seconds > 0 ? total_samples / total_seconds : 0;
  const double mbps = total_seconds > 0 ? total_bytes / total_seconds / 1e6 : 0;
  const double cpu_gb = total_bytes ? total_cpu / (total_bytes / 1e9) : 0;
  json j = {{"volume", args.volume},
            {"engine", (*loader)->engine_description()},
            {"targets", (*vol)->target_count()},
            {"batch", args.batch},
            {"queue_depth", args.queue_depth},
            {"io_threads", args.io_threads},
            {"coalesce", !args.no_coalesce},
            {"verify", !args.no_verify},
            {"cache", args.drop_cache ? cache_note : "as is"},
            {"samples", total_samples},
            {"payload_bytes", total_bytes},
            {"device_bytes", total_device},
            {"seconds", total_seconds},
            {"samples_per_s", sps},
            {"mb_per_s", mbps},
            {"cpu_seconds", total_cpu},
            {"cpu_s_per_gb", cpu_gb},
            {"p50_batch_ms", Percentile(latencies, 0.5) * 1e3},
            {"p99_batch_ms", Percentile(latencies, 0.99) * 1e3},
            {"epochs", epochs}};
  if (args.json) {
    std::cout << j.dump(2) << '\n';
    return kExitOk;
  }
  std::printf("engine       %s\n", (*loader)->engine_description().c_str());
  if (args.drop_cache) std::printf("cache        %s before each epoch\n", cache_note.c_str());
  std::printf("samples/s    %.0f\n", sps);
  std::printf("MB/s         %.1f (payload), %.1f (read from storage)\n", mbps,
              total_seconds > 0 ? total_device / total_seconds / 1e6 : 0);
  std::printf("CPU          %.3f s per GB delivered (user+sys)\n", cpu_gb);
  std::printf("batch I/O    p50 %.2f ms, p99 %.2f ms\n", Percentile(latencies, 0.5) * 1e3,
              Percentile(latencies, 0.99) * 1e3);
  return kExitOk;
}

int RunMount(const MountArgs& args) {
  if (!kMountSupported) return Fail(MountVolume(nullptr, "", {}));
  auto vol = OpenVolume(args.volume, args.target_map);
  if (!vol.ok()) return Fail(vol.status());
  // libfuse handles SIGINT/SIGTERM itself (unmount and return).
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  const Status st = MountVolume(
      *vol, args.mountpoint,
      {.foreground = args.foreground, .debug = args.debug, .allow_other = args.allow_other});
  return st.ok() ? kExitOk : Fail(st);
}

int RunLmdbInfo(const LmdbInfoArgs& args) {
  auto summary = SummarizeLmdb(args.db);
  if (!summary.ok()) return Fail(summary.status());
  const LmdbSummary& s = *summary;
  const LmdbStats& st = s.stats;
  json datum = nullptr;
  if (s.first_datum) {
    const DatumShape& d = *s.first_datum;
    datum = {{"channels", d.channels},     {"height", d.height},
             {"width", d.width},           {"encoded", d.encoded},
             {"data_bytes", d.data_bytes}, {"label", d.has_label ? json(d.label) : json(nullptr)}};
  }
  json j = {{"path", s.path},
            {"entries", st.entries},
            {"depth", st.depth},
            {"page_size", st.page_size},
            {"branch_pages", st.branch_pages},
            {"leaf_pages", st.leaf_pages},
            {"overflow_pages", st.overflow_pages},
            {"last_page", st.last_page},
            {"txnid", st.txnid},
            {"file_bytes", st.file_size},
            {"value_bytes", s.value_bytes},
            {"value_min", s.value_min},
            {"value_mean", s.value_mean},
            {"value_max", s.value_max},
            {"first_datum", datum}};
  if (st.entries > 0) {
    j["first_key"] = s.first_key;
    j["last_key"] = s.last_key;
  }
  if (args.json) {
    std::cout << j.dump(2, ' ', false, json::error_handler_t::replace) << '\n';
    return kExitOk;
  }
  std::printf("lmdb         %s\n", s.path.c_str());
  std::printf(
      "entries      %llu (depth %u; pages: %llu branch, %llu leaf, %llu overflow; "
      "page size %u)\n",
      static_cast<unsigned long long>(st.entries), st.depth,
      static_cast<unsigned long long>(st.branch_pages),
      static_cast<unsigned long long>(st.leaf_pages),
      static_cast<unsigned long long>(st.overflow_pages), st.page_size);
  std::printf("values       %s in total; min %llu, mean %.0f, max %llu bytes\n",
              HumanBytes(s.value_bytes).c_str(), static_cast<unsigned long long>(s.value_min),
              s.value_mean, static_cast<unsigned long long>(s.value_max));
  if (st.entries > 0) {
    std::printf("keys         '%s' .. '%s'\n", s.first_key.c_str(), s.last_key.c_str());
  }
  if (!datum.is_null()) std::printf("caffe datum  %s (first record)\n", datum.dump().c_str());
  return kExitOk;
}

}  // namespace dlfs::cli

namespace dlfs::cli {

bool DropPageCache() {
  ::sync();
  std::FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w");
  if (f == nullptr) return false;
  const bool ok = std::fputs("3", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

Result<LoaderOptions> BenchLoaderOptions(const BenchArgs& args) {
  DLFS_ASSIGN_OR_RETURN(const EngineKind engine, ParseEngineKind(args.engine));
  LoaderOptions o;
  o.batch_size = args.batch;
  o.seed = args.seed;
  o.queue_depth = args.queue_depth;
  o.io_threads = args.io_threads;
  o.prefetch_batches = args.prefetch;
  o.engine = engine;
  o.direct_io = !args.buffered;
  o.sqpoll = args.sqpoll;
  o.verify_checksums = !args.no_verify;
  o.coalesce = !args.no_coalesce;
  o.coalesce_gap = args.coalesce_gap;
  return o;
}

}  // namespace dlfs::cli

#ifndef DLFS_HAVE_MPI
namespace dlfs::cli {
bool LaunchedByMpirun() { return false; }
int RunEpochMpi(const EpochArgs&) { return kExitError; }
int RunBenchMpi(const BenchArgs&) { return kExitError; }

int RunLmdbRead(const LmdbReadArgs&) {
  std::fprintf(stderr,
               "dlfs: lmdb read needs MPI, and this dlfs was built without it "
               "(install libopenmpi-dev and rebuild)\n");
  return kExitError;
}
}  // namespace dlfs::cli
#endif
