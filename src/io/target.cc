// The one place outside the engines' backends that tells a path from an NBD
// URI: OpenTarget picks the kind, and the naming rules below treat a URI as
// a name relative to nothing.
#include "io/target.h"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>

#include "common/file_util.h"
#include "io/target_kinds.h"

namespace dlfs::io_internal {

Result<std::unique_ptr<Target>> OpenTarget(const std::string& path, TargetMode mode,
                                           const TargetOptions& options) {
  return IsNbdUri(path) ? OpenNbdTarget(path, mode, options) : OpenFileTarget(path, mode, options);
}

std::string ResolveTargetPath(const std::string& target0, std::string_view stored) {
  if (!stored.empty() && (stored.front() == '/' || IsNbdUri(stored))) return std::string(stored);
  // Relative to a URI there is no directory to resolve against: the path
  // stays relative and fails to open, naming it (give it with target_map).
  if (IsNbdUri(target0)) return std::string(stored);
  const std::filesystem::path dir = std::filesystem::path(target0).parent_path();
  return dir.empty() ? std::string(stored) : (dir / std::string(stored)).string();
}

Result<std::string> StoredTargetPath(const std::string& target0, const std::string& target,
                                     size_t max_bytes) {
  if (IsNbdUri(target)) {
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
  if (IsNbdUri(path)) return path;
  std::error_code ec;
  return std::filesystem::absolute(path, ec).lexically_normal().string();
}

bool PublishedByRename(const std::string& path) { return !IsNbdUri(path); }

Status CheckNameFree(const std::string& path, bool overwrite) {
  if (IsNbdUri(path)) return Status::Ok();
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
  if (IsNbdUri(path)) return {};
  return RemoveStaleFileTemporaries(path);
}

}  // namespace dlfs::io_internal
