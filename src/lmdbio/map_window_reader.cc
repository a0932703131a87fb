// lmm-dio-prov and up: rank 0 parses the record map (every value's byte
// range) from data.mdb and broadcasts it, so every rank knows where every
// value is. Each step, every rank plans the same runs; the node's readers
// read them into the window with explicit reads, and a record's place in
// the window follows from the plan (no table).
//   coalesce_iterations  one step covers several iterations, with reads of
//                        about coalesce_bytes per reader.
//   staggered_turns      readers read in turns of stagger_group.
#include <algorithm>
#include <cmath>

#include "dlfs/lmdb.h"
#include "lmdbio/readers.h"
#include "lmdbio/stopwatch.h"
#include "lmdbio/window_reader.h"

namespace dlfs::lmdbio {

namespace {

constexpr int kStaggerTag = 7302;

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
    if (features_.coalesce_iterations && entries_ > 0) {
      const double mean = static_cast<double>(total_value_bytes_) / entries_;
      const double per_reader_iter = mean * node_count_ / readers_here_;
      const double want =
          static_cast<double>(options_.coalesce_bytes) / std::max(per_reader_iter, 1.0);
      iters_per_step_ = static_cast<uint32_t>(std::clamp<double>(
          std::ceil(want), 1, std::max<uint32_t>(1, options_.max_coalesce_iters)));
    }
    // Every rank must read at the same iterations (reads are collective):
    // nodes of different sizes would compute different factors.
    MPI_Allreduce(MPI_IN_PLACE, &iters_per_step_, 1, MPI_UINT32_T, MPI_MIN, comm_);
    FinishInit();
    return Status::Ok();
  }

 private:
  // Rank 0 parses data.mdb; everyone gets the value offsets and lengths.
  Status BroadcastRecordMap(const std::string& path) {
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
    DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm_, st));
    uint64_t header[3] = {entries_, file_size_, page_size_};
    MPI_Bcast(header, 3, MPI_UINT64_T, 0, comm_);
    entries_ = header[0];
    file_size_ = header[1];
    page_size_ = static_cast<uint32_t>(header[2]);
    offsets_.resize(entries_);
    lengths_.resize(entries_);
    MPI_Bcast(offsets_.data(), static_cast<int>(entries_), MPI_UINT64_T, 0, comm_);
    MPI_Bcast(lengths_.data(), static_cast<int>(entries_), MPI_UINT64_T, 0, comm_);
    total_value_bytes_ = 0;
    for (uint64_t l : lengths_) total_value_bytes_ += l;
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

  Status FillStep(uint64_t s) override {
    // Every rank plans the same runs, so no table is needed in the window.
    const uint64_t iters = IterationsOfStep(s);
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

    const std::vector<Run> mine =
        ReaderShare(runs_, total, readers_here_, static_cast<uint32_t>(topo_->local_rank()),
                    options_.coalesce_bytes);
    Status st;
    if (features_.staggered_turns) st = StaggerWait();
    if (st.ok()) st = ReadRuns(mine, window_->base());
    if (features_.staggered_turns) StaggerPass();
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

  std::vector<uint64_t> offsets_, lengths_;  // the record map
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
