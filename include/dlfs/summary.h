// VolumeSummary: what `dlfs info` and Python's Volume.info() show about a
// volume, computed once here so both show the same thing.
//
// Thread safety: SummarizeVolume only reads the volume (const methods).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dlfs/volume.h"

namespace dlfs {

// What one target holds.
struct TargetUsage {
  uint64_t samples = 0;  // samples stored on it
  uint64_t bytes = 0;    // their bytes
};

// One entry of the field table (format v2, docs/format.md §4.8), and how
// the samples use it.
struct FieldUsage {
  std::string name;            // "" for the unnamed field
  uint64_t samples = 0;        // samples that have this field
  uint64_t compressed = 0;     // of them, stored with a zstd codec
  uint64_t stored_bytes = 0;   // bytes on disk, over all samples
  uint64_t decoded_bytes = 0;  // bytes after decoding
};

// The images section (docs/format.md §4.9) and what its records say.
struct ImagesUsage {
  VolumeImages recorded;  // the options, images looked at and changed
  uint64_t resized = 0;
  uint64_t as_jpeg = 0;  // changed images by what they hold now
  uint64_t as_png = 0;
  uint64_t as_raw = 0;
  uint32_t largest_original_side = 0;  // over the changed images
};

struct VolumeSummary {
  std::string path;
  VolumeInfo info;                       // from the superblocks
  std::vector<std::string> class_names;  // indexed by label
  std::vector<TargetUsage> usage;        // per target, in target order
  // The names of the superblock's incompat flags ("fields", "zstd"); empty
  // for a v1 volume.
  std::vector<std::string> incompat_flags;
  // The names of the compat flags ("images").
  std::vector<std::string> compat_flags;
  // The images section, when the volume has one.
  std::optional<ImagesUsage> images;
  // The field table by field id (sorted by name); empty when the volume has
  // no fields feature (each sample is then one unnamed raw field).
  std::vector<FieldUsage> fields;
  uint64_t dictionary_bytes = 0;  // the zstd dictionary, 0 for none

  // Bytes of all target files together.
  uint64_t file_bytes() const;
  // Directory bytes per sample (0 for an empty volume).
  double directory_bytes_per_sample() const;
};

// One pass over the directory (per-target and per-field usage) plus the
// volume's info.
VolumeSummary SummarizeVolume(const Volume& volume);

}  // namespace dlfs
