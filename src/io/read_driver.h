// Internal: ReadDriver, the one loop that runs reads through an IoEngine for
// every reader of a volume — the Loader's I/O threads, SampleReader, the node
// cache's sequential fill, the shard loader, the token loader and LMDBIO.
//
// A reader describes what it reads as a ReadJob: rounds of requests, each
// round issued once the previous one has completed (round 0: the planned
// reads; later rounds: retries, e.g. a failed read that held several samples
// split into each sample's own bytes). The driver submits, reaps, hands each
// outcome to its job, asks for the next round, and accounts the bytes and the
// time; a reader keeps only what is its own (which samples, where their bytes
// go, what a failure means).
//
//   Synchronous:  driver.Run(job)           every round, then returns
//   Streaming:    id = driver.Start(&job)   queued and submitted
//                 driver.Poll(wait, &done)  finished jobs' ids
//                 driver.Cancel(which)      jobs that no longer matter
//                 driver.Drain()            before the buffers go
//
// The engine itself resubmits short reads and -EAGAIN/-EINTR (io_engine.h):
// a request's outcome is all its bytes or an error, never partial data.
//
// Thread safety: as the engine's, one thread at a time; stats() from any.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "dlfs/io_engine.h"
#include "dlfs/status.h"

namespace dlfs::io_internal {

// What a reader reads, as rounds of requests. The driver calls NextRound
// first for round 0, then again each time every request of the current
// round has had its Complete; the job is done when NextRound returns false.
class ReadJob {
 public:
  virtual ~ReadJob() = default;

  // The next round's requests into *out (replacing it); false when the job
  // is done (then *out is ignored). A round of no requests is complete at
  // once. REQUIRES: the buffers stay valid until the round completes.
  virtual bool NextRound(std::vector<ReadRequest>* out) = 0;
  // The outcome of request `r` of the current round.
  virtual void Complete(size_t r, const Status& status) = 0;

  // Accounted by the driver: bytes requested over every round, and the
  // seconds from the job's start to its end.
  uint64_t bytes_read() const { return bytes_read_; }
  double seconds() const { return seconds_; }

 private:
  friend class ReadDriver;
  uint64_t bytes_read_ = 0;
  double seconds_ = 0;
};

// A fixed list of requests, one round, no retries: the outcome of each is
// kept for the reader to interpret.
class RequestList final : public ReadJob {
 public:
  RequestList() = default;
  explicit RequestList(std::vector<ReadRequest> requests) : requests(std::move(requests)) {}

  std::vector<ReadRequest> requests;
  std::vector<Status> results;  // per request, after the job is done

  bool NextRound(std::vector<ReadRequest>* out) override;
  void Complete(size_t r, const Status& status) override;

 private:
  bool issued_ = false;
};

struct ReadDriverStats {
  uint64_t jobs = 0;        // jobs finished
  uint64_t requests = 0;    // requests issued, retries included
  uint64_t bytes = 0;       // bytes those requested
  double wait_seconds = 0;  // the caller blocked on completions (Run, Poll with wait)
};

class ReadDriver {
 public:
  // `engine` must outlive the driver.
  explicit ReadDriver(IoEngine& engine);
  // Drains (waits for every read in flight).
  ~ReadDriver();
  ReadDriver(const ReadDriver&) = delete;
  ReadDriver& operator=(const ReadDriver&) = delete;

  IoEngine& engine() { return engine_; }

  // Runs every round of `job` and returns when it is done. Non-OK only when
  // the engine broke (the job's reads then failed with that error, and its
  // buffers may still be written: the caller must not reuse them). REQUIRES:
  // no streamed job is in flight.
  Status Run(ReadJob& job);
  // Runs `requests` as one RequestList: (*results)[i] is request i's
  // outcome (OK with every byte in place, or why not). Non-OK as Run.
  Status Read(std::vector<ReadRequest> requests, std::vector<Status>* results);

  // Starts `job` (queues its first round and submits it) and returns its
  // id; the job must stay alive until Poll reports it. A job with nothing
  // to read is reported by the next Poll.
  uint64_t Start(ReadJob* job);
  // Appends the ids of jobs that finished to *finished, first waiting (when
  // `wait`, no finished job is waiting to be reported, and any job is in
  // flight) for at least one completion — which need not finish a job, so
  // *finished may stay empty. Non-OK when the
  // engine broke: every job in flight is then forgotten (their ids are not
  // reported; their buffers may still be written, so the caller must not
  // reuse them).
  Status Poll(bool wait, std::vector<uint64_t>* finished);
  // Jobs `which` accepts stop after the reads already in flight: their
  // queued reads complete at once as Cancelled, no further round is asked
  // for, and Poll reports them finished as usual.
  void Cancel(const std::function<bool(uint64_t id)>& which);
  // Cancels everything and waits for the reads in flight. Non-OK when the
  // engine broke (their buffers may still be written).
  Status Drain();

  // Jobs started and not yet reported.
  size_t in_flight() const { return jobs_.size() + finished_.size(); }

  ReadDriverStats stats() const;

 private:
  struct Active {
    ReadJob* job;
    double started;
    size_t outstanding = 0;  // requests of the current round not completed
    bool cancelled = false;
  };

  // Issues rounds of `a` until one has requests or the job is done (then
  // true).
  bool Advance(uint64_t id, Active& a);
  void Finish(uint64_t id, Active& a);
  // Reaps completions (waiting for min_complete), handing each to its job.
  Status ReapInto(size_t min_complete);

  IoEngine& engine_;
  uint64_t next_id_ = 0;
  std::unordered_map<uint64_t, Active> jobs_;
  std::vector<uint64_t> finished_;  // done, not yet reported by Poll
  std::vector<ReadRequest> round_;
  std::vector<ReadCompletion> done_;
  std::atomic<uint64_t> jobs_done_{0}, requests_{0}, bytes_{0}, wait_ns_{0};
};

}  // namespace dlfs::io_internal
