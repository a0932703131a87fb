#define FUSE_USE_VERSION 35
#include <fuse.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/crc32c.h"
#include "common/file_util.h"
#include "dlfs/mount.h"

namespace dlfs {

const bool kMountSupported = true;

namespace {

constexpr uint32_t kVerifyLimit = 64u << 20;

// An open file: the verified bytes of a small sample, or just its index.
struct OpenSample {
  uint64_t index;
  std::vector<std::byte> bytes;  // empty when read through
  bool cached;
};

struct Context {
  std::shared_ptr<Volume> volume;
  struct timespec created;
  // Open files, owned here: the kernel's RELEASE for the last ones may not
  // arrive before an unmount by signal ends the loop.
  std::mutex mu;
  std::unordered_map<OpenSample*, std::unique_ptr<OpenSample>> open;
};

Context& Ctx() { return *static_cast<Context*>(fuse_get_context()->private_data); }

void FillDir(const Context& c, uint64_t d, struct stat* st) {
  st->st_mode = S_IFDIR | 0555;
  st->st_nlink = 2 + c.volume->directory().dir(d).child_count;
  st->st_mtim = st->st_ctim = st->st_atim = c.created;
}

int GetAttr(const char* path, struct stat* st, fuse_file_info*) {
  const Context& c = Ctx();
  std::memset(st, 0, sizeof *st);
  auto e = c.volume->directory().Resolve(path);
  if (!e.ok()) return -ENOENT;
  if (e->is_dir) {
    FillDir(c, e->index, st);
    return 0;
  }
  st->st_mode = S_IFREG | 0444;
  st->st_nlink = 1;
  st->st_size = c.volume->directory().sample(e->index).length;
  st->st_blocks = (st->st_size + 511) / 512;
  st->st_mtim = st->st_ctim = st->st_atim = c.created;
  return 0;
}

int ReadDir(const char* path, void* buf, fuse_fill_dir_t fill, off_t, fuse_file_info*,
            fuse_readdir_flags) {
  const Context& c = Ctx();
  const SampleDirectory& d = c.volume->directory();
  auto e = d.Resolve(path);
  if (!e.ok()) return -ENOENT;
  if (!e->is_dir) return -ENOTDIR;
  fill(buf, ".", nullptr, 0, FUSE_FILL_DIR_PLUS);
  fill(buf, "..", nullptr, 0, FUSE_FILL_DIR_PLUS);
  const DirInfo info = d.dir(e->index);
  for (uint64_t k = info.first_child; k < uint64_t{info.first_child} + info.child_count; ++k) {
    struct stat st {};
    FillDir(c, k, &st);
    const std::string name(d.dir_name(k));
    fill(buf, name.c_str(), &st, 0, FUSE_FILL_DIR_PLUS);
  }
  for (uint64_t i = info.first_sample; i < uint64_t{info.first_sample} + info.sample_count; ++i) {
    struct stat st {};
    st.st_mode = S_IFREG | 0444;
    st.st_nlink = 1;
    st.st_size = d.sample(i).length;
    st.st_mtim = st.st_ctim = st.st_atim = c.created;
    const std::string name(d.name(i));
    fill(buf, name.c_str(), &st, 0, FUSE_FILL_DIR_PLUS);
  }
  return 0;
}

int Open(const char* path, fuse_file_info* fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & (O_TRUNC | O_CREAT)) != 0) {
    return -EROFS;
  }
  Context& c = Ctx();
  auto e = c.volume->directory().Resolve(path);
  if (!e.ok()) return -ENOENT;
  if (e->is_dir) return -EISDIR;
  auto open = std::make_unique<OpenSample>();
  open->index = e->index;
  const uint32_t len = c.volume->directory().sample(e->index).length;
  open->cached = len <= kVerifyLimit;
  if (open->cached) {
    open->bytes.resize(len);
    const Status st = c.volume->ReadInto(e->index, open->bytes, /*verify=*/true);
    if (!st.ok()) {
      std::fprintf(stderr, "dlfs mount: %s\n", st.message().c_str());
      return -EIO;
    }
  }
  fi->fh = reinterpret_cast<uint64_t>(open.get());
  {
    std::lock_guard lock(Ctx().mu);
    Ctx().open.emplace(open.get(), std::move(open));
  }
  fi->keep_cache = 1;  // a volume never changes under its mount
  return 0;
}

int Read(const char*, char* buf, size_t size, off_t offset, fuse_file_info* fi) {
  const Context& c = Ctx();
  const auto* open = reinterpret_cast<const OpenSample*>(fi->fh);
  const SampleInfo s = c.volume->directory().sample(open->index);
  if (offset < 0) return -EINVAL;
  if (static_cast<uint64_t>(offset) >= s.length) return 0;
  const size_t n = std::min<uint64_t>(size, s.length - offset);
  if (open->cached) {
    std::memcpy(buf, open->bytes.data() + offset, n);
    return static_cast<int>(n);
  }
  const Status st = PreadFull(c.volume->target_fd(s.target), buf, n, s.offset + offset,
                              c.volume->info().targets[s.target]);
  if (!st.ok()) {
    std::fprintf(stderr, "dlfs mount: %s\n", st.message().c_str());
    return -EIO;
  }
  return static_cast<int>(n);
}

int Release(const char*, fuse_file_info* fi) {
  std::lock_guard lock(Ctx().mu);
  Ctx().open.erase(reinterpret_cast<OpenSample*>(fi->fh));
  return 0;
}

int ReadOnly() { return -EROFS; }

}  // namespace

Status MountVolume(std::shared_ptr<Volume> volume, const std::string& mountpoint,
                   const MountOptions& options) {
  Context ctx;
  ctx.volume = std::move(volume);
  ctx.created.tv_sec = static_cast<time_t>(ctx.volume->info().created_unix_ns / 1000000000);
  ctx.created.tv_nsec = static_cast<long>(ctx.volume->info().created_unix_ns % 1000000000);

  fuse_operations ops{};
  ops.getattr = GetAttr;
  ops.readdir = ReadDir;
  ops.open = Open;
  ops.read = Read;
  ops.release = Release;
  // Belt and braces: the mount is "ro", and every modifying call says so too.
  ops.write = [](const char*, const char*, size_t, off_t, fuse_file_info*) { return ReadOnly(); };
  ops.create = [](const char*, mode_t, fuse_file_info*) { return ReadOnly(); };
  ops.mkdir = [](const char*, mode_t) { return ReadOnly(); };
  ops.unlink = [](const char*) { return ReadOnly(); };
  ops.rmdir = [](const char*) { return ReadOnly(); };
  ops.rename = [](const char*, const char*, unsigned) { return ReadOnly(); };
  ops.truncate = [](const char*, off_t, fuse_file_info*) { return ReadOnly(); };
  ops.chmod = [](const char*, mode_t, fuse_file_info*) { return ReadOnly(); };
  ops.chown = [](const char*, uid_t, gid_t, fuse_file_info*) { return ReadOnly(); };
  ops.symlink = [](const char*, const char*) { return ReadOnly(); };
  ops.link = [](const char*, const char*) { return ReadOnly(); };

  std::string fsname = "fsname=dlfs:" + ctx.volume->path();
  for (char& ch : fsname) {
    if (ch == ',') ch = '_';  // commas would split the option list
  }
  std::vector<std::string> args = {"dlfs", "-o", "ro,default_permissions,subtype=dlfs," + fsname};
  if (options.allow_other) args.insert(args.end(), {"-o", "allow_other"});
  if (options.debug) args.push_back("-d");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  fuse_args fargs = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());

  // The low-level sequence rather than fuse_main(): it tells a failed mount
  // apart from a loop ended by SIGINT/SIGTERM, which is a clean unmount.
  fuse* f = fuse_new(&fargs, &ops, sizeof ops, &ctx);
  if (f == nullptr) {
    fuse_opt_free_args(&fargs);
    return Status::InvalidArgument("fuse_new rejected the mount options");
  }
  const std::string where = ctx.volume->path() + " at " + mountpoint;
  if (fuse_mount(f, mountpoint.c_str()) != 0) {
    fuse_destroy(f);
    fuse_opt_free_args(&fargs);
    return Status::IOError("cannot mount " + where + " (see the message above)");
  }
  fuse_session* se = fuse_get_session(f);
  Status result;
  if (fuse_set_signal_handlers(se) != 0) {
    result = Status::IOError("cannot install signal handlers for " + where);
  } else if (fuse_daemonize(options.foreground || options.debug ? 1 : 0) != 0) {
    result = Status::IOError("cannot go to the background after mounting " + where);
  } else {
    fuse_loop_config* config = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(config, 16);
    const int rc = fuse_loop_mt(f, config);
    fuse_loop_cfg_destroy(config);
    // A signal ends the loop with the signal's number; only a negative
    // errno is a failure of the file system itself.
    if (rc < 0) {
      result = Status::FromErrno(-rc, "serving " + where);
    }
  }
  fuse_remove_signal_handlers(se);
  fuse_unmount(f);
  fuse_destroy(f);
  fuse_opt_free_args(&fargs);
  return result;
}

}  // namespace dlfs
