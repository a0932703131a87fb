// The cursor walk: a read-only liblmdb cursor over the main database, as
// Caffe's DataReader uses it (the baseline and the lmm, lmm-dm and lmm-dio
// readers walk it).
#pragma once

#include <lmdb.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "dlfs/status.h"

namespace dlfs::lmdbio {

// Wraps from the last record to the first. Not thread-safe.
class MdbCursor {
 public:
  // Opens `path` (the LMDB directory or its data.mdb) read-only, without a
  // lock file, positioned at the first record. `walk_only`: the map is only
  // used to walk the tree (values are read with explicit reads), so kernel
  // read-around on its page faults would only pull in value pages early and
  // disturb the explicit reads' readahead: MDB_NORDAHEAD turns it off.
  // NotFound / IOError from liblmdb, InvalidArgument for an empty database.
  static Result<std::unique_ptr<MdbCursor>> Open(const std::string& path, bool walk_only = false);
  ~MdbCursor();

  uint64_t entries() const { return entries_; }
  // liblmdb's map of data.mdb: values are views into it.
  const std::byte* map() const { return map_; }
  uint64_t map_size() const { return map_size_; }  // bytes of the used pages

  // Moves to the next record, wrapping to the first after the last.
  Status Step();
  // Positions at `key`, which must exist.
  Status Seek(std::string_view key);
  std::string_view key() const {
    return std::string_view(static_cast<const char*>(key_.mv_data), key_.mv_size);
  }
  std::span<const std::byte> value() const {
    return {static_cast<const std::byte*>(value_.mv_data), value_.mv_size};
  }

 private:
  explicit MdbCursor(std::string path) : path_(std::move(path)) {}
  Status Get(MDB_cursor_op op);

  std::string path_;
  MDB_env* env_ = nullptr;
  MDB_txn* txn_ = nullptr;
  MDB_dbi dbi_ = 0;
  MDB_cursor* cursor_ = nullptr;
  MDB_val key_{}, value_{};
  uint64_t entries_ = 0;
  const std::byte* map_ = nullptr;
  uint64_t map_size_ = 0;
};

}  // namespace dlfs::lmdbio
