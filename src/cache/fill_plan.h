// Whether a node cache should be filled: what filling would cost against
// what it would save over the epochs still to come, all measured on this
// machine (touching fresh memory costs ten times more on some VMs than on a
// bare node; reading costs what the device and the batch sizes make it).
// A pure function, so the rule is tested apart from the threads that
// measure its inputs.
//
// Per byte cached: filling costs reading it once more in large sequential
// windows (scan: the device the reader reads too) and copying it into fresh
// shared memory (fill), of which the reader's caller loses the share
// `slowed` (0 where the fill's thread runs on a core left idle, 1 where it
// takes the reader's); it saves, in every later epoch, what the caller
// waited per byte it got (read). The first epoch's last batch waits for a
// fill decided on (loader.cc), so every later epoch saves in full, and a
// fill that lasts past the end of the epoch costs that wait instead:
//
//     fill iff  epochs_after * read  >  max(scan + fill * slowed,
//                                           wall - epoch_left * pace)
//
// where wall is the fill's seconds per byte, waits for a core included,
// pace the seconds per byte the reader hands out, and epoch_left the share
// of the current epoch still to read. Every term is per byte, so the
// decision does not depend on how much fits. (Before the first epoch
// waited, the fill ran beside the epochs and lasted five of Fashion-MNIST's
// here, trailing a given budget by 1.2-1.9x.)
//
// unless the user asked for the cache (an explicit budget: it is filled
// whatever it costs, and the report says what it cost).
#pragma once

#include <cstdint>
#include <string>

namespace dlfs::cache_internal {

// Seconds per byte, measured.
struct FillCosts {
  double scan = 0;  // reading the volume in large sequential windows
  double fill = 0;  // copying into the cache, fresh memory included
  double read = 0;  // what the caller waited per byte an epoch handed out
  // The caller's lost share of the fill's time: 1 - the cores it may run
  // on that were idle while the reader ran, at least 0. 1 when not measured.
  double slowed = 1;
  // How long the fill lasts: its seconds per byte, waits for a core
  // included (wall), against the seconds per byte the reader hands out
  // (pace). 0 when not measured: the fill counts as instant.
  double wall = 0;
  double pace = 0;
};

struct FillInputs {
  uint64_t cacheable_bytes = 0;  // not cached yet, and fitting the budget
  double epochs_after = 0;       // epochs planned after the one being read
  double epoch_left = 1;         // the share of the one being read still to come
  bool requested = false;        // the budget was given: fill whatever it costs
  FillCosts costs;
};

struct FillDecision {
  bool fill = false;
  double cost_seconds = 0;    // predicted, for cacheable_bytes
  double saving_seconds = 0;  // predicted, over epochs_after
  double fill_epochs = 0;     // the epochs the fill lasts (0: not measured)
  double wait_seconds = 0;    // predicted: the first epoch's end waiting for the fill
  double cost_per_gb = 0;     // predicted: the fill's own seconds per GB (scan + fill)
  // For reports: "fill: saves 1.8 s over 4 epochs for 0.40 s (read 0.02,
  // copy 0.38, 100 % of it taken from the reader; the fill lasting 0.5 of
  // them, 0.10 s past this one)".
  std::string reason;
};

FillDecision DecideFill(const FillInputs& in);

// The epochs a loader assumes are still to come when nobody said how many
// will be read (LoaderOptions::planned_epochs 0): training runs tens of
// epochs; a short run pays at most the fill it did not need.
inline constexpr double kAssumedEpochsAfter = 10;

}  // namespace dlfs::cache_internal
