// The reports about a volume, a verify run and an LMDB database
// (dlfs_tools/report.h); the benchmark's are in bench_report.cc.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "dlfs/enum_names.h"
#include "dlfs/volume.h"
#include "dlfs_tools/report.h"
#include "report/report_util.h"

namespace dlfs {

using nlohmann::json;

namespace {

// "1:05" or "2:03:04".
std::string Duration(double seconds) {
  const auto s = static_cast<unsigned long long>(seconds + 0.5);
  if (s >= 3600)
    return report_internal::Printf("%llu:%02llu:%02llu", s / 3600, s / 60 % 60, s % 60);
  return report_internal::Printf("%llu:%02llu", s / 60, s % 60);
}

// "none", "zstd", "zstd-dict" (compressed with the volume's dictionary).
const char* CodecName(FieldCodec c) {
  return c == FieldCodec::kNone ? "none" : c == FieldCodec::kZstd ? "zstd" : "zstd-dict";
}

json ImagesJson(const std::optional<ImagesUsage>& images) {
  if (!images) return nullptr;
  const ImagePrepOptions& o = images->recorded.options;
  return {{"max_side", o.max_side},
          {"filter", o.max_side ? json(NameOf(kResizeFilterNames, o.filter)) : json(nullptr)},
          {"mode", NameOf(kImageStoreModeNames, o.mode)},
          {"jpeg_quality", o.jpeg_quality},
          {"always_reencode", o.always_reencode},
          {"color", NameOf(kColorModeNames, o.color)},
          {"smart_threshold",
           o.mode == ImageStoreMode::kSmart ? json(o.smart_threshold) : json(nullptr)},
          {"jpeg_probability",
           o.mode == ImageStoreMode::kProportion ? json(o.jpeg_probability) : json(nullptr)},
          {"seed", o.mode == ImageStoreMode::kProportion ? json(o.seed) : json(nullptr)},
          {"images", images->recorded.images},
          {"changed", images->recorded.changed},
          {"resized", images->resized},
          {"stored", {{"jpeg", images->as_jpeg}, {"png", images->as_png}, {"raw", images->as_raw}}},
          {"largest_original_side", images->largest_original_side}};
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
          {"format", s.layout == "compact"      ? "v3"
                     : s.incompat_flags.empty() ? "v1"
                                                : "v2"},
          {"layout", s.layout},
          {"names", s.names},
          {"directory_bytes_per_sample", s.directory_bytes_per_sample()},
          {"sample_metadata_bytes", s.sample_metadata_bytes},
          {"sample_metadata_bytes_per_sample", s.sample_metadata_bytes_per_sample()},
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
          {"compat_flags", s.compat_flags},
          {"images", ImagesJson(s.images)},
          {"fields", fields},
          {"dictionary_bytes", s.dictionary_bytes},
          {"token_width", s.token_width},
          {"token_count", s.token_count}};
}

std::string SummaryText(const VolumeSummary& s) {
  using report_internal::Printf;
  const VolumeInfo& i = s.info;
  std::string out;
  out += Printf("volume       %s\n", s.path.c_str());
  // Format v2 is version 1 with optional features behind incompat flags
  // (docs/format.md): say v2 where the volume uses them.
  std::string features;
  for (const std::string& f : s.incompat_flags) features += (features.empty() ? "" : ", ") + f;
  if (features.empty()) {
    out += Printf("format       dlfs v%u, uuid %s\n", i.format_version, i.uuid.c_str());
  } else {
    out += Printf("format       dlfs v2 (version %u with %s), uuid %s\n", i.format_version,
                  features.c_str(), i.uuid.c_str());
  }
  if (s.token_width != 0) {
    // "tokens: N uint16 tokens in D documents"
    out += Printf("tokens       %llu uint%u tokens in %s\n",
                  static_cast<unsigned long long>(s.token_count), 8 * s.token_width,
                  report_internal::Count(i.sample_count, "document", "documents").c_str());
  } else if (s.layout == "compact" && !s.names) {
    out += Printf("samples      %llu, unnamed (addressed by index)\n",
                  static_cast<unsigned long long>(i.sample_count));
  } else {
    out += Printf("samples      %llu in %s\n", static_cast<unsigned long long>(i.sample_count),
                  report_internal::Count(i.dir_count, "directory", "directories").c_str());
  }
  const std::string where = i.target_details.size() == 1
                                ? std::string(NameOf(kTargetKindNames, i.target_details[0].kind))
                                : "in " + std::to_string(i.target_details.size()) + " targets";
  out += Printf("data         %s in samples, %s %s\n", HumanBytes(i.data_bytes).c_str(),
                HumanBytes(s.file_bytes()).c_str(), where.c_str());
  out += Printf(
      "directory    %s (%.2f bytes per sample), %s layout\n", HumanBytes(i.directory_bytes).c_str(),
      s.directory_bytes_per_sample(),
      s.layout == "compact" ? (s.names ? "compact (v3)" : "compact (v3), no names") : "tree (v1)");
  if (s.layout == "compact" && s.names) {
    out += Printf("             %.2f bytes per sample to locate and check one, the rest names\n",
                  s.sample_metadata_bytes_per_sample());
  }
  out += Printf("alignment    %u\n", i.data_alignment);
  std::string shown = features.empty() ? "none" : features;
  for (const std::string& f : s.compat_flags) shown += "; " + f + " (compat)";
  out += Printf("features     %s\n", shown.c_str());
  if (s.images) {
    // What pack-time preparation did: the options, then the records.
    const ImagesUsage& u = *s.images;
    out += Printf("images       prepared: %s\n", DescribeImagePrep(u.recorded.options).c_str());
    out += Printf("             %llu images, %llu changed",
                  static_cast<unsigned long long>(u.recorded.images),
                  static_cast<unsigned long long>(u.recorded.changed));
    if (u.recorded.changed > 0) {
      out += Printf(" (%llu resized; %llu JPEG, %llu PNG, %llu raw; originals up to %u px)",
                    static_cast<unsigned long long>(u.resized),
                    static_cast<unsigned long long>(u.as_jpeg),
                    static_cast<unsigned long long>(u.as_png),
                    static_cast<unsigned long long>(u.as_raw), u.largest_original_side);
    }
    out += Printf(", %llu as they came\n",
                  static_cast<unsigned long long>(u.recorded.images - u.recorded.changed));
  }
  if (!s.fields.empty()) {
    // The field table: how many samples have each field, and what it costs.
    out += Printf(
        "fields       %zu%s\n", s.fields.size(),
        s.dictionary_bytes ? (", zstd dictionary " + HumanBytes(s.dictionary_bytes)).c_str() : "");
    for (size_t f = 0; f < s.fields.size() && f < 50; ++f) {
      const FieldUsage& u = s.fields[f];
      out +=
          Printf("  %-10s %llu samples, %s", u.name.empty() ? "(unnamed)" : u.name.c_str(),
                 static_cast<unsigned long long>(u.samples), HumanBytes(u.decoded_bytes).c_str());
      if (u.compressed) {
        out += Printf(" (%s stored; %llu zstd)", HumanBytes(u.stored_bytes).c_str(),
                      static_cast<unsigned long long>(u.compressed));
      }
      out += "\n";
    }
    if (s.fields.size() > 50) out += "  ...\n";
  }
  // Per target: its file, its size, and the samples it holds (a balanced
  // multi-target volume has about equal bytes on each).
  out += Printf("targets      %zu\n", i.target_details.size());
  for (size_t t = 0; t < i.target_details.size(); ++t) {
    const TargetInfo& ti = i.target_details[t];
    out +=
        Printf("  %-10zu %s: %s %s, %llu samples, %s%s\n", t, ti.path.c_str(),
               HumanBytes(ti.size).c_str(), std::string(NameOf(kTargetKindNames, ti.kind)).c_str(),
               static_cast<unsigned long long>(s.usage[t].samples),
               HumanBytes(s.usage[t].bytes).c_str(), t == 0 ? " + the directory" : "");
  }
  out += Printf("classes      %llu", static_cast<unsigned long long>(i.class_count));
  for (size_t c = 0; c < s.class_names.size() && c < 20; ++c) {
    out += Printf("%s%zu=%s", c == 0 ? ": " : ", ", c, s.class_names[c].c_str());
  }
  out += s.class_names.size() > 20 ? ", ...\n" : "\n";
  return out;
}

}  // namespace

std::string DescribeImagePrep(const ImagePrepOptions& o) {
  using report_internal::Printf;
  std::string out = o.max_side != 0
                        ? Printf("max side %u (%s)", o.max_side,
                                 std::string(NameOf(kResizeFilterNames, o.filter)).c_str())
                        : std::string("size kept");
  switch (o.mode) {
    case ImageStoreMode::kKeep:
      out += ", formats kept";
      break;
    case ImageStoreMode::kJpeg:
      out += ", JPEG";
      break;
    case ImageStoreMode::kRaw:
      out += ", raw pixels";
      break;
    case ImageStoreMode::kSmart:
      out += Printf(", smart: raw up to %s of pixels, JPEG above",
                    HumanBytes(static_cast<double>(o.smart_threshold)).c_str());
      break;
    case ImageStoreMode::kProportion:
      out += Printf(", proportion: JPEG with probability %g (seed %llu), else raw",
                    o.jpeg_probability, static_cast<unsigned long long>(o.seed));
      break;
  }
  if (o.jpeg_quality != 0) {
    out += Printf(", JPEG quality %u", o.jpeg_quality);
  } else if (o.mode != ImageStoreMode::kRaw) {
    out += Printf(", JPEG quality %u when encoding", kDefaultJpegQuality);
  }
  if (o.always_reencode) out += ", always re-encoded";
  out += o.color == ColorMode::kRgb    ? ", RGB"
         : o.color == ColorMode::kGray ? ", gray"
                                       : ", own channels";
  return out;
}

std::string ProgressLine(std::string_view verb, uint64_t samples, uint64_t total, uint64_t bytes,
                         double seconds, double fraction, std::string_view extra) {
  using report_internal::Printf;
  std::string line = "\r  " + std::string(verb) + " " + std::to_string(samples);
  if (total > 0) line += " of " + std::to_string(total);
  line += " samples";
  if (fraction >= 0) line += Printf(" (%.1f%%)", 100 * std::min(fraction, 1.0));
  line += ", " + HumanBytes(bytes);
  if (seconds > 0) {
    line +=
        Printf(", %.0f samples/s, %s/s", samples / seconds, HumanBytes(bytes / seconds).c_str());
  }
  line += extra;
  if (fraction > 0 && fraction < 1 && seconds > 0) {
    line += ", ETA " + Duration(seconds * (1 - fraction) / fraction);
  }
  return line + "\033[K";
}

std::string FormatVolumeSummary(const VolumeSummary& summary, ReportFormat format) {
  if (format == ReportFormat::kText) return SummaryText(summary);
  return report_internal::Dump(SummaryJson(summary), 2);
}

std::string FormatSampleLine(const SampleDirectory& d, uint64_t i, ReportFormat format) {
  const SampleInfo s = d.sample(i);
  if (format == ReportFormat::kJson) {
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
    if (d.images()) {
      // What pack-time preparation changed in this sample: per image field,
      // what it holds now and the original's size (docs/format.md §4.9.2).
      json prepared = json::array();
      for (uint32_t f = 0; f < d.field_count(); ++f) {
        if (const std::optional<ImageOrigin> o = d.FindImageOrigin(i, f)) {
          prepared.push_back({{"field", std::string(d.field_name(f))},
                              {"stored", NameOf(kStoredImageNames, o->stored)},
                              {"resized", o->resized},
                              {"width", o->width},
                              {"height", o->height}});
        }
      }
      j["prepared"] = prepared;
    }
    return report_internal::Dump(j, -1);
  }
  const std::string label = s.label == kNoLabel ? "-" : std::to_string(s.label);
  std::string line =
      std::to_string(i) + '\t' + std::to_string(s.length) + '\t' + label + '\t' + d.Path(i);
  if (d.has_fields()) {
    // "jpg,cls,json(zstd)".
    line += '\t';
    bool first = true;
    for (const FieldInfo& f : d.Fields(i)) {
      line += first ? "" : ",";
      first = false;
      line += d.field_name(f.field);
      if (f.codec != FieldCodec::kNone) line += "(" + std::string(CodecName(f.codec)) + ")";
    }
  }
  return line + '\n';
}

std::string FormatDirectoryLine(const SampleDirectory& d, uint64_t dir, ReportFormat format) {
  if (format == ReportFormat::kText) return d.DirPath(dir) + "/\n";
  const DirInfo info = d.dir(dir);
  return report_internal::Dump({{"path", d.DirPath(dir)},
                                {"type", "dir"},
                                {"samples", info.sample_count},
                                {"subdirs", info.child_count}},
                               -1);
}

namespace {

void ListDirectory(const SampleDirectory& d, uint64_t dir, bool recursive, ReportFormat format,
                   const std::function<void(const std::string&)>& out,
                   const std::function<void(uint64_t)>& sample) {
  const std::vector<uint64_t> children = d.ChildDirs(dir);
  if (!recursive) {
    for (const uint64_t c : children) out(FormatDirectoryLine(d, c, format));
  }
  // A page of samples at a time: a directory may hold any number.
  constexpr uint64_t kPage = 4096;
  for (uint64_t from = 0;; from += kPage) {
    const std::vector<uint64_t> page = d.DirSamples(dir, from, kPage);
    for (const uint64_t i : page) sample(i);
    if (page.size() < kPage) break;
  }
  if (recursive) {
    for (const uint64_t c : children) ListDirectory(d, c, true, format, out, sample);
  }
}

}  // namespace

std::string SampleLinesHeader(const SampleDirectory& d) {
  return std::string("INDEX\tSIZE\tLABEL\tPATH") + (d.has_fields() ? "\tFIELDS" : "") + "\n";
}

Status ListPath(const SampleDirectory& d, std::string_view path, bool recursive,
                ReportFormat format, const std::function<void(const std::string&)>& out) {
  DLFS_ASSIGN_OR_RETURN(const PathEntry entry, d.Resolve(path));
  // Text: the columns named once, above the first sample's line.
  bool headed = format != ReportFormat::kText;
  const auto sample = [&](uint64_t i) {
    if (!headed) out(SampleLinesHeader(d));
    headed = true;
    out(FormatSampleLine(d, i, format));
  };
  if (!entry.is_dir) {
    sample(entry.index);
  } else {
    ListDirectory(d, entry.index, recursive, format, out, sample);
  }
  return Status::Ok();
}

std::string FormatEpochIndices(std::span<const uint64_t> indices, int ranks) {
  const size_t per_rank = ranks > 0 ? std::max<size_t>(indices.size() / ranks, 1) : 1;
  std::string out;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (ranks > 0) out += std::to_string(i / per_rank) + '\t';
    out += std::to_string(indices[i]) + '\n';
  }
  return out;
}

std::string FormatVerifyProgress(const VerifyReport& r) {
  const double fraction = r.total_bytes > 0 ? static_cast<double>(r.bytes_checked) / r.total_bytes
                                            : static_cast<double>(r.samples_checked) /
                                                  std::max<uint64_t>(r.total_samples, 1);
  return ProgressLine("verified", r.samples_checked, r.total_samples, r.bytes_checked, r.seconds,
                      fraction);
}

std::string FormatVerifyReport(const std::string& path, const VerifyReport& report,
                               ReportFormat format) {
  const Status& copy = report.backup_superblock;
  if (format == ReportFormat::kText) {
    // A token volume's chunks too: "..., 2 bad; 512 token chunks, 1 bad".
    const std::string chunks =
        report.token_chunks_checked == 0 && report.bad_token_chunks == 0
            ? std::string()
            : report_internal::Printf("; %llu token chunks, %llu bad",
                                      static_cast<unsigned long long>(report.token_chunks_checked),
                                      static_cast<unsigned long long>(report.bad_token_chunks));
    return report_internal::Printf("%s: %llu samples, %s checked in %.2f s: %llu bad%s%s\n",
                                   path.c_str(),
                                   static_cast<unsigned long long>(report.samples_checked),
                                   HumanBytes(report.bytes_checked).c_str(), report.seconds,
                                   static_cast<unsigned long long>(report.bad_samples),
                                   chunks.c_str(), copy.ok() ? "" : ", superblock copy damaged");
  }
  json records = json::array();
  for (const BadSample& b : report.bad) {
    records.push_back(
        {{"volume", b.volume}, {"index", b.index}, {"path", b.path}, {"reason", b.reason}});
  }
  return report_internal::Dump(
      {{"volume", path},
       {"samples_checked", report.samples_checked},
       {"bytes_checked", report.bytes_checked},
       {"seconds", report.seconds},
       {"bad_samples", records},
       {"token_chunks_checked", report.token_chunks_checked},
       {"bad_token_chunks", report.bad_token_chunks},
       {"tokens", report.tokens.ok() ? std::string("ok") : report.tokens.message()},
       {"superblock_copy", copy.ok() ? std::string("ok") : copy.message()}},
      2);
}

std::string FormatLmdbSummary(const LmdbSummary& s, ReportFormat format) {
  using report_internal::Printf;
  const LmdbStats& st = s.stats;
  json datum = nullptr;
  if (s.first_datum) {
    const DatumShape& d = *s.first_datum;
    datum = {{"channels", d.channels},     {"height", d.height},
             {"width", d.width},           {"encoded", d.encoded},
             {"data_bytes", d.data_bytes}, {"label", d.has_label ? json(d.label) : json(nullptr)}};
  }
  if (format == ReportFormat::kJson) {
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
    return report_internal::Dump(j, 2);
  }
  std::string out = Printf("lmdb         %s\n", s.path.c_str());
  out += Printf(
      "entries      %llu (depth %u; pages: %llu branch, %llu leaf, %llu overflow; "
      "page size %u)\n",
      static_cast<unsigned long long>(st.entries), st.depth,
      static_cast<unsigned long long>(st.branch_pages),
      static_cast<unsigned long long>(st.leaf_pages),
      static_cast<unsigned long long>(st.overflow_pages), st.page_size);
  out += Printf("values       %s in total; min %llu, mean %.0f, max %llu bytes\n",
                HumanBytes(s.value_bytes).c_str(), static_cast<unsigned long long>(s.value_min),
                s.value_mean, static_cast<unsigned long long>(s.value_max));
  if (st.entries > 0) {
    out += Printf("keys         '%s' .. '%s'\n", s.first_key.c_str(), s.last_key.c_str());
  }
  if (!datum.is_null()) out += Printf("caffe datum  %s (first record)\n", datum.dump().c_str());
  return out;
}

}  // namespace dlfs
