// LmdbioReader: the baseline (liblmdb cursor on every rank) and the windowed
// modes (one or more readers per node filling an MPI-3 shared window).
//
// Vocabulary used below:
//   stream position  index into the endless record stream; record = pos % N.
//   node list        the records of one read step that this node's ranks
//                    consume, in Caffe order: for each iteration of the step,
//                    for each local rank, its b records. Because a node's
//                    ranks are consecutive world ranks, one iteration's part
//                    of the node list is one contiguous range of positions.
//   step             the iterations served by one read: 1, or several with
//                    coalescing.
//   run              a contiguous, 4 KiB-aligned byte range of data.mdb
//                    holding one or more wanted values; runs are placed one
//                    after another in the window, so a value's bytes sit in
//                    the window exactly as in the file and views need no copy.
#include "dlfs/lmdbio.h"

#include <fcntl.h>
#include <lmdb.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/clock.h"
#include "common/file_util.h"
#include "dlfs/lmdb.h"
#include "dlfs/mpi.h"

namespace dlfs {

namespace {

constexpr uint64_t kAlign = 4096;          // run alignment: pages, and O_DIRECT's unit
constexpr uint64_t kMergeGap = 64 * 1024;  // values closer than this share one read
constexpr int kCursorTag = 7301, kStaggerTag = 7302;

uint64_t AlignDown(uint64_t x) { return x & ~(kAlign - 1); }
uint64_t AlignUp(uint64_t x) { return (x + kAlign - 1) & ~(kAlign - 1); }

// Adds the scope's wall time to `acc`.
class Stopwatch {
 public:
  explicit Stopwatch(double& acc) : acc_(acc), start_(Now()) {}
  ~Stopwatch() { acc_ += Now() - start_; }

 private:
  double& acc_;
  double start_;
};

std::string DataFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return path + "/data.mdb";
  return path;
}

Status MdbError(int rc, const std::string& path, const char* what) {
  if (rc == ENOENT) return Status::NotFound(path + ": " + what + ": " + mdb_strerror(rc));
  return Status::IOError(path + ": " + what + ": " + mdb_strerror(rc));
}

// Where liblmdb mapped `file` in this process. liblmdb does not export its
// map address (MDB_envinfo.me_mapaddr is the fixed-map hint, usually null;
// LMDBIO patched liblmdb for this), so it is read from /proc/self/maps:
// liblmdb maps the whole file once, from offset 0.
Result<const std::byte*> FindMapping(const std::string& file) {
  char real[PATH_MAX];
  if (::realpath(file.c_str(), real) == nullptr) return Status::FromErrno(errno, file);
  std::FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return Status::FromErrno(errno, "/proc/self/maps");
  char line[PATH_MAX + 256];
  const std::string suffix = std::string(" ") + real + "\n";
  uintptr_t found = 0;
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    const std::string_view l(line);
    if (l.size() < suffix.size() || l.substr(l.size() - suffix.size()) != suffix) continue;
    unsigned long start = 0, end = 0, offset = 0;
    if (std::sscanf(line, "%lx-%lx %*s %lx", &start, &end, &offset) == 3 && offset == 0) {
      found = start;
      break;
    }
  }
  std::fclose(maps);
  if (found == 0) return Status::NotFound(file + ": liblmdb's mapping is not in /proc/self/maps");
  return reinterpret_cast<const std::byte*>(found);
}

// A read-only liblmdb cursor over the main database that wraps from the last
// record to the first, like Caffe's DataReader.
class MdbCursor {
 public:
  // `walk_only`: the map is only used to walk the tree (values are read
  // with explicit reads), so kernel read-around on its page faults would
  // only pull in value pages early and disturb the explicit reads'
  // readahead: MDB_NORDAHEAD turns it off.
  static Result<std::unique_ptr<MdbCursor>> Open(const std::string& path, bool walk_only = false) {
    auto c = std::unique_ptr<MdbCursor>(new MdbCursor(path));
    int rc = mdb_env_create(&c->env_);
    if (rc != 0) return MdbError(rc, path, "mdb_env_create");
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, path);
    // Caffe opens read-only without thread-local slots; no lock file, so a
    // read-only directory works and ranks do not contend on the lock.
    const unsigned flags = MDB_RDONLY | MDB_NOTLS | MDB_NOLOCK |
                           (S_ISDIR(st.st_mode) ? 0 : MDB_NOSUBDIR) |
                           (walk_only ? MDB_NORDAHEAD : 0);
    if ((rc = mdb_env_open(c->env_, path.c_str(), flags, 0)) != 0)
      return MdbError(rc, path, "mdb_env_open");
    if ((rc = mdb_txn_begin(c->env_, nullptr, MDB_RDONLY, &c->txn_)) != 0)
      return MdbError(rc, path, "mdb_txn_begin");
    if ((rc = mdb_dbi_open(c->txn_, nullptr, 0, &c->dbi_)) != 0)
      return MdbError(rc, path, "mdb_dbi_open");
    if ((rc = mdb_cursor_open(c->txn_, c->dbi_, &c->cursor_)) != 0)
      return MdbError(rc, path, "mdb_cursor_open");
    MDB_stat stat;
    if ((rc = mdb_stat(c->txn_, c->dbi_, &stat)) != 0) return MdbError(rc, path, "mdb_stat");
    c->entries_ = stat.ms_entries;
    MDB_envinfo info;
    mdb_env_info(c->env_, &info);
    c->map_size_ = (info.me_last_pgno + 1) * uint64_t{stat.ms_psize};
    DLFS_ASSIGN_OR_RETURN(c->map_, FindMapping(DataFile(path)));
    if (c->entries_ == 0) return Status::InvalidArgument(path + ": the database has no records");
    DLFS_RETURN_IF_ERROR(c->Get(MDB_FIRST));
    return c;
  }

  ~MdbCursor() {
    if (cursor_) mdb_cursor_close(cursor_);
    if (txn_) mdb_txn_abort(txn_);
    if (env_) mdb_env_close(env_);
  }

  uint64_t entries() const { return entries_; }
  const std::byte* map() const { return map_; }
  uint64_t map_size() const { return map_size_; }

  // Moves to the next record, wrapping to the first after the last.
  Status Step() {
    const int rc = mdb_cursor_get(cursor_, &key_, &value_, MDB_NEXT);
    if (rc == MDB_NOTFOUND) return Get(MDB_FIRST);
    return rc == 0 ? Status::Ok() : MdbError(rc, path_, "mdb_cursor_get(MDB_NEXT)");
  }
  // Positions at `key`, which must exist.
  Status Seek(std::string_view key) {
    key_ = MDB_val{key.size(), const_cast<char*>(key.data())};
    const int rc = mdb_cursor_get(cursor_, &key_, &value_, MDB_SET_KEY);
    return rc == 0 ? Status::Ok() : MdbError(rc, path_, "mdb_cursor_get(MDB_SET_KEY)");
  }
  std::string_view key() const {
    return std::string_view(static_cast<const char*>(key_.mv_data), key_.mv_size);
  }
  std::span<const std::byte> value() const {
    return {static_cast<const std::byte*>(value_.mv_data), value_.mv_size};
  }

 private:
  explicit MdbCursor(std::string path) : path_(std::move(path)) {}
  Status Get(MDB_cursor_op op) {
    const int rc = mdb_cursor_get(cursor_, &key_, &value_, op);
    return rc == 0 ? Status::Ok() : MdbError(rc, path_, "mdb_cursor_get");
  }

  std::string path_;
  MDB_env* env_ = nullptr;
  MDB_txn* txn_ = nullptr;
  MDB_dbi dbi_ = 0;
  MDB_cursor* cursor_ = nullptr;
  MDB_val key_{}, value_{};
  uint64_t entries_ = 0;
  const std::byte* map_ = nullptr;
  uint64_t map_size_ = 0;
};

// ---------------------------------------------------------------------------
// baseline

class BaselineReader final : public LmdbioReader {
 public:
  ~BaselineReader() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  // Takes ownership of `comm`.
  Status Init(MPI_Comm comm, const std::string& path, const LmdbioOptions& options) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &ranks_);
    comm_ = comm;
    batch_ = options.batch_size;
    count_ = batch_ / ranks_;
    records_ = std::make_unique<std::span<const std::byte>[]>(count_);
    const double start = Now();
    auto cursor = MdbCursor::Open(path);
    Status st = cursor.ok() ? Status::Ok() : cursor.status();
    if (st.ok()) {
      cursor_ = std::move(*cursor);
      entries_ = cursor_->entries();
      // Walk to this rank's first record, as Caffe does on its first batch.
      Stopwatch w(times_.skip);
      st = Skip(uint64_t{count_} * rank_);
    }
    times_.setup = Now() - start;
    description_ = "baseline: liblmdb mmap cursor on every rank, skipping others' records";
    return AgreeOnStatus(comm_, st);
  }

  Status Next() override {
    if (!broken_.ok()) return broken_;
    Status st;
    buffer_.clear();
    offsets_.clear();
    {
      // Caffe copies each kept value out of the map (Datum parsing).
      Stopwatch w(times_.copy);
      for (uint32_t j = 0; j < count_ && st.ok(); ++j) {
        const auto v = cursor_->value();
        offsets_.push_back(buffer_.size());
        buffer_.insert(buffer_.end(), v.begin(), v.end());
        counters_.read_bytes += v.size();
        ++counters_.read_calls;
        st = cursor_->Step();
      }
    }
    if (st.ok()) {
      Stopwatch w(times_.skip);
      st = Skip(uint64_t{batch_} - count_);
    }
    {
      // Stands for the per-iteration gradient allreduce that keeps Caffe's
      // ranks in step; it also makes errors collective.
      Stopwatch w(times_.wait);
      st = AgreeOnStatus(comm_, st);
    }
    if (!st.ok()) return broken_ = st;
    offsets_.push_back(buffer_.size());
    for (uint32_t j = 0; j < count_; ++j) {
      records_[j] =
          std::span<const std::byte>(buffer_.data() + offsets_[j], offsets_[j + 1] - offsets_[j]);
    }
    first_position_ = iteration_ * batch_ + static_cast<uint64_t>(rank_) * count_;
    ++iteration_;
    ++counters_.read_steps;
    counters_.records += count_;
    counters_.record_bytes += buffer_.size();
    return Status::Ok();
  }

 private:
  Status Skip(uint64_t n) {
    for (uint64_t k = 0; k < n; ++k) DLFS_RETURN_IF_ERROR(cursor_->Step());
    counters_.skipped += n;
    return Status::Ok();
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, ranks_ = 1;
  uint32_t batch_ = 0;
  std::unique_ptr<MdbCursor> cursor_;
  std::vector<std::byte> buffer_;
  std::vector<uint64_t> offsets_;
  Status broken_;
};

// ---------------------------------------------------------------------------
// The node's shared window.

// An MPI-3 shared window over one node: local rank 0 owns the memory, every
// rank of the node maps it. The usable base is 4 KiB-aligned (the same
// offset in every process, since mappings are page-aligned).
class SharedWindow {
 public:
  ~SharedWindow() { Free(); }

  // Collective over `node`; every rank passes the same `bytes`. Keeps the
  // contents only when no reallocation is needed.
  Status Reserve(MPI_Comm node, uint64_t bytes) {
    if (bytes <= capacity_ && win_ != MPI_WIN_NULL) return Status::Ok();
    Free();
    // Grow with headroom, so steps of slightly varying size do not each
    // reallocate; round to 2 MiB (huge-page friendly).
    const uint64_t want =
        ((bytes + bytes / 4 + kAlign) + (2u << 20) - 1) & ~uint64_t{(2u << 20) - 1};
    int local = 0;
    MPI_Comm_rank(node, &local);
    void* mine = nullptr;
    const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(local == 0 ? want : 0), 1,
                                           MPI_INFO_NULL, node, &mine, &win_);
    if (rc != MPI_SUCCESS)
      return MpiError(rc, "MPI_Win_allocate_shared of " + std::to_string(want) + " bytes");
    MPI_Aint size = 0;
    int disp = 0;
    void* base = nullptr;
    MPI_Win_shared_query(win_, 0, &size, &disp, &base);
    const auto addr = reinterpret_cast<uintptr_t>(base);
    base_ = reinterpret_cast<std::byte*>(AlignUp(addr));
    capacity_ = static_cast<uint64_t>(size) - (AlignUp(addr) - addr);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win_);
    ++generation_;
    return Status::Ok();
  }

  void Sync() {
    if (win_ != MPI_WIN_NULL) MPI_Win_sync(win_);
  }
  std::byte* base() const { return base_; }
  uint64_t capacity() const { return capacity_; }
  uint64_t generation() const { return generation_; }  // bumps on every reallocation

 private:
  void Free() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (win_ == MPI_WIN_NULL || finalized) return;
    MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
    base_ = nullptr;
    capacity_ = 0;
  }

  MPI_Win win_ = MPI_WIN_NULL;
  std::byte* base_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t generation_ = 0;
};

// Where one wanted value is: `offset` in data.mdb, `length` bytes.
struct Extent {
  uint64_t offset;
  uint64_t length;
};

// A run: [file, file + length) of data.mdb, placed at `window` in the window.
struct Run {
  uint64_t file;
  uint64_t length;
  uint64_t window;
};

// Merges the extents (any order, duplicates allowed) into aligned runs,
// placed one after another from window offset `base`. Runs never extend
// past `file_size`.
std::vector<Run> PlanRuns(std::vector<Extent> extents, uint64_t file_size, uint64_t base) {
  std::sort(extents.begin(), extents.end(),
            [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
  std::vector<Run> runs;
  for (const Extent& e : extents) {
    const uint64_t start = AlignDown(e.offset);
    const uint64_t end = std::min(AlignUp(e.offset + e.length), file_size);
    if (!runs.empty() && start <= runs.back().file + runs.back().length + kMergeGap) {
      Run& r = runs.back();
      r.length = std::max(r.length, end - r.file);
    } else {
      runs.push_back({start, end - start, 0});
    }
  }
  uint64_t w = base;
  for (Run& r : runs) {
    r.window = w;
    w += AlignUp(r.length);
  }
  return runs;
}

uint64_t RunsEnd(const std::vector<Run>& runs, uint64_t base) {
  return runs.empty() ? base : runs.back().window + AlignUp(runs.back().length);
}

// Window offset of the value at file `offset`. REQUIRES: a run holds it.
uint64_t Locate(const std::vector<Run>& runs, uint64_t offset) {
  auto it = std::upper_bound(runs.begin(), runs.end(), offset,
                             [](uint64_t o, const Run& r) { return o < r.file; });
  --it;
  return it->window + (offset - it->file);
}

// ---------------------------------------------------------------------------
// lmm and above

class WindowReader final : public LmdbioReader {
 public:
  ~WindowReader() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    // The last reader's cursor for the step after the last one is still in
    // flight to reader 0; take it so no message outlives the reader.
    if (pipelined() && is_reader_ && reader_id_ == 0 && readers_total_ > 1 && steps_started_ > 0) {
      char sink[1 + 512];
      MPI_Recv(sink, sizeof sink, MPI_CHAR, readers_total_ - 1, kCursorTag, readers_,
               MPI_STATUS_IGNORE);
    }
    if (send_request_ != MPI_REQUEST_NULL) MPI_Wait(&send_request_, MPI_STATUS_IGNORE);
    window_.reset();
    topo_.reset();
    if (readers_ != MPI_COMM_NULL) MPI_Comm_free(&readers_);
    if (own_ != MPI_COMM_NULL) MPI_Comm_free(&own_);
  }

  // Takes ownership of `comm`.
  Status Init(MPI_Comm comm, const std::string& path, const LmdbioOptions& options) {
    own_ = comm;
    options_ = options;
    mode_ = options.mode;
    const double start = Now();
    DLFS_ASSIGN_OR_RETURN(NodeTopology topo, NodeTopology::Create(comm));
    topo_ = std::make_unique<NodeTopology>(std::move(topo));
    if (!topo_->contiguous()) {
      return Status::InvalidArgument(
          "LMDBIO needs each node's ranks to be consecutive world ranks (mpirun --map-by slot)");
    }
    batch_ = options.batch_size;
    count_ = batch_ / topo_->size();
    node_count_ = uint64_t{count_} * topo_->local_size();
    records_ = std::make_unique<std::span<const std::byte>[]>(count_);

    const uint32_t per_node =
        mode_ == LmdbioMode::kLmm ? 1 : std::max<uint32_t>(1, options.readers_per_node);
    readers_here_ = std::min<uint32_t>(per_node, topo_->local_size());
    is_reader_ = static_cast<uint32_t>(topo_->local_rank()) < readers_here_;
    MPI_Comm_split(comm, is_reader_ ? 0 : MPI_UNDEFINED, topo_->rank(), &readers_);
    if (is_reader_) {
      MPI_Comm_rank(readers_, &reader_id_);
      MPI_Comm_size(readers_, &readers_total_);
    }

    Status st;
    data_file_ = DataFile(path);
    if (prov()) {
      st = BroadcastRecordMap(comm, path);
    } else if (is_reader_) {
      auto cursor = MdbCursor::Open(path, /*walk_only=*/dio());
      if (cursor.ok()) {
        cursor_ = std::move(*cursor);
        entries_ = cursor_->entries();
        file_size_ = cursor_->map_size();
      } else {
        st = cursor.status();
      }
    }
    if (st.ok() && is_reader_ && dio()) {
      EngineOptions eo;
      eo.kind = options.engine;
      eo.direct_io = options.direct_io;
      eo.buffer_slots = 1;
      eo.queue_depth = 16;  // reads in flight per reader (threads, for pread)
      auto engine = CreateEngine({data_file_}, eo);
      if (engine.ok()) {
        engine_ = std::move(*engine);
        if (kAlign % engine_->alignment() != 0) {
          st = Status::NotSupported(data_file_ + ": O_DIRECT alignment " +
                                    std::to_string(engine_->alignment()) + " exceeds 4096");
        }
      } else {
        st = engine.status();
      }
    }
    DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm, st));
    if (!prov()) {
      // Readers know the record count; share it with the rest of the node.
      MPI_Bcast(&entries_, 1, MPI_UINT64_T, 0, topo_->node());
      MPI_Bcast(&file_size_, 1, MPI_UINT64_T, 0, topo_->node());
    }

    iters_per_step_ = 1;
    if (coal() && entries_ > 0) {
      const double mean = static_cast<double>(total_value_bytes_) / entries_;
      const double per_reader_iter = mean * node_count_ / readers_here_;
      const double want =
          static_cast<double>(options.coalesce_bytes) / std::max(per_reader_iter, 1.0);
      iters_per_step_ = static_cast<uint32_t>(std::clamp<double>(
          std::ceil(want), 1, std::max<uint32_t>(1, options.max_coalesce_iters)));
    }
    // Every rank must read at the same iterations (reads are collective):
    // nodes of different sizes would compute different factors.
    MPI_Allreduce(MPI_IN_PLACE, &iters_per_step_, 1, MPI_UINT32_T, MPI_MIN, comm);
    table_bytes_ = pipelined() || mode_ == LmdbioMode::kLmm
                       ? AlignUp(node_count_ * iters_per_step_ * sizeof(Extent))
                       : 0;
    window_ = std::make_unique<SharedWindow>();
    times_.setup = Now() - start;

    description_ = std::string(LmdbioModeName(mode_)) + ": " + std::to_string(readers_here_) +
                   " reader(s)/node, " + std::to_string(topo_->node_count()) + " node(s)";
    if (coal()) description_ += ", " + std::to_string(iters_per_step_) + " iterations per read";
    if (stag()) description_ += ", stagger group " + std::to_string(options.stagger_group);
    if (engine_) description_ += "; " + engine_->description();
    return Status::Ok();
  }

  Status Next() override {
    if (!broken_.ok()) return broken_;
    if (options_.planned_iterations > 0 && iteration_ >= options_.planned_iterations) {
      // Reads were planned (and cut short) for this many iterations.
      return Status::InvalidArgument("the reader was opened for " +
                                     std::to_string(options_.planned_iterations) +
                                     " iterations (LmdbioOptions::planned_iterations)");
    }
    const uint64_t i = iteration_;
    const uint32_t t = static_cast<uint32_t>(i % iters_per_step_);
    if (t == 0) {
      Status st = ReadStep(i / iters_per_step_);
      {
        Stopwatch w(times_.wait);
        st = AgreeOnStatus(topo_->world(), st);
      }
      if (!st.ok()) return broken_ = st;
      window_->Sync();
      ++steps_;
      ++counters_.read_steps;
    }
    // This rank's records of iteration i: node list entries
    // t*node_count_ + local_rank*count_ + j.
    const uint64_t first = t * node_count_ + uint64_t{count_} * topo_->local_rank();
    uint64_t bytes = 0;
    for (uint32_t j = 0; j < count_; ++j) {
      const Extent where = WindowExtent(first + j);
      records_[j] = std::span<const std::byte>(window_->base() + where.offset, where.length);
      bytes += where.length;
    }
    first_position_ = i * batch_ + uint64_t{count_} * topo_->rank();
    ++iteration_;
    counters_.records += count_;
    counters_.record_bytes += bytes;
    return Status::Ok();
  }

 private:
  bool pipelined() const { return mode_ == LmdbioMode::kLmmDm || mode_ == LmdbioMode::kLmmDio; }
  bool dio() const { return mode_ >= LmdbioMode::kLmmDio; }
  bool prov() const { return mode_ >= LmdbioMode::kLmmDioProv; }
  bool coal() const { return mode_ >= LmdbioMode::kLmmDioProvCoal; }
  bool stag() const { return mode_ == LmdbioMode::kLmmDioProvCoalStag; }

  // Rank 0 parses data.mdb; everyone gets the value offsets and lengths.
  Status BroadcastRecordMap(MPI_Comm comm, const std::string& path) {
    Status st;
    if (topo_->rank() == 0) {
      // Overflow page headers are checked by the readers, from the pages
      // they read anyway, rather than with one random read per value here.
      LmdbMapOptions mo;
      mo.check_overflow_headers = false;
      auto map = LmdbRecordMap::Build(path, mo);
      if (map.ok()) {
        entries_ = map->size();
        file_size_ = map->stats().file_size;
        page_size_ = map->stats().page_size;
        data_file_ = map->path();
        offsets_.resize(entries_);
        lengths_.resize(entries_);
        for (uint64_t k = 0; k < entries_; ++k) {
          offsets_[k] = map->value_offset(k);
          lengths_[k] = map->value_length(k);
        }
        if (entries_ == 0)
          st = Status::InvalidArgument(map->path() + ": the database has no records");
      } else {
        st = map.status();
      }
    }
    DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm, st));
    uint64_t header[3] = {entries_, file_size_, page_size_};
    MPI_Bcast(header, 3, MPI_UINT64_T, 0, comm);
    entries_ = header[0];
    file_size_ = header[1];
    page_size_ = static_cast<uint32_t>(header[2]);
    offsets_.resize(entries_);
    lengths_.resize(entries_);
    MPI_Bcast(offsets_.data(), static_cast<int>(entries_), MPI_UINT64_T, 0, comm);
    MPI_Bcast(lengths_.data(), static_cast<int>(entries_), MPI_UINT64_T, 0, comm);
    total_value_bytes_ = 0;
    for (uint64_t l : lengths_) total_value_bytes_ += l;
    return Status::Ok();
  }

  // Stream position of node list entry `n` in step `s`.
  uint64_t Position(uint64_t s, uint64_t n) const {
    const uint64_t t = n / node_count_, within = n % node_count_;
    return (s * iters_per_step_ + t) * batch_ + uint64_t{count_} * topo_->node_first_rank() +
           within;
  }

  // Where node list entry `n` sits in the window.
  Extent WindowExtent(uint64_t n) const {
    if (table_bytes_ > 0) {
      Extent e;
      std::memcpy(&e, window_->base() + n * sizeof(Extent), sizeof e);
      return e;
    }
    const uint64_t record = Position(step_, n) % entries_;
    return {Locate(runs_, offsets_[record]), lengths_[record]};
  }

  // Readers of this node split the node list of a step into contiguous parts.
  std::pair<uint64_t, uint64_t> ReaderPart(uint64_t total, uint32_t k) const {
    const uint64_t base = total / readers_here_, extra = total % readers_here_;
    const uint64_t begin = k * base + std::min<uint64_t>(k, extra);
    return {begin, begin + base + (k < extra ? 1 : 0)};
  }

  Status ReadStep(uint64_t s) {
    step_ = s;
    ++steps_started_;
    {
      // Nobody on the node may still be using the previous step's records.
      Stopwatch w(times_.wait);
      BarrierPolitely(topo_->node());
    }
    return prov() ? ReadStepWithMap(s) : ReadStepWithCursor(s);
  }

  // ---- lmm, lmm-dm, lmm-dio: readers walk a liblmdb cursor.

  Status ReadStepWithCursor(uint64_t s) {
    const uint32_t k = static_cast<uint32_t>(topo_->local_rank());
    const auto [begin, end] =
        is_reader_ ? ReaderPart(node_count_, k) : std::pair<uint64_t, uint64_t>{0, 0};
    Status st;
    std::vector<Extent> mine;  // file offsets of this reader's values
    if (is_reader_) st = Walk(s, end - begin, &mine);

    // Each reader's part of the window follows the previous readers' parts.
    uint64_t my_bytes = 0;
    std::vector<Run> runs;
    if (is_reader_ && st.ok()) {
      if (dio()) {
        runs = PlanRuns(mine, file_size_, 0);
        my_bytes = RunsEnd(runs, 0);
      } else {
        for (const Extent& e : mine) my_bytes += e.length;
        my_bytes = AlignUp(my_bytes);
      }
    }
    std::vector<uint64_t> sizes(topo_->local_size());
    {
      Stopwatch w(times_.wait);
      MPI_Request request;
      MPI_Iallgather(&my_bytes, 1, MPI_UINT64_T, sizes.data(), 1, MPI_UINT64_T, topo_->node(),
                     &request);
      WaitPolitely(&request);
    }
    uint64_t my_base = table_bytes_, total = table_bytes_;
    for (int r = 0; r < topo_->local_size(); ++r) {
      if (r < topo_->local_rank()) my_base += sizes[r];
      total += sizes[r];
    }
    DLFS_RETURN_IF_ERROR(window_->Reserve(topo_->node(), total));
    if (!is_reader_ || !st.ok()) return st;

    std::byte* base = window_->base();
    auto* table = reinterpret_cast<Extent*>(base);
    if (dio()) {
      for (Run& r : runs) r.window += my_base;
      st = ReadRuns(runs, base);
      for (size_t n = 0; n < mine.size(); ++n) {
        table[begin + n] = {Locate(runs, mine[n].offset), mine[n].length};
      }
    } else {
      Stopwatch w(times_.copy);
      uint64_t at = my_base;
      for (size_t n = 0; n < mine.size(); ++n) {
        std::memcpy(base + at, cursor_->map() + mine[n].offset, mine[n].length);
        table[begin + n] = {at, mine[n].length};
        at += mine[n].length;
        counters_.read_bytes += mine[n].length;
        ++counters_.read_calls;
      }
    }
    window_->Sync();
    return st;
  }

  // Moves the cursor over this reader's `n` records of step `s`, collecting
  // their file extents. lmm: the cursor then skips the rest of the batch.
  // lmm-dm/lmm-dio: the cursor arrives as a key from the previous reader and
  // leaves for the next one, so no reader walks past others' records.
  Status Walk(uint64_t s, uint64_t n, std::vector<Extent>* out) {
    Status st;
    if (mode_ == LmdbioMode::kLmm) {
      Stopwatch w(times_.skip);
      if (s == 0) st = SkipRecords(uint64_t{count_} * topo_->node_first_rank());
      if (st.ok()) st = Collect(n, out);
      if (st.ok()) st = SkipRecords(batch_ - node_count_);
      return st;
    }
    const bool handoff = readers_total_ > 1;
    if (handoff && !(s == 0 && reader_id_ == 0)) {
      char message[1 + 512];
      MPI_Status status;
      {
        Stopwatch w(times_.wait);
        MPI_Request request;
        MPI_Irecv(message, sizeof message, MPI_CHAR,
                  (reader_id_ + readers_total_ - 1) % readers_total_, kCursorTag, readers_,
                  &request);
        WaitPolitely(&request, &status);
      }
      int length = 0;
      MPI_Get_count(&status, MPI_CHAR, &length);
      if (length < 1 || message[0] != 0) {
        st = Status::Cancelled("an upstream LMDBIO reader failed");
      } else {
        Stopwatch w(times_.skip);
        st = cursor_->Seek(std::string_view(message + 1, length - 1));
      }
    }
    if (st.ok()) {
      Stopwatch w(times_.skip);
      st = Collect(n, out);
    }
    if (handoff) {
      // Pass the cursor on (or the news that it is lost).
      if (send_request_ != MPI_REQUEST_NULL) MPI_Wait(&send_request_, MPI_STATUS_IGNORE);
      send_buffer_.assign(1, st.ok() ? '\0' : '\1');
      if (st.ok()) send_buffer_ += cursor_->key();
      MPI_Isend(send_buffer_.data(), static_cast<int>(send_buffer_.size()), MPI_CHAR,
                (reader_id_ + 1) % readers_total_, kCursorTag, readers_, &send_request_);
    }
    if (st.ok() && options_.prefetch && mode_ == LmdbioMode::kLmmDm) Prefetch(*out);
    return st;
  }

  Status Collect(uint64_t n, std::vector<Extent>* out) {
    out->reserve(n);
    for (uint64_t k = 0; k < n; ++k) {
      const auto v = cursor_->value();
      out->push_back({static_cast<uint64_t>(v.data() - cursor_->map()), v.size()});
      DLFS_RETURN_IF_ERROR(cursor_->Step());
    }
    return Status::Ok();
  }

  Status SkipRecords(uint64_t n) {
    for (uint64_t k = 0; k < n; ++k) DLFS_RETURN_IF_ERROR(cursor_->Step());
    counters_.skipped += n;
    return Status::Ok();
  }

  // Speculative prefetch (lmm-dm): the next fetch is predicted to cover this
  // fetch's byte span shifted by the stride seen between the last two
  // fetches; the kernel is asked to read it ahead (MADV_WILLNEED) while this
  // reader copies.
  void Prefetch(const std::vector<Extent>& fetch) {
    if (fetch.empty()) return;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (const Extent& e : fetch) {
      lo = std::min(lo, e.offset);
      hi = std::max(hi, e.offset + e.length);
    }
    if (has_previous_fetch_ && lo > previous_lo_) {
      const uint64_t stride = lo - previous_lo_;
      const uint64_t from = AlignDown(lo + stride);
      const uint64_t to = std::min(AlignUp(hi + stride), cursor_->map_size());
      if (from < to) {
        ::madvise(const_cast<std::byte*>(cursor_->map()) + from, to - from, MADV_WILLNEED);
        counters_.prefetch_bytes += to - from;
      }
    }
    previous_lo_ = lo;
    has_previous_fetch_ = true;
  }

  // ---- lmm-dio-prov and above: everyone knows every value's extent.

  Status ReadStepWithMap(uint64_t s) {
    // Every rank plans the same runs, so no table is needed in the window.
    uint64_t iters = iters_per_step_;
    if (options_.planned_iterations > 0) {
      const uint64_t first = s * iters_per_step_;
      iters = first < options_.planned_iterations
                  ? std::min<uint64_t>(iters, options_.planned_iterations - first)
                  : iters;
    }
    const uint64_t n = node_count_ * iters;
    std::vector<Extent> extents(n);
    for (uint64_t k = 0; k < n; ++k) {
      const uint64_t record = Position(s, k) % entries_;
      extents[k] = {offsets_[record], lengths_[record]};
    }
    runs_ = PlanRuns(std::move(extents), file_size_, 0);
    const uint64_t total = RunsEnd(runs_, 0);
    DLFS_RETURN_IF_ERROR(window_->Reserve(topo_->node(), total));
    if (!is_reader_) return Status::Ok();

    // Cut the runs into reads of at most the coalescing size (and no more
    // than an even share per reader), then give each reader a contiguous
    // share of the bytes.
    const uint64_t share = AlignUp((total + readers_here_ - 1) / readers_here_);
    const uint64_t cap = std::max(kAlign, std::min(AlignUp(options_.coalesce_bytes), share));
    std::vector<Run> pieces;
    for (const Run& r : runs_) {
      for (uint64_t at = 0; at < r.length; at += cap) {
        pieces.push_back({r.file + at, std::min(cap, r.length - at), r.window + at});
      }
    }
    const uint32_t k = static_cast<uint32_t>(topo_->local_rank());
    std::vector<Run> mine;
    for (const Run& p : pieces) {
      if (p.window * readers_here_ / std::max<uint64_t>(total, 1) == k) mine.push_back(p);
    }
    Status st;
    if (stag()) st = StaggerWait();
    if (st.ok()) st = ReadRuns(mine, window_->base());
    if (stag()) StaggerPass();
    if (st.ok()) st = CheckOverflowHeaders(s, iters, mine);
    window_->Sync();
    return st;
  }

  // Checks the overflow page header in front of every value of step `s`
  // whose header this reader read (in `mine`), so a map that points at the
  // wrong page is caught before anyone uses the bytes.
  Status CheckOverflowHeaders(uint64_t s, uint64_t iters, const std::vector<Run>& mine) {
    if (mine.empty()) return Status::Ok();
    const std::byte* base = window_->base();
    for (uint64_t n = 0; n < node_count_ * iters; ++n) {
      const uint64_t record = Position(s, n) % entries_;
      const uint64_t value = offsets_[record];
      if (value % page_size_ != LmdbRecordMap::kOverflowHeader) continue;
      const uint64_t header = value - LmdbRecordMap::kOverflowHeader;
      auto it = std::upper_bound(mine.begin(), mine.end(), header,
                                 [](uint64_t o, const Run& r) { return o < r.file; });
      if (it == mine.begin() || header >= std::prev(it)->file + std::prev(it)->length) continue;
      const Run& r = *std::prev(it);
      DLFS_RETURN_IF_ERROR(CheckLmdbOverflowHeader(
          {base + r.window + (header - r.file), LmdbRecordMap::kOverflowHeader}, value,
          lengths_[record], page_size_, data_file_));
    }
    return Status::Ok();
  }

  // Staggering: reader g reads after reader g - group has finished.
  Status StaggerWait() {
    const int group = static_cast<int>(std::max<uint32_t>(1, options_.stagger_group));
    if (reader_id_ < group) return Status::Ok();
    Stopwatch w(times_.wait);
    char token = 0;
    MPI_Request request;
    MPI_Irecv(&token, 1, MPI_CHAR, reader_id_ - group, kStaggerTag, readers_, &request);
    WaitPolitely(&request);
    return Status::Ok();
  }
  void StaggerPass() {
    const int group = static_cast<int>(std::max<uint32_t>(1, options_.stagger_group));
    if (reader_id_ + group >= readers_total_) return;
    char token = 0;
    MPI_Send(&token, 1, MPI_CHAR, reader_id_ + group, kStaggerTag, readers_);
  }

  // Reads `runs` into the window with the engine.
  Status ReadRuns(const std::vector<Run>& runs, std::byte* base) {
    if (runs.empty()) return Status::Ok();
    Stopwatch w(times_.io);
    if (registered_generation_ != window_->generation()) {
      registered_ = engine_->RegisterBuffer(0, {window_->base(), window_->capacity()});
      registered_generation_ = window_->generation();
    }
    std::vector<ReadRequest> requests;
    requests.reserve(runs.size());
    for (const Run& r : runs) {
      ReadRequest q;
      q.offset = r.file;
      q.length = r.length;
      q.buffer = base + r.window;
      q.buffer_slot = registered_ ? 0 : ReadRequest::kNoSlot;
      requests.push_back(q);
      counters_.read_bytes += r.length;
      ++counters_.read_calls;
    }
    // With O_DIRECT a run that ends at an unaligned end of file cannot be
    // read whole; LMDB files are whole pages, so this only trips on a
    // damaged file, and the engine then reports the short read.
    std::vector<Status> results(requests.size());
    DLFS_RETURN_IF_ERROR(engine_->Read(requests, results));
    for (const Status& r : results) DLFS_RETURN_IF_ERROR(r);
    return Status::Ok();
  }

  MPI_Comm own_ = MPI_COMM_NULL;
  LmdbioOptions options_;
  LmdbioMode mode_ = LmdbioMode::kLmm;
  std::unique_ptr<NodeTopology> topo_;
  uint32_t batch_ = 0;
  uint64_t node_count_ = 0;  // records of one iteration consumed by this node
  uint32_t iters_per_step_ = 1;
  uint32_t readers_here_ = 1;
  bool is_reader_ = false;
  MPI_Comm readers_ = MPI_COMM_NULL;  // all readers of the job, in stream order
  int reader_id_ = 0, readers_total_ = 0;
  std::string data_file_;
  uint64_t file_size_ = 0;

  std::unique_ptr<MdbCursor> cursor_;  // cursor modes, readers only
  std::unique_ptr<IoEngine> engine_;   // dio modes, readers only
  bool registered_ = false;
  uint64_t registered_generation_ = 0;

  std::vector<uint64_t> offsets_, lengths_;  // prov modes: the record map
  uint64_t total_value_bytes_ = 0;
  uint32_t page_size_ = 4096;
  std::vector<Run> runs_;  // prov modes: the current step's runs

  std::unique_ptr<SharedWindow> window_;
  uint64_t table_bytes_ = 0;  // cursor modes: node list -> window extent table
  uint64_t step_ = 0;
  uint64_t steps_ = 0;          // read steps completed
  uint64_t steps_started_ = 0;  // read steps begun (each passes a cursor on)

  MPI_Request send_request_ = MPI_REQUEST_NULL;
  std::string send_buffer_;
  bool has_previous_fetch_ = false;
  uint64_t previous_lo_ = 0;
  Status broken_;
};

}  // namespace

std::string_view LmdbioModeName(LmdbioMode mode) { return NameOf(kLmdbioModeNames, mode); }

Result<LmdbioMode> ParseLmdbioMode(std::string_view name) {
  return ParseEnum(kLmdbioModeNames, name, "LMDBIO mode");
}

Result<std::unique_ptr<LmdbioReader>> LmdbioReader::Open(MPI_Comm comm, const std::string& path,
                                                         const LmdbioOptions& options) {
  int ranks = 1;
  MPI_Comm_size(comm, &ranks);
  if (options.batch_size == 0 || options.batch_size % ranks != 0) {
    return Status::InvalidArgument("batch size " + std::to_string(options.batch_size) +
                                   " is not a positive multiple of the " + std::to_string(ranks) +
                                   " ranks");
  }
  if (options.coalesce_bytes == 0 || options.stagger_group == 0) {
    return Status::InvalidArgument("coalesce size and stagger group must be positive");
  }
  // A private communicator: the reader's messages never meet the caller's.
  MPI_Comm own = MPI_COMM_NULL;
  MPI_Comm_dup(comm, &own);
  if (options.mode == LmdbioMode::kBaseline) {
    auto reader = std::make_unique<BaselineReader>();
    DLFS_RETURN_IF_ERROR(reader->Init(own, path, options));
    return std::unique_ptr<LmdbioReader>(std::move(reader));
  }
  auto reader = std::make_unique<WindowReader>();
  DLFS_RETURN_IF_ERROR(reader->Init(own, path, options));
  return std::unique_ptr<LmdbioReader>(std::move(reader));
}

}  // namespace dlfs
