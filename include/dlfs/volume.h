// Volume: an open dlfs volume — its superblock, its sample directory, and
// plain (pread) access to sample bytes.
//
// Start here. A volume is one file (or block device) written by `dlfs pack`
// or VolumeBuilder; docs/format.md specifies it. Open() reads the superblock
// and the whole directory region in one read each, verifies both checksums
// and the directory's structure, and refuses anything it does not fully
// understand with a Status naming the file and the problem.
//
// Reading samples here is the simple path (one pread per sample) used by the
// CLI, tests and importers; the batch loader (dlfs/loader.h) is the fast one.
//
// Thread safety: after Open(), every const method may be called from any
// number of threads concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dlfs/directory.h"
#include "dlfs/status.h"

namespace dlfs {

struct VolumeInfo {
  uint32_t format_version = 0;
  std::string uuid;  // 8-4-4-4-12 hex
  uint64_t created_unix_ns = 0;
  uint64_t volume_size = 0;  // bytes of the file
  uint64_t sample_count = 0;
  uint64_t dir_count = 0;
  uint64_t class_count = 0;
  uint64_t data_bytes = 0;  // sum of sample lengths
  uint64_t data_offset = 0;
  uint64_t data_length = 0;  // data region bytes, alignment padding included
  uint64_t directory_offset = 0;
  uint64_t directory_bytes = 0;
  uint32_t data_alignment = 1;
  std::vector<std::string> targets;  // target 0 is the volume file itself
};

class Volume {
 public:
  // Opens the volume at `path` read-only. Errors: NotFound / IOError (with
  // errno) when the file cannot be read; Corruption for a bad magic, a
  // checksum mismatch, a truncated file or any structural inconsistency;
  // NotSupported for a newer format version or unknown feature flags.
  static Result<std::shared_ptr<Volume>> Open(const std::string& path);

  ~Volume();
  Volume(const Volume&) = delete;
  Volume& operator=(const Volume&) = delete;

  const std::string& path() const { return path_; }
  const VolumeInfo& info() const { return info_; }
  const SampleDirectory& directory() const { return directory_; }
  uint64_t size() const { return directory_.size(); }

  // Reads sample `index` into `dst`, which must be exactly its length. With
  // `verify`, the bytes are checked against the stored CRC32C and a mismatch
  // is a Corruption status naming the sample; `dst` then holds the bad bytes
  // and must not be used. InvalidArgument for an index out of range.
  Status ReadInto(uint64_t index, std::span<std::byte> dst, bool verify = true) const;
  // Checks `bytes` against sample `index`'s stored CRC32C: OK, or a
  // Corruption status naming the volume, the sample and both checksums.
  // REQUIRES: index < size().
  Status CheckSample(uint64_t index, std::span<const std::byte> bytes) const;

  // Same, into a new buffer.
  Result<std::vector<std::byte>> Read(uint64_t index, bool verify = true) const;

  // Checks the copy of the superblock at the end of the file: OK when it is
  // intact and identical to the primary one.
  Status CheckBackupSuperblock() const;

  // The file descriptor of target `t` (read-only, close-on-exec), for I/O
  // engines that read the data region themselves. REQUIRES: t < target count.
  int target_fd(uint32_t t) const { return fds_[t]; }

 private:
  Volume() = default;

  std::string path_;
  VolumeInfo info_;
  std::vector<int> fds_;
  SampleDirectory directory_;
};

}  // namespace dlfs
