// `dlfs pack`'s progress line and summary (dlfs_tools/report.h).
#include <algorithm>

#include "dlfs_tools/report.h"
#include "report/report_util.h"

namespace dlfs {

using report_internal::Count;
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
      stats.token_width != 0
          ? Printf(
                "packed %llu documents (%llu uint%u tokens, %s) from %s source %s into %s in "
                "%.2f s\n",
                static_cast<unsigned long long>(stats.samples),
                static_cast<unsigned long long>(stats.tokens), 8 * stats.token_width,
                HumanBytes(stats.bytes).c_str(), std::string(SourceKindName(stats.from)).c_str(),
                source.c_str(), output.c_str(), stats.seconds)
          : Printf("packed %llu samples (%s, %llu classes) from %s source %s into %s in %.2f s\n",
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
  const auto list = [](const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  };
  if (stats.ignored() > 0) {
    // What ImageFolder would not load either: one line, with examples.
    std::string why;
    const auto part = [&](uint64_t n, const char* what) {
      if (n > 0) why += (why.empty() ? "" : ", ") + std::to_string(n) + " " + what;
    };
    part(stats.ignored_not_image, "without an image extension");
    part(stats.ignored_at_root, "at the root (no class)");
    out += Printf("ignored %s that ImageFolder would not load: %s (e.g. %s); all_files packs %s\n",
                  Count(stats.ignored(), "entry", "entries").c_str(), why.c_str(),
                  list(stats.ignored_examples).c_str(), stats.ignored() == 1 ? "it" : "them");
  }
  if (stats.skipped_hidden > 0) {
    out += Printf(
        "skip_hidden left out %s (e.g. %s): %s\n",
        Count(stats.skipped_hidden, "hidden entry", "hidden entries").c_str(),
        list(stats.skipped_hidden_examples).c_str(),
        stats.skipped_hidden_classes > 0
            ? "the labels differ from torchvision's ImageFolder, which makes a class of each "
              "directory at the top, hidden ones included"
            : "the samples may differ from torchvision's ImageFolder, which loads hidden image "
              "files");
  }
  if (!stats.renamed_classes.empty()) {
    std::vector<std::string> first(
        stats.renamed_classes.begin(),
        stats.renamed_classes.begin() + std::min<size_t>(stats.renamed_classes.size(), 5));
    out +=
        Printf("class_names renamed %s: %s%s\n",
               Count(stats.renamed_classes.size(), "class directory", "class directories").c_str(),
               list(first).c_str(), stats.renamed_classes.size() > 5 ? ", ..." : "");
  }
  if (!stats.empty_classes.empty()) {
    bool hidden = false;
    for (const std::string& c : stats.empty_classes) hidden = hidden || c.rfind('.', 0) == 0;
    out += Printf("%s without a sample: %s (torchvision's ImageFolder refuses such a tree%s)\n",
                  Count(stats.empty_classes.size(), "class", "classes").c_str(),
                  list(stats.empty_classes).c_str(),
                  hidden ? "; skip_hidden leaves hidden directories out" : "");
  }
  if (stats.skipped > 0) {
    out += Printf("skipped %s, e.g.:\n",
                  Count(stats.skipped, "unreadable source", "unreadable sources").c_str());
    for (const std::string& e : stats.skipped_examples) out += "  " + e + "\n";
  }
  return out;
}

}  // namespace dlfs
