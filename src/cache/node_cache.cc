#include "cache/node_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/clock.h"
#include "common/crc32c.h"

namespace dlfs::cache_internal {

namespace {

constexpr char kMagic[8] = {'D', 'L', 'F', 'S', 'N', 'C', '0', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kAlign = 64;                 // each sample starts on a cache line
constexpr uint64_t kBlock = uint64_t{2} << 20;  // fallocate granularity
constexpr int kSharerSlots = 64;
// Entry values: 0 empty, 1 being filled, else data offset + 2.
constexpr uint64_t kEmpty = 0, kFilling = 1, kReadyBase = 2;

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

// The first 4 KiB of the region. Only lock-free atomics cross processes.
struct NodeCache::Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  char uuid[40];
  uint64_t sample_count;
  uint64_t data_bytes;  // the volume's: with the uuid, what the layout derives from
  uint64_t data_offset;
  uint64_t capacity;
  uint64_t file_bytes;
  std::atomic<uint64_t> cursor;  // next free byte of the data area
  std::atomic<uint64_t> used;
  std::atomic<uint64_t> samples;
  std::atomic<uint32_t> full;
  std::atomic<int32_t> sharers[kSharerSlots];  // pids attached
};
static_assert(sizeof(NodeCache::Header) <= kHeaderBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int32_t>::is_always_lock_free);

namespace {

struct Layout {
  uint64_t data_offset, capacity, file_bytes;
};

Layout LayoutFor(const Volume& volume, uint64_t budget) {
  const SampleDirectory& dir = volume.directory();
  uint64_t all = 0;  // every sample, aligned: more is never needed
  for (uint64_t i = 0; i < dir.size() && all <= budget; ++i) {
    all += AlignUp(dir.sample(i).length, kAlign);
  }
  Layout l;
  l.data_offset = AlignUp(kHeaderBytes + 8 * dir.size(), 4096);
  l.capacity = AlignUp(std::min(all, budget), 4096);
  l.file_bytes = l.data_offset + l.capacity;
  return l;
}

std::string UuidOf(const Volume& v) { return v.info().uuid; }

// A region being made ("." NAME "." PID "." ATTEMPT) whose maker still runs:
// it locks the file only after creating it, so the lock cannot tell.
bool CreatorAlive(const std::string& tmp_name) {
  const size_t last = tmp_name.rfind('.');
  const size_t before =
      last == std::string::npos || last == 0 ? std::string::npos : tmp_name.rfind('.', last - 1);
  if (before == std::string::npos) return false;
  char* end = nullptr;
  const long pid = std::strtol(tmp_name.c_str() + before + 1, &end, 10);
  if (end != tmp_name.c_str() + last || pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

// Removes this user's regions that nobody holds (left by killed jobs):
// a shared lock is held by every process attached, so an exclusive one
// succeeds only on a region nobody uses.
void SweepStale(const std::string& dir, uid_t uid) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  const std::string mine = "dlfs-" + std::to_string(uid) + "-";
  const std::string mine_tmp = "." + mine;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(mine, 0) != 0 && name.rfind(mine_tmp, 0) != 0) continue;
    if (name.rfind(mine_tmp, 0) == 0 && CreatorAlive(name)) continue;
    const std::string path = dir + "/" + name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    struct stat st {
    }, now{};
    if (::fstat(fd, &st) == 0 && st.st_uid == uid && S_ISREG(st.st_mode) &&
        ::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::stat(path.c_str(), &now) == 0 &&
        now.st_ino == st.st_ino) {
      ::unlink(path.c_str());
    }
    ::close(fd);
  }
  ::closedir(d);
}

// Maps `fd` (or anonymous memory when fd < 0): read-write, and read-only.
bool MapRegion(int fd, uint64_t bytes, std::byte** rw, const std::byte** ro) {
  const int flags = fd >= 0 ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  void* a = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, fd, 0);
  if (a == MAP_FAILED) return false;
  void* b = a;
  if (fd >= 0) {
    b = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (b == MAP_FAILED) {
      ::munmap(a, bytes);
      return false;
    }
  }
  *rw = static_cast<std::byte*>(a);
  *ro = static_cast<const std::byte*>(b);
  return true;
}

}  // namespace

std::shared_ptr<NodeCache> NodeCache::Open(const Volume& volume, const NodeCacheOptions& options,
                                           std::string* note) {
  std::string dummy;
  std::string& why = note != nullptr ? *note : dummy;
  why.clear();
  if (options.budget == 0 || volume.size() == 0) return nullptr;
  const Layout layout = LayoutFor(volume, options.budget);
  if (layout.capacity == 0) return nullptr;
  std::shared_ptr<NodeCache> c(new NodeCache(volume));
  const uint64_t n = volume.size();
  c->checked_ = std::make_unique<std::atomic<uint64_t>[]>((n + 63) / 64);
  const uid_t uid = ::geteuid();

  auto init_header = [&](Header* h) {
    std::memset(static_cast<void*>(h), 0, sizeof *h);
    c->data_offset_ = layout.data_offset;
    h->version = kVersion;
    h->header_bytes = kHeaderBytes;
    std::snprintf(h->uuid, sizeof h->uuid, "%s", UuidOf(volume).c_str());
    h->sample_count = n;
    h->data_bytes = volume.info().data_bytes;
    h->data_offset = layout.data_offset;
    h->capacity = layout.capacity;
    h->file_bytes = layout.file_bytes;
  };
  auto attach_mapping = [&](int fd, uint64_t bytes) {
    c->fd_ = fd;
    c->file_bytes_ = bytes;
    c->header_ = reinterpret_cast<Header*>(c->base_);
    c->entries_ = reinterpret_cast<std::atomic<uint64_t>*>(c->base_ + kHeaderBytes);
    c->data_offset_ = c->header_->data_offset;
  };
  auto make_private = [&]() -> std::shared_ptr<NodeCache> {
    if (!MapRegion(-1, layout.file_bytes, &c->base_, &c->view_)) {
      why += why.empty() ? "" : "; ";
      why += "no memory for a cache of " + std::to_string(layout.capacity) + " bytes: uncached";
      return nullptr;
    }
    attach_mapping(-1, layout.file_bytes);
    init_header(c->header_);
    std::memcpy(c->header_->magic, kMagic, sizeof kMagic);
    c->SizeBlockMaps();
    return c;
  };
  if (!options.shared) return make_private();

  std::string dir = options.dir;
  if (dir.empty()) {
    const char* env = std::getenv("DLFS_CACHE_DIR");
    dir = env != nullptr && *env != '\0' ? env : "/dev/shm";
  }
  const std::string name =
      "dlfs-" + std::to_string(uid) + "-" + UuidOf(volume) + options.name_suffix;
  const std::string path = dir + "/" + name;
  SweepStale(dir, uid);

  // Attach to the node's region, or create it; a few rounds for races with
  // a creator or a last user removing it.
  for (int attempt = 0; attempt < 5; ++attempt) {
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno != ENOENT) {
      why = "node cache " + path + ": " + Errno("cannot open") + "; a private cache instead";
      return make_private();
    }
    if (fd >= 0) {
      struct stat st {};
      std::string refuse;
      if (::fstat(fd, &st) != 0) {
        refuse = Errno("fstat");
      } else if (!S_ISREG(st.st_mode)) {
        refuse = "not a regular file";
      } else if (st.st_uid != uid) {
        refuse = "owned by uid " + std::to_string(st.st_uid) + ", not " + std::to_string(uid);
      } else if ((st.st_mode & 077) != 0) {
        refuse = "mode " + std::to_string(st.st_mode & 0777) + " lets others in";
      } else if (static_cast<uint64_t>(st.st_size) < kHeaderBytes) {
        refuse = "too small to be a cache";
      }
      if (refuse.empty() && ::flock(fd, LOCK_SH | LOCK_NB) != 0) {
        // The last user is removing it (it holds the lock exclusively).
        ::close(fd);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        continue;
      }
      struct stat now {};
      if (refuse.empty() && (::stat(path.c_str(), &now) != 0 || now.st_ino != st.st_ino)) {
        ::close(fd);  // removed while we locked it
        continue;
      }
      if (refuse.empty()) {
        const uint64_t bytes = static_cast<uint64_t>(st.st_size);
        if (!MapRegion(fd, bytes, &c->base_, &c->view_)) {
          refuse = Errno("mmap");
        } else {
          attach_mapping(fd, bytes);
          // A creator links the region into place only once its header is
          // complete: a name without the magic is not a region of ours.
          const Header& h = *c->header_;
          if (std::memcmp(h.magic, kMagic, 8) != 0 || h.version != kVersion) {
            refuse = "not a dlfs cache of this version";
          } else if (std::string(h.uuid, strnlen(h.uuid, sizeof h.uuid)) != UuidOf(volume) ||
                     h.sample_count != n || h.data_bytes != volume.info().data_bytes) {
            refuse = "made for another volume";
          } else if (h.data_offset != layout.data_offset || h.file_bytes != bytes ||
                     h.data_offset + h.capacity > bytes || h.capacity % 4096 != 0) {
            refuse = "its layout does not match its size";
          }
        }
      }
      if (!refuse.empty()) {
        c->Detach();
        c->fd_ = -1;
        ::close(fd);
        why = "node cache " + path + ": refused (" + refuse + "); a private cache instead";
        return make_private();
      }
      break;  // attached
    }
    // Create: a temporary name, complete and locked, then linked into place.
    const std::string tmp =
        dir + "/." + name + "." + std::to_string(::getpid()) + "." + std::to_string(attempt);
    fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      why = "node cache in " + dir + ": " + Errno("cannot create") + "; uncached";
      return nullptr;
    }
    if (::fchmod(fd, 0600) != 0 || ::flock(fd, LOCK_SH) != 0 ||
        ::ftruncate(fd, static_cast<off_t>(layout.file_bytes)) != 0 ||
        ::fallocate(fd, 0, 0, static_cast<off_t>(layout.data_offset)) != 0 ||
        !MapRegion(fd, layout.file_bytes, &c->base_, &c->view_)) {
      why = "node cache " + tmp + ": " + Errno("cannot set up") + "; uncached";
      ::unlink(tmp.c_str());
      ::close(fd);
      c->base_ = nullptr;
      return nullptr;
    }
    attach_mapping(fd, layout.file_bytes);
    init_header(c->header_);
    // No fence needed: an attacher reaches the region only by opening the
    // name link(2) makes below, and those system calls order the header's
    // stores before its loads (a fence here only drew a ThreadSanitizer
    // warning, which does not model fences).
    std::memcpy(c->header_->magic, kMagic, sizeof kMagic);
    const bool linked = ::link(tmp.c_str(), path.c_str()) == 0;
    const int link_errno = errno;
    ::unlink(tmp.c_str());
    if (linked) break;
    c->Detach();
    c->fd_ = -1;
    ::close(fd);
    // ENOENT: our temporary file was swept away under us (by a process that
    // could not see we run, e.g. in another PID namespace); make it again.
    if (link_errno == ENOENT) continue;
    if (link_errno != EEXIST) {
      errno = link_errno;
      why = "node cache " + path + ": " + Errno("cannot link") + "; uncached";
      return nullptr;
    }
    // Another process created it first: attach to theirs.
  }
  if (c->fd_ < 0) {
    why = "node cache " + path + ": could not attach (kept changing); a private cache instead";
    return make_private();
  }
  c->path_ = path;
  // The region's capacity, not this process's budget: a region made with a
  // larger budget is attached as it is.
  c->SizeBlockMaps();
  // Register in the sharers' table (a slot whose process is gone is free;
  // a process with several loaders holds several slots).
  const int pid = ::getpid();
  for (int s = 0; s < kSharerSlots && c->sharer_slot_ < 0; ++s) {
    int32_t cur = c->header_->sharers[s].load(std::memory_order_relaxed);
    if (cur != 0 && ::kill(cur, 0) == 0) continue;
    if (c->header_->sharers[s].compare_exchange_strong(cur, pid)) c->sharer_slot_ = s;
  }
  return c;
}

void NodeCache::Detach() {
  if (base_ == nullptr) return;
  // (In a child of fork() the slot is the parent's.)
  if (sharer_slot_ >= 0 && ::getpid() == pid_) header_->sharers[sharer_slot_].store(0);
  sharer_slot_ = -1;
  if (view_ != base_) ::munmap(const_cast<std::byte*>(view_), file_bytes_);
  ::munmap(base_, file_bytes_);
  base_ = nullptr;
  view_ = nullptr;
}

NodeCache::~NodeCache() {
  Detach();
  if (fd_ < 0) return;
  if (::getpid() != pid_) {
    // A child of fork() shares the parent's open file and so its lock:
    // taking it exclusively would convert the parent's. Just let go.
    ::close(fd_);
    return;
  }
  // The last user (nobody else holds the lock) removes the region.
  struct stat st {
  }, now{};
  if (!path_.empty() && ::flock(fd_, LOCK_EX | LOCK_NB) == 0 && ::fstat(fd_, &st) == 0 &&
      ::stat(path_.c_str(), &now) == 0 && now.st_ino == st.st_ino) {
    ::unlink(path_.c_str());
  }
  ::close(fd_);
}

std::optional<std::span<const std::byte>> NodeCache::Find(uint64_t index) {
  const uint64_t v = entries_[index].load(std::memory_order_acquire);
  if (v < kReadyBase) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  const SampleInfo s = volume_.directory().sample(index);
  const uint64_t offset = v - kReadyBase;
  if (offset + s.length > header_->capacity) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;  // a damaged entry: never read outside the data area
  }
  const std::span<const std::byte> bytes(view_ + data_offset_ + offset, s.length);
  const uint64_t bit = uint64_t{1} << (index % 64);
  std::atomic<uint64_t>& word = checked_[index / 64];
  if ((word.load(std::memory_order_relaxed) & bit) == 0) {
    MapForReading(offset, s.length);
    if (crc32c::Value(bytes.data(), bytes.size()) != s.crc32c) {
      misses_.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    word.fetch_or(bit, std::memory_order_relaxed);
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  hit_bytes_.fetch_add(bytes.size(), std::memory_order_relaxed);
  return bytes;
}

void NodeCache::SizeBlockMaps() {
  const uint64_t words = (header_->capacity / kBlock + 64) / 64;
  block_words_ = words;
  reserved_ = std::make_unique<std::atomic<uint64_t>[]>(words);
  mapped_ = std::make_unique<std::atomic<uint64_t>[]>(words);
}

void NodeCache::MapForReading(uint64_t offset, uint64_t length) {
#ifdef MADV_POPULATE_READ
  // A sample is visible only once its blocks were reserved (whole blocks,
  // by fallocate), so this maps pages that exist and allocates nothing.
  if (fd_ < 0 || length == 0) return;
  for (uint64_t b = offset / kBlock; b <= (offset + length - 1) / kBlock; ++b) {
    if (b / 64 >= block_words_) return;
    std::atomic<uint64_t>& word = mapped_[b / 64];
    const uint64_t bit = uint64_t{1} << (b % 64);
    if (word.load(std::memory_order_relaxed) & bit) continue;
    const uint64_t from = data_offset_ + b * kBlock;
    const uint64_t to = std::min(data_offset_ + (b + 1) * kBlock, file_bytes_);
    ::madvise(const_cast<std::byte*>(view_) + from, to - from, MADV_POPULATE_READ);
    word.fetch_or(bit, std::memory_order_relaxed);
  }
#else
  (void)offset;
  (void)length;
#endif
}

bool NodeCache::Reserve(uint64_t offset, uint64_t length) {
  if (fd_ < 0 || length == 0) return true;  // private memory is reserved on touch
  for (uint64_t b = offset / kBlock; b <= (offset + length - 1) / kBlock; ++b) {
    if (b / 64 >= block_words_) return false;  // the header changed since we attached
    std::atomic<uint64_t>& word = reserved_[b / 64];
    const uint64_t bit = uint64_t{1} << (b % 64);
    if (word.load(std::memory_order_relaxed) & bit) continue;
    const uint64_t from = data_offset_ + b * kBlock;
    const uint64_t to = std::min(data_offset_ + (b + 1) * kBlock, file_bytes_);
    if (::fallocate(fd_, 0, static_cast<off_t>(from), static_cast<off_t>(to - from)) != 0) {
      return false;
    }
#ifdef MADV_POPULATE_WRITE
    // Map the block's pages into the writable mapping in one call: faulting
    // them in one by one as samples are copied cost more than the copies
    // (docs/benchmarks.md, "The cluster cache"). Best effort (Linux >= 5.14).
    ::madvise(base_ + from, to - from, MADV_POPULATE_WRITE);
#endif
    word.fetch_or(bit, std::memory_order_relaxed);
  }
  return true;
}

bool NodeCache::Admit(uint64_t index, std::span<const std::byte> bytes) {
  if (full()) return false;
  uint64_t expected = kEmpty;
  if (!entries_[index].compare_exchange_strong(expected, kFilling, std::memory_order_acq_rel)) {
    return false;  // cached, or another process is filling it
  }
  const double t0 = Now();
  const SampleInfo s = volume_.directory().sample(index);
  // Only bytes that match the directory become visible to anyone. Checked
  // before taking room: a refused sample (damaged on storage, offered every
  // epoch) must not use up the data area, which is never reclaimed.
  if (bytes.size() != s.length || crc32c::Value(bytes.data(), bytes.size()) != s.crc32c) {
    entries_[index].store(kEmpty, std::memory_order_release);
    return false;
  }
  const uint64_t need = AlignUp(bytes.size(), kAlign);
  const uint64_t offset = header_->cursor.fetch_add(need, std::memory_order_relaxed);
  bool ok = offset + need <= header_->capacity;
  if (!ok) header_->full.store(1, std::memory_order_relaxed);
  if (ok && !Reserve(offset, bytes.size())) {
    // /dev/shm (or the cgroup) has no memory left: keep what is cached.
    stopped_.store(true, std::memory_order_relaxed);
    ok = false;
  }
  if (ok) std::memcpy(base_ + data_offset_ + offset, bytes.data(), bytes.size());
  if (!ok) {
    entries_[index].store(kEmpty, std::memory_order_release);
    return false;
  }
  entries_[index].store(offset + kReadyBase, std::memory_order_release);
  header_->used.fetch_add(bytes.size(), std::memory_order_relaxed);
  header_->samples.fetch_add(1, std::memory_order_relaxed);
  filled_bytes_.fetch_add(bytes.size(), std::memory_order_relaxed);
  fill_ns_.fetch_add(static_cast<uint64_t>((Now() - t0) * 1e9), std::memory_order_relaxed);
  // This process put them there: no need to check them again on first use.
  checked_[index / 64].fetch_or(uint64_t{1} << (index % 64), std::memory_order_relaxed);
  return true;
}

bool NodeCache::full() const {
  return stopped_.load(std::memory_order_relaxed) ||
         header_->full.load(std::memory_order_relaxed) != 0;
}

NodeCacheStats NodeCache::stats() const {
  NodeCacheStats s;
  s.capacity = header_->capacity;
  s.used = header_->used.load(std::memory_order_relaxed);
  s.samples = header_->samples.load(std::memory_order_relaxed);
  s.hits = hits_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  s.hit_bytes = hit_bytes_.load(std::memory_order_relaxed);
  s.filled_bytes = filled_bytes_.load(std::memory_order_relaxed);
  s.fill_seconds = fill_ns_.load(std::memory_order_relaxed) / 1e9;
  s.shared = fd_ >= 0;
  if (s.shared) {
    std::vector<int32_t> pids;  // distinct processes alive
    for (const auto& slot : header_->sharers) {
      const int32_t p = slot.load(std::memory_order_relaxed);
      if (p != 0 && std::find(pids.begin(), pids.end(), p) == pids.end() &&
          (p == ::getpid() || ::kill(p, 0) == 0)) {
        pids.push_back(p);
      }
    }
    s.sharers = static_cast<uint32_t>(pids.size());
  } else {
    s.sharers = 1;
  }
  return s;
}

std::string NodeCache::Describe() const {
  return (fd_ >= 0 ? "node cache " + path_ : std::string("private cache")) + " of " +
         std::to_string(header_->capacity) + " bytes";
}

}  // namespace dlfs::cache_internal
