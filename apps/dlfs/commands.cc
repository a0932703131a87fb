#include "commands.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "dlfs/pack.h"
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

Result<std::shared_ptr<Volume>> OpenVolume(const std::string& path) { return Volume::Open(path); }

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
  std::printf("data         %s in samples, %s file\n", HumanBytes(info.data_bytes).c_str(),
              HumanBytes(info.volume_size).c_str());
  std::printf("directory    %s (%.1f bytes per sample)\n", HumanBytes(info.directory_bytes).c_str(),
              per_sample);
  std::printf("alignment    %u\n", info.data_alignment);
  std::printf("targets      %s\n", info.targets.front().c_str());
  std::printf("classes      %llu", static_cast<unsigned long long>(info.class_count));
  for (size_t c = 0; c < classes.size() && c < 20; ++c) {
    std::printf("%s%zu=%s", c == 0 ? ": " : ", ", c, classes[c].c_str());
  }
  std::printf("%s\n", classes.size() > 20 ? ", ..." : "");
  return kExitOk;
}

int RunLs(const LsArgs& args) {
  auto vol = OpenVolume(args.volume);
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
  auto vol = OpenVolume(args.volume);
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
  auto vol = OpenVolume(args.volume);
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

}  // namespace dlfs::cli
