#include "dlfs/summary.h"

namespace dlfs {

uint64_t VolumeSummary::file_bytes() const {
  uint64_t n = 0;
  for (const TargetSummary& t : target_details) n += t.size;
  return n;
}

double VolumeSummary::directory_bytes_per_sample() const {
  return samples ? static_cast<double>(directory_bytes) / samples : 0;
}

VolumeSummary SummarizeVolume(const Volume& volume) {
  const VolumeInfo& info = volume.info();
  const SampleDirectory& d = volume.directory();
  VolumeSummary s;
  s.path = volume.path();
  s.format_version = info.format_version;
  s.uuid = info.uuid;
  s.created_unix_ns = info.created_unix_ns;
  s.samples = info.sample_count;
  s.directories = info.dir_count;
  s.bytes = info.data_bytes;
  s.volume_bytes = info.volume_size;
  s.directory_bytes = info.directory_bytes;
  s.alignment = info.data_alignment;
  for (uint64_t c = 0; c < d.class_count(); ++c) s.class_names.emplace_back(d.class_name(c));
  s.targets = info.targets;
  for (size_t t = 0; t < info.target_details.size(); ++t) {
    const TargetInfo& ti = info.target_details[t];
    s.target_details.push_back(TargetSummary{.index = static_cast<uint32_t>(t),
                                             .path = ti.path,
                                             .stored_path = ti.stored_path,
                                             .size = ti.size});
  }
  for (uint64_t i = 0; i < d.size(); ++i) {
    const SampleInfo si = d.sample(i);
    ++s.target_details[si.target].samples;
    s.target_details[si.target].bytes += si.length;
  }
  return s;
}

}  // namespace dlfs
