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
  // Their bytes (a compact directory's: the bytes its blocks span, the
  // alignment padding between samples included; counted without reading
  // every sample's record).
  uint64_t bytes = 0;
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
  // "compact" (format v3, docs/format.md §10) or "tree" (v1/v2, §4).
  std::string layout;
  // Of the directory's bytes, what locating and checking the samples takes
  // (v3: block entries and records; v1/v2: the sample entries).
  uint64_t sample_metadata_bytes = 0;
  bool names = true;  // whether samples have paths (v3: optional)
  // A token volume (docs/format.md §10.11): bytes per token id (2 or 4; 0
  // for any other volume) and the corpus's tokens. Its samples are its
  // documents.
  uint32_t token_width = 0;
  uint64_t token_count = 0;

  // Bytes of all target files together.
  uint64_t file_bytes() const;
  // Directory bytes per sample (0 for an empty volume).
  double directory_bytes_per_sample() const;
  // sample_metadata_bytes per sample (0 for an empty volume).
  double sample_metadata_bytes_per_sample() const;
};

// The volume's info plus what its directory says of its use. A tree (v1/v2)
// directory: one pass over the samples (per-target and per-field usage). A
// compact one: one pass over its blocks' entries (1 in 1,024 samples by
// default), none over the samples.
VolumeSummary SummarizeVolume(const Volume& volume);

}  // namespace dlfs
