#include "dlfs/summary.h"

namespace dlfs {

uint64_t VolumeSummary::file_bytes() const {
  uint64_t n = 0;
  for (const TargetInfo& t : info.target_details) n += t.size;
  return n;
}

double VolumeSummary::directory_bytes_per_sample() const {
  return info.sample_count ? static_cast<double>(info.directory_bytes) / info.sample_count : 0;
}

VolumeSummary SummarizeVolume(const Volume& volume) {
  const SampleDirectory& d = volume.directory();
  VolumeSummary s;
  s.path = volume.path();
  s.info = volume.info();
  for (uint64_t c = 0; c < d.class_count(); ++c) s.class_names.emplace_back(d.class_name(c));
  s.usage.resize(s.info.target_details.size());
  for (uint64_t i = 0; i < d.size(); ++i) {
    const SampleInfo si = d.sample(i);
    ++s.usage[si.target].samples;
    s.usage[si.target].bytes += si.length;
  }
  return s;
}

}  // namespace dlfs
