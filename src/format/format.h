// On-disk layout of a dlfs volume: format version 1, the format-v2
// features behind incompat flags (fields, zstd; docs/format.md §2.5, §4.8)
// and the images section behind a compat flag (§4.9).
//
// docs/format.md is the specification; this header only mirrors it as the
// constants and packed structs shared by the reader and the writer. Change
// both in the same commit. All integers are little-endian; the structs are
// read and written in place, so the library refuses to build on big-endian
// hosts rather than silently misread volumes.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace dlfs::format {

static_assert(std::endian::native == std::endian::little,
              "dlfs volumes are little-endian and read in place");

// First 8 bytes of every superblock. The high-bit first byte and the CR LF /
// SUB tail (as in PNG) catch 7-bit and text-mode transfer damage.
inline constexpr unsigned char kSuperblockMagic[8] = {0x89, 'D', 'L', 'F', 'S', '\r', '\n', 0x1a};
inline constexpr uint32_t kFormatVersion = 1;
// Format v3 (docs/format.md §10): the same superblock and data regions, and
// a compact directory region that readers map and use in place, checked
// block by block on first use.
inline constexpr uint32_t kFormatVersionCompact = 3;
inline constexpr uint32_t kSuperblockSize = 4096;
// Regions start on this boundary so O_DIRECT readers can read them whole.
inline constexpr uint32_t kRegionAlignment = 4096;
inline constexpr uint32_t kMaxRegions = 16;
inline constexpr uint32_t kMaxTargets = 8;
inline constexpr uint32_t kMaxTargetPath = 240;
inline constexpr uint32_t kMaxDataAlignment = 1u << 20;

// Feature flags (docs/format.md §2.5). A reader refuses a volume with any
// incompat bit it does not know; unknown compat bits are ignored.
// FIELDS: the directory has the fields header, field table and field records
// (§4.8). ZSTD: some fields are zstd-compressed (only together with FIELDS).
inline constexpr uint32_t kIncompatFields = 0x1;
inline constexpr uint32_t kIncompatZstd = 0x2;
inline constexpr uint32_t kKnownIncompatFlags = kIncompatFields | kIncompatZstd;
// IMAGES: the directory region holds an images section (§4.9); readers that
// do not know it ignore it.
inline constexpr uint32_t kCompatImages = 0x1;

inline constexpr uint32_t kNone = 0xFFFFFFFFu;  // "no parent", "no label"
// Labels other than kNone are below this (§4.6 rule 7): the writer refuses a
// larger one and the reader refuses a volume holding one (§5 check 39). The
// class table has an entry for every class up to the largest label, so a
// label from a hostile source (a tar's .cls, a Datum) must not size it: one
// sample labelled 10^9 made a 557-byte tar take minutes and gigabytes. 2^24
// classes is beyond any labelled data set we know of (ImageNet-21k has
// 21,841; extreme classification ~3M) and keeps the table <= 128 MiB.
inline constexpr uint32_t kLabelLimit = 1u << 24;

enum class RegionKind : uint32_t {
  kInvalid = 0,  // reserved: an all-zero entry is never a region
  kData = 1,
  kDirectory = 2,
};

struct RegionEntry {
  uint32_t kind;    // RegionKind
  uint32_t target;  // index into the target table
  uint64_t offset;  // byte offset in that target, a multiple of kRegionAlignment
  uint64_t length;  // bytes
  uint32_t crc32c;  // of the region's bytes; 0 for data (samples carry their own)
  uint32_t reserved;
};
static_assert(sizeof(RegionEntry) == 32);

struct TargetEntry {
  uint64_t size;   // bytes of the target file or device used by the volume
  uint32_t flags;  // reserved, 0
  // 0 for target 0 (the file a reader opens the volume from), 1..240 for
  // every other target.
  uint32_t path_length;
  // Not NUL-terminated. Absolute, or relative to target 0's directory
  // (docs/format.md §2.3).
  char path[kMaxTargetPath];
};
static_assert(sizeof(TargetEntry) == 256);

struct Superblock {
  unsigned char magic[8];
  uint32_t format_version;
  uint32_t superblock_size;  // kSuperblockSize
  uint8_t uuid[16];          // random, identical in every target of a volume
  uint32_t incompat_flags;
  uint32_t compat_flags;
  uint64_t volume_size;  // bytes of this target file, both superblocks included
  uint64_t created_unix_ns;
  uint64_t sample_count;
  uint64_t dir_count;
  uint64_t class_count;
  uint64_t data_bytes;      // sum of sample lengths (padding excluded)
  uint32_t data_alignment;  // every sample offset is a multiple of it; power of two
  uint32_t target_index;    // which target this file is; 0 holds the directory
  uint32_t target_count;    // 1..kMaxTargets; see docs/format.md §2.6
  uint32_t region_count;
  uint8_t reserved0[24];
  RegionEntry regions[kMaxRegions];
  TargetEntry targets[kMaxTargets];
  uint8_t reserved1[1404];
  uint32_t crc32c;  // of bytes [0, 4092), i.e. everything before this field
};
static_assert(sizeof(Superblock) == kSuperblockSize);
static_assert(offsetof(Superblock, regions) == 128);
static_assert(offsetof(Superblock, targets) == 640);
static_assert(offsetof(Superblock, crc32c) == kSuperblockSize - 4);

// ---- Directory region -------------------------------------------------------

inline constexpr uint32_t kDirectoryMagic = 0x52444c44;  // "DLDR" read as bytes
inline constexpr uint32_t kDirectoryHeaderSize = 128;
// With FIELDS: the v1 header followed by FieldsHeader.
inline constexpr uint32_t kDirectoryHeaderSizeFields = 256;

struct DirectoryHeader {
  uint32_t magic;        // kDirectoryMagic
  uint32_t header_size;  // kDirectoryHeaderSize
  uint64_t sample_count;
  uint64_t dir_count;
  uint64_t class_count;
  uint64_t string_bytes;
  // Byte offsets of the arrays from the start of the region, multiples of 8.
  uint64_t samples_offset;
  uint64_t dirs_offset;
  uint64_t classes_offset;
  uint64_t strings_offset;
  uint32_t sample_entry_size;  // sizeof(SampleEntry)
  uint32_t dir_entry_size;     // sizeof(DirEntry)
  uint32_t class_entry_size;   // sizeof(ClassEntry)
  uint32_t reserved0;
  // With the compat flag IMAGES: where the images section is (§4.9); zero
  // otherwise.
  uint64_t images_offset;
  uint64_t images_bytes;
  uint8_t reserved1[24];
};
static_assert(sizeof(DirectoryHeader) == kDirectoryHeaderSize);
static_assert(offsetof(DirectoryHeader, images_offset) == 88);

// One per sample; the array index is the sample index.
struct SampleEntry {
  uint64_t offset;       // byte offset of the sample in its target
  uint32_t length;       // bytes
  uint32_t crc32c;       // of the sample's bytes
  uint32_t label;        // class id, or kNone
  uint32_t parent;       // index of the directory holding the sample
  uint32_t name_offset;  // into the string pool
  uint16_t name_length;  // bytes, 1..65535, no '/' and no NUL
  uint16_t target;       // index into the target table
};
static_assert(sizeof(SampleEntry) == 32);

// One per directory, in breadth-first order: the root is 0, each directory's
// children are contiguous and sorted by name, and its samples are contiguous
// and sorted by name, so lookups are binary searches.
struct DirEntry {
  uint32_t parent;  // kNone for the root
  uint32_t name_offset;
  uint16_t name_length;  // 0 only for the root
  uint16_t reserved0;
  uint32_t first_child;
  uint32_t child_count;
  uint32_t first_sample;
  uint32_t sample_count;
  uint32_t reserved1;
};
static_assert(sizeof(DirEntry) == 32);

// One per label id: the class's name.
struct ClassEntry {
  uint32_t name_offset;
  uint32_t name_length;
};
static_assert(sizeof(ClassEntry) == 8);

// ---- Fields (format v2, incompat flag FIELDS; docs/format.md §4.8) ---------

inline constexpr uint32_t kFieldsMagic = 0x58444c44;  // "DLDX" read as bytes
inline constexpr uint32_t kMaxFields = 0xFFFF;

enum class FieldLayout : uint32_t {
  kSingle = 1,   // every sample is field 0, raw, its whole extent
  kRecords = 2,  // per-sample FieldRecords through the field index
};

enum class FieldCodec : uint8_t { kNone = 0, kZstd = 1, kZstdDict = 2 };

// At region offset 128 when FIELDS is set (header_size 256).
struct FieldsHeader {
  uint32_t magic;  // kFieldsMagic
  uint32_t layout;
  uint32_t field_count;        // 1..kMaxFields
  uint32_t field_entry_size;   // sizeof(FieldEntry)
  uint32_t record_entry_size;  // sizeof(FieldRecord)
  uint32_t reserved0;
  uint64_t fields_offset;   // FieldEntry[field_count]
  uint64_t index_offset;    // u32[sample_count + 1] (records layout), else 0
  uint64_t records_offset;  // FieldRecord[record_count] (records layout), else 0
  uint64_t record_count;
  uint64_t dict_offset;  // zstd dictionary, or 0
  uint64_t dict_bytes;
  uint8_t reserved1[56];
};
static_assert(sizeof(FieldsHeader) == 128);

// One per field id; names sorted strictly increasing, in the string pool.
struct FieldEntry {
  uint32_t name_offset;
  uint32_t name_length;  // 0..65535; 0 is the unnamed field
};
static_assert(sizeof(FieldEntry) == 8);

// One per field of a sample, in storage order inside the sample's extent.
struct FieldRecord {
  uint32_t stored_length;   // bytes in the extent
  uint32_t crc32c;          // of the stored bytes
  uint32_t decoded_length;  // after decoding; == stored_length for kNone
  uint16_t field;           // field id
  uint8_t codec;            // FieldCodec
  uint8_t reserved;
};
static_assert(sizeof(FieldRecord) == 16);

// ---- Images (compat flag IMAGES; docs/format.md §4.9) ----------------------

inline constexpr uint32_t kImagesMagic = 0x4d494c44;  // "DLIM" read as bytes

// Values of ImagesHeader::filter, ::mode and ImageRecord::stored.
enum class ImageFilterCode : uint8_t {
  kNone = 0,
  kBilinear = 1,
  kBicubic = 2,
  kLanczos = 3,
  kBox = 4,
  kHamming = 5
};
inline constexpr uint8_t kMaxImageFilterCode = 5;
enum class ImageModeCode : uint8_t { kKeep = 0, kJpeg = 1, kRaw = 2, kSmart = 3, kProportion = 4 };
inline constexpr uint8_t kMaxImageModeCode = 4;
enum class StoredImageCode : uint8_t { kJpeg = 1, kPng = 2, kRaw = 3 };
inline constexpr uint8_t kImageFlagAlwaysReencode = 0x1;  // ImagesHeader::flags
inline constexpr uint8_t kImageRecordResized = 0x1;       // ImageRecord::flags

// At images_offset, 8-aligned, between the last array and the string pool.
struct ImagesHeader {
  uint32_t magic;              // kImagesMagic
  uint32_t header_size;        // sizeof(ImagesHeader)
  uint32_t record_entry_size;  // sizeof(ImageRecord)
  uint32_t reserved0;
  uint64_t record_count;
  uint64_t records_offset;  // region offset of ImageRecord[record_count]
  uint64_t image_count;     // image fields looked at (changed or kept)
  uint32_t max_side;        // 0: not capped
  uint8_t filter;           // ImageFilterCode
  uint8_t mode;             // ImageModeCode
  uint8_t jpeg_quality;     // 1..100, 0 = not asked for
  uint8_t color;            // 0 own channels, 1 RGB, 2 gray (ColorMode's values)
  uint8_t flags;            // kImageFlagAlwaysReencode
  uint8_t reserved1[7];
  uint64_t smart_threshold;
  double jpeg_probability;
  uint64_t seed;
  uint8_t reserved2[16];
};
static_assert(sizeof(ImagesHeader) == 96);
static_assert(offsetof(ImagesHeader, max_side) == 40);
static_assert(offsetof(ImagesHeader, smart_threshold) == 56);
static_assert(offsetof(ImagesHeader, seed) == 72);

// One per image the writer changed, sorted by (sample, field).
struct ImageRecord {
  uint32_t sample;
  uint16_t field;
  uint8_t stored;  // StoredImageCode
  uint8_t flags;   // kImageRecordResized
  uint32_t width;  // of the original image
  uint32_t height;
};
static_assert(sizeof(ImageRecord) == 16);

// Raw image bytes (§4.9.3): this header, then height x width x channels
// bytes of HWC uint8 pixels.
inline constexpr unsigned char kRawImageMagic[4] = {0x89, 'R', 'A', 'W'};
inline constexpr uint8_t kRawImageVersion = 1;
struct RawImageHeader {
  unsigned char magic[4];
  uint8_t version;
  uint8_t channels;  // 1 or 3
  uint16_t reserved;
  uint32_t height;
  uint32_t width;
};
static_assert(sizeof(RawImageHeader) == 16);

// ---- The compact directory (format v3; docs/format.md §10) ------------------

inline constexpr uint32_t kCompactMagic = 0x33444c44;  // "DLD3" read as bytes
inline constexpr uint32_t kCompactHeaderSize = 256;
// Samples per block: 2^block_shift, within these bounds (§10.1).
inline constexpr uint32_t kMinBlockShift = 4;
inline constexpr uint32_t kMaxBlockShift = 16;
inline constexpr uint32_t kDefaultBlockShift = 10;

// CompactHeader::flags.
// NAMES: the names, name-order and tree sections are present (§10.4-10.6).
inline constexpr uint32_t kCompactNames = 0x1;
// NAMES_SORTED (with NAMES): index order is name order, so there is no
// name-order section (§10.5).
inline constexpr uint32_t kCompactNamesSorted = 0x2;
// TOKENS: a token volume (§10.11): the samples are documents of token ids
// of token_width bytes, back to back across blocks on one target, and the
// token checks section holds a CRC32C per 2^check_shift bytes of them.
inline constexpr uint32_t kCompactTokens = 0x4;
inline constexpr uint32_t kKnownCompactFlags = kCompactNames | kCompactNamesSorted | kCompactTokens;
// Token volumes: chunk sizes of the token checks, 2^check_shift bytes.
inline constexpr uint32_t kMinCheckShift = 9;
inline constexpr uint32_t kMaxCheckShift = 24;
inline constexpr uint32_t kDefaultCheckShift = 12;  // 4 KiB: one page, one O_DIRECT unit

// The sections of a compact directory, by their place in CompactHeader::sections.
enum CompactSection : uint32_t {
  kSectionBlocks = 0,      // BlockEntry[block_count]
  kSectionRecords = 1,     // every block's sample records
  kSectionClasses = 2,     // ClassesHeader, ClassEntry[class_count], class names
  kSectionNameBlocks = 3,  // NameBlock[block_count]               (NAMES)
  kSectionNames = 4,       // name ends and name bytes              (NAMES)
  kSectionNameOrder = 5,   // index of the sample at each name position (NAMES, not NAMES_SORTED)
  kSectionTree = 6,        // TreeHeader, TreeEntry[dir_count], paths (NAMES)
  kSectionCount = 7,
};

struct SectionEntry {
  uint64_t offset;  // from the start of the region, a multiple of 8 (0 with length 0: absent)
  uint64_t length;  // bytes
};
static_assert(sizeof(SectionEntry) == 16);

struct CompactHeader {
  uint32_t magic;        // kCompactMagic
  uint32_t header_size;  // kCompactHeaderSize
  uint64_t sample_count;
  uint64_t class_count;
  uint64_t dir_count;    // tree entries (0 without NAMES)
  uint64_t block_count;  // ceil(sample_count / 2^block_shift)
  uint32_t block_shift;  // samples per block = 2^block_shift
  uint32_t flags;        // kCompactNames | kCompactNamesSorted | kCompactTokens
  uint32_t order_width;  // bytes per name-order entry (1..8), 0 without that section
  // TOKENS: bytes per token id (2 or 4) and the token checks' chunk size,
  // 2^check_shift bytes (kMinCheckShift..kMaxCheckShift); both 0 without.
  uint16_t token_width;
  uint16_t check_shift;
  SectionEntry sections[kSectionCount];
  uint64_t max_sample_length;  // the largest sample's length (what a reader's buffers need)
  // TOKENS: the token checks section, u32 CRC32C[ceil(data_bytes /
  // 2^check_shift)]; (0, 0) without.
  SectionEntry token_checks;
  uint8_t reserved1[252 - 56 - 16 * kSectionCount - 8 - 16];
  uint32_t crc32c;  // of bytes [0, 252)
};
static_assert(sizeof(CompactHeader) == kCompactHeaderSize);
static_assert(offsetof(CompactHeader, token_width) == 52);
static_assert(offsetof(CompactHeader, check_shift) == 54);
static_assert(offsetof(CompactHeader, sections) == 56);
static_assert(offsetof(CompactHeader, max_sample_length) == 168);
static_assert(offsetof(CompactHeader, token_checks) == 176);
static_assert(offsetof(CompactHeader, reserved1) == 192);
static_assert(offsetof(CompactHeader, crc32c) == 252);

// One per block of 2^block_shift samples (the last block may hold fewer).
// A block's samples lie back to back on one target, in index order, each
// starting at a multiple of data_alignment; their records give where each
// ends, its CRC32C and its label.
struct BlockEntry {
  uint64_t data_offset;     // of the block's first sample in its target
  uint64_t records_offset;  // of its records, from the records section's start; multiple of 8
  uint32_t label;           // label_width 0: every sample's label (class id or kNone)
  uint16_t target;
  uint8_t end_width;    // bytes per end, 1..8
  uint8_t label_width;  // bytes per label, 0..4
  uint32_t reserved;
  // CRC32C of this entry's bytes [0, 28) followed by the block's records.
  uint32_t crc32c;
};
static_assert(sizeof(BlockEntry) == 32);

// At the start of the classes section.
struct ClassesHeader {
  uint32_t crc32c;  // of the section's bytes after this header
  uint32_t reserved;
  uint64_t name_bytes;  // bytes of class names after ClassEntry[class_count]
};
static_assert(sizeof(ClassesHeader) == 16);

// One per block of 2^block_shift names (sample i's name is in block i >>
// block_shift). Names are full paths ("cat/sub/b.jpg").
struct NameBlock {
  uint64_t bytes_offset;  // of the block's first name, from the names section's start
  uint64_t ends_offset;   // of the block's name ends, from the names section's start; multiple of 8
  uint8_t end_width;      // bytes per end, 1..8
  uint8_t reserved[3];
  // CRC32C of this entry's bytes [0, 20), the block's ends, then its names.
  uint32_t crc32c;
};
static_assert(sizeof(NameBlock) == 24);

// At the start of the tree section.
struct TreeHeader {
  uint32_t crc32c;  // of the section's bytes after this header
  uint32_t reserved;
  uint64_t path_bytes;  // bytes of directory paths after TreeEntry[dir_count]
};
static_assert(sizeof(TreeHeader) == 16);

// One per directory, sorted by path + "/" (the root, path "", first): a
// directory's subtree is then [d, d + subtree_dirs), and the samples under
// it the name positions [first_position, first_position + position_count).
struct TreeEntry {
  uint64_t parent;  // kNoDir for the root
  uint64_t subtree_dirs;
  uint64_t first_position;
  uint64_t position_count;
  uint64_t own_samples;  // samples directly in it
  uint64_t path_offset;  // of its path in the paths after the entries
  uint32_t path_length;
  uint32_t child_count;  // directories directly in it
};
static_assert(sizeof(TreeEntry) == 56);
inline constexpr uint64_t kNoDir = ~uint64_t{0};

inline constexpr uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace dlfs::format
