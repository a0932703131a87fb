// SequentialFill: fills a node cache by reading its volume in large
// windows in storage order (VolumeScan), on a thread of its own, instead of
// keeping what the epochs' random reads happen to bring in — which, in a
// loop bound by reading, barely fills a cache at all.
//
// The node's processes share the work: each claims the next window of the
// region (NodeCache::ClaimFillWindow), so the volume is read once per node
// however many ranks fill. The loader serves a sample from the cache as
// soon as its window is in, so an epoch being read gains from the fill
// while it runs.
//
// For a loader whose cache holds the whole volume, whether to fill is the
// rule of DecideHoldWhole (fill_plan.h): by the epochs that follow, nothing
// measured (Options::hold_when_it_fits). Otherwise it is decided by
// DecideFill (fill_plan.h) from costs
// measured once per node (NodeCache::ClaimFillMeasurement), so the ranks of
// a job agree: the first process to start measures what its caller waits
// per byte in steady state (what each later epoch would save per cached
// byte), then fills one window, the probe, which measures what reading and
// copying cost here, and how much of that the reader would lose (none
// where a core it may run on stayed idle while it read); the node's
// other processes wait for those figures rather than probe too. Each
// decides with the epochs it has still to read. A cache the user asked for (an explicit budget) is
// filled without asking. Whatever is filled stays cached; a fill that does
// not pay stops after its probe.
//
// Thread safety: stats() from any thread; the destructor stops the thread
// after its current window. In a child of fork() (where the thread does
// not exist) the destructor leaves everything alone.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cache/fill_plan.h"
#include "cache/node_cache.h"
#include "dlfs/io_engine.h"
#include "dlfs/volume.h"

namespace dlfs::cache_internal {

class SequentialFill {
 public:
  // What the reader has handed out so far: the seconds its caller spent in
  // the reader (waiting for data, and checking bytes not read from the
  // cache) and the sample bytes it got. Called on the fill's thread.
  struct ReaderProgress {
    double caller_wait_seconds = 0;
    uint64_t payload_bytes = 0;
    // The reader's own CPU seconds (its I/O threads, and its checks on the
    // caller's thread), which cached samples do not cost; 0: not known.
    // Needed only while deciding().
    // Unlike the caller's waits, it does not grow with the processes
    // sharing the cores.
    double reader_cpu_seconds = 0;
  };
  struct Options {
    double epochs_after = kAssumedEpochsAfter;  // epochs read after the current one
    // The sample bytes the reader hands out per epoch (its rank's share);
    // 0: the volume's. Sizes the span over which the caller's waits are
    // measured.
    uint64_t epoch_bytes = 0;
    // The sample bytes handed out before the caller's waits are what an
    // epoch costs (its first read-ahead window, whose batches were read
    // while it waited for the first), and the span over which they are
    // measured then (at least two windows: over one batch, prefetched while
    // the first was awaited, a 100 KB-sample epoch waited 25x less than it
    // costs). 0: 1 MiB and 4 MiB. Both are capped at a fraction of the epoch.
    uint64_t settle_bytes = 0;
    uint64_t measure_bytes = 0;
    // The reader reads through the page cache: where the fill competes
    // with readers for the cores, the first epoch's waits overstate what a
    // cached epoch saves (what a warm one waits), and decide only when sure
    // (sure_margin); else the second epoch is measured, and a fill decided
    // then is done at once (readers_wait).
    bool page_cached = false;
    // The epochs after the first read memory (the page warmer holds the
    // volume): decided as where the fill competes for the cores, above, and
    // the fill leaves the pages it read in the page cache.
    bool later_epochs_warm = false;
    // Where the first epoch's waits overstate a warm one's (page-cached
    // reads on a busy node, or where the page warmer holds the volume), a
    // fill is decided in the first epoch only if this fraction of them
    // would repay it; else in the second (kSureMargin; tests set others).
    double sure_margin = kSureMargin;
    bool requested = false;  // an explicit budget: fill regardless
    // The loader's rule (DecideHoldWhole): where the cache holds the whole
    // volume, it is held from the first epoch (as if requested, with
    // kHeldWhole) or not filled at all, by the epochs that follow, not by
    // measured costs, which decide only a cache too small for the volume.
    bool hold_when_it_fits = false;
    // Why requested, for the report (FillInputs::requested_as).
    const char* requested_as = "budget given";
    std::function<ReaderProgress()> progress;
    // Whether the job's memory is too short to grow the cache now; asked
    // before each window. The fill stops at the first yes: the cache never
    // takes the last of a cgroup's memory from the processes that share it
    // (their batch buffers), whatever its budget.
    std::function<bool()> memory_short = MemoryShort;
    // The readers' engine options: the fill's own engine (VolumeScan::
    // CreateEngine) takes their NBD options and their injected damaged
    // range (tests, dlfs/io_engine.h), which fails its reads as the
    // readers' do; with periodic faults, which exercise the readers'
    // reads (a fill would serve the samples around them), it does not run.
    EngineOptions engine;

    // A reader's fill: requested when `cache_budget` is (CacheBudgetRequested),
    // the epochs after the first from `planned_epochs` (0: kAssumedEpochsAfter).
    static Options ForReader(uint64_t cache_budget, uint32_t planned_epochs, uint64_t epoch_bytes,
                             const EngineOptions& engine, std::function<ReaderProgress()> progress);
  };
  // The default for memory_short: what this process may still use
  // (dlfs/memory.h) is under a quarter of its cgroup's limit, or under
  // 256 MiB of MemAvailable where no cgroup limits it.
  static bool MemoryShort();
  // Starts the thread at once (a requested fill) or when Start() is called
  // (the reader's first batch: the decision needs its progress).
  SequentialFill(std::shared_ptr<NodeCache> cache, std::shared_ptr<const Volume> volume,
                 Options options);
  ~SequentialFill();
  SequentialFill(const SequentialFill&) = delete;
  SequentialFill& operator=(const SequentialFill&) = delete;

  // The reader has begun: filling (or measuring whether to) may start.
  void Start();
  // Filled whatever it costs (Options::requested, or the volume held whole
  // by Options::hold_when_it_fits): the reader waits for it at the end of
  // its first epoch (WaitFilled).
  bool requested() const;
  // Blocks until no window is left to claim and every window claimed on
  // the node is done, or the fill stopped, or nothing moved for
  // `stall_seconds` (a process that claimed a window died). For a requested
  // fill at the end of the first epoch.
  void WaitFilled(double stall_seconds = 2.0);
  // When the reader should wait for the fill (WaitFilled), where the fill
  // competes with it for the cores (sequential_fill.cc says what filling
  // beside the epochs cost there): a fill decided in a warm epoch at once
  // (kNow), one decided in the first epoch at its end (kAtEpochEnd), as a
  // budget given is. One relaxed load, for every batch.
  enum class ReadersWait { kNo, kNow, kAtEpochEnd };
  ReadersWait readers_wait() const;
  // Until the fill has decided (or ended): the reader's figures are still
  // being measured (ReaderProgress::reader_cpu_seconds costs a system
  // call per sample of a thread's CPU clock, not a vDSO read: the reader
  // takes them only meanwhile). One relaxed load.
  bool deciding() const;
  // Stops filling (a window being read is finished); WaitFilled returns.
  void Stop();

  struct Stats {
    uint64_t windows = 0;         // of the volume; 0 until this process reads one
    uint64_t windows_filled = 0;  // by this process
    uint64_t bytes_read = 0;      // by this process
    double scan_seconds = 0;      // reading them
    double fill_seconds = 0;      // copying them into the cache
    // Of those, the time the fill's thread waited for a core (the probe's
    // costs leave it out: the readers ran meanwhile).
    double scan_queued_seconds = 0, fill_queued_seconds = 0;
    double cpu_seconds = 0;  // of the fill's threads
    bool decided = false;
    FillDecision decision;
    bool running = false;
    bool memory_short = false;  // stopped because memory was short

    // The prediction against the outcome, for reports: "; filled 54.9 MB
    // at 2.41 s/GB (predicted 2.55)", or empty before anything was filled.
    std::string Outcome() const;
  };
  Stats stats() const;

 private:
  struct State;
  static void Run(State& s);

  const pid_t pid_;
  std::unique_ptr<State> state_;
};

}  // namespace dlfs::cache_internal
