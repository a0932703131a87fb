#include "dlfs/summary.h"

#include <algorithm>

#include "format/format.h"

namespace dlfs {

uint64_t VolumeSummary::file_bytes() const {
  uint64_t n = 0;
  for (const TargetInfo& t : info.target_details) n += t.size;
  return n;
}

double VolumeSummary::directory_bytes_per_sample() const {
  return info.sample_count ? static_cast<double>(info.directory_bytes) / info.sample_count : 0;
}

double VolumeSummary::sample_metadata_bytes_per_sample() const {
  return info.sample_count ? static_cast<double>(sample_metadata_bytes) / info.sample_count : 0;
}

VolumeSummary SummarizeVolume(const Volume& volume) {
  const SampleDirectory& d = volume.directory();
  VolumeSummary s;
  s.path = volume.path();
  s.info = volume.info();
  for (uint64_t c = 0; c < d.class_count(); ++c) s.class_names.emplace_back(d.class_name(c));
  s.usage.resize(s.info.target_details.size());
  s.layout = d.compact() ? "compact" : "tree";
  s.sample_metadata_bytes = d.sample_metadata_bytes();
  s.names = d.has_names();
  s.token_width = d.token_width();
  s.token_count = d.token_count();
  if (d.compact()) {
    // Per target from the block entries: a block's samples span from its
    // data offset to the next block's on the same target (or the end of
    // the target's data region).
    std::vector<uint64_t> last(s.usage.size(), ~uint64_t{0});
    for (uint64_t b = 0; b < d.block_count(); ++b) {
      const SampleDirectory::BlockPlace p = d.block_place(b);
      if (p.target >= s.usage.size()) continue;  // a damaged entry: its block reads fail
      if (last[p.target] != ~uint64_t{0} && p.data_offset >= last[p.target]) {
        s.usage[p.target].bytes += p.data_offset - last[p.target];
      }
      last[p.target] = p.data_offset;
      s.usage[p.target].samples += p.count;
    }
    for (size_t t = 0; t < s.usage.size(); ++t) {
      const TargetInfo& ti = s.info.target_details[t];
      if (last[t] != ~uint64_t{0} && ti.data_offset + ti.data_length >= last[t]) {
        s.usage[t].bytes += ti.data_offset + ti.data_length - last[t];
      }
    }
    return s;
  }
  // An open volume has no other bit: Open refuses flags it does not know.
  if (s.info.incompat_flags & format::kIncompatFields) s.incompat_flags.push_back("fields");
  if (s.info.incompat_flags & format::kIncompatZstd) s.incompat_flags.push_back("zstd");
  if (s.info.compat_flags & format::kCompatImages) s.compat_flags.push_back("images");
  if (const std::optional<VolumeImages> images = d.images()) {
    ImagesUsage u;
    u.recorded = *images;
    for (uint64_t k = 0; k < images->changed; ++k) {
      const ImageOrigin o = d.image_origin(k);
      u.resized += o.resized;
      u.as_jpeg += o.stored == StoredImage::kJpeg;
      u.as_png += o.stored == StoredImage::kPng;
      u.as_raw += o.stored == StoredImage::kRaw;
      u.largest_original_side = std::max({u.largest_original_side, o.width, o.height});
    }
    s.images = u;
  }
  if (d.has_fields()) {
    for (uint32_t f = 0; f < d.field_count(); ++f) {
      s.fields.push_back(FieldUsage{std::string(d.field_name(f))});
    }
    s.dictionary_bytes = d.dictionary().size();
  }
  for (uint64_t i = 0; i < d.size(); ++i) {
    const SampleInfo si = d.sample(i);
    ++s.usage[si.target].samples;
    s.usage[si.target].bytes += si.length;
    if (s.fields.empty()) continue;
    for (const FieldInfo& f : d.Fields(i)) {
      FieldUsage& u = s.fields[f.field];
      ++u.samples;
      u.compressed += f.codec != FieldCodec::kNone;
      u.stored_bytes += f.stored_length;
      u.decoded_bytes += f.decoded_length;
    }
  }
  return s;
}

}  // namespace dlfs
