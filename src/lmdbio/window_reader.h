// What the windowed LMDBIO modes (lmm and up) share: the node's readers, the
// node's shared window, the engine for explicit reads, and Next().
//
// Vocabulary:
//   stream position  index into the endless record stream; record = pos % N.
//   node list        the records of one read step that this node's ranks
//                    consume, in Caffe order: for each iteration of the step,
//                    for each local rank, its b records. Because a node's
//                    ranks are consecutive world ranks, one iteration's part
//                    of the node list is one contiguous range of positions.
//   step             the iterations served by one read: 1, or several with
//                    coalesce_iterations.
//   run              see run_plan.h.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "dlfs/io_engine.h"
#include "dlfs/lmdbio.h"
#include "dlfs/mpi.h"
#include "io/read_driver.h"
#include "lmdbio/lmdbio_features.h"
#include "lmdbio/run_plan.h"
#include "lmdbio/shared_window.h"

namespace dlfs::lmdbio {

class WindowReader : public LmdbioReader {
 public:
  ~WindowReader() override;

  // Collective: reads a step when the previous one is used up, then points
  // this rank's records into the window.
  Status Next() final;

 protected:
  // Takes ownership of `comm`; `topo` is over `comm`.
  WindowReader(MPI_Comm comm, NodeTopology topo, const LmdbioOptions& options,
               const LmdbioFeatures& features);

  // Init, first part (collective): the per-rank counts and which ranks are
  // readers. InvalidArgument, on every rank, unless each node's ranks are
  // consecutive world ranks.
  Status SetUpReaders();
  // Init, on readers with explicit reads: the engine over data_file_. Local.
  Status OpenEngine();
  // Init, last part (collective over the node): the window, sized for a
  // step of `step_bytes` (it grows later if a step needs more), and the
  // description. Allocating and mapping the window at open keeps that
  // one-time cost out of the first iteration.
  Status FinishInit(uint64_t step_bytes);

  // Fills the window with the node list of step `s`; every rank of the node
  // calls it, after the node's previous step is no longer in use.
  virtual Status FillStep(uint64_t s) = 0;
  // Where node list entry `n` of the current step sits in the window.
  virtual Extent WindowExtent(uint64_t n) const = 0;

  // Stream position of node list entry `n` in step `s`.
  uint64_t Position(uint64_t s, uint64_t n) const;
  // Reads `runs` from data_file_ into the window at `base` with the engine.
  Status ReadRuns(const std::vector<Run>& runs, std::byte* base);

  MPI_Comm comm_ = MPI_COMM_NULL;  // owned: the reader's private communicator
  LmdbioOptions options_;
  LmdbioFeatures features_;
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

  std::unique_ptr<IoEngine> engine_;                 // explicit reads, readers only
  std::unique_ptr<io_internal::ReadDriver> driver_;  // over engine_
  std::unique_ptr<SharedWindow> window_;
  uint64_t step_ = 0;           // of the records in the window
  uint64_t steps_started_ = 0;  // read steps begun

 private:
  Status ReadStep(uint64_t s);

  bool registered_ = false;
  uint64_t registered_generation_ = 0;
  Status broken_;
};

}  // namespace dlfs::lmdbio
