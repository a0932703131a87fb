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

class LmdbRecordMap {
 public:
  // `path` is the data.mdb file, or a directory holding one.
  static Result<LmdbRecordMap> Build(const std::string& path);

  const std::string& path() const { return path_; }  // the data.mdb file
  const LmdbStats& stats() const { return stats_; }
  uint64_t size() const { return offsets_.size(); }

  // REQUIRES: i < size(). Records are in key order.
  std::string_view key(uint64_t i) const {
    return std::string_view(keys_).substr(key_offsets_[i], key_offsets_[i + 1] - key_offsets_[i]);
  }
  uint64_t value_offset(uint64_t i) const { return offsets_[i]; }
  uint64_t value_length(uint64_t i) const { return lengths_[i]; }

 private:
  friend class LmdbParser;
  std::string path_;
  LmdbStats stats_;
  std::string keys_;
  std::vector<uint64_t> key_offsets_{0};
  std::vector<uint64_t> offsets_;
  std::vector<uint64_t> lengths_;
};

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

}  // namespace dlfs
