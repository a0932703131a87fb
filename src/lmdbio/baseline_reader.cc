// baseline: every rank opens the database with liblmdb (mmap) and walks the
// cursor, skipping the other ranks' records, as Caffe's DataReader does.
#include <vector>

#include "common/clock.h"
#include "lmdbio/mdb_cursor.h"
#include "lmdbio/readers.h"
#include "lmdbio/stopwatch.h"

namespace dlfs::lmdbio {

namespace {

class BaselineReader final : public LmdbioReader {
 public:
  explicit BaselineReader(MPI_Comm comm) : comm_(comm) {}
  ~BaselineReader() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  Status Init(const std::string& path, const LmdbioOptions& options) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &ranks_);
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

}  // namespace

Result<std::unique_ptr<LmdbioReader>> OpenBaselineReader(MPI_Comm comm, const std::string& path,
                                                         const LmdbioOptions& options) {
  auto reader = std::make_unique<BaselineReader>(comm);
  DLFS_RETURN_IF_ERROR(reader->Init(path, options));
  return std::unique_ptr<LmdbioReader>(std::move(reader));
}

}  // namespace dlfs::lmdbio
