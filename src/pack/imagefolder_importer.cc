// ImageFolder importer: a class-per-directory tree, labelled the way
// torchvision.datasets.ImageFolder labels it.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <utility>
#include <vector>

#include "common/file_util.h"
#include "format/format.h"
#include "pack/importer.h"

namespace dlfs::pack_internal {

namespace {

constexpr size_t kReadChunk = 1u << 20;

struct Entry {
  std::string name;
  bool is_dir;
};

// Lists `dir` sorted by name (byte-wise, which for UTF-8 is Python's sorted()
// order), following symlinks as os.walk(followlinks=True) does.
Result<std::vector<Entry>> ListSorted(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Status::FromErrno(errno, dir);
  std::vector<Entry> out;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    if (e->d_type == DT_DIR || e->d_type == DT_REG) {
      out.push_back({std::string(name), e->d_type == DT_DIR});
      continue;
    }
    // Symlinks and file systems without d_type: ask stat (which follows
    // links). A dangling link stays a file, whose read then fails and is
    // reported (or skipped) like any unreadable source.
    struct stat st;
    const std::string path = dir + "/" + e->d_name;
    const bool is_dir = ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    out.push_back({std::string(name), is_dir});
    errno = 0;  // readdir reports its own errors through errno
  }
  const int err = errno;
  ::closedir(d);
  if (err != 0) return Status::FromErrno(err, dir);
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return out;
}

class Walker {
 public:
  Walker(const std::string& root, PackContext& ctx) : root_(root), ctx_(ctx), buf_(kReadChunk) {}

  Status AddFile(const std::string& rel, uint32_t label) {
    const std::string path = root_ + "/" + rel;
    ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (fd.get() < 0) return ctx_.Unreadable(path, Status::FromErrno(errno, path));
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return ctx_.Unreadable(path, Status::FromErrno(errno, path));
    if (!S_ISREG(st.st_mode)) {
      return ctx_.Unreadable(path, Status::InvalidArgument(path + ": not a regular file"));
    }
    ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
    VolumeBuilder& b = ctx_.builder();
    DLFS_RETURN_IF_ERROR(b.BeginSample(rel, label));
    while (true) {
      const ssize_t n = ::read(fd.get(), buf_.data(), buf_.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const Status err = Status::FromErrno(errno, path);
        b.AbortSample();
        return ctx_.Unreadable(path, err);
      }
      if (n == 0) break;
      Status st = b.Append({buf_.data(), static_cast<size_t>(n)});
      if (!st.ok()) {
        b.AbortSample();
        return st.WithContext(path);
      }
    }
    DLFS_RETURN_IF_ERROR(b.EndSample());
    return ctx_.Tick();
  }

  // Adds every file below `rel` (a directory relative to the root), in
  // sorted order, depth first.
  Status AddTree(const std::string& rel, uint32_t label) {
    const std::string path = root_ + "/" + rel;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0)
      return ctx_.Unreadable(path, Status::FromErrno(errno, path));
    // A symlink back up the tree would recurse forever.
    const std::pair<dev_t, ino_t> id{st.st_dev, st.st_ino};
    if (!active_.insert(id).second) return Status::Ok();
    auto listing = ListSorted(path);
    Status result;
    if (!listing.ok()) {
      result = ctx_.Unreadable(path, listing.status());
    } else {
      for (const Entry& e : *listing) {
        const std::string child = rel + "/" + e.name;
        result = e.is_dir ? AddTree(child, label) : AddFile(child, label);
        if (!result.ok()) break;
      }
    }
    active_.erase(id);
    return result;
  }

 private:
  const std::string& root_;
  PackContext& ctx_;
  std::vector<std::byte> buf_;
  std::set<std::pair<dev_t, ino_t>> active_;
};

}  // namespace

Status ImportImageFolder(const std::string& root_in, PackContext& ctx) {
  std::string root = root_in;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  DLFS_ASSIGN_OR_RETURN(std::vector<Entry> top, ListSorted(root));
  std::vector<std::string> classes;
  for (const Entry& e : top) {
    if (e.is_dir) classes.push_back(e.name);
  }
  if (classes.size() >= format::kNone - 1)
    return Status::InvalidArgument(root + ": too many classes");
  ctx.builder().SetClassNames(classes);
  Walker walker(root, ctx);
  uint32_t label = 0;
  for (const Entry& e : top) {
    if (e.is_dir) {
      DLFS_RETURN_IF_ERROR(walker.AddTree(e.name, label++));
    } else {
      DLFS_RETURN_IF_ERROR(walker.AddFile(e.name, kNoLabel));
    }
  }
  return Status::Ok();
}

}  // namespace dlfs::pack_internal
