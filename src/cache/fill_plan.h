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
// takes the reader's); it saves, in every later epoch, what
// the caller waited per byte it got (read). Every term is per byte, so the decision does not depend
// on how much fits: fill iff
//
//     saved_epochs * read  >  scan + fill * slowed
//
// where saved_epochs is epochs_after less what the fill's own time takes of
// them: the fill runs beside the epochs, so the cached share grows from none
// to all over the F epochs it lasts (F = wall / pace * cacheable /
// epoch_bytes / fillers: the fill's seconds per byte over the reader's, times
// the share of an epoch's bytes left to fill, over the processes that fill
// it side by side), and those epochs save half on average:
// epochs_after - F/2 when F <= epochs_after, else epochs_after^2 / (2F).
// On a node whose cores the readers keep busy, a Fashion-MNIST fill lasted
// 2-3 epochs: counted as saving from the start, it filled 5-epoch jobs at a
// loss.
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
  double read = 0;  // what the caller spent in the reader per byte an epoch handed out
  // The caller's lost share of the fill's time: 1 - the cores it may run
  // on that were idle while the reader ran, at least 0. 1 when not measured.
  double slowed = 1;
  // How long the fill lasts beside the epochs: its seconds per byte, waits
  // for a core included (wall), over the seconds per byte the reader
  // hands out (pace). 0 when not measured: the fill counts as instant.
  double wall = 0;
  double pace = 0;
  // Decided in a warm epoch: the fill is done at once while the readers
  // wait (SequentialFill::ReadersWait), so all of its time is theirs
  // (slowed 1) and it lasts no epoch (wall 0).
  bool at_once = false;
};

struct FillInputs {
  uint64_t cacheable_bytes = 0;  // not cached yet, and fitting the budget
  double epochs_after = 0;       // epochs planned after the one being read
  // The bytes the reader hands out per epoch: the fill of cacheable_bytes
  // lasts wall / pace * cacheable_bytes / epoch_bytes epochs. 0: as many
  // as cacheable_bytes (the whole volume, one reader).
  uint64_t epoch_bytes = 0;
  // The node's processes that fill side by side, each at the measured
  // pace (at most one per core): the fill lasts 1/fillers as long.
  double fillers = 1;
  bool requested = false;  // fill whatever it costs
  // Why it was requested, for the reason: "budget given", or the reader's
  // own ("remote storage, small samples: filled first").
  const char* requested_as = "budget given";
  FillCosts costs;
};

struct FillDecision {
  bool fill = false;
  double cost_seconds = 0;    // predicted, for cacheable_bytes
  double saving_seconds = 0;  // predicted, over epochs_after
  double fill_epochs = 0;     // the epochs the fill lasts (0: not measured)
  double cost_per_gb = 0;     // predicted: the fill's own seconds per GB (scan + fill)
  // For reports: "fill: saves 1.8 s over 4 epochs (the fill lasting 0.5 of
  // them) for 0.40 s (read 0.02, copy 0.38, 100 % of it taken from the reader)".
  std::string reason;
};

FillDecision DecideFill(const FillInputs& in);

// The loader's rule where its node cache holds the whole volume and no
// budget was given: the volume is held from the first epoch (filled as for
// a budget given: before the first read, or beside the first epoch for a
// volume over 2 GiB, Loader::Create) when at least kHoldEpochsAfter epochs
// follow it, else not filled. Costs measured decide only for a cache too
// small for the volume. `reason` says why not, for reports.
// (docs/benchmarks.md, "Small samples and the node cache": held from the
// first epoch, Fashion-MNIST and a 1.6 GB volume of 100 KB samples took
// 0.7-0.95x the cache off's time over 3 epochs, one process or mpirun
// -np 2 / 4, and much less beyond; over 2 epochs the 1.6 GB volume took
// 1.05x.)
struct HoldWhole {
  bool hold = false;
  std::string reason;
};
inline constexpr double kHoldEpochsAfter = 2;
HoldWhole DecideHoldWhole(double epochs_after);
// FillInputs::requested_as of a volume held whole by that rule.
inline constexpr char kHeldWhole[] = "the volume fits the cache: held from the first epoch";

// The epochs a loader assumes are still to come when nobody said how many
// will be read (LoaderOptions::planned_epochs 0): training runs tens of
// epochs; a short run pays at most the fill it did not need.
inline constexpr double kAssumedEpochsAfter = 10;

// Where what the first epoch costs the reader overstates what a warm one
// would (the page cache will hold the volume), a fill is decided in the
// first epoch only if a fifth of the reader's CPU then would repay it: that
// CPU was 2.7-3.8x what a cached epoch saved here (Fashion-MNIST, one to
// four processes), and a third made 5-epoch jobs under mpirun fill at a
// loss (SequentialFill::Options).
inline constexpr double kSureMargin = 5;

}  // namespace dlfs::cache_internal
