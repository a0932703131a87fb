// lmm-dio and up: rank 0 finds the record map (every value's byte range)
// once, at open, and broadcasts it, so every rank knows where every value
// is. Each step, every rank plans the same runs; the node's readers read
// them into the window with explicit reads, and a record's place in the
// window follows from the plan (no table).
//   record_map_from_cursor  (lmm-dio) rank 0 walks a liblmdb cursor over
//                           the records the run will read, as LMDBIO's DIO
//                           does: one fault per tree page, one at a time.
//   record_map_from_parser  (prov) rank 0 parses the tree's pages with
//                           parallel preads, no liblmdb, no mmap.
//   coalesce_iterations     one step covers several iterations, with reads
//                           of about coalesce_bytes per reader.
//   staggered_turns         readers read in turns of stagger_group.
#include <algorithm>
#include <cmath>

#include "dlfs/lmdb.h"
#include "lmdbio/mdb_cursor.h"
#include "lmdbio/readers.h"
#include "lmdbio/stopwatch.h"
#include "lmdbio/window_reader.h"

namespace dlfs::lmdbio {

namespace {

constexpr int kStaggerTag = 7302;
// The largest explicit read. A reader's share of a step is cut into reads of
// at most this size, which the engine keeps in flight together (16 per
// reader). 1 MiB is the largest request a FUSE file system takes by default
// (max_pages 256) and Lustre's RPC size: a larger read would be split into
// requests served one after the other, each paying the latency again.
constexpr uint64_t kMaxReadBytes = uint64_t{1} << 20;

uint64_t RunsBytes(const std::vector<Run>& runs) {
  uint64_t n = 0;
  for (const Run& r : runs) n += r.length;
  return n;
}

class MapWindowReader final : public WindowReader {
 public:
  MapWindowReader(MPI_Comm comm, NodeTopology topo, const LmdbioOptions& options,
                  const LmdbioFeatures& features)
      : WindowReader(comm, std::move(topo), options, features) {}

  Status Init(const std::string& path) {
    DLFS_RETURN_IF_ERROR(SetUpReaders());
    data_file_ = LmdbDataFile(path);
    DLFS_RETURN_IF_ERROR(BroadcastRecordMap(path));
    DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm_, OpenEngine()));
    iters_per_step_ = 1;
    if (features_.coalesce_iterations && !lengths_.empty()) {
      const double mean = static_cast<double>(total_value_bytes_) / lengths_.size();
      const double per_reader_iter = mean * node_count_ / readers_here_;
      const double want =
          static_cast<double>(options_.coalesce_bytes) / std::max(per_reader_iter, 1.0);
      iters_per_step_ = static_cast<uint32_t>(std::clamp<double>(
          std::ceil(want), 1, std::max<uint32_t>(1, options_.max_coalesce_iters)));
    }
    // Every rank must read at the same iterations (reads are collective):
    // nodes of different sizes would compute different factors.
    MPI_Allreduce(MPI_IN_PLACE, &iters_per_step_, 1, MPI_UINT32_T, MPI_MIN, comm_);
    return AgreeOnStatus(comm_, FinishInit(RunsEnd(PlanStep(0), 0)));
  }

 private:
  // Rank 0 finds the record map; everyone gets the value offsets and
  // lengths (of every record, or of the first ones the run will read).
  Status BroadcastRecordMap(const std::string& path) {
    Status st;
    if (topo_->rank() == 0) {
      st = features_.record_map_from_parser ? ParseRecordMap(path) : WalkRecordMap(path);
      if (st.ok() && entries_ == 0) {
        st = Status::InvalidArgument(LmdbDataFile(path) + ": the database has no records");
      }
    }
    DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm_, st));
    uint64_t header[4] = {entries_, offsets_.size(), file_size_, page_size_};
    MPI_Bcast(header, 4, MPI_UINT64_T, 0, comm_);
    entries_ = header[0];
    file_size_ = header[2];
    page_size_ = static_cast<uint32_t>(header[3]);
    offsets_.resize(header[1]);
    lengths_.resize(header[1]);
    MPI_Bcast(offsets_.data(), static_cast<int>(offsets_.size()), MPI_UINT64_T, 0, comm_);
    MPI_Bcast(lengths_.data(), static_cast<int>(lengths_.size()), MPI_UINT64_T, 0, comm_);
    total_value_bytes_ = 0;
    for (uint64_t l : lengths_) total_value_bytes_ += l;
    return Status::Ok();
  }

  // prov: the parser reads the branch and leaf pages. Overflow page headers
  // are checked by the readers, from the pages they read anyway, rather
  // than with one random read per value here.
  Status ParseRecordMap(const std::string& path) {
    LmdbMapOptions mo;
    mo.check_overflow_headers = false;
    DLFS_ASSIGN_OR_RETURN(LmdbRecordMap map, LmdbRecordMap::Build(path, mo));
    entries_ = map.size();
    file_size_ = map.stats().file_size;
    page_size_ = map.stats().page_size;
    offsets_.resize(entries_);
    lengths_.resize(entries_);
    for (uint64_t k = 0; k < entries_; ++k) {
      offsets_[k] = map.value_offset(k);
      lengths_[k] = map.value_length(k);
    }
    return Status::Ok();
  }

  // lmm-dio: a liblmdb cursor walks the records the run will read (all of
  // them when the number of iterations is not known), and each value's
  // place in the map is its byte range in the file.
  Status WalkRecordMap(const std::string& path) {
    DLFS_ASSIGN_OR_RETURN(std::unique_ptr<MdbCursor> cursor,
                          MdbCursor::Open(path, /*no_readahead=*/true));
    entries_ = cursor->entries();
    file_size_ = cursor->map_size();
    page_size_ = cursor->page_size();
    uint64_t need = entries_;
    if (options_.planned_iterations > 0 &&
        options_.planned_iterations < (entries_ + batch_ - 1) / batch_) {
      need = options_.planned_iterations * batch_;
    }
    offsets_.resize(need);
    lengths_.resize(need);
    for (uint64_t k = 0; k < need; ++k) {
      if (k > 0) DLFS_RETURN_IF_ERROR(cursor->Step());
      const auto v = cursor->value();
      offsets_[k] = static_cast<uint64_t>(v.data() - cursor->map());
      lengths_[k] = v.size();
    }
    return Status::Ok();
  }

  Extent WindowExtent(uint64_t n) const override {
    const uint64_t record = Position(step_, n) % entries_;
    return {Locate(runs_, offsets_[record]), lengths_[record]};
  }

  // Iterations step `s` serves: iters_per_step_, or fewer for the last step
  // before planned_iterations.
  uint64_t IterationsOfStep(uint64_t s) const {
    const uint64_t first = s * iters_per_step_;
    if (options_.planned_iterations == 0 || first >= options_.planned_iterations) {
      return iters_per_step_;
    }
    return std::min<uint64_t>(iters_per_step_, options_.planned_iterations - first);
  }

  // The runs of step `s`, placed in the window from offset 0. Every rank
  // plans the same runs, so no table is needed in the window.
  std::vector<Run> PlanStep(uint64_t s) const {
    const uint64_t n = node_count_ * IterationsOfStep(s);
    std::vector<Extent> extents(n);
    for (uint64_t k = 0; k < n; ++k) {
      const uint64_t record = Position(s, k) % entries_;
      extents[k] = {offsets_[record], lengths_[record]};
    }
    return PlanRuns(std::move(extents), file_size_, 0);
  }

  Status FillStep(uint64_t s) override {
    const uint64_t iters = IterationsOfStep(s);
    runs_ = PlanStep(s);
    const uint64_t total = RunsEnd(runs_, 0);
    DLFS_RETURN_IF_ERROR(window_->Reserve(topo_->node(), total));
    if (!is_reader_) return Status::Ok();

    const std::vector<Run> mine = ReaderShare(
        runs_, total, readers_here_, static_cast<uint32_t>(topo_->local_rank()), kMaxReadBytes);
    Status st;
    if (features_.staggered_turns) {
      // Pipelined turns: a group passes the turn once the first half of its
      // bytes has arrived, so the next group's request latency overlaps
      // this group's second half on the link. At most two groups read at
      // once, and the link does not idle between turns.
      size_t half = 0;
      for (uint64_t bytes = 0, all = RunsBytes(mine); half < mine.size() && 2 * bytes < all;) {
        bytes += mine[half++].length;
      }
      st = StaggerWait();
      if (st.ok()) st = ReadRuns({mine.begin(), mine.begin() + half}, window_->base());
      StaggerPass();
      if (st.ok()) st = ReadRuns({mine.begin() + half, mine.end()}, window_->base());
    } else {
      st = ReadRuns(mine, window_->base());
    }
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
      const Run* r = FindRun(mine, header);
      if (r == nullptr) continue;
      DLFS_RETURN_IF_ERROR(CheckLmdbOverflowHeader(
          {base + r->window + (header - r->file), LmdbRecordMap::kOverflowHeader}, value,
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

  // The record map: records [0, offsets_.size()) of the entries_; a run
  // with planned iterations never reads past those.
  std::vector<uint64_t> offsets_, lengths_;
  uint64_t total_value_bytes_ = 0;
  uint32_t page_size_ = 4096;
  std::vector<Run> runs_;  // the current step's runs
};

}  // namespace

Result<std::unique_ptr<LmdbioReader>> OpenMapWindowReader(MPI_Comm comm, NodeTopology topo,
                                                          const std::string& path,
                                                          const LmdbioOptions& options,
                                                          const LmdbioFeatures& features) {
  auto reader = std::make_unique<MapWindowReader>(comm, std::move(topo), options, features);
  DLFS_RETURN_IF_ERROR(reader->Init(path));
  return std::unique_ptr<LmdbioReader>(std::move(reader));
}

}  // namespace dlfs::lmdbio
