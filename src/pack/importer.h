// Internal interface between Pack() and the importers.
#pragma once

#include <string>
#include <vector>

#include "dlfs/builder.h"
#include "dlfs/pack.h"
#include "dlfs/status.h"

namespace dlfs::pack_internal {

// Importers copy a member or an image to the volume through a buffer of at
// most this size: memory stays bounded by it whatever a header claims.
inline constexpr size_t kCopyChunk = 1u << 20;

// What an importer may do besides adding samples: report a source it could
// not read, and let the caller see progress and ask for cancellation.
class PackContext {
 public:
  PackContext(VolumeBuilder& builder, const PackOptions& options, PackStats& stats);

  VolumeBuilder& builder() { return builder_; }
  const PackOptions& options() const { return options_; }
  const PackStats& stats() const { return stats_; }

  // A source that could not be read: with skip_unreadable it is counted and
  // OK is returned, otherwise `error` is returned to stop packing.
  Status Unreadable(const std::string& path, const Status& error);

  // Call after each sample: reports progress (rate-limited) and returns
  // Cancelled once cancellation was requested.
  Status Tick();
  // Reports progress now (Pack's last report, when every sample is in).
  void Report();

  // True when progress is reported: importers then count their sources
  // first (set_total_samples, CountSourceBytes).
  bool wants_progress() const { return static_cast<bool>(options_.on_progress); }
  void set_total_samples(uint64_t n) { progress_.total_samples = n; }

  // Sources read as a byte stream (tar shards): their total size, and the
  // one being read from now on (its predecessors count as done). The name
  // goes to the builder too (SetSourceName), for duplicate-path messages.
  void CountSourceBytes(const std::vector<std::string>& files);
  void BeginSource(const std::string& file);

  // An entry left out by design (imagefolder: ImageFolder would not load
  // it, or skip_hidden): counted in the stats, with the first few as
  // examples.
  enum class Ignored { kNotImage, kAtRoot, kHidden, kHiddenClass };
  void Ignore(Ignored why, const std::string& rel_path);
  // imagefolder: a class directory that class_names renames.
  void Renamed(const std::string& directory, const std::string& name) {
    stats_.renamed_classes.push_back(directory + " -> " + name);
  }
  // imagefolder: the classes left without a sample.
  void set_empty_classes(std::vector<std::string> names) {
    stats_.empty_classes = std::move(names);
  }

 private:
  VolumeBuilder& builder_;
  const PackOptions& options_;
  PackStats& stats_;
  PackProgress progress_;
  uint64_t current_source_bytes_ = 0;  // size of the source BeginSource named
  double start_;                       // Now() at construction
  double last_report_;                 // Now() at the last progress report
};

Status ImportImageFolder(const std::string& root, PackContext& ctx);
Status ImportIdx(const std::string& dir, PackContext& ctx);
Status ImportTar(const std::string& source, PackContext& ctx);
Status ImportLmdb(const std::string& source, PackContext& ctx);

// Token corpora (token_importer.cc). The volume's token width (2 or 4) for
// a megatron or tokens source, before the builder is made: the token_dtype
// option, or what the source's dtype allows (a scan of the tokens for a
// dtype wider than 16 bits). Errors name the file.
Result<uint32_t> TokenWidth(const std::string& source, SourceKind kind, const PackOptions& options);
// Whether `source` is a Megatron dataset: "dir/name", "dir/name.bin" or
// "dir/name.idx" with both name.bin and name.idx present.
bool IsMegatronSource(const std::string& source);
Status ImportMegatron(const std::string& source, uint32_t width, PackContext& ctx);
Status ImportTokens(const std::string& source, uint32_t width, PackContext& ctx);

}  // namespace dlfs::pack_internal
