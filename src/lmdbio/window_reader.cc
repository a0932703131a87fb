#include "lmdbio/window_reader.h"

#include <algorithm>

#include "lmdbio/stopwatch.h"

namespace dlfs::lmdbio {

WindowReader::WindowReader(MPI_Comm comm, NodeTopology topo, const LmdbioOptions& options,
                           const LmdbioFeatures& features)
    : comm_(comm),
      options_(options),
      features_(features),
      topo_(std::make_unique<NodeTopology>(std::move(topo))) {}

WindowReader::~WindowReader() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  window_.reset();
  topo_.reset();
  if (readers_ != MPI_COMM_NULL) MPI_Comm_free(&readers_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

Status WindowReader::SetUpReaders() {
  if (!topo_->contiguous()) {
    return Status::InvalidArgument(
        "LMDBIO needs each node's ranks to be consecutive world ranks (mpirun --map-by slot)");
  }
  batch_ = options_.batch_size;
  count_ = batch_ / topo_->size();
  node_count_ = uint64_t{count_} * topo_->local_size();
  records_ = std::make_unique<std::span<const std::byte>[]>(count_);

  const uint32_t per_node =
      features_.one_reader_skips_others ? 1 : std::max<uint32_t>(1, options_.readers_per_node);
  readers_here_ = std::min<uint32_t>(per_node, topo_->local_size());
  is_reader_ = static_cast<uint32_t>(topo_->local_rank()) < readers_here_;
  MPI_Comm_split(comm_, is_reader_ ? 0 : MPI_UNDEFINED, topo_->rank(), &readers_);
  if (is_reader_) {
    MPI_Comm_rank(readers_, &reader_id_);
    MPI_Comm_size(readers_, &readers_total_);
  }
  return Status::Ok();
}

Status WindowReader::OpenEngine() {
  if (!is_reader_ || !features_.explicit_reads) return Status::Ok();
  EngineOptions eo;
  eo.kind = options_.engine;
  eo.direct_io = options_.direct_io;
  eo.buffer_slots = 1;
  eo.queue_depth = 16;  // reads in flight per reader (threads, for pread)
  DLFS_ASSIGN_OR_RETURN(engine_, CreateEngine({data_file_}, eo));
  driver_ = std::make_unique<io_internal::ReadDriver>(*engine_);
  if (kAlign % engine_->alignment() != 0) {
    return Status::NotSupported(data_file_ + ": O_DIRECT alignment " +
                                std::to_string(engine_->alignment()) + " exceeds 4096");
  }
  return Status::Ok();
}

Status WindowReader::FinishInit(uint64_t step_bytes) {
  window_ = std::make_unique<SharedWindow>();
  description_ = std::string(LmdbioModeName(options_.mode)) + ": " + std::to_string(readers_here_) +
                 " reader(s)/node, " + std::to_string(topo_->node_count()) + " node(s)";
  if (features_.coalesce_iterations) {
    description_ += ", " + std::to_string(iters_per_step_) + " iterations per read";
  }
  if (features_.staggered_turns) {
    description_ += ", stagger group " + std::to_string(options_.stagger_group);
  }
  if (engine_) description_ += "; " + engine_->description();
  return window_->Reserve(topo_->node(), step_bytes);
}

Status WindowReader::Next() {
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

Status WindowReader::ReadStep(uint64_t s) {
  step_ = s;
  ++steps_started_;
  {
    // Nobody on the node may still be using the previous step's records.
    Stopwatch w(times_.wait);
    BarrierPolitely(topo_->node());
  }
  return FillStep(s);
}

uint64_t WindowReader::Position(uint64_t s, uint64_t n) const {
  const uint64_t t = n / node_count_, within = n % node_count_;
  return (s * iters_per_step_ + t) * batch_ + uint64_t{count_} * topo_->node_first_rank() + within;
}

Status WindowReader::ReadRuns(const std::vector<Run>& runs, std::byte* base) {
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
  std::vector<Status> results;
  DLFS_RETURN_IF_ERROR(driver_->Read(std::move(requests), &results));
  for (const Status& r : results) DLFS_RETURN_IF_ERROR(r);
  return Status::Ok();
}

}  // namespace dlfs::lmdbio
