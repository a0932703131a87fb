// Internal interface between Pack() and the importers.
#pragma once

#include <string>

#include "dlfs/builder.h"
#include "dlfs/pack.h"
#include "dlfs/status.h"

namespace dlfs::pack_internal {

// What an importer may do besides adding samples: report a source it could
// not read, and let the caller see progress and ask for cancellation.
class PackContext {
 public:
  PackContext(VolumeBuilder& builder, const PackOptions& options, PackStats& stats);

  VolumeBuilder& builder() { return builder_; }
  const PackOptions& options() const { return options_; }

  // A source that could not be read: with skip_unreadable it is counted and
  // OK is returned, otherwise `error` is returned to stop packing.
  Status Unreadable(const std::string& path, const Status& error);

  // Call after each sample: reports progress (rate-limited) and returns
  // Cancelled once cancellation was requested.
  Status Tick();

  void set_total_samples(uint64_t n) { progress_.total_samples = n; }

 private:
  VolumeBuilder& builder_;
  const PackOptions& options_;
  PackStats& stats_;
  PackProgress progress_;
  double start_;        // Now() at construction
  double last_report_;  // Now() at the last progress report
};

Status ImportImageFolder(const std::string& root, PackContext& ctx);
Status ImportIdx(const std::string& dir, PackContext& ctx);
Status ImportTar(const std::string& source, PackContext& ctx);
Status ImportLmdb(const std::string& source, PackContext& ctx);

}  // namespace dlfs::pack_internal
