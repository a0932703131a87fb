// Internal to src/builder: an unnamed temporary file beside the volume being
// written, for what a streaming writer collects faster than it may keep in
// memory (the compact directory's sections). The file has no name
// (O_TMPFILE, or created and unlinked at once), so nothing is left behind
// whatever happens to the process.
//
// Thread safety: none; one writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dlfs/status.h"

namespace dlfs::builder_internal {

class SpillFile {
 public:
  // A new empty spill file in the directory of `near_path`.
  static Result<std::unique_ptr<SpillFile>> Create(const std::string& near_path);
  ~SpillFile();
  SpillFile(const SpillFile&) = delete;
  SpillFile& operator=(const SpillFile&) = delete;

  // Appends through a 1 MiB buffer.
  Status Append(std::span<const std::byte> data);
  Status Append(const void* data, size_t n) {
    return Append({static_cast<const std::byte*>(data), n});
  }
  // Writes at `offset` (after any appended bytes are flushed).
  Status WriteAt(const void* data, size_t n, uint64_t offset);
  uint64_t size() const { return size_; }

  // Maps the whole file read-only (after flushing); the mapping lives until
  // the next Map or the file's end. Null for an empty file.
  Result<const std::byte*> Map();
  // Hands the bytes [offset, offset + n) to `sink` in pieces of at most 8 MiB.
  Status CopyTo(uint64_t offset, uint64_t n,
                const std::function<Status(std::span<const std::byte>)>& sink);

 private:
  SpillFile(int fd, std::string where) : fd_(fd), where_(std::move(where)) {}
  Status Flush();
  void Unmap();

  int fd_;
  std::string where_;  // for messages
  std::vector<std::byte> buf_;
  uint64_t size_ = 0;     // bytes appended or written, buffered included
  uint64_t flushed_ = 0;  // bytes of size_ in the file
  void* map_ = nullptr;
  uint64_t map_bytes_ = 0;
};

}  // namespace dlfs::builder_internal
