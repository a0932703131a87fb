// ImageFolder importer: a class-per-directory tree, read the way
// torchvision.datasets.ImageFolder (0.14) reads it: the same classes, labels
// and samples (files with an image extension below a class directory),
// hidden entries included; `skip_hidden` leaves those out, `all_files`
// packs every regular file instead.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
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

// torchvision.datasets.folder.IMG_EXTENSIONS, matched case-insensitively as
// has_file_allowed_extension does.
constexpr std::string_view kImageExtensions[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                                 ".pgm", ".tif",  ".tiff", ".webp"};

bool IsImageName(std::string_view name) {
  for (std::string_view ext : kImageExtensions) {
    if (name.size() < ext.size()) continue;
    const std::string_view tail = name.substr(name.size() - ext.size());
    if (std::equal(tail.begin(), tail.end(), ext.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == b;
        })) {
      return true;
    }
  }
  return false;
}

bool IsHidden(std::string_view name) { return !name.empty() && name[0] == '.'; }

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

// Walks the tree in sorted order, depth first. In counting mode it only
// counts the samples a packing walk would add (for the progress total),
// reporting nothing.
class Walker {
 public:
  Walker(const std::string& root, PackContext& ctx, bool counting = false)
      : root_(root),
        ctx_(ctx),
        counting_(counting),
        all_files_(ctx.options().all_files),
        skip_hidden_(ctx.options().skip_hidden) {
    if (!counting_) buf_.resize(kReadChunk);
  }

  uint64_t counted() const { return counted_; }
  bool counting() const { return counting_; }

  Status AddFile(const std::string& rel, uint32_t label) {
    if (counting_) {
      ++counted_;
      return Status::Ok();
    }
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

  // Adds every file below `rel` (a class directory, relative to the root)
  // in torchvision's ImageFolder order: the directories of its subtree
  // sorted by path (its make_dataset sorts os.walk's (root, dirs, files)
  // tuples, so by the root strings), each one's files sorted by name. So
  // cat/a.jpg, cat/z.jpg, then cat/sub/b.jpg; not depth first.
  Status AddTree(const std::string& rel, uint32_t label) {
    std::vector<std::string> dirs;
    DLFS_RETURN_IF_ERROR(CollectDirs(rel, &dirs));
    std::sort(dirs.begin(), dirs.end());
    for (const std::string& dir : dirs) {
      const std::string path = root_ + "/" + dir;
      auto listing = ListSorted(path);
      if (!listing.ok()) {
        if (!counting_) DLFS_RETURN_IF_ERROR(ctx_.Unreadable(path, listing.status()));
        continue;
      }
      for (const Entry& e : *listing) {
        if (e.is_dir) continue;  // listed in its own turn
        const std::string child = dir + "/" + e.name;
        if (skip_hidden_ && IsHidden(e.name)) {
          Ignore(PackContext::Ignored::kHidden, child);
        } else if (!all_files_ && !IsImageName(e.name)) {
          Ignore(PackContext::Ignored::kNotImage, child);
        } else {
          DLFS_RETURN_IF_ERROR(AddFile(child, label));
        }
      }
    }
    return Status::Ok();
  }

  // `rel` and every directory below it, following symlinks (as os.walk's
  // followlinks=True) but never around a cycle. A directory that cannot be
  // read is reported (or, with skip_unreadable, skipped) by AddTree.
  Status CollectDirs(const std::string& rel, std::vector<std::string>* out) {
    const std::string path = root_ + "/" + rel;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      if (counting_) return Status::Ok();  // the packing walk reports it
      return ctx_.Unreadable(path, Status::FromErrno(errno, path));
    }
    const std::pair<dev_t, ino_t> id{st.st_dev, st.st_ino};
    if (!active_.insert(id).second) return Status::Ok();
    out->push_back(rel);
    auto listing = ListSorted(path);
    Status result;
    if (listing.ok()) {
      for (const Entry& e : *listing) {
        if (!e.is_dir) continue;
        const std::string child = rel + "/" + e.name;
        if (skip_hidden_ && IsHidden(e.name)) {
          Ignore(PackContext::Ignored::kHidden, child);
        } else {
          result = CollectDirs(child, out);
          if (!result.ok()) break;
        }
      }
    }
    active_.erase(id);
    return result;
  }

  void Ignore(PackContext::Ignored why, const std::string& rel) {
    if (!counting_) ctx_.Ignore(why, rel);
  }

 private:
  const std::string& root_;
  PackContext& ctx_;
  const bool counting_;
  const bool all_files_;
  const bool skip_hidden_;
  uint64_t counted_ = 0;
  std::vector<std::byte> buf_;
  std::set<std::pair<dev_t, ino_t>> active_;
};

}  // namespace

Status ImportImageFolder(const std::string& root_in, PackContext& ctx) {
  std::string root = root_in;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  DLFS_ASSIGN_OR_RETURN(std::vector<Entry> top, ListSorted(root));
  const bool all_files = ctx.options().all_files;
  const bool skip_hidden = ctx.options().skip_hidden;
  // Classes: the top-level directories (torchvision's find_classes: every
  // entry that is a directory, hidden ones too).
  const auto is_class = [&](const Entry& e) {
    return e.is_dir && !(skip_hidden && IsHidden(e.name));
  };
  std::vector<std::string> classes;
  for (const Entry& e : top) {
    if (is_class(e)) classes.push_back(e.name);
  }
  if (classes.size() >= format::kNone - 1)
    return Status::InvalidArgument(root + ": too many classes");
  // The directories name the classes; class_names may rename them, one
  // for one, but never silently add or leave out a class.
  if (const std::vector<std::string>& names = ctx.options().class_names;
      !names.empty() && names.size() != classes.size()) {
    std::string dirs;
    for (size_t c = 0; c < classes.size() && c < 8; ++c) dirs += (c ? ", " : "") + classes[c];
    if (classes.size() > 8) dirs += ", ...";
    return Status::InvalidArgument(
        root + ": class_names gives " + std::to_string(names.size()) + " names for " +
        std::to_string(classes.size()) + " class directories (" + dirs +
        "); an ImageFolder tree's classes are its directories: give one name per directory, in "
        "sorted order, to rename them, or none");
  }
  if (!ctx.options().class_names.empty()) {
    for (size_t c = 0; c < classes.size(); ++c) {
      if (classes[c] != ctx.options().class_names[c]) {
        ctx.Renamed(classes[c], ctx.options().class_names[c]);
      }
    }
  }
  if (classes.empty() && !all_files) {
    return Status::InvalidArgument(
        root + ": no class directories (ImageFolder reads ROOT/CLASS/IMAGE; files directly in " +
        root + " have no class); all_files packs every file as an unlabelled sample");
  }
  ctx.builder().SetClassNames(classes);
  // Walks the tree: adds (or, counting, counts) every sample.
  std::vector<std::string> empty_classes;
  const auto walk = [&](Walker& walker) -> Status {
    uint32_t label = 0;
    for (const Entry& e : top) {
      if (is_class(e)) {
        const uint64_t before = ctx.builder().sample_count();
        DLFS_RETURN_IF_ERROR(walker.AddTree(e.name, label++));
        if (!walker.counting() && ctx.builder().sample_count() == before) {
          empty_classes.push_back(e.name);
        }
      } else if (skip_hidden && IsHidden(e.name)) {
        walker.Ignore(e.is_dir ? PackContext::Ignored::kHiddenClass : PackContext::Ignored::kHidden,
                      e.name);
      } else if (all_files) {
        DLFS_RETURN_IF_ERROR(walker.AddFile(e.name, kNoLabel));
      } else {
        walker.Ignore(PackContext::Ignored::kAtRoot, e.name);
      }
    }
    return Status::Ok();
  };
  if (ctx.wants_progress()) {  // count first: the progress total
    Walker counter(root, ctx, /*counting=*/true);
    DLFS_RETURN_IF_ERROR(walk(counter));
    ctx.set_total_samples(counter.counted());
  }
  Walker walker(root, ctx);
  DLFS_RETURN_IF_ERROR(walk(walker));
  // As torchvision, which refuses such a tree: most likely the wrong
  // directory, or files ImageFolder cannot load.
  if (!all_files && ctx.builder().sample_count() == 0 && ctx.stats().skipped == 0) {
    return Status::InvalidArgument(
        root + ": no image files (other entries left out: " +
        std::to_string(ctx.stats().ignored() + ctx.stats().skipped_hidden) +
        "); ImageFolder loads " +
        "ROOT/CLASS/.../NAME.{jpg,jpeg,png,ppm,bmp,pgm,tif,tiff,webp}; "
        "all_files packs every file");
  }
  ctx.set_empty_classes(std::move(empty_classes));
  return Status::Ok();
}

}  // namespace dlfs::pack_internal
