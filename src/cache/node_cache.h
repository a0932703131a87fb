// NodeCache: a volume's samples kept in memory once per node, shared by
// every process that reads the volume there (the ranks of a job, their
// DataLoader workers, other jobs of the same user).
//
// The cache is one file in /dev/shm ($DLFS_CACHE_DIR) per user and volume,
// "dlfs-<uid>-<volume uuid>" (plus NodeCacheOptions::name_suffix), mapped by each user: a header,
// one 8-byte entry per sample of the volume, and a data area of at most the budget's bytes
// (docs/architecture.md, "The node cache"). An entry is empty, being filled, or the offset of the
// sample's stored bytes in the data area; samples are appended (a bump allocator) and never
// evicted.
//
// Why never evicted: every epoch reads each sample exactly once, in an
// order fixed in advance. Between two reads of a sample every other sample
// is read once, so a cache of C samples can serve at most C hits per epoch
// whatever it evicts — Belady's MIN, which knows the future, does no
// better — and a cache that keeps the first C samples it is offered serves
// exactly C from the second epoch on. (tests/unit/node_cache_test.cc checks
// this against MIN on traces; LRU serves far fewer: a sample read early in
// one epoch and late in the next is evicted in between.)
//
// Sharing safely:
// - Created exclusively (a temporary name, then link()) with mode 0600;
//   attached only when owned by this user, mode 0600, a regular file of the
//   expected size and layout for this volume (uuid, samples, bytes). A region
//   that fails any check is never used: the process gets a private cache
//   and the note says why.
// - A sample's bytes become visible only when checked against the
//   directory's CRC32C and wholly written (a process killed mid-fill leaves an
//   entry "being filled", never read). Each process also checks a sample's
//   bytes against the directory the first time it uses them, so a damaged
//   or tampered region cannot feed it a wrong sample.
// - Each user holds a shared flock() on the file; the last to detach (the
//   one that can take the lock exclusively) removes it. A region left by a
//   killed job (nobody holds its lock) is removed by the next Open of this
//   user, whatever its volume; one still being made by a running process
//   (not locked yet) is not.
// - The data area's memory is reserved with fallocate() before it is
//   written, so a full /dev/shm ends filling cleanly (the cache stays as it
//   is) instead of a SIGBUS. So are the entries (8 bytes per sample), 2 MiB
//   (262,144 samples) at a time as samples are first looked up: a volume of
//   10^9 samples costs its cache nothing per sample before it is read (all
//   8 GB of entries were allocated at creation before, a second per GB).
//
// Thread safety: every method may be called from any thread, and the
// region from any number of processes at once.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

#include "cache/fill_plan.h"
#include "common/shm_region.h"
#include "dlfs/volume.h"

namespace dlfs::cache_internal {

// The sequential fill's window (NodeCache::fill_window_bytes): large enough
// for reads at the device's sequential speed (4 MiB), small enough that the
// node's processes share the work evenly — and a 64th of the volume at most
// (not under 1 MiB), since the fill's probe reads one window into fresh
// memory to measure what filling costs: a 4 MiB probe took 20-30 ms of a
// 30-40 ms Fashion-MNIST epoch (55 MB) at 2 ranks here.
inline constexpr uint64_t kFillWindowBytes = uint64_t{4} << 20;
inline constexpr uint64_t kSmallestFillWindowBytes = uint64_t{1} << 20;
constexpr uint64_t FillWindowBytes(uint64_t volume_data_bytes) {
  const uint64_t w = volume_data_bytes / 64;
  return w < kSmallestFillWindowBytes ? kSmallestFillWindowBytes
         : w > kFillWindowBytes       ? kFillWindowBytes
                                      : w;
}

struct NodeCacheOptions {
  uint64_t budget = 0;  // bytes of samples at most; 0: no cache
  // One region per node and volume, shared (false: this process's own
  // memory, as when sharing is impossible).
  bool shared = true;
  // Where shared regions live; empty: $DLFS_CACHE_DIR, else /dev/shm.
  std::string dir;
  // Appended to the region's name: fake nodes of one host (DLFS_RANKS_PER_NODE)
  // each keep their own region, as real nodes would.
  std::string name_suffix;
  // Hold samples decoded (the Loader reading fields of a volume with
  // compressed fields): each sample's fields decoded, in storage order, so a
  // compressed field is decompressed once per node, when admitted, not on
  // every read. Only when the budget holds every sample so (decoded bytes
  // are what the budget counts then); otherwise, or when no field of the
  // volume is compressed, the cache holds stored bytes as usual (decoded()
  // says which). A region of decoded samples has a name of its own
  // ("...-decoded"): the other readers of a volume's region (SampleReader,
  // ShardLoader, the cluster cache) expect stored bytes.
  bool decoded = false;
};

struct NodeCacheStats {
  uint64_t capacity = 0;      // bytes of samples the region may hold
  uint64_t used = 0;          // bytes of samples in it (every process's)
  uint64_t samples = 0;       // samples in it
  uint64_t hits = 0;          // this process: samples found
  uint64_t misses = 0;        // this process: samples looked up and not found
  uint64_t hit_bytes = 0;     // this process: bytes of the samples found
  uint64_t filled_bytes = 0;  // this process: bytes it added
  double fill_seconds = 0;    // this process: time spent adding them
  // This process: bytes of the data area it reserved and mapped (whole
  // blocks of 2 MiB, at the first sample in each): the memory its filling
  // touched, which may run ahead of filled_bytes by a block.
  uint64_t reserved_bytes = 0;
  uint32_t sharers = 0;  // processes attached now (the region's table)
  bool shared = false;   // a region other processes can attach
};

class NodeCache {
 public:
  // The cache of `volume` for this process: the node's shared region (made
  // if needed), a private one when sharing is off or the region cannot be
  // trusted, or nullptr when there is none (budget 0, no memory, no
  // /dev/shm). Never an error: a job runs uncached rather than fail for its
  // cache. `*note` (when not null) says what was done and why, e.g. "node
  // cache /dev/shm/dlfs-0-...: refused (owned by uid 1000); a private
  // cache instead".
  static std::shared_ptr<NodeCache> Open(const Volume& volume, const NodeCacheOptions& options,
                                         std::string* note);
  // Detaches; the last process attached removes the region.
  ~NodeCache();
  NodeCache(const NodeCache&) = delete;
  NodeCache& operator=(const NodeCache&) = delete;

  // The stored bytes of sample `index` (as on the device) when the cache
  // holds them and, the first time this process uses them, they match the
  // directory's CRC32C; nullopt otherwise. The span stays valid for the
  // cache's life (keep the shared_ptr) and is read-only memory.
  // decoded(): the sample's fields decoded instead, back to back in storage
  // order (field j at the sum of the decoded lengths before it), checked
  // the first time against the CRC32C the admitting process wrote beside
  // them (the format has no checksum of decoded bytes: this catches a
  // damaged region, not a forgery by another process of the same user).
  std::optional<std::span<const std::byte>> Find(uint64_t index);
  // Offers the stored bytes of sample `index`, just read from the device:
  // checked against the directory's CRC32C (refused bytes take no room),
  // then copied in (decoded(): decoded, then copied) when there is room and
  // no process has it yet. The caller must not change `bytes` during the
  // call. True when the sample is now in the cache (added by this call).
  bool Admit(uint64_t index, std::span<const std::byte> bytes);
  // A sample offered to AdmitMany: its stored bytes, as for Admit.
  struct Offer {
    uint64_t index;
    std::span<const std::byte> bytes;
  };
  // Admit for each of `offers` (a fill window's samples), with the samples
  // accepted placed side by side and written into a shared region by the
  // kernel (pwritev), not copied through this process's mapping: the first
  // write to each page of a mapping takes a fault even once the page is
  // allocated and mapped (MADV_POPULATE_WRITE), which on a VM whose host
  // shadows the page tables made each fill 3-5x slower (docs/benchmarks.md,
  // "Small samples and the node cache"). Returns how many were added.
  size_t AdmitMany(std::span<const Offer> offers);
  // Holds samples decoded (NodeCacheOptions::decoded, and it applied).
  bool decoded() const { return decoded_; }
  // Its capacity holds every sample of the volume (as decoded() says).
  bool holds_all() const { return holds_all_; }
  // No more samples fit (or filling stopped: no memory left in /dev/shm).
  bool full() const;
  // Holds no sample yet (on any process of the node): a reader skips its
  // lookups, and counts them as misses (CountMisses).
  bool empty() const;
  // Holds under a 32nd of the volume's samples (a probe's windows, after a
  // decision not to fill): a reader skips its lookups then too. Each costs
  // a load from a table too large for the CPU's caches; over Fashion-MNIST's
  // 0.022 s warm epochs through the page cache, lookups for 3 % of hits
  // made every epoch 3-5 ms slower than with no cache at all.
  bool sparse() const;
  void CountMisses(uint64_t n);

  // The sequential fill's share of the work (sequential_fill.h): the next
  // of `windows` windows of the volume in storage order no process of the
  // node has claimed, or nullopt when none is left (or the cache is full).
  // Every process of the node cuts the volume into the same windows:
  // fill_window_bytes() each, fixed when the region was made.
  std::optional<uint64_t> ClaimFillWindow(uint64_t windows);
  // A claimed window's samples were all offered (Admit).
  void FillWindowDone();
  uint64_t fill_window_bytes() const;
  uint64_t fill_windows_done() const;

  // What filling costs and saves per byte, measured once per node: every
  // process of a job then decides from the same figures (DecideFill with
  // its own epochs), so the node's ranks agree, and only one of them pays
  // for the measuring. True when this process is to measure: nobody has,
  // or the process measuring is gone. It then publishes the costs, or
  // gives up (nullptr: another process may measure).
  bool ClaimFillMeasurement();
  void PublishFillCosts(const FillCosts* costs);
  // The costs published on the node, and the process that measured them.
  std::optional<FillCosts> fill_costs(int32_t* measured_by = nullptr) const;

  NodeCacheStats stats() const;
  // The region's file; empty for a private cache.
  const std::string& path() const { return path_; }
  // "shared node cache /dev/shm/dlfs-0-... of 1.2 GB" or "private cache ...".
  std::string Describe() const;

 public:
  struct Header;  // the region's first page (node_cache.cc)

 private:
  explicit NodeCache(const Volume& volume) : volume_(volume) {}
  // Allocates the data area's blocks holding [offset, offset + length)
  // (shared regions; once per process and block), and maps them into the
  // read-write mapping where `map_writable` (they will be copied into
  // through it). False when /dev/shm has no room for them.
  bool Reserve(uint64_t offset, uint64_t length, bool map_writable = true);
  // Allocates the block of entries holding `index`'s (shared regions; once
  // per process and block). False when /dev/shm has no room for it.
  bool ReserveEntry(uint64_t index);
  // Maps the data area's blocks holding [offset, offset + length) into the
  // read-only mapping, once per process and block.
  void MapForReading(uint64_t offset, uint64_t length);
  // Admit's and AdmitMany's first step: claims sample `index` (being
  // filled) and checks `bytes` against the directory, decoding them into
  // *held where the cache holds samples decoded. The bytes to store, or
  // nullopt: cached or being filled elsewhere; refused (the claim
  // released); or no room for its entry (filling stops).
  std::optional<std::span<const std::byte>> Claim(uint64_t index, std::span<const std::byte> bytes,
                                                  std::vector<std::byte>* held);
  // Makes claimed sample `index`, written at `offset` of the data area,
  // visible, and checked for this process (it wrote the bytes it checked).
  void Publish(uint64_t index, uint64_t offset);
  // Counts samples filled by this process, since `since` (Now()).
  void CountFilled(uint64_t bytes, uint64_t samples, double since);
  // Sizes reserved_ and mapped_ for the attached region's capacity.
  void SizeBlockMaps();
  void Detach();

  // Sample `index` decoded as the data area holds it (the prefix, then its
  // fields); false when a field does not decode or lies outside `stored`.
  bool DecodeSample(uint64_t index, std::span<const std::byte> stored,
                    std::vector<std::byte>* out) const;

  const Volume& volume_;
  bool decoded_ = false;
  bool holds_all_ = false;
  const pid_t pid_ = ::getpid();  // the process that opened it
  std::string path_;
  shm::Region region_;  // the node's region; not valid for a private cache
  int fd_ = -1;         // region_'s descriptor, -1 for a private cache
 public:
  // Atomics in a private anonymous mapping (LazyZeroWords).
  struct UnmapWords {
    size_t bytes;
    void operator()(std::atomic<uint64_t>* p) const;
  };
  using Words = std::unique_ptr<std::atomic<uint64_t>[], UnmapWords>;

 private:
  std::byte* base_ = nullptr;        // read-write mapping (filling)
  const std::byte* view_ = nullptr;  // read-only mapping of the same bytes (handed out)
  uint64_t file_bytes_ = 0;
  Header* header_ = nullptr;
  std::atomic<uint64_t>* entries_ = nullptr;
  uint64_t data_offset_ = 0;
  int sharer_slot_ = -1;
  // Per process: samples whose bytes were checked here, 2 MiB blocks of the
  // data area known to be allocated, and those mapped for reading.
  Words checked_;
  std::unique_ptr<std::atomic<uint64_t>[]> reserved_;
  std::unique_ptr<std::atomic<uint64_t>[]> mapped_;
  uint64_t block_words_ = 0;          // words of reserved_ and mapped_
  Words entries_reserved_;            // blocks of entries known to be allocated
  std::atomic<bool> stopped_{false};  // fallocate failed: fill no more
  std::atomic<uint64_t> hits_{0}, misses_{0}, hit_bytes_{0}, filled_bytes_{0}, fill_ns_{0};
  std::atomic<uint64_t> reserved_bytes_{0};
};

}  // namespace dlfs::cache_internal
