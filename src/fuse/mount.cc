// The read-only FUSE view, on libfuse's low-level (inode) API.
//
// Inodes are fixed by the directory: directory d is inode d + 1 (the root,
// d = 0, is FUSE_ROOT_ID), sample i is inode dir_count + 1 + i, so lookups
// need no table and forgetting needs no bookkeeping. The volume never
// changes under its mount, so the kernel may keep entries, attributes and
// file contents (keep_cache) as long as it likes: a file read once is
// served from the page cache on later opens without reaching this process.
// Replies are sent from the verified bytes in place (no copy into a libfuse
// buffer); large samples, verified by a streaming pass, are spliced from the
// volume's file descriptor where the kernel allows it.
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/crc32c.h"
#include "common/file_util.h"
#include "dlfs/mount.h"

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

// Verified samples kept for the reads that follow the first one of a
// sample that takes several reads (most take one: reads are up to 1 MiB).
class VerifiedCache {
 public:
  using Bytes = std::shared_ptr<const std::vector<std::byte>>;
  static constexpr uint64_t kBudget = 128u << 20;

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
    while (bytes_ > kBudget && lru_.size() > 1) {
      bytes_ -= lru_.back().second->size();
      map_.erase(lru_.back().first);
      lru_.pop_back();
    }
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
  bool no_open = false;  // the kernel opens files without asking us
  VerifiedCache cache;
  // Large samples that passed a streaming verification in this mount.
  std::mutex verified_mu;
  std::unordered_set<uint64_t> verified;
};

Context& Ctx(fuse_req_t req) { return *static_cast<Context*>(fuse_req_userdata(req)); }

bool IsDir(const Context& c, fuse_ino_t ino) { return ino >= 1 && ino <= c.dirs; }
bool IsSample(const Context& c, fuse_ino_t ino) {
  return ino > c.dirs && ino - c.dirs - 1 < c.volume->size();
}
uint64_t DirOf(fuse_ino_t ino) { return ino - 1; }
uint64_t SampleOf(const Context& c, fuse_ino_t ino) { return ino - c.dirs - 1; }
fuse_ino_t DirIno(uint64_t d) { return d + 1; }
fuse_ino_t SampleIno(const Context& c, uint64_t i) { return c.dirs + 1 + i; }

void Fill(const Context& c, fuse_ino_t ino, struct stat* st) {
  std::memset(st, 0, sizeof *st);
  st->st_ino = ino;
  st->st_mtim = st->st_ctim = st->st_atim = c.created;
  if (IsDir(c, ino)) {
    st->st_mode = S_IFDIR | 0555;
    st->st_nlink = 2 + c.volume->directory().dir(DirOf(ino)).child_count;
  } else {
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_size = c.volume->directory().sample(SampleOf(c, ino)).length;
    st->st_blocks = (st->st_size + 511) / 512;
    st->st_blksize = kMaxRead;
  }
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
  const std::string& dir = c.dir_paths[DirOf(parent)];
  auto found = c.volume->directory().Resolve(dir.empty() ? std::string(name) : dir + "/" + name);
  if (!found.ok() || std::strchr(name, '/') != nullptr) {
    fuse_reply_entry(req, &e);  // ino 0: a negative entry the kernel caches too
    return;
  }
  e.ino = found->is_dir ? DirIno(found->index) : SampleIno(c, found->index);
  e.generation = 1;
  Fill(c, e.ino, &e.attr);
  fuse_reply_entry(req, &e);
}

void Forget(fuse_req_t req, fuse_ino_t, uint64_t) { fuse_reply_none(req); }

void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  const Context& c = Ctx(req);
  if (!IsDir(c, ino) && !IsSample(c, ino)) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  struct stat st;
  Fill(c, ino, &st);
  fuse_reply_attr(req, &st, kCacheSeconds);
}

// Entries of directory d in a fixed order: ".", "..", child directories,
// samples; `off` is the position of the next one.
void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*, bool plus) {
  const Context& c = Ctx(req);
  if (!IsDir(c, ino)) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  const SampleDirectory& d = c.volume->directory();
  const DirInfo info = d.dir(DirOf(ino));
  const uint64_t total = 2 + uint64_t{info.child_count} + info.sample_count;
  std::vector<char> buf(size);
  size_t used = 0;
  for (uint64_t k = static_cast<uint64_t>(std::max<off_t>(off, 0)); k < total; ++k) {
    std::string name;
    fuse_ino_t child;
    if (k == 0) {
      name = ".";
      child = ino;
    } else if (k == 1) {
      name = "..";
      child = info.parent == kNoParent ? ino : DirIno(info.parent);
    } else if (k < 2 + info.child_count) {
      const uint64_t cd = info.first_child + (k - 2);
      name = d.dir_name(cd);
      child = DirIno(cd);
    } else {
      const uint64_t i = info.first_sample + (k - 2 - info.child_count);
      name = d.name(i);
      child = SampleIno(c, i);
    }
    size_t n;
    if (plus) {
      fuse_entry_param e{};
      e.attr_timeout = e.entry_timeout = kCacheSeconds;
      Fill(c, child, &e.attr);
      // "." and ".." do not count as lookups (the kernel says so).
      e.ino = k < 2 ? 0 : child;
      e.attr.st_ino = child;
      e.generation = 1;
      n = fuse_add_direntry_plus(req, buf.data() + used, size - used, name.c_str(), &e,
                                 static_cast<off_t>(k + 1));
    } else {
      struct stat st;
      Fill(c, child, &st);
      n = fuse_add_direntry(req, buf.data() + used, size - used, name.c_str(), &st,
                            static_cast<off_t>(k + 1));
    }
    if (n > size - used) break;  // full: the kernel asks again from k
    used += n;
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
  if (!IsSample(c, ino)) {
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

// Reads sample `index` whole in chunks, computing its CRC32C on the way,
// without keeping it: OK when it matches the directory's checksum.
Status VerifyStreaming(const Volume& v, uint64_t index) {
  const SampleInfo s = v.directory().sample(index);
  const std::string& file = v.info().targets[s.target];
  std::vector<std::byte> buf(std::min<size_t>(kVerifyChunk, s.length));
  uint32_t crc = 0;
  for (uint64_t at = 0; at < s.length;) {
    const size_t n = std::min<uint64_t>(buf.size(), s.length - at);
    DLFS_RETURN_IF_ERROR(v.ReadTarget(s.target, buf.data(), n, s.offset + at, file)
                             .WithContext(v.path() + ": sample " + std::to_string(index)));
    crc = crc32c::Extend(crc, buf.data(), n);
    at += n;
  }
  if (crc == s.crc32c) return Status::Ok();
  char sums[64];
  std::snprintf(sums, sizeof sums, "stored 0x%08x, computed 0x%08x", s.crc32c, crc);
  return Status::Corruption(v.path() + ": sample " + std::to_string(index) + " '" +
                            v.directory().Path(index) + "': checksum mismatch (" + sums + ")");
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, fuse_file_info*) {
  Context& c = Ctx(req);
  if (!IsSample(c, ino)) {
    fuse_reply_err(req, IsDir(c, ino) ? EISDIR : ENOENT);
    return;
  }
  const uint64_t index = SampleOf(c, ino);
  const Volume& v = *c.volume;
  const SampleInfo s = v.directory().sample(index);
  if (offset < 0) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  if (static_cast<uint64_t>(offset) >= s.length) {
    fuse_reply_buf(req, nullptr, 0);
    return;
  }
  const size_t n = std::min<uint64_t>(size, s.length - offset);
  if (s.length <= c.options.whole_sample_limit) {
    // Small: read whole and verified, then served from memory in place. No
    // byte is handed out before its sample checked out. A sample that takes
    // several reads is kept for the next ones.
    VerifiedCache::Bytes bytes = c.cache.Get(index);
    if (!bytes) {
      auto fresh = std::make_shared<std::vector<std::byte>>(s.length);
      const Status st = v.ReadInto(index, *fresh, /*verify=*/true);
      if (!st.ok()) {
        Log(st);
        fuse_reply_err(req, EIO);
        return;
      }
      bytes = std::move(fresh);
      if (offset != 0 || n != s.length) c.cache.Put(index, bytes);
    }
    fuse_reply_buf(req, reinterpret_cast<const char*>(bytes->data()) + offset, n);
    return;
  }
  // Large: verified by a streaming pass (once per mount) before any byte
  // is served, then spliced from the volume's file.
  bool verified;
  {
    std::lock_guard lock(c.verified_mu);
    verified = c.verified.count(index) > 0;
  }
  if (!verified) {
    const Status st = VerifyStreaming(v, index);
    if (!st.ok()) {
      Log(st);
      fuse_reply_err(req, EIO);
      return;
    }
    std::lock_guard lock(c.verified_mu);
    c.verified.insert(index);
  }
  if (v.target_fd(s.target) < 0) {
    // An NBD export has no fd to splice from: read, then reply.
    std::vector<std::byte> bytes(n);
    const Status st = v.ReadTarget(s.target, bytes.data(), n, s.offset + offset, v.path());
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
  buf.buf[0].pos = static_cast<off_t>(s.offset + offset);
  const int rc = fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
  if (rc < 0) Log(Status::FromErrno(-rc, v.path() + ": reply for sample " + std::to_string(index)));
}

void Release(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, 0); }

void StatFs(fuse_req_t req, fuse_ino_t) {
  const Context& c = Ctx(req);
  struct statvfs st {};
  st.f_bsize = st.f_frsize = 4096;
  st.f_blocks = (c.volume->info().volume_size + 4095) / 4096;
  st.f_files = c.dirs + c.volume->size();
  st.f_namemax = 255;
  fuse_reply_statfs(req, &st);
}

void ReadOnly(fuse_req_t req) { fuse_reply_err(req, EROFS); }

}  // namespace

Status MountVolume(std::shared_ptr<Volume> volume, const std::string& mountpoint,
                   const MountOptions& options) {
  Context ctx;
  ctx.volume = std::move(volume);
  ctx.options = options;
  ctx.created.tv_sec = static_cast<time_t>(ctx.volume->info().created_unix_ns / 1000000000);
  ctx.created.tv_nsec = static_cast<long>(ctx.volume->info().created_unix_ns % 1000000000);
  const SampleDirectory& dir = ctx.volume->directory();
  ctx.dirs = dir.dir_count();
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
  if (fuse_session_mount(se, mountpoint.c_str()) != 0) {
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
