// VolumeSummary: what `dlfs info` and Python's Volume.info() show about a
// volume, computed once here so both show the same thing.
//
// Thread safety: SummarizeVolume only reads the volume (const methods).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dlfs/volume.h"

namespace dlfs {

// What one target holds.
struct TargetUsage {
  uint64_t samples = 0;  // samples stored on it
  uint64_t bytes = 0;    // their bytes
};

struct VolumeSummary {
  std::string path;
  VolumeInfo info;                       // from the superblocks
  std::vector<std::string> class_names;  // indexed by label
  std::vector<TargetUsage> usage;        // per target, in target order

  // Bytes of all target files together.
  uint64_t file_bytes() const;
  // Directory bytes per sample (0 for an empty volume).
  double directory_bytes_per_sample() const;
};

// One pass over the directory (per-target usage) plus the volume's info.
VolumeSummary SummarizeVolume(const Volume& volume);

}  // namespace dlfs
