// Reading existing LMDB databases (Caffe's format) without liblmdb.
//
// LmdbRecordMap parses data.mdb directly — read-only, no lock file, plain
// pread — and lists every record of the main database in key order with the
// exact byte range of its value in the file ("provenance"), taken from the
// real leaf nodes and overflow pages, never from an assumed writer layout
// (values can sit in reused free pages, out of key order). With the map,
// readers fetch values with explicit reads: no mmap, no cursor walk.
//
// Supported: the unnamed main database with default (memcmp) key order,
// inline and overflow values, any page size. Refused with NotSupported:
// named sub-databases, duplicate keys (DUPSORT), non-default key order.
// A truncated or damaged file is a Corruption error naming the file and the
// page; nothing is trusted without a bounds check.
//
// Thread safety: an LmdbRecordMap is immutable once built.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dlfs/status.h"

namespace dlfs {

struct LmdbStats {
  uint32_t page_size = 0;
  uint64_t txnid = 0;  // of the meta page used (the newest valid one)
  uint64_t last_page = 0;
  uint32_t depth = 0;
  uint64_t entries = 0;
  uint64_t branch_pages = 0;
  uint64_t leaf_pages = 0;
  uint64_t overflow_pages = 0;
  uint64_t file_size = 0;
};

struct LmdbMapOptions {
  // Read and check the header of every value's first overflow page (one
  // small random read per large value). Without it the map is built from
  // the branch and leaf pages only; the caller must then check each header
  // with CheckLmdbOverflowHeader once it has read the value's page (the
  // LMDBIO reader does). stats().overflow_pages is the same either way.
  bool check_overflow_headers = true;
};

class LmdbRecordMap {
 public:
  // `path` is the data.mdb file, or a directory holding one.
  static Result<LmdbRecordMap> Build(const std::string& path, const LmdbMapOptions& options = {});

  const std::string& path() const { return path_; }  // the data.mdb file
  const LmdbStats& stats() const { return stats_; }
  uint64_t size() const { return offsets_.size(); }

  // REQUIRES: i < size(). Records are in key order.
  std::string_view key(uint64_t i) const {
    return std::string_view(keys_).substr(key_offsets_[i], key_offsets_[i + 1] - key_offsets_[i]);
  }
  uint64_t value_offset(uint64_t i) const { return offsets_[i]; }
  uint64_t value_length(uint64_t i) const { return lengths_[i]; }
  // Whether value i is stored in overflow pages (then its page header sits
  // in the 16 bytes before value_offset(i)).
  bool in_overflow(uint64_t i) const { return offsets_[i] % stats_.page_size == kOverflowHeader; }

  static constexpr uint64_t kOverflowHeader = 16;  // PAGEHDRSZ

 private:
  friend class LmdbParser;
  std::string path_;
  LmdbStats stats_;
  std::string keys_;
  std::vector<uint64_t> key_offsets_{0};
  std::vector<uint64_t> offsets_;
  std::vector<uint64_t> lengths_;
};

// The data.mdb file `path` names: path/data.mdb when `path` is a directory,
// `path` itself otherwise.
std::string LmdbDataFile(const std::string& path);

// Reads and checks only the meta pages of data.mdb (two small reads, no tree
// walk): the LmdbStats of the newest valid meta page, with page_size, txnid,
// last_page, depth, entries and file_size set and the page counts left 0.
// Enough to tell whether two paths hold the same database. Errors as
// LmdbRecordMap::Build's for the file and its meta pages.
Result<LmdbStats> ReadLmdbMeta(const std::string& path);

// Checks the 16-byte page header in front of an overflow value that starts
// at file offset `value_offset` and holds `length` bytes: the page names
// itself, is an overflow page, and its run can hold the value. Corruption
// naming `path` and the page otherwise.
Status CheckLmdbOverflowHeader(std::span<const std::byte> header, uint64_t value_offset,
                               uint64_t length, uint32_t page_size, const std::string& path);

// A Caffe Datum (caffe.proto), decoded from the protobuf wire format.
struct Datum {
  int32_t channels = 0;
  int32_t height = 0;
  int32_t width = 0;
  int32_t label = 0;
  bool has_label = false;
  bool encoded = false;             // data holds a compressed image (JPEG/PNG)
  std::span<const std::byte> data;  // view into the buffer passed to ParseDatum
  uint64_t float_count = 0;         // entries of float_data
};

// Decodes `bytes`; Corruption for a malformed message. `data` points into
// `bytes`.
Result<Datum> ParseDatum(std::span<const std::byte> bytes);

// The shape of a Datum, without its bytes.
struct DatumShape {
  int32_t channels = 0;
  int32_t height = 0;
  int32_t width = 0;
  int32_t label = 0;
  bool has_label = false;
  bool encoded = false;
  uint64_t data_bytes = 0;  // size of the data field
};

// What `dlfs lmdb info` shows about a database.
struct LmdbSummary {
  std::string path;  // the data.mdb file
  LmdbStats stats;
  uint64_t value_bytes = 0;  // sum of the value lengths
  uint64_t value_min = 0;    // 0 for an empty database
  uint64_t value_max = 0;
  double value_mean = 0;
  std::string first_key, last_key;  // empty for an empty database
  // Set when the first value (in key order) decodes as a Caffe Datum.
  std::optional<DatumShape> first_datum;
};

// Builds the record map of `path` (a data.mdb or its directory) and reads
// the first value. Errors: those of LmdbRecordMap::Build, and IOError naming
// the file when the first value cannot be read. A first value that is not a
// Datum is not an error (first_datum stays empty).
Result<LmdbSummary> SummarizeLmdb(const std::string& path);

}  // namespace dlfs
