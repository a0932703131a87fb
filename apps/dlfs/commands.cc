#include "commands.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "dlfs/builder.h"
#include "dlfs/lmdb.h"
#include "dlfs/loader.h"
#include "dlfs/mixture.h"
#include "dlfs/mount.h"
#include "dlfs/pack.h"
#include "dlfs/sampler.h"
#include "dlfs/summary.h"
#include "dlfs/verify.h"
#include "dlfs/volume.h"

namespace dlfs::cli {

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

Result<std::shared_ptr<Volume>> OpenVolume(const VolumeArgs& args) {
  VolumeOpenOptions options;
  DLFS_ASSIGN_OR_RETURN(options.target_map, ParseTargetMap(args.target_map));
  return Volume::Open(args.path, options);
}

namespace {

using nlohmann::json;

// Progress lines go to stderr and only to a terminal, overwritten in place.
bool ShowProgress(bool quiet) { return !quiet && ::isatty(STDERR_FILENO); }

// "1:05" or "2:03:04".
std::string Duration(double seconds) {
  const auto s = static_cast<unsigned long long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%llu:%02llu:%02llu", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%llu:%02llu", s / 60, s % 60);
  }
  return buf;
}

// One progress line: "<verb> N of TOTAL samples (P%), BYTES, R samples/s,
// ETA m:ss". `fraction` is how much of the work is done (from samples or
// bytes), or negative when the total is unknown.
void PrintProgress(const char* verb, uint64_t samples, uint64_t total, uint64_t bytes,
                   double seconds, double fraction, const std::string& extra = "") {
  std::string line = "\r  " + std::string(verb) + " " + std::to_string(samples);
  if (total > 0) line += " of " + std::to_string(total);
  line += " samples";
  if (fraction >= 0) {
    char pct[32];
    std::snprintf(pct, sizeof pct, " (%.1f%%)", 100 * std::min(fraction, 1.0));
    line += pct;
  }
  line += ", " + HumanBytes(bytes);
  if (seconds > 0) {
    char rate[64];
    std::snprintf(rate, sizeof rate, ", %.0f samples/s, %s/s", samples / seconds,
                  HumanBytes(bytes / seconds).c_str());
    line += rate;
  }
  line += extra;
  if (fraction > 0 && fraction < 1 && seconds > 0) {
    line += ", ETA " + Duration(seconds * (1 - fraction) / fraction);
  }
  std::fprintf(stderr, "%s\033[K", line.c_str());
}

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

json SummaryJson(const VolumeSummary& s) {
  const VolumeInfo& i = s.info;
  json fields = json::array();
  for (const FieldUsage& f : s.fields) {
    fields.push_back({{"name", f.name},
                      {"samples", f.samples},
                      {"compressed", f.compressed},
                      {"stored_bytes", f.stored_bytes},
                      {"bytes", f.decoded_bytes}});
  }
  json targets = json::array();
  for (size_t t = 0; t < i.target_details.size(); ++t) {
    const TargetInfo& ti = i.target_details[t];
    targets.push_back({{"index", t},
                       {"path", ti.path},
                       {"stored_path", ti.stored_path},
                       {"kind", NameOf(kTargetKindNames, ti.kind)},
                       {"size", ti.size},
                       {"samples", s.usage[t].samples},
                       {"bytes", s.usage[t].bytes}});
  }
  return {{"path", s.path},
          {"format_version", i.format_version},
          {"uuid", i.uuid},
          {"samples", i.sample_count},
          {"directories", i.dir_count},
          {"bytes", i.data_bytes},
          {"volume_bytes", i.volume_size},
          {"directory_bytes", i.directory_bytes},
          {"alignment", i.data_alignment},
          {"classes", i.class_count},
          {"class_names", s.class_names},
          {"targets", i.targets},
          {"target_details", targets},
          {"created_unix_ns", i.created_unix_ns},
          {"incompat_flags", s.incompat_flags},
          {"fields", fields},
          {"dictionary_bytes", s.dictionary_bytes}};
}

// "none", "zstd", "zstd-dict" (compressed with the volume's dictionary).
const char* CodecName(FieldCodec c) {
  return c == FieldCodec::kNone ? "none" : c == FieldCodec::kZstd ? "zstd" : "zstd-dict";
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
  if (d.has_fields()) {
    // Format v2: each field's name, decoded size, stored size and codec.
    json fields = json::array();
    for (const FieldInfo& f : d.Fields(i)) {
      fields.push_back({{"name", std::string(d.field_name(f.field))},
                        {"size", f.decoded_length},
                        {"stored", f.stored_length},
                        {"codec", CodecName(f.codec)}});
    }
    j["fields"] = fields;
  }
  return j;
}

// "jpg,cls,json" (text listing of a sample's fields; empty without fields).
std::string FieldList(const SampleDirectory& d, uint64_t i) {
  std::string out;
  if (!d.has_fields()) return out;
  for (const FieldInfo& f : d.Fields(i)) {
    out += out.empty() ? "" : ",";
    out += d.field_name(f.field);
    if (f.codec != FieldCodec::kNone) out += "(" + std::string(CodecName(f.codec)) + ")";
  }
  return out;
}

void PrintSample(const SampleDirectory& d, uint64_t i, bool as_json) {
  if (as_json) {
    std::cout << SampleJson(d, i).dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
    return;
  }
  const SampleInfo s = d.sample(i);
  const std::string label = s.label == kNoLabel ? "-" : std::to_string(s.label);
  std::cout << i << '\t' << s.length << '\t' << label << '\t' << d.Path(i);
  if (d.has_fields()) std::cout << '\t' << FieldList(d, i);
  std::cout << '\n';
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
          {"misses", s.cache_misses},
          {"hit_rate", lookups ? static_cast<double>(s.cache_hits) / lookups : 0.0},
          {"device_bytes", s.io.bytes},
          {"fill_bytes", s.cache_fill_bytes},
          {"fill_seconds", s.cache_fill_seconds},
          {"fill_s_per_gb",
           s.cache_fill_bytes ? s.cache_fill_seconds / (s.cache_fill_bytes / 1e9) : 0.0},
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

// The library names the option that would change an error by its PackOptions
// field; `dlfs pack` says which flag sets it instead.
Status InFlagTerms(const Status& st) {
  static constexpr std::pair<std::string_view, std::string_view> kFlags[] = {
      {"(set overwrite to", "(use --force to"},
      {"(set skip_unreadable to", "(use --skip-unreadable to"},
      {"the fields option applies", "--fields applies"},
      {"all_files packs", "--all-files packs"},
      {"(target_paths)", "(--target-path)"},
      {"target_paths (or none)", "--target-path options (or none)"}};
  std::string message = st.message();
  for (const auto& [option, flag] : kFlags) {
    if (const size_t at = message.find(option); at != message.npos) {
      message.replace(at, option.size(), flag);
    }
  }
  return Status(st.code(), std::move(message), st.sys_errno());
}

}  // namespace

int RunPack(PackArgs args) {
  PackOptions& options = args.options;
  VolumeBuilder::Options& volume = options.volume;
  // --target-path alone implies the count; with --targets both must agree.
  volume.targets = args.targets.value_or(1 + static_cast<uint32_t>(volume.target_paths.size()));
  if (!volume.target_paths.empty() && volume.targets != volume.target_paths.size() + 1) {
    return Fail(Status::InvalidArgument("--targets " + std::to_string(volume.targets) + " needs " +
                                        std::to_string(volume.targets - 1) +
                                        " --target-path options (or none), not " +
                                        std::to_string(volume.target_paths.size())));
  }
  auto names = ParseClassNames(args.class_names);
  if (!names.ok()) return Fail(names.status());
  options.class_names = std::move(*names);
  for (std::string_view rest = args.fields; !rest.empty();) {
    const size_t comma = rest.find(',');
    if (comma != 0) options.fields.emplace_back(rest.substr(0, comma));
    rest = comma == rest.npos ? std::string_view() : rest.substr(comma + 1);
  }
  if (args.dict && args.compress.empty()) {
    return Fail(Status::InvalidArgument("--dict needs --compress zstd[:LEVEL]"));
  }
  auto compression = ParseCompression(args.compress, args.dict);
  if (!compression.ok()) return Fail(compression.status().WithContext("--compress"));
  volume.compress = std::move(*compression);
  options.cancel = &g_cancel;
  const bool progress = ShowProgress(args.quiet);
  if (progress) {
    options.on_progress = [](const PackProgress& p) {
      // The importers counted their sources first: samples, or (tar) bytes.
      double fraction = -1;
      std::string extra;
      if (p.total_samples > 0) {
        fraction = static_cast<double>(p.samples) / p.total_samples;
      } else if (p.total_source_bytes > 0) {
        fraction = static_cast<double>(p.source_bytes) / p.total_source_bytes;
        extra = ", read " + HumanBytes(p.source_bytes) + " of " + HumanBytes(p.total_source_bytes);
      }
      if (p.skipped) extra += ", skipped " + std::to_string(p.skipped);
      PrintProgress("packed", p.samples, p.total_samples, p.bytes, p.seconds, fraction, extra);
    };
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  auto stats = Pack(args.source, args.output, options);
  if (progress) std::fprintf(stderr, "\r\033[K");
  if (!stats.ok()) return Fail(InFlagTerms(stats.status()));
  for (const std::string& r : stats->removed_temporaries) {
    std::fprintf(stderr, "dlfs: removed stale temporary file %s\n", r.c_str());
  }
  std::printf("packed %llu samples (%s, %llu classes) from %s source %s into %s in %.2f s\n",
              static_cast<unsigned long long>(stats->samples), HumanBytes(stats->bytes).c_str(),
              static_cast<unsigned long long>(stats->classes),
              std::string(SourceKindName(stats->from)).c_str(), args.source.c_str(),
              args.output.c_str(), stats->seconds);
  if (stats->dictionary_bytes > 0) {
    std::printf("zstd dictionary: %s, trained on the first samples' fields\n",
                HumanBytes(stats->dictionary_bytes).c_str());
  }
  if (volume.targets > 1) {
    std::string list;
    for (uint32_t t = 0; t < volume.targets; ++t) {
      list += t == 0                        ? args.output
              : volume.target_paths.empty() ? VolumeBuilder::DefaultTargetPath(args.output, t)
                                            : volume.target_paths[t - 1];
      list += t + 1 < volume.targets ? ", " : "";
    }
    std::printf("%u targets: %s\n", volume.targets, list.c_str());
  }
  if (stats->ignored() > 0) {
    // What ImageFolder would not load either; one line, with examples.
    std::string why;
    const auto part = [&](uint64_t n, const char* what) {
      if (n == 0) return;
      why += (why.empty() ? "" : ", ") + std::to_string(n) + " " + what;
    };
    part(stats->ignored_not_image, "without an image extension");
    part(stats->ignored_hidden, "hidden");
    part(stats->ignored_at_root, "at the root (no class)");
    std::string examples;
    for (const std::string& e : stats->ignored_examples) {
      examples += (examples.empty() ? "" : ", ") + e;
    }
    std::printf(
        "ignored %llu entries that ImageFolder would not load: %s (e.g. %s); "
        "--all-files packs them\n",
        static_cast<unsigned long long>(stats->ignored()), why.c_str(), examples.c_str());
  }
  if (stats->skipped > 0) {
    std::printf("skipped %llu unreadable sources, e.g.:\n",
                static_cast<unsigned long long>(stats->skipped));
    for (const std::string& e : stats->skipped_examples) std::printf("  %s\n", e.c_str());
  }
  return kExitOk;
}

int RunInfo(const InfoArgs& args) {
  auto vol = OpenVolume(args.volume);
  if (!vol.ok()) return Fail(vol.status());
  const VolumeSummary s = SummarizeVolume(**vol);
  const VolumeInfo& i = s.info;
  if (args.json) {
    std::cout << SummaryJson(s).dump(2, ' ', false, json::error_handler_t::replace) << '\n';
    return kExitOk;
  }
  std::printf("volume       %s\n", s.path.c_str());
  std::printf("format       dlfs v%u, uuid %s\n", i.format_version, i.uuid.c_str());
  std::printf("samples      %llu in %llu directories\n",
              static_cast<unsigned long long>(i.sample_count),
              static_cast<unsigned long long>(i.dir_count));
  std::printf("data         %s in samples, %s %s\n", HumanBytes(i.data_bytes).c_str(),
              HumanBytes(s.file_bytes()).c_str(),
              i.target_details.size() == 1
                  ? std::string(NameOf(kTargetKindNames, i.target_details[0].kind)).c_str()
                  : ("in " + std::to_string(i.target_details.size()) + " targets").c_str());
  std::printf("directory    %s (%.1f bytes per sample)\n", HumanBytes(i.directory_bytes).c_str(),
              s.directory_bytes_per_sample());
  std::printf("alignment    %u\n", i.data_alignment);
  std::string features;
  for (const std::string& f : s.incompat_flags) features += (features.empty() ? "" : ", ") + f;
  std::printf("features     %s\n", features.empty() ? "none (v1 layout)" : features.c_str());
  if (!s.fields.empty()) {
    // The field table: how many samples have each field, and what it costs.
    std::printf(
        "fields       %zu%s\n", s.fields.size(),
        s.dictionary_bytes ? (", zstd dictionary " + HumanBytes(s.dictionary_bytes)).c_str() : "");
    for (size_t f = 0; f < s.fields.size() && f < 50; ++f) {
      const FieldUsage& u = s.fields[f];
      std::printf("  %-10s %llu samples, %s", u.name.empty() ? "(unnamed)" : u.name.c_str(),
                  static_cast<unsigned long long>(u.samples), HumanBytes(u.decoded_bytes).c_str());
      if (u.compressed) {
        std::printf(" (%s stored; %llu zstd)", HumanBytes(u.stored_bytes).c_str(),
                    static_cast<unsigned long long>(u.compressed));
      }
      std::printf("\n");
    }
    if (s.fields.size() > 50) std::printf("  ...\n");
  }
  // Per target: its file, its size, and the samples it holds (a balanced
  // multi-target volume has about equal bytes on each).
  std::printf("targets      %zu\n", i.target_details.size());
  for (size_t t = 0; t < i.target_details.size(); ++t) {
    const TargetInfo& ti = i.target_details[t];
    std::printf("  %-10zu %s: %s %s, %llu samples, %s%s\n", t, ti.path.c_str(),
                HumanBytes(ti.size).c_str(), std::string(NameOf(kTargetKindNames, ti.kind)).c_str(),
                static_cast<unsigned long long>(s.usage[t].samples),
                HumanBytes(s.usage[t].bytes).c_str(), t == 0 ? " + the directory" : "");
  }
  std::printf("classes      %llu", static_cast<unsigned long long>(i.class_count));
  for (size_t c = 0; c < s.class_names.size() && c < 20; ++c) {
    std::printf("%s%zu=%s", c == 0 ? ": " : ", ", c, s.class_names[c].c_str());
  }
  std::printf("%s\n", s.class_names.size() > 20 ? ", ..." : "");
  return kExitOk;
}

int RunLs(const LsArgs& args) {
  auto vol = OpenVolume(args.volume);
  if (!vol.ok()) return Fail(vol.status());
  const SampleDirectory& d = (*vol)->directory();
  auto entry = d.Resolve(args.dir);
  if (!entry.ok()) return Fail(entry.status().WithContext(args.volume.path));
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
  auto vol = OpenVolume(args.volume);
  if (!vol.ok()) return Fail(vol.status());
  uint64_t index = 0;
  if (args.index) {
    index = *args.index;
  } else {
    auto found = (*vol)->directory().Lookup(args.path);
    if (!found.ok()) return Fail(found.status().WithContext(args.volume.path));
    index = *found;
  }
  if (args.decode) return RunCatDecoded(args, **vol, index);
  if (args.field) {
    auto field = (*vol)->Read(index, std::string_view(*args.field), args.verify);
    if (!field.ok()) return Fail(field.status());
    return WriteOutput(args.output, *field);
  }
  const SampleDirectory& d = (*vol)->directory();
  if (d.has_fields() &&
      (d.Fields(index).size() != 1 || d.field_name(d.Fields(index)[0].field) != "")) {
    // A multi-field (or named-field) sample has no single byte string.
    std::string names;
    for (const FieldInfo& f : d.Fields(index)) names += " " + std::string(d.field_name(f.field));
    return Fail(Status::InvalidArgument(
        args.volume.path + ": sample " + std::to_string(index) + " '" + d.Path(index) +
        "' has fields (" + (names.empty() ? " none" : names) + " ); pick one with --field"));
  }
  auto bytes = d.has_fields() ? (*vol)->Read(index, std::string_view(""), args.verify)
                              : (*vol)->Read(index, args.verify);
  if (!bytes.ok()) return Fail(bytes.status());
  return WriteOutput(args.output, *bytes);
}

int WriteOutput(const std::string& path, std::span<const std::byte> data) {
  const bool to_stdout = path.empty() || path == "-";
  ScopedFd file;
  if (!to_stdout) {
    file = ScopedFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (file.get() < 0) return Fail(Status::FromErrno(errno, path));
  }
  const int fd = to_stdout ? STDOUT_FILENO : file.get();
  const std::byte* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Fail(Status::FromErrno(errno, to_stdout ? "stdout" : path));
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (!to_stdout && ::close(file.release()) != 0) return Fail(Status::FromErrno(errno, path));
  return kExitOk;
}

int RunVerify(const VerifyArgs& args) {
  auto vol = OpenVolume(args.volume);
  if (!vol.ok()) return Fail(vol.status());
  VerifyOptions options;
  json bad = json::array();
  options.on_bad_sample = [&](uint64_t index, const Status& problem) {
    std::fprintf(stderr, "%sdlfs: %s\n", ::isatty(STDERR_FILENO) ? "\r\033[K" : "",
                 problem.message().c_str());
    // The records a loader's quarantine takes (and quarantine() lists).
    bad.push_back({{"volume", args.volume.path},
                   {"index", index},
                   {"path", (*vol)->directory().Path(index)},
                   {"reason", problem.message()}});
  };
  const uint64_t total = (*vol)->size();
  const uint64_t total_bytes = (*vol)->info().data_bytes;
  if (ShowProgress(args.quiet)) {
    options.on_progress = [total, total_bytes](const VerifyReport& r) {
      // By bytes: verify reads sequentially, so time follows bytes.
      const double fraction =
          total_bytes > 0 ? static_cast<double>(r.bytes_checked) / total_bytes
                          : static_cast<double>(r.samples_checked) / std::max<uint64_t>(total, 1);
      PrintProgress("verified", r.samples_checked, total, r.bytes_checked, r.seconds, fraction);
    };
  }
  VerifyReport report;
  Status st = VerifyVolume(**vol, options, &report);
  if (ShowProgress(args.quiet)) std::fprintf(stderr, "\r\033[K");
  if (!st.ok()) return Fail(st);
  if (!report.backup_superblock.ok()) {
    std::fprintf(stderr, "dlfs: %s\n", report.backup_superblock.message().c_str());
  }
  if (args.json) {
    const json out = {
        {"volume", args.volume.path},
        {"samples_checked", report.samples_checked},
        {"bytes_checked", report.bytes_checked},
        {"seconds", report.seconds},
        {"bad_samples", bad},
        {"superblock_copy",
         report.backup_superblock.ok() ? std::string("ok") : report.backup_superblock.message()}};
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("%s: %llu samples, %s checked in %.2f s: %llu bad%s\n", args.volume.path.c_str(),
                static_cast<unsigned long long>(report.samples_checked),
                HumanBytes(report.bytes_checked).c_str(), report.seconds,
                static_cast<unsigned long long>(report.bad_samples),
                report.backup_superblock.ok() ? "" : ", superblock copy damaged");
  }
  return report.bad_samples == 0 && report.backup_superblock.ok() ? kExitOk : kExitDamaged;
}

int RunEpoch(const EpochArgs& args) {
  if (LaunchedByMpirun()) return RunEpochMpi(args);
  auto vol = OpenVolume(args.volume);
  if (!vol.ok()) return Fail(vol.status());
  auto sampler = Sampler::Create((*vol)->size(), args.sampler);
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

int RunBench(const BenchArgs& args) {
  if (LaunchedByMpirun()) {
    if (args.decode) {
      return Fail(
          Status::NotSupported("bench --decode does not run under mpirun yet; run it "
                               "without mpirun (one process)"));
    }
    return RunBenchMpi(args);
  }
  if (args.shard_local || args.private_open) {
    return Fail(Status::InvalidArgument("--shard-local and --private-open need mpirun"));
  }
  auto vol = OpenVolume(args.volume);
  if (!vol.ok()) return Fail(vol.status());
  if (args.mixture.empty() && (!args.weights.empty() || args.epoch_samples || args.cycle)) {
    return Fail(
        Status::InvalidArgument("--weights, --epoch-samples and --cycle need several "
                                "volumes"));
  }
  if (args.decode) {
    if (!args.mixture.empty()) {
      return Fail(Status::NotSupported("bench --decode reads one volume"));
    }
    return RunBenchDecoded(args, *vol);
  }
  const LoaderOptions& o = args.source.loader;
  std::vector<std::shared_ptr<Volume>> volumes = {*vol};
  for (const std::string& path : args.mixture) {
    VolumeArgs more = args.volume;
    more.path = path;
    auto v = OpenVolume(more);
    if (!v.ok()) return Fail(v.status());
    volumes.push_back(*v);
  }
  std::unique_ptr<BatchSource> source;
  std::vector<const Loader*> loaders;
  if (volumes.size() > 1) {
    MixtureOptions m;
    m.weights = args.weights.empty() ? std::vector<double>(volumes.size(), 1.0) : args.weights;
    m.epoch_samples = args.epoch_samples;
    m.cycle = args.cycle;
    m.sampler = o.sampler;
    auto mix = MixtureSource::Create(volumes, m, o);
    if (!mix.ok()) return Fail(mix.status());
    for (size_t v = 0; v < volumes.size(); ++v) loaders.push_back(&(*mix)->loader(v));
    source = std::move(mix).value();
  } else {
    auto loader = Loader::Create(*vol, o);
    if (!loader.ok()) return Fail(loader.status());
    loaders.push_back(loader->get());
    source = std::move(loader).value();
  }
  const std::string& cache_note = loaders.front()->cache_note();
  if (!cache_note.empty()) std::fprintf(stderr, "dlfs: warning: %s\n", cache_note.c_str());
  std::vector<const Volume*> read;
  for (const auto& v : volumes) read.push_back(v.get());
  BenchOptions bench = args.bench;
  if (!args.json) {
    bench.on_epoch = [](const EpochReport& e) {
      const SourceStats& s = e.stats;
      std::printf("epoch %llu: %llu samples in %.2f s: %.0f samples/s, %.1f MB/s, %.3f CPU s/GB",
                  static_cast<unsigned long long>(e.epoch),
                  static_cast<unsigned long long>(e.samples), e.seconds, e.samples_per_s(),
                  e.mb_per_s(), e.cpu_s_per_gb());
      if (s.cache_bytes > 0) {
        const uint64_t lookups = s.cache_hits + s.cache_misses;
        std::printf("; cache hits %.0f %%, %s from the device, %s cached",
                    lookups ? 100.0 * s.cache_hits / lookups : 0.0,
                    HumanBytes(static_cast<double>(s.io.bytes)).c_str(),
                    HumanBytes(static_cast<double>(s.cache_used_bytes)).c_str());
      }
      std::printf("\n");
    };
  }
  auto report = RunEpochs(*source, read, bench);
  if (!report.ok()) return Fail(report.status());
  const EpochReport& t = report->total;
  if (args.json) {
    json epochs = json::array();
    for (const EpochReport& e : report->epochs) epochs.push_back(EpochJson(e));
    std::vector<std::string> paths = {args.volume.path};
    paths.insert(paths.end(), args.mixture.begin(), args.mixture.end());
    json j = {{"volume", paths.size() == 1 ? json(args.volume.path) : json(paths)},
              {"engine", report->source},
              {"targets", (*vol)->target_count()},
              {"batch", o.sampler.batch_size},
              {"queue_depth", o.engine.queue_depth},
              {"io_threads", o.io_threads},
              {"coalesce", o.plan.coalesce},
              {"verify", o.verify_checksums},
              {"fields", o.fields},
              {"page_cache", report->cache},
              {"samples", t.samples},
              {"payload_bytes", t.payload_bytes},
              {"device_bytes", t.device_bytes},
              {"seconds", t.seconds},
              {"samples_per_s", t.samples_per_s()},
              {"mb_per_s", t.mb_per_s()},
              {"cpu_seconds", t.cpu_seconds},
              {"cpu_s_per_gb", t.cpu_s_per_gb()},
              {"p50_batch_ms", report->p50_batch_ms},
              {"p99_batch_ms", report->p99_batch_ms},
              {"pipeline", PipelineJson(t)},
              {"memory",
               {{"buffer_pool_bytes", t.stats.buffer_bytes},
                {"cache_bytes", t.stats.cache_bytes},
                {"cache_budget", ResolveCacheBudget(o.cache_budget, ReadMemoryLimit())},
                {"cache_note", cache_note},
                {"setup_seconds", t.stats.setup_seconds}}},
              {"cache", CacheJson(t)},
              {"io_uring_flags", t.stats.uring_flags},
              {"epochs", epochs}};
    std::cout << j.dump(2) << '\n';
    return kExitOk;
  }
  std::printf("engine       %s\n", report->source.c_str());
  if (!o.fields.empty()) {
    std::string names;
    for (const std::string& f : o.fields) names += (names.empty() ? "" : ",") + f;
    std::printf("fields       %s (payload: decoded bytes)\n", names.c_str());
  }
  if (bench.drop_cache) std::printf("cache        %s before each epoch\n", report->cache.c_str());
  std::printf("samples/s    %.0f\n", t.samples_per_s());
  std::printf("MB/s         %.1f (payload), %.1f (read from storage)\n", t.mb_per_s(),
              t.device_mb_per_s());
  std::printf("CPU          %.3f s per GB delivered (user+sys)\n", t.cpu_s_per_gb());
  std::printf("batch I/O    p50 %.2f ms, p99 %.2f ms\n", report->p50_batch_ms,
              report->p99_batch_ms);
  const SourceStats& s = t.stats;
  std::string flags;
  for (const std::string& f : s.uring_flags) flags += (flags.empty() ? "" : ", ") + f;
  std::printf("io_uring     %s\n", flags.empty() ? "(no setup flags)" : flags.c_str());
  std::printf("pipeline     rings empty %.3f s of %.3f s, %.1f reads in flight on average\n",
              s.ring_empty_seconds(), t.seconds, t.mean_in_flight());
  std::printf(
      "             submit %.3f s, waiting for completions %.3f s, verify %.3f s, "
      "Next() waiting %.3f s\n",
      s.io.submit_seconds, s.io.wait_seconds, s.verify_seconds, s.next_wait_seconds);
  std::printf("memory       batch buffers %s (pre-faulted in %.3f s), node cache %s\n",
              HumanBytes(static_cast<double>(s.buffer_bytes)).c_str(), s.setup_seconds,
              s.cache_bytes ? (HumanBytes(static_cast<double>(s.cache_bytes)) + " (" +
                               HumanBytes(static_cast<double>(s.cache_used_bytes)) + " used, " +
                               std::to_string(s.cache_sharers) + " process" +
                               (s.cache_sharers == 1 ? "" : "es") + ")")
                                  .c_str()
                            : "off");
  if (s.cache_fill_bytes > 0) {
    std::printf(
        "             cache filled %s in %.3f s on its lowest-priority thread (%.2f s/GB)\n",
        HumanBytes(static_cast<double>(s.cache_fill_bytes)).c_str(), s.cache_fill_seconds,
        s.cache_fill_seconds / (s.cache_fill_bytes / 1e9));
  }
  return kExitOk;
}

int RunMount(const MountArgs& args) {
  if (!kMountSupported) return Fail(MountVolume(nullptr, "", {}));
  auto vol = OpenVolume(args.volume);
  if (!vol.ok()) return Fail(vol.status());
  // libfuse handles SIGINT/SIGTERM itself (unmount and return).
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  const Status st = MountVolume(*vol, args.mountpoint, args.options);
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
