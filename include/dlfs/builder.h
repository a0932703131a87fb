// VolumeBuilder: writes a new dlfs volume, sample by sample.
//
// Samples stream to a temporary file next to the destination
// ("<path>.tmp.<pid>.<n>") while only their directory entries (32 bytes plus
// the name) stay in memory. Finish() writes the directory region and both
// superblocks, fsyncs, then renames the temporary file into place, so a
// crash or an error at any point leaves no file that opens as a volume. The
// destination is never replaced unless Options::overwrite is set.
//
// With Options::targets = N > 1 the samples are spread over N files (e.g.
// on N devices): target 0 is `path` and holds the directory, targets 1..N-1
// are further files, each with its own temporary file. Each sample goes
// whole to the target holding the fewest bytes so far. All targets are
// written and fsynced before any is renamed into place, target 0 last, and
// a failed rename removes the targets already renamed; see docs/format.md §6
// for what a crash can leave. Each temporary file carries a write lock
// (F_OFD_SETLK) while its builder lives, so that the next builder for the
// same path can tell a killed builder's leftovers from a running one's and
// remove them.
//
// Paths are relative, '/'-separated ("cat/001.jpg"); intermediate directories
// are created implicitly. A path may hold one sample; a name cannot be both a
// sample and a directory. Both are refused when the offending sample is
// added (BeginSample / Add), before any of its bytes are written, naming the
// sample that came first (and its source, see SetSourceName). Sample order
// in the volume is canonical (see docs/format.md §4), not insertion order.
//
// Memory: per sample, its directory entry (32 bytes plus the name) and 8 to
// 16 bytes in the table of paths that finds duplicates; per directory, its
// entry and its path.
//
// Thread safety: none; use one builder from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dlfs/directory.h"
#include "dlfs/status.h"

namespace dlfs {

class VolumeBuilder {
 public:
  struct Options {
    // Every sample starts at a multiple of this (a power of two, at most
    // 1 MiB). 1 packs samples back to back; 4096 lets O_DIRECT readers read
    // each sample without touching a neighbour, at the cost of padding.
    uint32_t align = 1;
    // Replace existing files at the destinations (each atomically, on
    // Finish; a multi-target volume as a whole is not replaced atomically).
    bool overwrite = false;
    // Number of target files, 1 to 8.
    uint32_t targets = 1;
    // Paths of targets 1, 2, ... (exactly targets - 1 of them), or empty for
    // DefaultTargetPath's names. Target 0's table records each relative to
    // the directory of `path` when it lies at or below it, else absolute;
    // such a recorded path must fit in 240 bytes. A path may be an NBD URI
    // (dlfs/nbd.h; recorded as given): the export, at least as large as the
    // target, is written in place — its old superblock is zeroed at
    // Create, and the new one written last, after the data and a flush
    // (docs/format.md §6.1). An export holding a dlfs target counts as
    // existing (overwrite replaces it). Target 0 must be a file.
    std::vector<std::string> target_paths;
  };

  // Creates the temporary files, first removing stale ones a builder killed
  // while writing the same destination left ("<path>.tmp.<pid>.<n>" of a
  // process no longer running here, whose file lock nobody holds; see
  // removed_temporaries()). AlreadyExists if a destination exists and
  // !options.overwrite; InvalidArgument for a bad alignment, target count or
  // target path (two targets naming one file, too long).
  static Result<std::unique_ptr<VolumeBuilder>> Create(const std::string& path, Options options);
  static Result<std::unique_ptr<VolumeBuilder>> Create(const std::string& path) {
    return Create(path, Options{});
  }

  // Removes the temporary file unless Finish() succeeded.
  ~VolumeBuilder();

  // Names of label ids 0..n-1. Labels at or beyond n get their decimal
  // number as name.
  void SetClassNames(std::vector<std::string> names);

  // Names the source of the samples added from now on (e.g. the tar shard
  // they come from), for the message that refuses a later duplicate path.
  void SetSourceName(std::string name);

  // Adds one sample with all its bytes. InvalidArgument for a bad path, a
  // path already added (naming the earlier sample and its source) or a path
  // that is also a directory.
  Status Add(std::string_view path, std::span<const std::byte> data, uint32_t label = kNoLabel);

  // Adds one sample in pieces: BeginSample, any number of Append, then
  // EndSample — or AbortSample to drop it (e.g. its source failed mid-read).
  Status BeginSample(std::string_view path, uint32_t label = kNoLabel);
  Status Append(std::span<const std::byte> data);
  Status EndSample();
  void AbortSample();

  // Sets the label of the n-th sample added (counting from 0, aborted
  // samples not counted), e.g. once a label that arrives after the sample's
  // bytes is known. InvalidArgument for n >= sample_count() or a label out
  // of range.
  Status SetLabel(uint64_t n, uint32_t label);

  // Writes the directory and superblocks, syncs and publishes the volume.
  // InvalidArgument if two samples share a path or a sample's path is also
  // a directory. The builder is unusable afterwards, whatever the result.
  Status Finish();

  uint64_t sample_count() const;
  uint64_t data_bytes() const;  // sample bytes added so far
  // Classes the volume will have: max(class names set, largest label + 1).
  uint64_t class_count() const;
  const std::string& path() const;
  const std::string& temp_path() const;  // target 0's
  // The stale temporary files Create removed: "<file> (left by process
  // <pid>, <n> bytes)".
  const std::vector<std::string>& removed_temporaries() const;
  std::vector<std::string> target_paths() const;  // final names, target 0 first
  std::vector<std::string> temp_paths() const;    // same order

  // "<path>.t<target>": where target `target` > 0 goes without explicit
  // target paths (`path` itself for target 0).
  static std::string DefaultTargetPath(const std::string& path, uint32_t target);

 private:
  class Impl;
  explicit VolumeBuilder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dlfs
