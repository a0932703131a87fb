#include "cache/node_cache.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/clock.h"
#include "common/crc32c.h"
#include "common/shm_region.h"
#include "format/format.h"

namespace dlfs::cache_internal {

namespace {

constexpr char kMagic[8] = {'D', 'L', 'F', 'S', 'N', 'C', '0', '1'};
// 2: the sequential fill's window claims; 3: its costs measured once per
// node; 4: with the fill's duration (wall, pace); 5: and whether it is done
// at once (FillCosts::at_once)
constexpr uint32_t kVersion = 5;
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kAlign = 64;  // each sample starts on a cache line
// Before each decoded sample (NodeCacheOptions::decoded): u32 CRC32C of its
// decoded bytes, u32 their count.
constexpr uint64_t kDecodedPrefix = 8;
constexpr uint64_t kBlock = uint64_t{2} << 20;  // fallocate granularity
constexpr int kSharerSlots = 64;
// Entry values: 0 empty, 1 being filled, else data offset + 2.
constexpr uint64_t kEmpty = 0, kFilling = 1, kReadyBase = 2;
// Header::fill_costs_state.
constexpr uint32_t kCostsNone = 0, kCostsMeasuring = 1, kCostsPublished = 2;

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

// `words` zeroed atomics in pages the kernel zeroes when first touched: a
// bitmap of a billion samples costs memory only where bits are set (a
// value-initialized array wrote all of it, 125 MB at 1e9 samples, before
// the first batch).
void NodeCache::UnmapWords::operator()(std::atomic<uint64_t>* p) const { ::munmap(p, bytes); }

NodeCache::Words LazyZeroWords(uint64_t words) {
  const size_t bytes = std::max<size_t>(words * sizeof(uint64_t), 1);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();  // as operator new would fail: no memory
  return NodeCache::Words(static_cast<std::atomic<uint64_t>*>(p), NodeCache::UnmapWords{bytes});
}

namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Writes `bytes` bytes, the pieces' in order, to `fd` at `offset`, through
// short writes and interruptions; false on an error (ENOSPC: /dev/shm full).
bool WriteAll(int fd, std::vector<iovec>& pieces, uint64_t offset, uint64_t bytes) {
  size_t first = 0;
  while (bytes > 0 && first < pieces.size()) {
    const int count = static_cast<int>(std::min<size_t>(pieces.size() - first, IOV_MAX));
    const ssize_t n = ::pwritev(fd, pieces.data() + first, count, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    offset += static_cast<uint64_t>(n);
    bytes -= std::min<uint64_t>(bytes, static_cast<uint64_t>(n));
    // Past the pieces written whole; the one cut short starts further on.
    for (auto left = static_cast<size_t>(n); left > 0 && first < pieces.size();) {
      iovec& p = pieces[first];
      if (left >= p.iov_len) {
        left -= p.iov_len;
        ++first;
      } else {
        p.iov_base = static_cast<std::byte*>(p.iov_base) + left;
        p.iov_len -= left;
        left = 0;
      }
    }
  }
  return bytes == 0;
}

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
  // The sequential fill (sequential_fill.h): windows of fill_window_bytes
  // in storage order, claimed one by one by the node's processes.
  uint64_t fill_window_bytes;
  std::atomic<uint64_t> fill_next;  // next window to claim
  std::atomic<uint64_t> fill_done;  // windows whose samples were offered
  // Its costs per byte (ClaimFillMeasurement): written before fill_costs_state
  // becomes kCostsPublished, read after it is seen so.
  std::atomic<uint32_t> fill_costs_state;
  std::atomic<int32_t> fill_costs_pid;  // the process measuring or that measured
  std::atomic<double> fill_cost_scan, fill_cost_fill, fill_cost_read, fill_cost_slowed;
  std::atomic<double> fill_cost_wall, fill_cost_pace;
  uint32_t decoded;  // 1: samples held decoded (0 in regions of earlier versions)
  std::atomic<uint32_t> fill_cost_at_once;  // FillCosts::at_once
};
static_assert(sizeof(NodeCache::Header) <= kHeaderBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int32_t>::is_always_lock_free);
static_assert(std::atomic<double>::is_always_lock_free);

namespace {

struct Layout {
  uint64_t data_offset, capacity, file_bytes;
  bool holds_all;  // every sample fits
};

// The bytes of sample i's fields decoded.
uint64_t DecodedLength(const SampleDirectory& dir, uint64_t i) {
  uint64_t n = 0;
  for (const FieldInfo& f : dir.Fields(i)) n += f.decoded_length;
  return n;
}

// `*decoded` (asked for) stays true when the cache is to hold samples
// decoded: some field of the volume is compressed and every sample,
// decoded, fits the budget. A cache of a part of the samples decoded would
// serve fewer of them from memory than one of stored bytes, and reading
// from storage costs more than decompressing.
Layout LayoutFor(const Volume& volume, uint64_t budget, bool* decoded) {
  const SampleDirectory& dir = volume.directory();
  uint64_t all = 0;  // every sample, aligned: more is never needed
  *decoded = *decoded && (volume.info().incompat_flags & format::kIncompatZstd) != 0;
  if (*decoded) {
    for (uint64_t i = 0; i < dir.size() && all <= budget; ++i) {
      all += AlignUp(kDecodedPrefix + DecodedLength(dir, i), kAlign);
    }
    if (all > budget) {
      *decoded = false;
      all = 0;
    }
  }
  if (!*decoded && dir.compact()) {
    // No pass over the samples (a billion of them take seconds): at most
    // kAlign - 1 bytes of padding each.
    const uint64_t n = dir.size();
    all = volume.info().data_bytes + std::min(n, (budget + kAlign) / (kAlign - 1)) * (kAlign - 1);
  }
  for (uint64_t i = 0; !*decoded && !dir.compact() && i < dir.size() && all <= budget; ++i) {
    all += AlignUp(dir.sample(i).length, kAlign);
  }
  Layout l;
  l.data_offset = AlignUp(kHeaderBytes + 8 * dir.size(), 4096);
  l.capacity = AlignUp(std::min(all, budget), 4096);
  l.file_bytes = l.data_offset + l.capacity;
  l.holds_all = all <= budget;
  return l;
}

std::string UuidOf(const Volume& v) { return v.info().uuid; }

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
  bool decoded = options.decoded;
  const Layout layout = LayoutFor(volume, options.budget, &decoded);
  if (layout.capacity == 0) return nullptr;
  std::shared_ptr<NodeCache> c(new NodeCache(volume));
  c->decoded_ = decoded;
  c->holds_all_ = layout.holds_all;
  const uint64_t n = volume.size();
  c->checked_ = LazyZeroWords((n + 63) / 64);
  c->entries_reserved_ = LazyZeroWords((n * 8 / kBlock + 64) / 64);

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
    h->fill_window_bytes = FillWindowBytes(volume.info().data_bytes);
    h->decoded = decoded ? 1 : 0;
  };
  auto attach_mapping = [&](uint64_t bytes) {
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
    attach_mapping(layout.file_bytes);
    init_header(c->header_);
    std::memcpy(c->header_->magic, kMagic, sizeof kMagic);
    c->SizeBlockMaps();
    return c;
  };
  if (!options.shared) return make_private();

  const std::string dir = shm::RegionDir(options.dir);
  const std::string name =
      shm::UserPrefix() + UuidOf(volume) + options.name_suffix + (decoded ? "-decoded" : "");
  const std::string path = dir + "/" + name;
  shm::SweepStale(dir);

  // Attach to the node's region, or create it; a few rounds for races with
  // a creator or a last user removing it.
  for (int attempt = 0; attempt < 5 && !c->region_.valid(); ++attempt) {
    auto found = shm::Attach(dir, name, kHeaderBytes);
    if (!found.ok()) {
      why = "node cache " + found.status().message() + "; a private cache instead";
      return make_private();
    }
    if (*found) {
      shm::Region region = std::move(**found);
      std::string refuse;
      if (!MapRegion(region.fd(), region.bytes(), &c->base_, &c->view_)) {
        refuse = Errno("mmap");
      } else {
        attach_mapping(region.bytes());
        // A creator links the region into place only once its header is
        // complete: a name without the magic is not a region of ours.
        const Header& h = *c->header_;
        if (std::memcmp(h.magic, kMagic, 8) != 0 || h.version != kVersion) {
          refuse = "not a dlfs cache of this version";
        } else if (std::string(h.uuid, strnlen(h.uuid, sizeof h.uuid)) != UuidOf(volume) ||
                   h.sample_count != n || h.data_bytes != volume.info().data_bytes) {
          refuse = "made for another volume";
        } else if (h.decoded != (decoded ? 1u : 0u)) {
          refuse = decoded ? "holds stored samples, not decoded ones" : "holds decoded samples";
        } else if (h.data_offset != layout.data_offset || h.file_bytes != region.bytes() ||
                   h.data_offset + h.capacity > region.bytes() || h.capacity % 4096 != 0) {
          refuse = "its layout does not match its size";
        }
      }
      if (!refuse.empty()) {
        c->Detach();
        why = "node cache " + path + ": refused (" + refuse + "); a private cache instead";
        return make_private();
      }
      c->region_ = std::move(region);
      break;
    }
    // Create: complete (header allocated; the entries and the data area as
    // they are used) before it is linked into place.
    auto made = shm::Create(dir, name, layout.file_bytes, kHeaderBytes, [&](int fd) {
      if (!MapRegion(fd, layout.file_bytes, &c->base_, &c->view_)) {
        return Status::IOError(Errno("mmap"));
      }
      attach_mapping(layout.file_bytes);
      init_header(c->header_);
      // No fence needed: an attacher reaches the region only by opening the
      // name link(2) makes, and those system calls order the header's
      // stores before its loads (a fence here only drew a ThreadSanitizer
      // warning, which does not model fences).
      std::memcpy(c->header_->magic, kMagic, sizeof kMagic);
      return Status::Ok();
    });
    if (made.ok()) {
      c->region_ = std::move(*made);
      break;
    }
    c->Detach();
    // Another process created it first: attach to theirs.
    if (made.status().code() == StatusCode::kAlreadyExists) continue;
    why = "node cache " + made.status().message() + "; uncached";
    return nullptr;
  }
  if (!c->region_.valid()) {
    why = "node cache " + path + ": could not attach (kept changing); a private cache instead";
    return make_private();
  }
  c->path_ = path;
  c->fd_ = c->region_.fd();
  // A region made with a smaller budget may not hold them all.
  c->holds_all_ = c->holds_all_ && c->header_->capacity >= layout.capacity;
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
  region_.Release();  // the last user removes the region
}

bool NodeCache::ReserveEntry(uint64_t index) {
  if (fd_ < 0) return true;  // private memory is reserved on touch
  const uint64_t b = index * sizeof(uint64_t) / kBlock;
  std::atomic<uint64_t>& word = entries_reserved_[b / 64];
  const uint64_t bit = uint64_t{1} << (b % 64);
  if (word.load(std::memory_order_relaxed) & bit) return true;
  // Another process may have allocated it: fallocate of allocated pages
  // changes nothing and costs one pass over them.
  const uint64_t from = kHeaderBytes + b * kBlock;
  const uint64_t to = std::min(from + kBlock, data_offset_);
  if (from < to &&
      ::fallocate(fd_, 0, static_cast<off_t>(from), static_cast<off_t>(to - from)) != 0) {
    return false;
  }
  word.fetch_or(bit, std::memory_order_relaxed);
  return true;
}

std::optional<std::span<const std::byte>> NodeCache::Find(uint64_t index) {
  if (!ReserveEntry(index)) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  const uint64_t v = entries_[index].load(std::memory_order_acquire);
  if (v < kReadyBase) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  // Located in this process before its bytes are handed out: a compact
  // directory block that fails its check here is a miss, and the reader's
  // own read reports it.
  const Result<SampleInfo> located = volume_.directory().Locate(index);
  if (!located.ok()) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  const SampleInfo& s = *located;
  const uint64_t offset = v - kReadyBase;
  const std::byte* at = view_ + data_offset_ + offset;
  const uint64_t prefix = decoded_ ? kDecodedPrefix : 0;
  uint64_t held = s.length;
  if (decoded_ && offset + kDecodedPrefix <= header_->capacity) {
    // The count beside the bytes (checked against the directory on first
    // use): walking the sample's field records on every hit cost more
    // than the rest of a hit.
    uint32_t count;
    std::memcpy(&count, at + 4, 4);
    held = kDecodedPrefix + count;
  }
  if (offset + std::max(held, prefix) > header_->capacity) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;  // a damaged entry: never read outside the data area
  }
  const std::span<const std::byte> bytes(at + prefix, held - prefix);
  const uint64_t bit = uint64_t{1} << (index % 64);
  std::atomic<uint64_t>& word = checked_[index / 64];
  if ((word.load(std::memory_order_relaxed) & bit) == 0) {
    MapForReading(offset, held);
    uint32_t want = s.crc32c;
    if (decoded_) std::memcpy(&want, at, 4);
    if ((decoded_ && bytes.size() != DecodedLength(volume_.directory(), index)) ||
        crc32c::Value(bytes.data(), bytes.size()) != want) {
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

bool NodeCache::Reserve(uint64_t offset, uint64_t length, bool map_writable) {
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
    if (map_writable) ::madvise(base_ + from, to - from, MADV_POPULATE_WRITE);
#else
    (void)map_writable;
#endif
    word.fetch_or(bit, std::memory_order_relaxed);
    reserved_bytes_.fetch_add(to - from, std::memory_order_relaxed);
  }
  return true;
}

bool NodeCache::DecodeSample(uint64_t index, std::span<const std::byte> stored,
                             std::vector<std::byte>* out) const {
  const std::vector<FieldInfo> fields = volume_.directory().Fields(index);
  uint64_t n = 0;
  for (const FieldInfo& f : fields) n += f.decoded_length;
  if (n > UINT32_MAX) return false;
  out->resize(kDecodedPrefix + n);
  uint64_t at = kDecodedPrefix;
  for (const FieldInfo& f : fields) {
    if (uint64_t{f.offset_in_sample} + f.stored_length > stored.size()) return false;
    const std::span<std::byte> dst(out->data() + at, f.decoded_length);
    // The stored bytes were checked whole against the directory just before.
    if (!volume_
             .DecodeField(index, f, stored.subspan(f.offset_in_sample, f.stored_length), dst,
                          /*verify=*/false)
             .ok()) {
      return false;
    }
    at += f.decoded_length;
  }
  const uint32_t crc = crc32c::Value(out->data() + kDecodedPrefix, n);
  const auto count = static_cast<uint32_t>(n);
  std::memcpy(out->data(), &crc, 4);
  std::memcpy(out->data() + 4, &count, 4);
  return true;
}

std::optional<std::span<const std::byte>> NodeCache::Claim(uint64_t index,
                                                           std::span<const std::byte> bytes,
                                                           std::vector<std::byte>* held) {
  if (!ReserveEntry(index)) {
    stopped_.store(true, std::memory_order_relaxed);
    return std::nullopt;
  }
  uint64_t expected = kEmpty;
  if (!entries_[index].compare_exchange_strong(expected, kFilling, std::memory_order_acq_rel)) {
    return std::nullopt;  // cached, or another process is filling it
  }
  const Result<SampleInfo> located = volume_.directory().Locate(index);
  // Only bytes that match the directory become visible to anyone. Checked
  // before taking room: a refused sample (damaged on storage, offered every
  // epoch) must not use up the data area, which is never reclaimed.
  bool ok = located.ok() && bytes.size() == located->length &&
            crc32c::Value(bytes.data(), bytes.size()) == located->crc32c;
  // Decoded here, before taking room: a field that does not decode (a
  // volume written wrong) leaves the sample uncached, and readers decode
  // it themselves and report it.
  if (ok && decoded_) ok = DecodeSample(index, bytes, held);
  if (!ok) {
    entries_[index].store(kEmpty, std::memory_order_release);
    return std::nullopt;
  }
  return decoded_ ? std::span<const std::byte>(*held) : bytes;
}

void NodeCache::Publish(uint64_t index, uint64_t offset) {
  entries_[index].store(offset + kReadyBase, std::memory_order_release);
  // This process put them there: no need to check them again on first use.
  checked_[index / 64].fetch_or(uint64_t{1} << (index % 64), std::memory_order_relaxed);
}

void NodeCache::CountFilled(uint64_t bytes, uint64_t samples, double since) {
  header_->used.fetch_add(bytes, std::memory_order_relaxed);
  header_->samples.fetch_add(samples, std::memory_order_relaxed);
  filled_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  fill_ns_.fetch_add(static_cast<uint64_t>((Now() - since) * 1e9), std::memory_order_relaxed);
}

bool NodeCache::Admit(uint64_t index, std::span<const std::byte> offered) {
  if (full()) return false;
  const double t0 = Now();
  thread_local std::vector<std::byte> held;
  const std::optional<std::span<const std::byte>> claimed = Claim(index, offered, &held);
  if (!claimed) return false;
  const std::span<const std::byte> bytes = *claimed;
  const uint64_t need = AlignUp(bytes.size(), kAlign);
  const uint64_t offset = header_->cursor.fetch_add(need, std::memory_order_relaxed);
  bool ok = offset + need <= header_->capacity;
  if (!ok) header_->full.store(1, std::memory_order_relaxed);
  if (ok && !Reserve(offset, bytes.size())) {
    // /dev/shm (or the cgroup) has no memory left: keep what is cached.
    stopped_.store(true, std::memory_order_relaxed);
    ok = false;
  }
  if (!ok) {
    entries_[index].store(kEmpty, std::memory_order_release);
    return false;
  }
  std::memcpy(base_ + data_offset_ + offset, bytes.data(), bytes.size());
  Publish(index, offset);
  CountFilled(bytes.size(), 1, t0);
  return true;
}

size_t NodeCache::AdmitMany(std::span<const Offer> offers) {
  if (fd_ < 0) {  // private memory: no descriptor to write through
    size_t added = 0;
    for (const Offer& o : offers) added += Admit(o.index, o.bytes) ? 1 : 0;
    return added;
  }
  const double t0 = Now();
  // The samples taken (each claimed: kFilling), where they go relative to
  // the run's start, and their bytes (decoded ones in `decoded`, one
  // buffer each, reused by the next window).
  struct Taken {
    uint64_t index, at;
    std::span<const std::byte> bytes;
  };
  thread_local std::vector<Taken> taken;
  thread_local std::vector<std::vector<std::byte>> decoded;
  taken.clear();
  size_t decoded_used = 0;
  uint64_t run = 0;
  for (const Offer& o : offers) {
    if (full()) break;
    if (decoded_used == decoded.size()) decoded.emplace_back();
    const std::optional<std::span<const std::byte>> bytes =
        Claim(o.index, o.bytes, &decoded[decoded_used]);
    if (!bytes) continue;
    if (decoded_) ++decoded_used;  // its bytes live there until the write
    taken.push_back({o.index, run, *bytes});
    run += AlignUp(bytes->size(), kAlign);
  }
  if (taken.empty()) return 0;

  // One run of the data area for all of them; those past its end are not
  // cached (the cache is full).
  const uint64_t offset = header_->cursor.fetch_add(run, std::memory_order_relaxed);
  size_t kept = taken.size();
  if (offset + run > header_->capacity) {
    header_->full.store(1, std::memory_order_relaxed);
    const uint64_t room = offset < header_->capacity ? header_->capacity - offset : 0;
    while (kept > 0 && taken[kept - 1].at + taken[kept - 1].bytes.size() > room) --kept;
  }
  const uint64_t length = kept > 0 ? taken[kept - 1].at + taken[kept - 1].bytes.size() : 0;
  bool ok = kept > 0 && Reserve(offset, length, /*map_writable=*/false);
  // The samples and the zeros between them (each starts on a cache line),
  // IOV_MAX pieces per call.
  static constexpr std::byte kZeros[kAlign] = {};
  thread_local std::vector<iovec> pieces;
  for (size_t k = 0; ok && k < kept;) {
    pieces.clear();
    const uint64_t from = taken[k].at;
    for (; k < kept && pieces.size() + 2 <= IOV_MAX; ++k) {
      const Taken& t = taken[k];
      pieces.push_back({const_cast<std::byte*>(t.bytes.data()), t.bytes.size()});
      const uint64_t end = k + 1 < kept ? taken[k + 1].at : t.at + t.bytes.size();
      if (end > t.at + t.bytes.size()) {
        pieces.push_back({const_cast<std::byte*>(kZeros), end - t.at - t.bytes.size()});
      }
    }
    const uint64_t to = k < kept ? taken[k].at : length;
    ok = WriteAll(fd_, pieces, data_offset_ + offset + from, to - from);
  }
  if (!ok) {
    // /dev/shm (or the cgroup) has no memory left: keep what is cached.
    stopped_.store(true, std::memory_order_relaxed);
    kept = 0;
  }
  for (size_t k = kept; k < taken.size(); ++k) {
    entries_[taken[k].index].store(kEmpty, std::memory_order_release);
  }
  uint64_t bytes = 0;
  for (size_t k = 0; k < kept; ++k) {
    Publish(taken[k].index, offset + taken[k].at);
    bytes += taken[k].bytes.size();
  }
  if (kept > 0) CountFilled(bytes, kept, t0);
  return kept;
}

std::optional<uint64_t> NodeCache::ClaimFillWindow(uint64_t windows) {
  if (full()) return std::nullopt;
  uint64_t next = header_->fill_next.load(std::memory_order_relaxed);
  while (next < windows) {
    if (header_->fill_next.compare_exchange_weak(next, next + 1, std::memory_order_relaxed)) {
      return next;
    }
  }
  return std::nullopt;
}

bool NodeCache::ClaimFillMeasurement() {
  const int32_t me = ::getpid();
  uint32_t state = header_->fill_costs_state.load(std::memory_order_acquire);
  while (state != kCostsPublished) {
    if (state == kCostsNone) {
      if (header_->fill_costs_state.compare_exchange_weak(state, kCostsMeasuring,
                                                          std::memory_order_acq_rel)) {
        header_->fill_costs_pid.store(me, std::memory_order_release);
        return true;
      }
      continue;
    }
    // Being measured. The pid is stored just after the state: 0 is a
    // process about to store it, not one that is gone.
    int32_t by = header_->fill_costs_pid.load(std::memory_order_acquire);
    if (by == 0 || by == me || ::kill(by, 0) == 0 || errno == EPERM) return false;
    return header_->fill_costs_pid.compare_exchange_strong(by, me, std::memory_order_acq_rel);
  }
  return false;
}

void NodeCache::PublishFillCosts(const FillCosts* costs) {
  if (costs == nullptr) {
    header_->fill_costs_pid.store(0, std::memory_order_relaxed);
    header_->fill_costs_state.store(kCostsNone, std::memory_order_release);
    return;
  }
  header_->fill_cost_scan.store(costs->scan, std::memory_order_relaxed);
  header_->fill_cost_fill.store(costs->fill, std::memory_order_relaxed);
  header_->fill_cost_read.store(costs->read, std::memory_order_relaxed);
  header_->fill_cost_slowed.store(costs->slowed, std::memory_order_relaxed);
  header_->fill_cost_wall.store(costs->wall, std::memory_order_relaxed);
  header_->fill_cost_pace.store(costs->pace, std::memory_order_relaxed);
  header_->fill_cost_at_once.store(costs->at_once ? 1 : 0, std::memory_order_relaxed);
  header_->fill_costs_pid.store(::getpid(), std::memory_order_relaxed);
  header_->fill_costs_state.store(kCostsPublished, std::memory_order_release);
}

std::optional<FillCosts> NodeCache::fill_costs(int32_t* measured_by) const {
  if (header_->fill_costs_state.load(std::memory_order_acquire) != kCostsPublished) {
    return std::nullopt;
  }
  if (measured_by != nullptr)
    *measured_by = header_->fill_costs_pid.load(std::memory_order_relaxed);
  return FillCosts{.scan = header_->fill_cost_scan.load(std::memory_order_relaxed),
                   .fill = header_->fill_cost_fill.load(std::memory_order_relaxed),
                   .read = header_->fill_cost_read.load(std::memory_order_relaxed),
                   .slowed = header_->fill_cost_slowed.load(std::memory_order_relaxed),
                   .wall = header_->fill_cost_wall.load(std::memory_order_relaxed),
                   .pace = header_->fill_cost_pace.load(std::memory_order_relaxed),
                   .at_once = header_->fill_cost_at_once.load(std::memory_order_relaxed) != 0};
}

void NodeCache::FillWindowDone() { header_->fill_done.fetch_add(1, std::memory_order_release); }

uint64_t NodeCache::fill_window_bytes() const { return header_->fill_window_bytes; }

uint64_t NodeCache::fill_windows_done() const {
  return header_->fill_done.load(std::memory_order_acquire);
}

bool NodeCache::empty() const { return header_->samples.load(std::memory_order_relaxed) == 0; }

bool NodeCache::sparse() const {
  return header_->samples.load(std::memory_order_relaxed) * 32 < volume_.size();
}

void NodeCache::CountMisses(uint64_t n) { misses_.fetch_add(n, std::memory_order_relaxed); }

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
  s.reserved_bytes = reserved_bytes_.load(std::memory_order_relaxed);
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
