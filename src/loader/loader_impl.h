// Loader::Impl, shared by loader.cc (the caller's side, Create) and
// loader_io.cc (the I/O threads).
//
// Batches are numbered by ticket: ticket t of generation g is batch
// t % B of epoch base_epoch + t / B (B batches per epoch). SetEpoch(e)
// moving forward keeps the generation (tickets already read for epoch e
// stay useful); going back or restarting an epoch starts a new generation,
// and batches of older generations are dropped when their reads complete.
// I/O thread k reads tickets k, k + n, ... while they lie within
// prefetch_batches of the caller's next ticket, never waiting for a batch
// to complete before queueing the next one's reads: the engine always has
// work, and completions are matched to batches by tag.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cache/node_cache.h"
#include "cache/sequential_fill.h"
#include "dlfs/loader.h"
#include "loader/batch_data.h"
#include "loader/batch_read.h"
#include "loader/epoch_order.h"
#include "loader/fields.h"
#include "loader/page_warmer.h"
#include "loader/quarantine.h"
#include "loader/slab_pool.h"

namespace dlfs {

using cache_internal::NodeCache;
using loader_internal::BatchRead;
using loader_internal::EpochOrder;
using loader_internal::EpochOrders;
using loader_internal::Slab;
using loader_internal::SlabPool;

class Loader::Impl {
 public:
  struct Worker {
    std::unique_ptr<IoEngine> engine;
    std::unique_ptr<io_internal::ReadDriver> driver;  // over `engine`, on `thread`
    std::shared_ptr<SlabPool> pool;
    std::thread thread;
    uint32_t index = 0;
  };

  // A batch whose reads are queued or in flight on one worker.
  struct InFlight {
    uint64_t gen, ticket, epoch, seq;
    std::shared_ptr<const EpochOrder> order;
    std::vector<uint64_t> indices;  // the batch's, in order
    // With a node cache: the bytes of the samples it holds (empty span for
    // the others), and the samples to read, in batch order.
    std::vector<std::optional<std::span<const std::byte>>> cached;
    std::vector<uint64_t> misses;
    std::unique_ptr<BatchRead> read;
    std::shared_ptr<Slab> slab;
    bool abandoned = false;  // its generation ended: drop it when done
  };

  Impl(std::shared_ptr<Volume> v, const LoaderOptions& o, Sampler s)
      : volume_(std::move(v)),
        options_(o),
        sampler_(std::move(s)),
        batches_(o.order || o.batch_order ? o.order_batches : sampler_.batches_per_epoch()),
        window_(std::max<uint32_t>(o.prefetch_batches, 1)) {
    po_.read = options_.plan;
  }

  ~Impl();

  // --- The caller's side ---------------------------------------------------

  void SetEpoch(uint64_t e);

  // Makes batch `k` of epoch `e` the next one Next() hands out; the batches
  // before it are not read. With `part`: epoch e is the rest after an
  // elastic resume (k counts from its first batch), read in a new
  // generation.
  void SetPosition(uint64_t e, uint64_t k, std::shared_ptr<const EpochOrder> part);

  // What the order depends on, with no position.
  SourceState Identity() const;

  SourceState SaveState() const;

  Status LoadState(const SourceState& state);

  Result<bool> Next(Batch* out);

  // Checks the batch (and splits its fields) on the caller's thread.
  Result<bool> HandOut(std::shared_ptr<Batch::Data> data, Batch* out);

  // Checksums (verify_checksums) and fields of every sample of `data`.
  Status Check(Batch::Data* data);

  SourceStats Stats() const;

  std::vector<uint64_t> RankIndices(uint64_t epoch) const;

  // --- The I/O threads -----------------------------------------------------

  // REQUIRES: mu_ held. Threads start with the first epoch and live as long
  // as the loader (a restart is a new generation, not new threads).
  void StartThreadsLocked();

  void Run(Worker& w);

  // REQUIRES: mu_ held. Whether ticket `t` lies in an epoch after the last
  // one planned (LoaderOptions::planned_epochs) that the caller has not
  // moved to: not read ahead, since nobody will ask for it.
  bool PastPlannedEnd(uint64_t t) const {
    const uint64_t planned = options_.planned_epochs;
    if (planned == 0 || part_) return false;
    const uint64_t epoch = base_epoch_ + t / batches_;
    return epoch >= planned && epoch > epoch_;
  }

  // Batch `b`'s reads are done (or it had none): publish it, unless
  // abandoned.
  void Finish(InFlight& b);

  // The batch in its order: the samples read (`read`, in b.misses' order)
  // and those the node cache holds.
  std::shared_ptr<Batch::Data> WithCached(const InFlight& b, std::shared_ptr<Batch::Data> read);

  void Publish(const InFlight& b, Result<std::shared_ptr<Batch::Data>> result);

  std::shared_ptr<Volume> volume_;
  LoaderOptions options_;
  Sampler sampler_;
  const pid_t pid_ = ::getpid();
  const uint64_t batches_;  // per epoch
  uint64_t window_;         // batches read ahead of the caller (set by Open, then fixed)
  loader_internal::PlanOptions po_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::shared_ptr<NodeCache> cache_;  // null: none
  std::string cache_note_;
  uint64_t cache_budget_ = 0;  // as resolved from the options and the memory left
  const uint32_t subset_crc_ = SubsetCrc(options_.subset);
  std::vector<uint32_t> field_ids_;  // LoaderOptions::fields resolved; empty: whole samples
  const std::shared_ptr<loader_internal::DecodedBuffers> decoded_buffers_ =
      std::make_shared<loader_internal::DecodedBuffers>();
  double setup_seconds_ = 0;
  std::string description_;

  mutable std::mutex mu_;
  std::condition_variable ready_cv_;  // a batch became ready
  std::condition_variable work_cv_;   // the window moved, a new generation, or stop
  std::atomic<bool> started_{false};
  bool stop_ = false;
  uint64_t gen_ = 0;
  uint64_t base_epoch_ = 0;  // epoch of ticket 0 in this generation
  uint64_t consumer_ = 0;    // next ticket Next() hands out
  uint64_t epoch_ = 0;
  uint64_t epoch_end_ = 0;  // first ticket after the current epoch
  std::map<uint64_t, Result<std::shared_ptr<Batch::Data>>> ready_;
  Status start_error_;
  bool resume_pending_ = false;  // LoadState's position, not yet used or moved
  bool caller_waiting_ = false;  // Next() waits for ticket consumer_
  // The rest of an epoch after an elastic resume (its epoch's tickets before
  // first_seq are never read), and the parts read before it; kept until
  // another position is set.
  std::shared_ptr<const EpochOrder> part_;
  std::vector<EpochSegment> part_done_;
  uint64_t parts_made_ = 0;

  // Samples left out as bad (skip_bad_samples, LoaderOptions::quarantine).
  loader_internal::Quarantine bad_samples_{*volume_, options_.skip_bad_samples,
                                           options_.max_bad_samples};
  std::vector<std::shared_ptr<Slab>> quarantine_;  // buffers a broken engine may still write

  EpochOrders orders_{volume_->path(), volume_->size(), batches_, options_, sampler_};

  std::atomic<uint64_t> verify_ns_{0};
  // CPU time of the I/O threads (their reads' copies, planning, hand-offs):
  // with verify_ns_, the loader's CPU per byte for the node cache's plan.
  std::atomic<uint64_t> io_cpu_ns_{0};
  std::atomic<uint64_t> next_wait_ns_{0};
  std::atomic<uint64_t> handed_bytes_{0};  // sample bytes Next() handed out

  // Fills the node cache by sequential reads (null without a cache).
  std::unique_ptr<cache_internal::SequentialFill> fill_;
  // Reads a small page-cached volume ahead in the first epoch (or null).
  std::unique_ptr<loader_internal::PageWarmer> warmer_;
  // An explicit budget: the first epoch's last batch waits for the fill
  // (LoaderOptions::planned_epochs). Guarded by mu_.
  bool wait_for_fill_ = false;
  // The I/O threads wait for the fill before their first read: remote
  // storage and small samples (Create says why). Set before they start.
  bool fill_first_ = false;
};

}  // namespace dlfs
