// The read-only FUSE view, on libfuse's low-level (inode) API.
//
// Files are (sample, field) pairs (docs/format.md §4.8.5): field f of
// sample i is the file KEY.FIELD in the sample's directory, KEY alone for the
// unnamed field, so a volume without fields lists one file per sample and a
// tar-packed one lists the tar's members; raw pixels the writer made are
// shown as PPM files (dlfs/file_view.h), so image readers open them. A file's size is its field's
// decoded length; raw fields are served from their stored extent, zstd ones
// decoded whole once and kept for the reads that follow.
//
// Inodes are fixed by the directory: directory d is inode d + 1 (the root,
// d = 0, is FUSE_ROOT_ID), field f of sample i is inode
// dir_count + 1 + i * field_count + f, so lookups need no table and
// forgetting needs no bookkeeping. The volume never changes under its mount,
// so the kernel may keep entries, attributes and file contents (keep_cache)
// as long as it likes: a file read once is served from the page cache on
// later opens without reaching this process.
// Replies are sent from the verified bytes in place (no copy into a libfuse
// buffer); large samples, verified by a streaming pass, are spliced from the
// volume's file descriptor where the kernel allows it.
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/crc32c.h"
#include "common/file_util.h"
#include "dlfs/file_view.h"
#include "dlfs/mount.h"
#include "volume/field_decode.h"

namespace dlfs {

const bool kMountSupported = true;

namespace {

// The kernel may cache entries and attributes this long (seconds): the
// volume is immutable while mounted.
constexpr double kCacheSeconds = 86400;
// Largest read the kernel is asked to send at once, and its read-ahead.
constexpr unsigned kMaxRead = 1u << 20;
// Streaming verification reads this much at a time.
constexpr size_t kVerifyChunk = 8u << 20;

// Verified (and decoded) files kept for the reads that follow the first one
// of a file that takes several reads (most take one: reads are up to 1 MiB).
// Keyed by inode. An entry serves one pass through its file: it is put only
// when bytes remain after the read that fetched it, and dropped by the read
// that reaches the end of the file.
//
// It also holds at most kMaxEntries files. A read that misses the cache is
// not always the start of a pass: when memory reclaim takes some pages of a
// file the kernel keeps cached (keep_cache), the next open brings back only
// those pages, in a read that stops short of the end (or starts past 0) and
// that no other read follows. Bounded by kBudget alone, such entries stayed:
// on a volume of small files (up to 128 MiB of them) every file reclaim ever
// took part of stayed in memory, and the mount's RSS grew for hours
// (docs/reliability.md, promise 8). Bounded by count, they age out: at most
// kMaxEntries files stay, however many are read, enough for 4 concurrent
// passes per thread serving requests (16); more concurrent passes cost
// re-reads, never wrong bytes.
//
// Holds at most kBudget bytes too, except that the entry just put always
// stays: a zstd field larger than the budget is decoded once per run of
// reads rather than once per read.
class VerifiedCache {
 public:
  using Bytes = std::shared_ptr<const std::vector<std::byte>>;
  static constexpr uint64_t kBudget = 128u << 20;
  static constexpr size_t kMaxEntries = 64;

  Bytes Get(uint64_t index) {
    std::lock_guard lock(mu_);
    auto it = map_.find(index);
    if (it == map_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  void Put(uint64_t index, Bytes bytes) {
    std::lock_guard lock(mu_);
    if (map_.count(index)) return;
    bytes_ += bytes->size();
    lru_.emplace_front(index, std::move(bytes));
    map_[index] = lru_.begin();
    while ((bytes_ > kBudget || lru_.size() > kMaxEntries) && lru_.size() > 1) {
      bytes_ -= lru_.back().second->size();
      map_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }
  // The pass through `index` is over.
  void Drop(uint64_t index) {
    std::lock_guard lock(mu_);
    auto it = map_.find(index);
    if (it == map_.end()) return;
    bytes_ -= it->second->second->size();
    lru_.erase(it->second);
    map_.erase(it);
  }

 private:
  std::mutex mu_;
  std::list<std::pair<uint64_t, Bytes>> lru_;
  std::unordered_map<uint64_t, std::list<std::pair<uint64_t, Bytes>>::iterator> map_;
  uint64_t bytes_ = 0;
};

struct Context {
  std::shared_ptr<Volume> volume;
  MountOptions options;
  struct timespec created;
  std::vector<std::string> dir_paths;  // by directory index, "" for the root
  uint64_t dirs = 0;
  uint64_t fields = 1;   // field ids per sample: the inode stride
  bool no_open = false;  // the kernel opens files without asking us
  VerifiedCache cache;
  // Large raw files (by inode) that passed a streaming verification in this mount.
  std::mutex verified_mu;
  std::unordered_set<uint64_t> verified;
};

Context& Ctx(fuse_req_t req) { return *static_cast<Context*>(fuse_req_userdata(req)); }

// What a file inode stands for: field `field` of sample `sample`, shown as
// a PPM when it holds raw pixels (dlfs/file_view.h).
struct FileRef {
  uint64_t sample;
  FieldInfo field;
  bool ppm = false;
};

bool IsDir(const Context& c, fuse_ino_t ino) { return ino >= 1 && ino <= c.dirs; }
uint64_t DirOf(fuse_ino_t ino) { return ino - 1; }
fuse_ino_t DirIno(uint64_t d) { return d + 1; }
fuse_ino_t FileIno(const Context& c, uint64_t i, uint32_t f) {
  return c.dirs + 1 + i * c.fields + f;
}

// The file behind `ino`, or nullopt for a directory or an inode that names
// no field a sample has.
std::optional<FileRef> FileOf(const Context& c, fuse_ino_t ino) {
  if (ino <= c.dirs) return std::nullopt;
  const uint64_t k = ino - c.dirs - 1;
  const uint64_t i = k / c.fields;
  if (i >= c.volume->size()) return std::nullopt;
  const std::optional<FieldInfo> f =
      c.volume->directory().Field(i, static_cast<uint32_t>(k % c.fields));
  if (!f) return std::nullopt;
  return FileRef{i, *f, IsRawImageField(c.volume->directory(), i, f->field)};
}

// A file's size as shown (a raw image's PPM is 16 bytes longer).
uint64_t ShownSize(const FileRef& file) {
  return ViewFileSize({.sample = file.sample, .info = file.field, .ppm = file.ppm});
}

void FillCommon(const Context& c, fuse_ino_t ino, struct stat* st) {
  std::memset(st, 0, sizeof *st);
  st->st_ino = ino;
  st->st_mtim = st->st_ctim = st->st_atim = c.created;
}

void FillDir(const Context& c, fuse_ino_t ino, struct stat* st) {
  FillCommon(c, ino, st);
  st->st_mode = S_IFDIR | 0555;
  st->st_nlink = 2 + c.volume->directory().dir(DirOf(ino)).child_count;
}

void FillFile(const Context& c, fuse_ino_t ino, const FileRef& f, struct stat* st) {
  FillCommon(c, ino, st);
  st->st_mode = S_IFREG | 0444;
  st->st_nlink = 1;
  st->st_size = static_cast<off_t>(ShownSize(f));
  st->st_blocks = (st->st_size + 511) / 512;
  st->st_blksize = kMaxRead;
}

void Log(const Status& st) { std::fprintf(stderr, "dlfs mount: %s\n", st.message().c_str()); }

void Init(void* userdata, fuse_conn_info* conn) {
  Context& c = *static_cast<Context*>(userdata);
  // Large reads and read-ahead: a typical sample arrives in one request.
  conn->max_readahead = std::max(conn->max_readahead, kMaxRead);
  conn->max_read = kMaxRead;   // as the max_read mount option says
  conn->max_write = kMaxRead;  // also sizes the largest request libfuse accepts
  if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
  if (conn->capable & FUSE_CAP_SPLICE_MOVE) conn->want |= FUSE_CAP_SPLICE_MOVE;
  if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  // No OPEN or RELEASE round trips: the kernel opens read-only files by
  // itself (the mount is "ro", so writes never get this far) and keeps
  // their cache. Reads carry the inode, which is all a read needs.
  if (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) {
    conn->want |= FUSE_CAP_NO_OPEN_SUPPORT;
    c.no_open = true;
  }
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  const Context& c = Ctx(req);
  fuse_entry_param e{};
  e.attr_timeout = e.entry_timeout = kCacheSeconds;
  if (!IsDir(c, parent)) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  const SampleDirectory& d = c.volume->directory();
  const std::string& dir = c.dir_paths[DirOf(parent)];
  const std::string_view base(name);
  if (base.find('/') != base.npos) {
    fuse_reply_entry(req, &e);  // ino 0: a negative entry the kernel caches too
    return;
  }
  const Result<PathEntry> found =
      d.Resolve(dir.empty() ? std::string(base) : dir + "/" + std::string(base));
  if (found.ok() && found->is_dir) {
    e.ino = DirIno(found->index);
    e.generation = 1;
    FillDir(c, e.ino, &e.attr);
    fuse_reply_entry(req, &e);
    return;
  }
  // KEY.FIELD, a sample's unnamed field, or NAME.ppm (dlfs/file_view.h).
  const std::optional<ViewFile> view = ResolveViewFile(d, dir, base);
  if (!view) {
    fuse_reply_entry(req, &e);
    return;
  }
  const FileRef file{view->sample, view->info, view->ppm};
  e.ino = FileIno(c, file.sample, file.field.field);
  e.generation = 1;
  FillFile(c, e.ino, file, &e.attr);
  fuse_reply_entry(req, &e);
}

void Forget(fuse_req_t req, fuse_ino_t, uint64_t) { fuse_reply_none(req); }

void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  const Context& c = Ctx(req);
  struct stat st;
  if (IsDir(c, ino)) {
    FillDir(c, ino, &st);
  } else if (const std::optional<FileRef> file = FileOf(c, ino)) {
    FillFile(c, ino, *file, &st);
  } else {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fuse_reply_attr(req, &st, kCacheSeconds);
}

// Entries of directory d in a fixed order: ".", "..", child directories,
// then each sample's files by field id. Position p of an entry is p < base
// for the first ones and base + j * fields + f for field f of the directory's
// j-th sample (positions of fields a sample lacks are skipped); an entry's
// cookie (`off`) is its position + 1, so a listing resumes where it stopped.
void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*, bool plus) {
  const Context& c = Ctx(req);
  if (!IsDir(c, ino)) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  const SampleDirectory& d = c.volume->directory();
  const DirInfo info = d.dir(DirOf(ino));
  const std::vector<uint64_t> children = d.ChildDirs(DirOf(ino));
  // The directory's samples, a page at a time (a directory may hold any
  // number; each reply holds a few hundred entries).
  std::vector<uint64_t> page;
  uint64_t page_first = 0;
  auto sample_at = [&](uint64_t j) {
    if (j < page_first || j >= page_first + page.size()) {
      page_first = j;
      page = d.DirSamples(DirOf(ino), j, 1024);
    }
    return j - page_first < page.size() ? page[j - page_first] : d.size();
  };
  const uint64_t base = 2 + uint64_t{children.size()};
  const uint64_t end = base + uint64_t{info.sample_count} * c.fields;
  std::vector<char> buf(size);
  size_t used = 0;
  uint64_t fields_of = UINT64_MAX;  // the sample whose field ids `ids` holds
  std::vector<FieldInfo> ids;       // its fields, by id
  for (uint64_t p = static_cast<uint64_t>(std::max<off_t>(off, 0)); p < end;) {
    std::string name;
    fuse_ino_t child;
    struct stat attr;
    if (p < base) {
      if (p == 0) {
        name = ".";
        child = ino;
      } else if (p == 1) {
        name = "..";
        child = info.parent == kNoDirectory ? ino : DirIno(info.parent);
      } else {
        const uint64_t cd = children[p - 2];
        name = d.dir_name(cd);
        child = DirIno(cd);
      }
      FillDir(c, child, &attr);
    } else {
      const uint64_t j = (p - base) / c.fields;
      const uint64_t i = sample_at(j);
      if (i >= d.size()) break;  // a damaged tree listed fewer samples than it counts
      if (i != fields_of) {
        ids = d.Fields(i);
        std::sort(ids.begin(), ids.end(),
                  [](const FieldInfo& a, const FieldInfo& b) { return a.field < b.field; });
        fields_of = i;
      }
      const uint64_t from = (p - base) % c.fields;
      const auto f =
          std::find_if(ids.begin(), ids.end(), [&](const FieldInfo& x) { return x.field >= from; });
      if (f == ids.end()) {
        p = base + (j + 1) * c.fields;  // no more fields here: the next sample
        continue;
      }
      p = base + j * c.fields + f->field;
      name = ViewFileName(d, i, f->field);
      child = FileIno(c, i, f->field);
      FillFile(c, child, FileRef{i, *f, IsRawImageField(d, i, f->field)}, &attr);
    }
    size_t n;
    if (plus) {
      fuse_entry_param e{};
      e.attr_timeout = e.entry_timeout = kCacheSeconds;
      e.attr = attr;
      // "." and ".." do not count as lookups (the kernel says so).
      e.ino = p < 2 ? 0 : child;
      e.generation = 1;
      n = fuse_add_direntry_plus(req, buf.data() + used, size - used, name.c_str(), &e,
                                 static_cast<off_t>(p + 1));
    } else {
      n = fuse_add_direntry(req, buf.data() + used, size - used, name.c_str(), &attr,
                            static_cast<off_t>(p + 1));
    }
    if (n > size - used) break;  // full: the kernel asks again from p
    used += n;
    ++p;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void ReadDirPlain(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  ReadDir(req, ino, size, off, fi, false);
}
void ReadDirPlus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  ReadDir(req, ino, size, off, fi, true);
}

void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Context& c = Ctx(req);
  if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & (O_TRUNC | O_CREAT)) != 0) {
    fuse_reply_err(req, EROFS);
    return;
  }
  if (IsDir(c, ino)) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  if (!FileOf(c, ino)) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  if (c.no_open) {
    fuse_reply_err(req, ENOSYS);  // from now on the kernel opens files itself
    return;
  }
  fi->keep_cache = 1;  // a volume never changes under its mount
  fuse_reply_open(req, fi);
}

// Reads raw field `f` of sample `index` whole in chunks, computing its
// CRC32C on the way, without keeping it: OK when it matches the field's
// checksum (for a volume without fields: the sample's).
Status VerifyStreaming(const Volume& v, uint64_t index, const FieldInfo& f) {
  DLFS_ASSIGN_OR_RETURN(const SampleInfo s, v.directory().Locate(index));
  const std::string& file = v.info().targets[s.target];
  std::vector<std::byte> buf(std::min<size_t>(kVerifyChunk, f.stored_length));
  uint32_t crc = 0;
  for (uint64_t at = 0; at < f.stored_length;) {
    const size_t n = std::min<uint64_t>(buf.size(), f.stored_length - at);
    DLFS_RETURN_IF_ERROR(
        v.ReadTarget(s.target, buf.data(), n, s.offset + f.offset_in_sample + at, file)
            .WithContext(v.FieldContext(index, f.field)));
    crc = crc32c::Extend(crc, buf.data(), n);
    at += n;
  }
  if (crc == f.crc32c) return Status::Ok();
  char sums[64];
  std::snprintf(sums, sizeof sums, "stored 0x%08x, computed 0x%08x", f.crc32c, crc);
  return Status::Corruption(v.FieldContext(index, f.field) + ": checksum mismatch (" + sums + ")");
}

// Field `f` of sample `index` whole, checked (and decoded when compressed):
// Corruption naming the volume, the sample and the field if it is damaged.
Result<std::shared_ptr<std::vector<std::byte>>> ReadWhole(const Volume& v, uint64_t index,
                                                          const FieldInfo& f) {
  DLFS_ASSIGN_OR_RETURN(const SampleInfo s, v.directory().Locate(index));
  auto stored = std::make_shared<std::vector<std::byte>>(f.stored_length);
  DLFS_RETURN_IF_ERROR(v.ReadTarget(s.target, stored->data(), stored->size(),
                                    s.offset + f.offset_in_sample, v.info().targets[s.target])
                           .WithContext(v.FieldContext(index, f.field)));
  if (f.codec == FieldCodec::kNone) {
    DLFS_RETURN_IF_ERROR(v.DecodeField(index, f, *stored, {}, /*verify=*/true));
    return stored;
  }
  // The CRC of the stored bytes and the frame's declared size are checked
  // before the directory's decoded length sizes anything.
  DLFS_ASSIGN_OR_RETURN(std::vector<std::byte> decoded,
                        DecodeFieldToVector(v, index, f, *stored, /*verify=*/true));
  return std::make_shared<std::vector<std::byte>>(std::move(decoded));
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, fuse_file_info*) {
  Context& c = Ctx(req);
  const std::optional<FileRef> file = FileOf(c, ino);
  if (!file) {
    fuse_reply_err(req, IsDir(c, ino) ? EISDIR : ENOENT);
    return;
  }
  const uint64_t index = file->sample;
  const FieldInfo& f = file->field;
  const Volume& v = *c.volume;
  const Result<SampleInfo> located = v.directory().Locate(index);
  if (!located.ok()) {
    Log(located.status());
    fuse_reply_err(req, EIO);
    return;
  }
  const SampleInfo s = *located;
  const uint64_t length = ShownSize(*file);
  if (offset < 0) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  if (static_cast<uint64_t>(offset) >= length) {
    fuse_reply_buf(req, nullptr, 0);
    return;
  }
  const size_t n = std::min<uint64_t>(size, length - offset);
  if (file->ppm || f.codec != FieldCodec::kNone ||
      f.stored_length <= c.options.whole_sample_limit) {
    // Small or compressed: read whole, verified (and decoded), then served
    // from memory in place. No byte is handed out before its field checked
    // out. A file that takes several reads is kept for the next ones, so a
    // compressed field is decoded once per sequential pass, not per read;
    // the read that reaches its end ends the pass (see VerifiedCache).
    // Raw pixels are served as the PPM they are shown as.
    const bool to_end = static_cast<uint64_t>(offset) + n == length;
    VerifiedCache::Bytes bytes = c.cache.Get(ino);
    if (!bytes) {
      auto fresh = ReadWhole(v, index, f);
      if (fresh.ok() && file->ppm) {
        auto ppm = RawImageToPpm(**fresh, v.FieldContext(index, f.field));
        fresh = ppm.ok() ? Result<std::shared_ptr<std::vector<std::byte>>>(
                               std::make_shared<std::vector<std::byte>>(std::move(*ppm)))
                         : Result<std::shared_ptr<std::vector<std::byte>>>(ppm.status());
      }
      if (!fresh.ok()) {
        Log(fresh.status());
        fuse_reply_err(req, EIO);
        return;
      }
      bytes = std::move(*fresh);
      if (!to_end) c.cache.Put(ino, bytes);
    } else if (to_end) {
      c.cache.Drop(ino);  // `bytes` keeps them for this reply
    }
    fuse_reply_buf(req, reinterpret_cast<const char*>(bytes->data()) + offset, n);
    return;
  }
  // Large and raw: verified by a streaming pass (once per mount) before any
  // byte is served, then spliced from the volume's file.
  bool verified;
  {
    std::lock_guard lock(c.verified_mu);
    verified = c.verified.count(ino) > 0;
  }
  if (!verified) {
    const Status st = VerifyStreaming(v, index, f);
    if (!st.ok()) {
      Log(st);
      fuse_reply_err(req, EIO);
      return;
    }
    std::lock_guard lock(c.verified_mu);
    c.verified.insert(ino);
  }
  const uint64_t at = s.offset + f.offset_in_sample + offset;
  if (v.target_fd(s.target) < 0) {
    // An NBD export has no fd to splice from: read, then reply.
    std::vector<std::byte> bytes(n);
    const Status st = v.ReadTarget(s.target, bytes.data(), n, at, v.path());
    if (!st.ok()) {
      Log(st);
      fuse_reply_err(req, EIO);
      return;
    }
    fuse_reply_buf(req, reinterpret_cast<const char*>(bytes.data()), n);
    return;
  }
  fuse_bufvec buf = FUSE_BUFVEC_INIT(n);
  buf.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
  buf.buf[0].fd = v.target_fd(s.target);
  buf.buf[0].pos = static_cast<off_t>(at);
  const int rc = fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
  if (rc < 0) Log(Status::FromErrno(-rc, "reply for " + v.FieldContext(index, f.field)));
}

void Release(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, 0); }

void StatFs(fuse_req_t req, fuse_ino_t) {
  const Context& c = Ctx(req);
  struct statvfs st {};
  st.f_bsize = st.f_frsize = 4096;
  st.f_blocks = (c.volume->info().volume_size + 4095) / 4096;
  st.f_files = c.dirs + c.volume->directory().field_instance_count();
  st.f_namemax = 255;
  fuse_reply_statfs(req, &st);
}

void ReadOnly(fuse_req_t req) { fuse_reply_err(req, EROFS); }

// The mount point as an absolute path, once it is known to be an existing
// empty directory. Absolute because libfuse unmounts by that name at exit,
// from whatever working directory it has then; empty because a mount hides
// what the directory holds.
Result<std::string> ResolveMountpoint(const std::string& mountpoint) {
  char* real = ::realpath(mountpoint.c_str(), nullptr);
  if (real == nullptr) return Status::FromErrno(errno, mountpoint);
  std::string path = real;
  std::free(real);
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) {
    if (errno == ENOTDIR) {
      return Status::InvalidArgument(mountpoint +
                                     ": not a directory (mount on an existing empty directory)");
    }
    return Status::FromErrno(errno, mountpoint);
  }
  uint64_t entries = 0;
  while (const dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++entries;
  }
  ::closedir(d);
  if (entries > 0) {
    return Status::InvalidArgument(mountpoint + ": not empty (" + std::to_string(entries) +
                                   (entries == 1 ? " entry" : " entries") +
                                   " the mount would hide); mount on an empty directory");
  }
  return path;
}

}  // namespace

Status MountVolume(std::shared_ptr<Volume> volume, const std::string& mountpoint,
                   const MountOptions& options) {
  // One malloc arena for the process. glibc gives threads arenas of their
  // own (up to 8 per core), and the worker threads allocate the cache's
  // entries, which outlive the request, among each request's short-lived
  // buffers: every arena then keeps the high-water mark of the entries that
  // happened to land in it, freed but resident, creeping up for hundreds of
  // thousands of reads (measured: about +0.8 MB over 420,000 reads with 16
  // arenas, flat with one; docs/reliability.md). A request takes the
  // shared arena's lock a few times (its buffers), next to a round trip
  // through the kernel; contention on many cores is not measured yet. Must
  // run before the worker threads start; the mount owns the process from
  // here anyway (signal handlers, daemonizing).
  DLFS_ASSIGN_OR_RETURN(const std::string where_path, ResolveMountpoint(mountpoint));
  mallopt(M_ARENA_MAX, 1);
  Context ctx;
  ctx.volume = std::move(volume);
  ctx.options = options;
  ctx.created.tv_sec = static_cast<time_t>(ctx.volume->info().created_unix_ns / 1000000000);
  ctx.created.tv_nsec = static_cast<long>(ctx.volume->info().created_unix_ns % 1000000000);
  const SampleDirectory& dir = ctx.volume->directory();
  ctx.dirs = dir.dir_count();
  ctx.fields = dir.field_count();
  ctx.dir_paths.reserve(ctx.dirs);
  for (uint64_t d = 0; d < ctx.dirs; ++d) ctx.dir_paths.push_back(dir.DirPath(d));

  fuse_lowlevel_ops ops{};
  ops.init = Init;
  ops.lookup = Lookup;
  ops.forget = Forget;
  ops.getattr = GetAttr;
  ops.readdir = ReadDirPlain;
  ops.readdirplus = ReadDirPlus;
  ops.open = Open;
  ops.read = Read;
  ops.release = Release;
  ops.statfs = StatFs;
  // Belt and braces: the mount is "ro", and every modifying call says so too.
  ops.setattr = [](fuse_req_t r, fuse_ino_t, struct stat*, int, fuse_file_info*) { ReadOnly(r); };
  ops.mknod = [](fuse_req_t r, fuse_ino_t, const char*, mode_t, dev_t) { ReadOnly(r); };
  ops.mkdir = [](fuse_req_t r, fuse_ino_t, const char*, mode_t) { ReadOnly(r); };
  ops.unlink = [](fuse_req_t r, fuse_ino_t, const char*) { ReadOnly(r); };
  ops.rmdir = [](fuse_req_t r, fuse_ino_t, const char*) { ReadOnly(r); };
  ops.symlink = [](fuse_req_t r, const char*, fuse_ino_t, const char*) { ReadOnly(r); };
  ops.rename = [](fuse_req_t r, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned) {
    ReadOnly(r);
  };
  ops.link = [](fuse_req_t r, fuse_ino_t, fuse_ino_t, const char*) { ReadOnly(r); };
  ops.write = [](fuse_req_t r, fuse_ino_t, const char*, size_t, off_t, fuse_file_info*) {
    ReadOnly(r);
  };
  ops.create = [](fuse_req_t r, fuse_ino_t, const char*, mode_t, fuse_file_info*) { ReadOnly(r); };

  std::string fsname = "fsname=dlfs:" + ctx.volume->path();
  for (char& ch : fsname) {
    if (ch == ',') ch = '_';  // commas would split the option list
  }
  std::vector<std::string> args = {
      "dlfs", "-o",
      "ro,default_permissions,subtype=dlfs,max_read=" + std::to_string(kMaxRead) + "," + fsname};
  if (options.allow_other) args.insert(args.end(), {"-o", "allow_other"});
  if (options.debug) args.push_back("-d");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  fuse_args fargs = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());

  fuse_session* se = fuse_session_new(&fargs, &ops, sizeof ops, &ctx);
  if (se == nullptr) {
    fuse_opt_free_args(&fargs);
    return Status::InvalidArgument("fuse_session_new rejected the mount options");
  }
  const std::string where = ctx.volume->path() + " at " + mountpoint;
  if (fuse_session_mount(se, where_path.c_str()) != 0) {
    fuse_session_destroy(se);
    fuse_opt_free_args(&fargs);
    return Status::IOError("cannot mount " + where + " (see the message above)");
  }
  Status result;
  if (fuse_set_signal_handlers(se) != 0) {
    result = Status::IOError("cannot install signal handlers for " + where);
  } else if (fuse_daemonize(options.foreground || options.debug ? 1 : 0) != 0) {
    result = Status::IOError("cannot go to the background after mounting " + where);
  } else {
    // Several threads, each with its own /dev/fuse descriptor: requests of
    // concurrent readers (DataLoader workers) are served in parallel.
    fuse_loop_config* config = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(config, 16);
    fuse_loop_cfg_set_clone_fd(config, 1);
    const int rc = fuse_session_loop_mt(se, config);
    fuse_loop_cfg_destroy(config);
    // A signal ends the loop with the signal's number; only a negative
    // errno is a failure of the file system itself.
    if (rc < 0) result = Status::FromErrno(-rc, "serving " + where);
  }
  fuse_remove_signal_handlers(se);
  fuse_session_unmount(se);
  fuse_session_destroy(se);
  fuse_opt_free_args(&fargs);
  return result;
}

}  // namespace dlfs
