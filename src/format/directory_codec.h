// The directory region codec (docs/format.md §4, §5 checks 26-41): the one
// place that turns a writer's tree into region bytes, and that checks region
// bytes before a reader uses them in place. VolumeBuilder encodes with it;
// SampleDirectory::Create decodes with it and then answers queries over the
// arrays it returns.
//
// Writing is two steps, so a caller can report path errors before it builds
// anything: OrderDirectory puts a tree into canonical order (§4.6) and
// refuses trees that have no valid encoding; EncodeDirectory lays the ordered
// tree out as region bytes. DecodeDirectory accepts exactly what the format
// allows, so decoding an encoded tree always succeeds.
//
// Thread safety: plain functions over caller-owned data; no shared state.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dlfs/directory.h"
#include "dlfs/status.h"
#include "format/format.h"

namespace dlfs::format {

// Binary search for `name` among the entries [first, first + count), whose
// names name_of(index) are strictly increasing byte-wise (§4.6 rule 2).
// Returns the matching index, or nullopt. Used by lookups, validation and
// the writer alike.
template <typename NameOf>
std::optional<uint64_t> FindByName(uint64_t first, uint64_t count, std::string_view name,
                                   NameOf name_of) {
  // A plain loop rather than ranges::lower_bound over views::iota: clang 14
  // (the fuzzer build) cannot compile that against libstdc++ 12.
  uint64_t lo = first, hi = first + count;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (name_of(mid) < name) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == first + count || name_of(lo) != name) return std::nullopt;
  return lo;
}

// ---- Writing -----------------------------------------------------------------

// A directory as a writer collects it. Names are slices of
// DirectoryTree::names.
struct TreeDir {
  uint32_t parent;  // tree id of the parent; kNone for the root (id 0)
  uint64_t name_offset;
  uint32_t name_length;
};

// One field of a sample as a writer collects it (docs/format.md §4.8.3), in
// storage order within the sample's extent.
struct TreeField {
  uint32_t field;  // index into DirectoryTree::field_names
  uint32_t stored_length;
  uint32_t crc32c;  // of the stored bytes
  uint32_t decoded_length;
  uint8_t codec;  // FieldCodec
};

// A sample as a writer collects it.
struct TreeSample {
  uint64_t offset;  // in its target
  uint32_t target;
  uint32_t length;
  uint32_t crc32c;
  uint32_t label;  // class id, or kNone
  uint32_t dir;    // tree id of its directory
  uint64_t name_offset;
  uint32_t name_length;
  // Its fields: DirectoryTree::fields[first_field, first_field + field_count).
  uint32_t field_count = 0;
  uint64_t first_field = 0;
};

// An image the writer changed (§4.9.2), as it collects it.
struct TreeImage {
  uint32_t sample;  // position in DirectoryTree::samples
  uint16_t field;   // field id (in DirectoryTree::field_names' order; 0 without fields)
  uint8_t stored;   // StoredImageCode
  uint8_t flags;    // kImageRecordResized
  uint32_t width;   // of the original
  uint32_t height;
};

// A writer's tree, in any order (borrowed, not owned). REQUIRES: dirs[0] is
// the root and every other directory reaches it through parent links; names
// are valid components (§4.6 rule 5) and lie inside `names`; labels are
// below class_count; at most kNone - 1 samples and directories.
struct DirectoryTree {
  std::string_view names;
  std::span<const TreeDir> dirs;
  std::span<const TreeSample> samples;
  // Names of labels 0 .. class_names.size() - 1; the other labels below
  // class_count are named by their decimal number (§4.6 rule 8).
  std::span<const std::string> class_names;
  uint64_t class_count = 0;  // >= class_names.size()
  // Format v2 (§4.8): with `with_fields`, the region gets the fields header,
  // the field table (field_names, strictly increasing) and, unless every
  // sample is exactly one raw field 0 (the single layout), field records.
  // Without it, `fields` is ignored and the region is v1's.
  bool with_fields = false;
  std::span<const std::string> field_names;
  std::span<const TreeField> fields;
  std::span<const std::byte> dictionary;  // zstd dictionary, or empty
  // The images section (§4.9, compat flag IMAGES): written when `images` is
  // set. Its options and image_count are taken from *images; the encoder
  // fills in the rest. image_records may be in any order; at most one per
  // (sample, field), each naming a field its sample has.
  const ImagesHeader* images = nullptr;
  std::span<const TreeImage> image_records;
};

// The canonical order of a tree (§4.6): where each entry goes in the region.
struct DirectoryOrder {
  std::vector<uint32_t> dirs;       // dirs[k]: tree id of directory k (breadth-first)
  std::vector<uint32_t> dir_index;  // dir_index[id]: index k of tree directory id
  std::vector<uint32_t> samples;    // samples[i]: position in tree.samples of sample i
};

// Orders `tree` canonically: directories breadth-first with children sorted
// by name, samples grouped by directory in that order and sorted by name.
// InvalidArgument, naming the path, when two samples share a path ("two
// samples have the path 'x/a.jpg'") or a name is both a sample and a
// sub-directory of one directory ("'x/a' is both a sample and a
// directory"); these are the trees no region can encode.
Result<DirectoryOrder> OrderDirectory(const DirectoryTree& tree);

// The region bytes of `tree` laid out in `order` (§4): header, samples,
// dirs, classes, then the string pool, each right after the previous one.
// REQUIRES: `order` is OrderDirectory(tree)'s. InvalidArgument when the
// names do not fit the format's string pool (< 4 GiB).
Result<std::vector<std::byte>> EncodeDirectory(const DirectoryTree& tree,
                                               const DirectoryOrder& order);

// ---- Reading -----------------------------------------------------------------

// The arrays of a directory region, read in place. After DecodeDirectory
// returns them, every index below the counts and every name lies inside the
// region.
struct DirectoryArrays {
  const SampleEntry* samples = nullptr;
  const DirEntry* dirs = nullptr;
  const ClassEntry* classes = nullptr;
  const char* strings = nullptr;
  uint64_t sample_count = 0;
  uint64_t dir_count = 0;
  uint64_t class_count = 0;
  uint64_t string_bytes = 0;
  // Fields (format v2). Without FIELDS: field_count 0 and no arrays.
  uint32_t field_layout = 0;  // FieldLayout, or 0 without fields
  uint32_t field_count = 0;
  const FieldEntry* fields = nullptr;
  const uint32_t* field_index = nullptr;  // [sample_count + 1], records layout
  const FieldRecord* records = nullptr;
  uint64_t record_count = 0;
  const std::byte* dictionary = nullptr;
  uint64_t dictionary_bytes = 0;
  // The images section (compat flag IMAGES), else null: its header (options
  // and counts) and records, sorted by (sample, field).
  const ImagesHeader* images = nullptr;
  const ImageRecord* image_records = nullptr;
  uint64_t image_record_count = 0;

  std::string_view String(uint32_t offset, uint32_t length) const {
    return {strings + offset, length};
  }
  std::string_view sample_name(uint64_t i) const {
    return String(samples[i].name_offset, samples[i].name_length);
  }
  std::string_view dir_name(uint64_t k) const {
    return String(dirs[k].name_offset, dirs[k].name_length);
  }
  std::string_view class_name(uint64_t c) const {
    return String(classes[c].name_offset, classes[c].name_length);
  }
  std::string_view field_name(uint64_t f) const {
    return String(fields[f].name_offset, fields[f].name_length);
  }
};

// Checks the `size` bytes at `region` (the directory region of
// `volume_path`, 8-byte aligned) against what the superblock says
// (`expected`): every structural rule of §4, in the order of §5 checks
// 26-41, so that no query over the returned arrays can read outside the
// region or loop. With expected.already_validated only the header and array
// bounds (checks 26-33) are made. Corruption "<volume_path>: directory
// region: <problem>" on the first rule broken. The arrays point into
// `region`, which the caller keeps alive and unchanged.
Result<DirectoryArrays> DecodeDirectory(const std::byte* region, uint64_t size,
                                        const SampleDirectory::Expected& expected,
                                        const std::string& volume_path);

}  // namespace dlfs::format
