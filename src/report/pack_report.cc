// `dlfs pack`'s progress line and summary (dlfs/report.h).
#include "dlfs/report.h"
#include "report/report_util.h"

namespace dlfs {

using report_internal::Printf;

std::string FormatPackProgress(const PackProgress& p) {
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
  return ProgressLine("packed", p.samples, p.total_samples, p.bytes, p.seconds, fraction, extra);
}

std::string FormatPackReport(const PackStats& stats, const std::string& source,
                             const std::string& output, const VolumeBuilder::Options& volume) {
  std::string out =
      Printf("packed %llu samples (%s, %llu classes) from %s source %s into %s in %.2f s\n",
             static_cast<unsigned long long>(stats.samples), HumanBytes(stats.bytes).c_str(),
             static_cast<unsigned long long>(stats.classes),
             std::string(SourceKindName(stats.from)).c_str(), source.c_str(), output.c_str(),
             stats.seconds);
  if (stats.dictionary_bytes > 0) {
    out += Printf("zstd dictionary: %s, trained on the first samples' fields\n",
                  HumanBytes(stats.dictionary_bytes).c_str());
  }
  if (volume.images.enabled()) {
    const ImagePrepStats& i = stats.images;
    out += Printf(
        "prepared %llu images (%s): %llu changed", static_cast<unsigned long long>(i.images),
        DescribeImagePrep(volume.images).c_str(), static_cast<unsigned long long>(i.changed));
    if (i.changed > 0) {
      out += Printf(
          " (%llu resized; %llu stored as JPEG, %llu as PNG, %llu as raw pixels)",
          static_cast<unsigned long long>(i.resized), static_cast<unsigned long long>(i.as_jpeg),
          static_cast<unsigned long long>(i.as_png), static_cast<unsigned long long>(i.as_raw));
    }
    out += Printf(", %llu as they came; image bytes %s -> %s\n",
                  static_cast<unsigned long long>(i.images - i.changed),
                  HumanBytes(i.bytes_in).c_str(), HumanBytes(i.bytes_out).c_str());
  }
  if (const std::vector<std::string> paths = volume.TargetPaths(output); paths.size() > 1) {
    std::string list;
    for (const std::string& path : paths) list += (list.empty() ? "" : ", ") + path;
    out += Printf("%zu targets: %s\n", paths.size(), list.c_str());
  }
  if (stats.ignored() > 0) {
    // What ImageFolder would not load either: one line, with examples.
    std::string why, examples;
    const auto part = [&](uint64_t n, const char* what) {
      if (n > 0) why += (why.empty() ? "" : ", ") + std::to_string(n) + " " + what;
    };
    part(stats.ignored_not_image, "without an image extension");
    part(stats.ignored_hidden, "hidden");
    part(stats.ignored_at_root, "at the root (no class)");
    for (const std::string& e : stats.ignored_examples) {
      examples += (examples.empty() ? "" : ", ") + e;
    }
    out += Printf(
        "ignored %llu entries that ImageFolder would not load: %s (e.g. %s); all_files packs "
        "them\n",
        static_cast<unsigned long long>(stats.ignored()), why.c_str(), examples.c_str());
  }
  if (stats.skipped > 0) {
    out += Printf("skipped %llu unreadable sources, e.g.:\n",
                  static_cast<unsigned long long>(stats.skipped));
    for (const std::string& e : stats.skipped_examples) out += "  " + e + "\n";
  }
  return out;
}

}  // namespace dlfs
