// SampleDirectory: the in-memory tree of a volume's samples.
//
// It is the only metadata dlfs keeps, a read-only view over the directory
// region exactly as stored on disk, in one of two layouts:
//
// - format v1/v2 (docs/format.md §4): opening validates the whole region
//   once (32 bytes per sample plus names), then every query reads the arrays
//   in place; a sample's index is its position in path order.
// - format v3, the compact directory (docs/format.md §10): opening checks
//   the header only; the region (6-10 bytes per sample, names and the tree
//   optional) is used in place, typically through a read-only mapping of the
//   volume file, and each block of samples or names is checked the first
//   time a query reads it. A sample's index is the order the writer added
//   it in; names, when present, are looked up through their own sorted order.
//
//   by index:  O(1)                 Locate(i) / sample(i), name(i), Path(i)
//   by path:   O(depth * log n)     Lookup("train/00042")   (v3: O(log n))
//   listing:   O(entries)           ChildDirs(d), DirSamples(d, from, max)
//
// Queries that read a v3 block that fails its check return the Corruption
// naming the block (Locate, Resolve, Lookup, CheckAll); the accessors that
// cannot return a Status (sample, name, Path, label) are for samples already
// located (see sample()).
//
// Thread safety: immutable after construction (the record of checked blocks
// is internal and atomic); any number of threads may query one
// SampleDirectory concurrently. Copies share the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dlfs/image_prep_options.h"
#include "dlfs/status.h"

namespace dlfs {

namespace directory_internal {
class CompactState;
}
namespace format {
struct DirectoryHeader;
struct SampleEntry;
struct DirEntry;
struct ClassEntry;
struct FieldEntry;
struct FieldRecord;
struct ImagesHeader;
struct ImageRecord;
}  // namespace format

// Label of a sample that has none (e.g. a file at the root of an ImageFolder).
inline constexpr uint32_t kNoLabel = 0xFFFFFFFFu;
// Parent of the root directory.
inline constexpr uint32_t kNoParent = 0xFFFFFFFFu;

struct SampleInfo {
  uint64_t offset;  // byte offset in its target
  uint32_t length;  // bytes
  uint32_t crc32c;
  uint32_t label;   // or kNoLabel
  uint32_t parent;  // directory index
  uint16_t target;
};

struct DirInfo {
  uint64_t parent;  // kNoDirectory for the root (index 0)
  uint64_t child_count;
  uint64_t sample_count;  // samples directly in it (ChildDirs, DirSamples list them)
};
inline constexpr uint64_t kNoDirectory = ~uint64_t{0};

// How a field is stored (docs/format.md §4.8.4).
enum class FieldCodec : uint8_t { kNone = 0, kZstd = 1, kZstdDict = 2 };

// One field of a sample (format v2, docs/format.md §4.8): where its stored
// bytes lie and how to decode them. A volume without fields has one unnamed
// raw field (id 0, name "") per sample: the whole sample.
struct FieldInfo {
  uint32_t field = 0;             // field id (SampleDirectory::field_name)
  uint32_t offset_in_sample = 0;  // where its stored bytes start in the sample's extent
  uint32_t stored_length = 0;
  uint32_t crc32c = 0;  // of the stored bytes
  uint32_t decoded_length = 0;
  FieldCodec codec = FieldCodec::kNone;
};

// How the writer prepared the volume's images (docs/format.md §4.9): the
// options it recorded, and how many images it looked at and changed.
struct VolumeImages {
  // What was asked for; the fields not recorded (threads, skip_unreadable,
  // max_pixels) have their defaults.
  ImagePrepOptions options;
  uint64_t images = 0;   // image fields looked at
  uint64_t changed = 0;  // of them, stored otherwise than as they came
};

// One image the writer changed: what its field holds now and the original's
// size (docs/format.md §4.9.2).
struct ImageOrigin {
  uint64_t sample = 0;
  uint32_t field = 0;  // field id (0 in a volume without fields)
  StoredImage stored = StoredImage::kJpeg;
  bool resized = false;
  uint32_t width = 0;  // of the original image
  uint32_t height = 0;
};

// What a path names: a sample or a directory.
struct PathEntry {
  bool is_dir;
  uint64_t index;  // sample index, or directory index when is_dir
};

class SampleDirectory {
 public:
  // What the superblock says the directory region must agree with.
  struct Expected {
    uint64_t sample_count = 0;
    uint64_t dir_count = 0;
    uint64_t class_count = 0;
    uint64_t data_bytes = 0;      // sum of all sample lengths
    uint32_t data_alignment = 1;  // every sample offset is a multiple of it
    // One entry per target (its size is the target count, so sample target
    // ids are below it): the extent of a sample on target t lies in
    // [data_regions[t].begin, data_regions[t].end).
    struct DataRange {
      uint64_t begin = 0;
      uint64_t end = 0;
    };
    std::vector<DataRange> data_regions;
    // The superblock's incompat flags: FIELDS means the region has the
    // format-v2 fields header (docs/format.md §4.8); ZSTD allows codecs.
    uint32_t incompat_flags = 0;
    // The superblock's compat flags: IMAGES means the region has an images
    // section (docs/format.md §4.9), checked and offered by images().
    uint32_t compat_flags = 0;
    // The superblock's format_version: 1 (v1 and v2 regions) or 3 (the
    // compact directory).
    uint32_t format_version = 1;
    // Set only when these exact bytes already passed Create in this job
    // (an MPI collective open hands one checked copy to every rank): the
    // header and array bounds are still checked, the per-entry rules are
    // not repeated.
    bool already_validated = false;
  };

  // Validates `region` (the directory region of `volume_path`, `size` bytes)
  // against `expected` and builds a view over it. Takes shared ownership of
  // the bytes; they must stay unmodified and be 8-byte aligned. Every
  // structural rule of docs/format.md §4 is checked (bounds, ordering,
  // coverage), so a region that passes cannot make a later query read out of
  // range. Returns Corruption naming `volume_path` otherwise.
  static Result<SampleDirectory> Create(std::shared_ptr<const std::byte> region, uint64_t size,
                                        const Expected& expected, const std::string& volume_path);

  SampleDirectory() = default;

  uint64_t size() const { return sample_count_; }  // number of samples
  uint64_t dir_count() const { return dir_count_; }
  uint64_t class_count() const { return class_count_; }
  // 1 for the v1/v2 layout, 3 for the compact directory.
  uint32_t format_version() const { return compact_ ? 3 : 1; }
  bool compact() const { return compact_ != nullptr; }
  // Whether samples have names (always in v1/v2; optional in v3). Without
  // names, sample i's path is "#<i>" (which Lookup and Resolve take), and
  // the tree is the root alone.
  bool has_names() const;

  // Sample i's extent, CRC and label. v3: checks the block holding it the
  // first time (Corruption naming the block). REQUIRES: i < size().
  Result<SampleInfo> Locate(uint64_t i) const;
  // Locates every sample of `indices` into out[k] (out.size() ==
  // indices.size()), faster than one Locate each where the directory is
  // larger than the CPU's caches (a compact directory's blocks and records
  // are fetched for all of them at once). Samples that cannot be located
  // get length 0 and their error in (*failed)[k]; *failed is left empty
  // when every one was located. REQUIRES: every index < size().
  void LocateMany(std::span<const uint64_t> indices, std::span<SampleInfo> out,
                  std::vector<Status>* failed) const;
  // The same for a sample already located (or any sample of a v1/v2
  // volume, whose directory was checked whole at open). A v3 sample whose
  // block fails its check comes back with length 0 and a CRC no bytes have
  // (so a verified read of it fails); callers on a read path use Locate.
  SampleInfo sample(uint64_t i) const;
  // The last path component ("#<i>" for a compact volume without names).
  std::string name(uint64_t i) const;
  uint32_t label(uint64_t i) const;
  // "train/00042": the directory names from the root, joined by '/'.
  // v3: "#<i>" without names, "<damaged name block N>" when its block fails
  // its check.
  std::string Path(uint64_t i) const;

  // REQUIRES: d < dir_count(). The root is directory 0 and has an empty name.
  DirInfo dir(uint64_t d) const;
  std::string_view dir_name(uint64_t d) const;
  std::string DirPath(uint64_t d) const;
  // Directory d's sub-directories, sorted by name.
  std::vector<uint64_t> ChildDirs(uint64_t d) const;
  // Up to `max` samples directly in directory d, sorted by name, skipping
  // the first `from` (paging a listing of any size).
  std::vector<uint64_t> DirSamples(uint64_t d, uint64_t from = 0,
                                   uint64_t max = ~uint64_t{0}) const;
  // The samples below directory d (recursively) as one run of consecutive
  // indices [first, first + count), when they are one (always for the root;
  // in v3 whenever names were added in order); else nullopt.
  struct IndexRange {
    uint64_t first = 0;
    uint64_t count = 0;
  };
  std::optional<IndexRange> SubtreeIndexRange(uint64_t d) const;

  // Checks everything a query could read (v3: every block of samples,
  // names and name order, the tree, and that names are in order); for
  // v1/v2, already done at open. Corruption naming the first bad part.
  Status CheckAll() const;
  // The largest sample's length, when the directory records it (v3); else
  // nullopt (finding it takes a pass over every sample).
  std::optional<uint64_t> max_sample_length() const;
  // Where block b of a compact directory lies, as its entry says, without
  // checking it (for summaries: a damaged block's samples still fail every
  // read). REQUIRES: b < block_count().
  struct BlockPlace {
    uint16_t target = 0;
    uint64_t data_offset = 0;
    uint64_t count = 0;  // samples in it
  };
  BlockPlace block_place(uint64_t b) const;
  // Blocks of the compact directory (0 for v1/v2) and samples per block.
  uint64_t block_count() const;
  uint64_t block_samples() const;

  // REQUIRES: c < class_count().
  std::string_view class_name(uint64_t c) const;

  // ---- Token volumes (format v3 with the TOKENS flag, docs/format.md
  // §10.11): each sample is a document, an array of little-endian unsigned
  // token ids of token_width() bytes, and the documents lie back to back:
  // the corpus's token stream is target 0's bytes [token_stream_offset(),
  // + token_count() * token_width()), and document d starts at token
  // (Locate(d).offset - token_stream_offset()) / token_width(). Empty
  // documents are kept (they hold no token). The stream is checked in
  // chunks of 2^token_check_shift() bytes (TokenCheck): a reader of a
  // window of tokens checks the chunks it covers instead of whole
  // documents (src/directory/token_checks.h). Any other volume answers 0 and
  // its queries NotSupported.
  uint32_t token_width() const;          // 2 or 4; 0: not a token volume
  uint64_t token_count() const;          // tokens in the corpus
  uint64_t token_stream_offset() const;  // byte offset in target 0 of token 0
  uint32_t token_check_shift() const;    // chunks of 2^shift bytes
  uint64_t token_chunk_count() const;    // ceil(token bytes / 2^shift)
  // The CRC32C of chunk `chunk` of the stream: its bytes [chunk << shift,
  // min((chunk + 1) << shift, token bytes)). InvalidArgument past the last.
  Result<uint32_t> TokenCheck(uint64_t chunk) const;
  // The first token of `document`; document == size() gives token_count().
  // Checks the document's block (and that it follows the one before).
  Result<uint64_t> DocumentStart(uint64_t document) const;
  // The document holding token `token` (< token_count()): the last
  // non-empty document starting at or before it. O(log n) through the
  // block entries, then the block's records; no per-document arrays.
  Result<uint64_t> DocumentAt(uint64_t token) const;

  // Resolves a '/'-separated path relative to the root ("" or "/" is the
  // root; leading, trailing and repeated slashes are ignored). NotFound when
  // nothing has that path.
  Result<PathEntry> Resolve(std::string_view path) const;
  // Like Resolve, but the path must name a sample.
  Result<uint64_t> Lookup(std::string_view path) const;

  // Indices of every sample below directory `d` (recursively), ascending.
  // REQUIRES: d < dir_count().
  std::vector<uint64_t> SamplesUnder(uint64_t d) const;

  // ---- Fields (format v2). A volume without the fields feature answers as
  // if every sample were one unnamed raw field. ----
  bool has_fields() const { return field_count_ != 0; }
  // Some sample has several fields or a compressed one (the records layout,
  // docs/format.md §4.8.3): its stored extent is then not one field's bytes.
  bool has_field_records() const { return field_index_ != nullptr; }
  // Field ids are 0 .. field_count() - 1, sorted by name.
  uint32_t field_count() const { return field_count_ != 0 ? field_count_ : 1; }
  std::string_view field_name(uint32_t f) const;  // REQUIRES: f < field_count()
  std::optional<uint32_t> FindField(std::string_view name) const;
  // Sample i's fields in storage order. REQUIRES: i < size().
  std::vector<FieldInfo> Fields(uint64_t i) const;
  // Field `field` of sample i, or nullopt when the sample lacks it.
  std::optional<FieldInfo> Field(uint64_t i, uint32_t field) const;
  // Fields of all samples together (the field records in the records
  // layout; one per sample otherwise). O(1).
  uint64_t field_instance_count() const;
  // The volume's zstd dictionary (empty when it has none).
  std::span<const std::byte> dictionary() const { return {dict_, dict_bytes_}; }

  // ---- Prepared images (compat flag IMAGES, docs/format.md §4.9) ----
  // The images section, or nullopt when the volume has none.
  std::optional<VolumeImages> images() const;
  // The changed images, sorted by (sample, field): k < images()->changed.
  ImageOrigin image_origin(uint64_t k) const;
  // Sample i's field `field` when the writer changed it, else nullopt (also
  // for a volume without an images section). O(log changed).
  std::optional<ImageOrigin> FindImageOrigin(uint64_t i, uint32_t field = 0) const;

  // Total bytes of the region the view reads (what the directory costs in
  // memory once every part of it has been read).
  uint64_t memory_bytes() const { return region_size_; }
  // Of them, what locating and checking samples takes (v3: block entries and
  // sample records; v1/v2: the sample array).
  uint64_t sample_metadata_bytes() const;

 private:
  std::string_view String(uint32_t offset, uint32_t length) const;
  // Binary searches among a directory's children and its samples.
  std::optional<uint64_t> FindChildDir(const format::DirEntry& d, std::string_view name) const;
  std::optional<uint64_t> FindSample(const format::DirEntry& d, std::string_view name) const;

  static Result<SampleDirectory> CreateCompact(std::shared_ptr<const std::byte> region,
                                               uint64_t size, const Expected& expected,
                                               const std::string& volume_path);

  std::shared_ptr<const directory_internal::CompactState> compact_;  // v3, else null
  std::shared_ptr<const std::byte> region_;
  uint64_t region_size_ = 0;
  uint64_t sample_count_ = 0;
  uint64_t dir_count_ = 0;
  uint64_t class_count_ = 0;
  const format::SampleEntry* samples_ = nullptr;
  const format::DirEntry* dirs_ = nullptr;
  const format::ClassEntry* classes_ = nullptr;
  const char* strings_ = nullptr;
  uint32_t field_count_ = 0;  // 0: no fields feature
  const format::FieldEntry* fields_ = nullptr;
  const uint32_t* field_index_ = nullptr;  // null in the single layout
  const format::FieldRecord* records_ = nullptr;
  const std::byte* dict_ = nullptr;
  uint64_t dict_bytes_ = 0;
  const format::ImagesHeader* images_ = nullptr;  // null: no images section
  const format::ImageRecord* image_records_ = nullptr;
  uint64_t image_record_count_ = 0;
};

}  // namespace dlfs
