// The one place outside the engines' backends that tells a path from an NBD
// URI or an s3:// URL: OpenTarget picks the kind, and the naming rules below
// treat an NBD URI as a name relative to nothing, and an s3:// URL as a key
// whose neighbours are named relative to its "directory" (the key up to its
// last '/'), as a file's are.
#include "io/target.h"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>

#include "common/file_util.h"
#include "dlfs/s3.h"
#include "io/target_kinds.h"
#include "s3/s3_client.h"

namespace dlfs::io_internal {

namespace {
bool IsUri(std::string_view path) { return IsNbdUri(path) || IsS3Url(path); }
}  // namespace

Result<std::unique_ptr<Target>> OpenTarget(const std::string& path, TargetMode mode,
                                           const TargetOptions& options) {
  if (IsNbdUri(path)) return OpenNbdTarget(path, mode, options);
  if (IsS3Url(path)) return OpenS3Target(path, mode, options);
  return OpenFileTarget(path, mode, options);
}

std::string ResolveTargetPath(const std::string& target0, std::string_view stored) {
  if (!stored.empty() && (stored.front() == '/' || IsUri(stored))) return std::string(stored);
  // A volume packed to files and uploaded keeps its layout: "v.dlfs.t1"
  // beside s3://b/d/v.dlfs is s3://b/d/v.dlfs.t1.
  if (IsS3Url(target0)) return target0.substr(0, target0.rfind('/') + 1) + std::string(stored);
  // Relative to an NBD URI there is no directory to resolve against: the
  // path stays relative and fails to open, naming it (give it with
  // target_map).
  if (IsNbdUri(target0)) return std::string(stored);
  const std::filesystem::path dir = std::filesystem::path(target0).parent_path();
  return dir.empty() ? std::string(stored) : (dir / std::string(stored)).string();
}

Result<std::string> StoredTargetPath(const std::string& target0, const std::string& target,
                                     size_t max_bytes) {
  if (IsUri(target)) {
    // Stored as given: a URI is not relative to anything.
    if (target.size() > max_bytes) {
      return Status::InvalidArgument(target + ": URI longer than " + std::to_string(max_bytes) +
                                     " bytes");
    }
    return target;
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path abs0 = fs::absolute(target0, ec).lexically_normal();
  if (ec) return Status::FromErrno(ec.value(), target0);
  const fs::path abs = fs::absolute(target, ec).lexically_normal();
  if (ec) return Status::FromErrno(ec.value(), target);
  const fs::path rel = abs.lexically_relative(abs0.parent_path());
  std::string stored = !rel.empty() && *rel.begin() != ".." ? rel.string() : abs.string();
  if (abs == abs0 || stored.empty() || stored == "." || abs.filename().empty()) {
    return Status::InvalidArgument(target + ": not usable as a target file of " + target0);
  }
  if (stored.size() > max_bytes) {
    return Status::InvalidArgument(target + ": target path '" + stored + "' is longer than " +
                                   std::to_string(max_bytes) + " bytes (place it nearer to " +
                                   target0 + ")");
  }
  return stored;
}

std::string TargetIdentity(const std::string& path) {
  if (IsUri(path)) return path;
  std::error_code ec;
  return std::filesystem::absolute(path, ec).lexically_normal().string();
}

bool PublishedWhole(const std::string& path) { return !IsNbdUri(path); }

Status CheckNameFree(const std::string& path, bool overwrite) {
  if (IsS3Url(path) && !overwrite) {
    // An object replaced by a PUT is gone: it is refused unless overwrite.
    DLFS_ASSIGN_OR_RETURN(const s3::Url url, s3::ParseUrl(path));
    auto info = s3::Head(url);
    if (info.ok())
      return Status::AlreadyExists(path + ": already exists (set overwrite to replace it)");
    if (info.status().code() != StatusCode::kNotFound ||
        info.status().message().find("no such bucket") != std::string::npos) {
      return info.status();
    }
    return Status::Ok();
  }
  if (IsUri(path)) return Status::Ok();
  // Never replaceable, force or not: the publishing rename would fail only
  // once everything is written.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return Status::IOError(
        path + ": is a directory; a volume is a file: name one inside it (e.g. " +
            (path.empty() || path.back() != '/' ? path + "/" : path) + "data.dlfs)",
        EISDIR);
  }
  if (overwrite || !PathExists(path)) return Status::Ok();
  return Status::AlreadyExists(path + ": already exists (set overwrite to replace it)");
}

std::vector<std::string> RemoveStaleTemporaries(const std::string& path) {
  if (IsUri(path)) return {};
  return RemoveStaleFileTemporaries(path);
}

}  // namespace dlfs::io_internal
