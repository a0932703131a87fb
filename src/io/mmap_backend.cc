// mmap backend: each read is a copy out of a shared read-only mapping of
// its target, made on the thread that prepares it. For samples read through
// the page cache: a cached buffered read costs a system call, a page-cache
// lookup and the kernel's copy, a copy out of a mapping whose pages are in
// place only the copy (a warm Fashion-MNIST epoch on two I/O threads: 0.023 s
// against 0.046 s with io_uring's buffered reads, docs/benchmarks.md). Pages
// not in memory are read by the fault, synchronously, on this thread.
//
// A target that shrinks under its mapping, or a page whose read fails,
// would raise SIGBUS: the mappings are registered with map_guard, which
// maps zeros over the page instead, and every read of that target from
// then on fails with EIO, so no zeros are ever handed out as its bytes.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/map_guard.h"
#include "io/io_backend.h"

namespace dlfs::io_internal {

namespace {

// The process's mappings, one per file (device and inode), shared by every
// engine that reads it and by the loader's page warmer, which maps its
// pages ahead of the reads (PageWarmer::Populate): a first touch of a page
// costs a fault even when the page is cached, on the reading thread.
struct SharedMapping {
  dev_t dev = 0;
  ino_t ino = 0;
  MappedFile file;
  uint32_t refs = 0;
};
std::mutex g_maps_mu;
std::vector<SharedMapping> g_maps;

}  // namespace

Result<MappedFile> AcquireMapping(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, path);
  std::lock_guard lock(g_maps_mu);
  for (SharedMapping& m : g_maps) {
    if (m.dev == st.st_dev && m.ino == st.st_ino) {
      ++m.refs;
      return m.file;
    }
  }
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size < 0) return Status::FromErrno(errno, path);
  if (size == 0) return MappedFile{};  // nothing to map: every read ends at its end
  void* p = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap " + path);
  // The reads are random: a fault reads its page, not the device's
  // read-ahead around it (8 MiB here), which for a volume larger than
  // memory would read many times the samples' bytes. Reading ahead is the
  // page warmer's work (loader/page_warmer.h).
  (void)::madvise(p, static_cast<size_t>(size), MADV_RANDOM);
  MappedFile f{static_cast<const std::byte*>(p), static_cast<uint64_t>(size),
               map_guard::Register(p, static_cast<size_t>(size))};
  g_maps.push_back(SharedMapping{st.st_dev, st.st_ino, f, 1});
  return f;
}

void ReleaseMapping(const MappedFile& file) {
  if (file.base == nullptr) return;
  std::lock_guard lock(g_maps_mu);
  for (size_t k = 0; k < g_maps.size(); ++k) {
    SharedMapping& m = g_maps[k];
    if (m.file.base != file.base || --m.refs > 0) continue;
    if (m.file.guarded) map_guard::Unregister(m.file.base);
    ::munmap(const_cast<std::byte*>(m.file.base), m.file.size);
    g_maps.erase(g_maps.begin() + static_cast<std::ptrdiff_t>(k));
    return;
  }
}

namespace {

class MmapBackend final : public Backend {
 public:
  MmapBackend(const Targets& targets, const EngineOptions& options)
      : targets_(targets), capacity_(std::max<uint32_t>(options.queue_depth, 1)) {}

  Status Map() {
    maps_.resize(targets_.fds.size());
    for (size_t t = 0; t < targets_.fds.size(); ++t) {
      if (targets_.fds[t] < 0) continue;  // not read here: its reads fail with EBADF
      DLFS_ASSIGN_OR_RETURN(maps_[t], AcquireMapping(targets_.fds[t], targets_.paths[t]));
    }
    return Status::Ok();
  }

  ~MmapBackend() override {
    for (const MappedFile& m : maps_) ReleaseMapping(m);
  }

  uint32_t capacity() const override { return capacity_; }

  // The copy is made here: nothing is left to start or wait for.
  void Prepare(const Op& op) override { done_.push_back(Completion{op.tag, Copy(op)}); }
  Status Submit() override { return Status::Ok(); }
  Status Reap(std::vector<Completion>* out) override { return Poll(out); }
  Status Poll(std::vector<Completion>* out) override {
    out->insert(out->end(), done_.begin(), done_.end());
    done_.clear();
    return Status::Ok();
  }

  bool RegisterBuffer(uint32_t, std::span<std::byte>) override { return false; }

  std::string Describe() const override {
    return "mmap, buffered (copies out of the page cache through a shared mapping, on the "
           "reading thread)";
  }

 private:
  // The bytes copied (fewer at the target's end, as pread), or -errno.
  int64_t Copy(const Op& op) const {
    if (op.target >= maps_.size() || targets_.fds[op.target] < 0) return -EBADF;
    const MappedFile& m = maps_[op.target];
    if (op.offset >= m.size) return 0;
    const uint64_t n = std::min<uint64_t>(op.length, m.size - op.offset);
    // An unguarded mapping (map_guard's table full) could kill the process
    // on a shrunken file: read those with pread instead.
    if (!m.guarded) {
      const ssize_t r =
          ::pread(targets_.fds[op.target], op.buffer, op.length, static_cast<off_t>(op.offset));
      return r < 0 ? -int64_t{errno} : int64_t{r};
    }
    std::memcpy(op.buffer, m.base + op.offset, n);
    // The file shrank or a page's read failed (now or before): zeros were
    // copied where its bytes were, or may be.
    if (map_guard::AnyFault() && map_guard::Faulted(m.base)) return -EIO;
    return static_cast<int64_t>(n);
  }

  const Targets& targets_;
  const uint32_t capacity_;
  std::vector<MappedFile> maps_;
  std::vector<Completion> done_;  // touched only by the engine's thread
};

}  // namespace

Result<std::unique_ptr<Backend>> CreateMmapBackend(const Targets& targets,
                                                   const EngineOptions& options) {
  auto b = std::make_unique<MmapBackend>(targets, options);
  DLFS_RETURN_IF_ERROR(b->Map());
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace dlfs::io_internal
