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

struct TargetSummary {
  uint32_t index = 0;
  std::string path;         // as opened here
  std::string stored_path;  // as recorded in target 0; empty for target 0
  uint64_t size = 0;        // bytes of the target file
  uint64_t samples = 0;     // samples stored on it
  uint64_t bytes = 0;       // their bytes
};

struct VolumeSummary {
  std::string path;
  uint32_t format_version = 0;
  std::string uuid;
  uint64_t created_unix_ns = 0;
  uint64_t samples = 0;
  uint64_t directories = 0;
  uint64_t bytes = 0;         // sum of sample lengths
  uint64_t volume_bytes = 0;  // bytes of target 0
  uint64_t directory_bytes = 0;
  uint32_t alignment = 1;
  std::vector<std::string> class_names;  // indexed by label
  std::vector<std::string> targets;      // paths as opened, target 0 first
  std::vector<TargetSummary> target_details;

  uint64_t classes() const { return class_names.size(); }
  // Bytes of all target files together.
  uint64_t file_bytes() const;
  // Directory bytes per sample (0 for an empty volume).
  double directory_bytes_per_sample() const;
};

// One pass over the directory (per-target usage) plus the volume's info.
VolumeSummary SummarizeVolume(const Volume& volume);

}  // namespace dlfs
