// lmm, lmm-dm, lmm-dio: the node's readers walk a liblmdb cursor to find
// their records and put them into the window, behind a table of where each
// node list entry landed.
//   lmm      one reader per node; its cursor steps over the other nodes'
//            records; values are copied from the mmap.
//   lmm-dm   readers pass the cursor (the key of the next record) along, so
//            no reader walks past records it does not read; each prefetches
//            its predicted next fetch.
//   lmm-dio  as lmm-dm, but values reach the window with explicit reads.
#include <sys/mman.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "common/clock.h"
#include "dlfs/lmdb.h"
#include "lmdbio/mdb_cursor.h"
#include "lmdbio/readers.h"
#include "lmdbio/stopwatch.h"
#include "lmdbio/window_reader.h"

namespace dlfs::lmdbio {

namespace {

constexpr int kCursorTag = 7301;
// A handed-off cursor: a status byte and the key (liblmdb keys are at most
// 511 bytes by default).
constexpr int kCursorMessage = 1 + 512;

class CursorWindowReader final : public WindowReader {
 public:
  CursorWindowReader(MPI_Comm comm, NodeTopology topo, const LmdbioOptions& options,
                     const LmdbioFeatures& features)
      : WindowReader(comm, std::move(topo), options, features) {}

  ~CursorWindowReader() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    // The last reader's cursor for the step after the last one is still in
    // flight to reader 0; take it so no message outlives the reader.
    if (features_.cursor_handoff && is_reader_ && reader_id_ == 0 && readers_total_ > 1 &&
        steps_started_ > 0) {
      char sink[kCursorMessage];
      MPI_Recv(sink, sizeof sink, MPI_CHAR, readers_total_ - 1, kCursorTag, readers_,
               MPI_STATUS_IGNORE);
    }
    if (send_request_ != MPI_REQUEST_NULL) MPI_Wait(&send_request_, MPI_STATUS_IGNORE);
  }

  Status Init(const std::string& path) {
    DLFS_RETURN_IF_ERROR(SetUpReaders());
    Status st;
    data_file_ = LmdbDataFile(path);
    if (is_reader_) {
      auto cursor = MdbCursor::Open(path, /*walk_only=*/features_.explicit_reads);
      if (cursor.ok()) {
        cursor_ = std::move(*cursor);
        entries_ = cursor_->entries();
        file_size_ = cursor_->map_size();
      } else {
        st = cursor.status();
      }
    }
    if (st.ok()) st = OpenEngine();
    DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm_, st));
    // Readers know the record count; share it with the rest of the node.
    MPI_Bcast(&entries_, 1, MPI_UINT64_T, 0, topo_->node());
    MPI_Bcast(&file_size_, 1, MPI_UINT64_T, 0, topo_->node());
    // One step is one iteration; the window starts with the node list's
    // extent table.
    iters_per_step_ = 1;
    table_bytes_ = AlignUp(node_count_ * sizeof(Extent));
    FinishInit();
    return Status::Ok();
  }

 private:
  Extent WindowExtent(uint64_t n) const override {
    Extent e;
    std::memcpy(&e, window_->base() + n * sizeof(Extent), sizeof e);
    return e;
  }

  Status FillStep(uint64_t s) override {
    const uint32_t k = static_cast<uint32_t>(topo_->local_rank());
    const auto [begin, end] = is_reader_ ? ReaderPart(node_count_, readers_here_, k)
                                         : std::pair<uint64_t, uint64_t>{0, 0};
    Status st;
    std::vector<Extent> mine;  // file offsets of this reader's values
    if (is_reader_) st = Walk(s, end - begin, &mine);

    // Each reader's part of the window follows the previous readers' parts.
    uint64_t my_bytes = 0;
    std::vector<Run> runs;
    if (is_reader_ && st.ok()) {
      if (features_.explicit_reads) {
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
    if (features_.explicit_reads) {
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
  // their file extents. With one_reader_skips_others the cursor then skips
  // the rest of the batch; with cursor_handoff it arrives as a key from the
  // previous reader and leaves for the next one.
  Status Walk(uint64_t s, uint64_t n, std::vector<Extent>* out) {
    Status st;
    if (features_.one_reader_skips_others) {
      Stopwatch w(times_.skip);
      if (s == 0) st = SkipRecords(uint64_t{count_} * topo_->node_first_rank());
      if (st.ok()) st = Collect(n, out);
      if (st.ok()) st = SkipRecords(batch_ - node_count_);
      return st;
    }
    const bool handoff = features_.cursor_handoff && readers_total_ > 1;
    if (handoff && !(s == 0 && reader_id_ == 0)) st = ReceiveCursor();
    if (st.ok()) {
      Stopwatch w(times_.skip);
      st = Collect(n, out);
    }
    if (handoff) PassCursor(st);
    if (st.ok() && features_.speculative_prefetch) Prefetch(*out);
    return st;
  }

  // Waits for the previous reader's cursor and moves ours to it.
  Status ReceiveCursor() {
    char message[kCursorMessage];
    MPI_Status status;
    {
      Stopwatch w(times_.wait);
      MPI_Request request;
      MPI_Irecv(message, sizeof message, MPI_CHAR,
                (reader_id_ + readers_total_ - 1) % readers_total_, kCursorTag, readers_, &request);
      WaitPolitely(&request, &status);
    }
    int length = 0;
    MPI_Get_count(&status, MPI_CHAR, &length);
    if (length < 1 || message[0] != 0) {
      return Status::Cancelled("an upstream LMDBIO reader failed");
    }
    Stopwatch w(times_.skip);
    return cursor_->Seek(std::string_view(message + 1, length - 1));
  }

  // Passes the cursor on to the next reader, or the news that it is lost.
  void PassCursor(const Status& st) {
    if (send_request_ != MPI_REQUEST_NULL) MPI_Wait(&send_request_, MPI_STATUS_IGNORE);
    send_buffer_.assign(1, st.ok() ? '\0' : '\1');
    if (st.ok()) send_buffer_ += cursor_->key();
    MPI_Isend(send_buffer_.data(), static_cast<int>(send_buffer_.size()), MPI_CHAR,
              (reader_id_ + 1) % readers_total_, kCursorTag, readers_, &send_request_);
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

  // Speculative prefetch: the next fetch is predicted to cover this fetch's
  // byte span shifted by the stride seen between the last two fetches; the
  // kernel is asked to read it ahead (MADV_WILLNEED) while this reader
  // copies.
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

  std::unique_ptr<MdbCursor> cursor_;  // readers only
  uint64_t table_bytes_ = 0;           // node list -> window extent table
  MPI_Request send_request_ = MPI_REQUEST_NULL;
  std::string send_buffer_;
  bool has_previous_fetch_ = false;
  uint64_t previous_lo_ = 0;
};

}  // namespace

Result<std::unique_ptr<LmdbioReader>> OpenCursorWindowReader(MPI_Comm comm, NodeTopology topo,
                                                             const std::string& path,
                                                             const LmdbioOptions& options,
                                                             const LmdbioFeatures& features) {
  auto reader = std::make_unique<CursorWindowReader>(comm, std::move(topo), options, features);
  DLFS_RETURN_IF_ERROR(reader->Init(path));
  return std::unique_ptr<LmdbioReader>(std::move(reader));
}

}  // namespace dlfs::lmdbio
