// What the harnesses do with a volume that opened: every query a reader
// makes, with the invariants a validated directory promises checked.
#pragma once

#include <algorithm>

#include "dlfs/summary.h"
#include "dlfs/verify.h"
#include "dlfs/volume.h"
#include "fuzz_util.h"

namespace dlfs::fuzz {

// Reads, looks up and lists (at most `limit` samples); returns the number of
// samples whose checksum failed (VerifyVolume's count).
inline uint64_t ExerciseVolume(const Volume& v, uint64_t limit = 4096) {
  const SampleDirectory& d = v.directory();
  const uint64_t n = std::min<uint64_t>(d.size(), limit);
  for (uint64_t i = 0; i < n; ++i) {
    const SampleInfo s = d.sample(i);
    if (s.target >= v.info().target_details.size()) Broken("sample on a target the volume lacks");
    const TargetInfo& t = v.info().target_details[s.target];
    if (s.offset < t.data_offset || s.offset + s.length > t.data_offset + t.data_length) {
      Broken("sample outside its target's data region");
    }
    // Every sample's path leads back to it.
    auto found = d.Lookup(d.Path(i));
    if (!found.ok() || *found != i) Broken("Lookup(Path(i)) != i");
    if (s.label != kNoLabel && s.label < d.class_count()) (void)d.class_name(s.label);
    (void)v.ReadStored(i, /*verify=*/true);
    (void)v.Read(i, /*verify=*/true);  // decodes a compressed sample
  }
  for (uint64_t k = 0; k < std::min<uint64_t>(d.dir_count(), limit); ++k) {
    const DirInfo info = d.dir(k);
    auto found = d.Resolve(d.DirPath(k));
    if (!found.ok() || !found->is_dir || found->index != k) Broken("Resolve(DirPath(k)) != k");
    (void)info;
  }
  if (d.dir_count() > 0 && d.size() <= limit) (void)d.SamplesUnder(0);
  (void)SummarizeVolume(v);
  uint64_t bad = 0;
  if (d.size() <= limit) {
    VerifyReport report;
    VerifyOptions options;
    if (!VerifyVolume(v, options, &report).ok()) Broken("VerifyVolume could not run");
    bad = report.bad_samples;
  }
  return bad;
}

}  // namespace dlfs::fuzz
