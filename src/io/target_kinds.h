// Internal to src/io: the kinds of target behind OpenTarget (target.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "io/target.h"

namespace dlfs::io_internal {

// A file or block device path (file_target.cc).
Result<std::unique_ptr<Target>> OpenFileTarget(const std::string& path, TargetMode mode,
                                               const TargetOptions& options);
std::vector<std::string> RemoveStaleFileTemporaries(const std::string& path);

// An NBD URI (nbd_target.cc).
Result<std::unique_ptr<Target>> OpenNbdTarget(const std::string& uri, TargetMode mode,
                                              const TargetOptions& options);

// An s3:// URL (s3_target.cc).
Result<std::unique_ptr<Target>> OpenS3Target(const std::string& url, TargetMode mode,
                                             const TargetOptions& options);

}  // namespace dlfs::io_internal
