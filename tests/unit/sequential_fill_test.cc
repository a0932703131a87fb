// SequentialFill: a node cache filled by reading its volume in windows in
// storage order; the node's processes (here: cache handles of their own,
// on threads) share the windows, each read once; a fill that would not pay
// stops after its probe; a requested one is filled whatever it costs.
// Regions go to a temporary DLFS_CACHE_DIR per test, not /dev/shm.
#include "cache/sequential_fill.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>
#include <vector>

#include "synthetic_volume.h"
#include "testutil.h"

namespace dlfs {
namespace sequential_fill_test {

namespace fs = std::filesystem;
using cache_internal::NodeCache;
using cache_internal::SequentialFill;

class SequentialFillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(fs::path(shm_.path()) / "shm");
    ::setenv("DLFS_CACHE_DIR", (fs::path(shm_.path()) / "shm").c_str(), 1);
    // ~3,000 samples of 1-9 KB (15 MB): fill windows of 1 MiB.
    vol_ = testing::MakeSyntheticVolume(fs::path(tmp_.path()) / "v.dlfs",
                                        {.samples = 3000, .bytes = [](uint64_t i) {
                                           return testing::RandomBytes(1000 + (i * 7919) % 8000,
                                                                       static_cast<uint32_t>(i));
                                         }});
    ASSERT_TRUE(vol_);
  }
  void TearDown() override { ::unsetenv("DLFS_CACHE_DIR"); }

  std::shared_ptr<NodeCache> Cache() {
    std::string note;
    auto c = NodeCache::Open(*vol_, {.budget = uint64_t{1} << 30}, &note);
    EXPECT_TRUE(c) << note;
    return c;
  }
  // Every sample found in `cache`, with the volume's bytes.
  void ExpectAllCached(NodeCache& cache) {
    for (uint64_t i = 0; i < vol_->size(); ++i) {
      auto found = cache.Find(i);
      ASSERT_TRUE(found) << "sample " << i;
      ASSERT_OK_AND_ASSIGN(auto stored, vol_->ReadStored(i));
      ASSERT_TRUE(std::equal(found->begin(), found->end(), stored.begin(), stored.end())) << i;
    }
  }

  testing::TempDir tmp_, shm_;
  std::shared_ptr<Volume> vol_;
};

TEST_F(SequentialFillTest, ARequestedFillCachesTheWholeVolume) {
  auto cache = Cache();
  ASSERT_TRUE(cache);
  SequentialFill fill(cache, vol_, {.epochs_after = 0, .requested = true});
  fill.WaitFilled();
  const auto st = fill.stats();
  EXPECT_TRUE(st.decided && st.decision.fill) << st.decision.reason;
  EXPECT_GT(st.windows, 2u);
  EXPECT_EQ(st.windows_filled, st.windows);
  ExpectAllCached(*cache);
}

TEST_F(SequentialFillTest, TheNodesProcessesShareTheWindows) {
  // Three "processes": each its own handle on the region and its own fill.
  std::vector<std::shared_ptr<NodeCache>> caches = {Cache(), Cache(), Cache()};
  std::vector<std::unique_ptr<SequentialFill>> fills;
  for (auto& c : caches) {
    ASSERT_TRUE(c);
    fills.push_back(std::make_unique<SequentialFill>(
        c, vol_, SequentialFill::Options{.epochs_after = 0, .requested = true}));
  }
  uint64_t filled = 0, windows = 0;
  for (auto& f : fills) {
    f->WaitFilled();
    filled += f->stats().windows_filled;
    windows = std::max(windows, f->stats().windows);
  }
  EXPECT_EQ(filled, windows);  // each window read once on the node
  EXPECT_EQ(caches[0]->fill_windows_done(), windows);
  ExpectAllCached(*caches[2]);
}

// A caller that gets 1 MB each time it is asked and waits
// `wait(bytes so far)` seconds for it; with `busy`, those seconds are the
// reader's CPU too, else its CPU is not known.
SequentialFill::Options Caller(std::function<double(uint64_t)> wait, double epochs_after,
                               bool busy = false) {
  auto got = std::make_shared<std::atomic<uint64_t>>(0);
  auto waited = std::make_shared<std::atomic<double>>(0);
  return {.epochs_after = epochs_after, .progress = [=] {
            const uint64_t bytes = got->fetch_add(1'000'000) + 1'000'000;
            const double total = waited->load() + wait(bytes);
            waited->store(total);
            return SequentialFill::ReaderProgress{.caller_wait_seconds = total,
                                                  .payload_bytes = bytes,
                                                  .reader_cpu_seconds = busy ? total : 0};
          }};
}

// A page-cached reader of 5 MB epochs whose caller waits 1 s per MB in its
// first epoch, then 0.1 s per MB (`second_waits`) or nothing; 10 epochs
// after the first. The first epoch never decides (an unreachable margin).
SequentialFill::Options WarmSecondEpoch(bool second_waits) {
  SequentialFill::Options o = Caller(
      [second_waits](uint64_t bytes) {
        return bytes <= 5'000'000 ? 1.0 : second_waits ? 0.1 : 0.0;
      },
      10);
  o.epoch_bytes = 5'000'000;
  o.page_cached = true;
  o.sure_margin = 1e12;
  return o;
}

// The first CPU this thread may run on, alone.
cpu_set_t FirstCpu() {
  cpu_set_t all, one;
  EXPECT_EQ(::sched_getaffinity(0, sizeof all, &all), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &all)) {
      CPU_SET(c, &one);
      break;
    }
  }
  return one;
}

// Runs a fill of `cache` for a reader whose caller behaves as `caller`
// says, to its end: its stats. With `one_cpu`, the fill's thread may run on
// one CPU only, as a rank bound to its core (the thread, made by the
// constructor, takes the calling thread's mask).
SequentialFill::Stats FillFor(std::shared_ptr<NodeCache> cache, std::shared_ptr<Volume> volume,
                              SequentialFill::Options caller, bool one_cpu = false) {
  cpu_set_t all;
  EXPECT_EQ(::sched_getaffinity(0, sizeof all, &all), 0);
  const cpu_set_t one = FirstCpu();
  if (one_cpu) {
    EXPECT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  }
  SequentialFill fill(std::move(cache), std::move(volume), std::move(caller));
  if (one_cpu) {
    EXPECT_EQ(::sched_setaffinity(0, sizeof all, &all), 0);
  }
  fill.Start();
  fill.WaitFilled();
  return fill.stats();
}

// Time the fill's thread spends waiting for a core is not what filling
// costs (the readers ran meanwhile): counted apart, and left out of the
// probe's costs. Here a thread on the fill's only core spins 2 ms at a
// time, resting 0.5 ms between, and the fill's thread runs only when it
// rests (SCHED_IDLE, taken from the thread that makes it): it waits for
// the core, but not for ever. (At the same priority, a fill of a few
// milliseconds that sleeps on its reads got the core on waking, and was
// sometimes never queued at all.)
TEST_F(SequentialFillTest, WaitsForACoreAreCountedApart) {
  if (!fs::exists("/proc/thread-self/schedstat")) GTEST_SKIP() << "no /proc/thread-self/schedstat";
  auto cache = Cache();
  ASSERT_TRUE(cache);
  std::atomic<bool> stop{false};
  std::thread spinner([&] {
    const cpu_set_t one = FirstCpu();
    EXPECT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
    while (!stop.load(std::memory_order_relaxed)) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
      while (std::chrono::steady_clock::now() < until) {
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  SequentialFill::Stats st;
  bool idle_policy = false;
  std::thread maker([&] {
    const sched_param idle{};
    idle_policy = ::sched_setscheduler(0, SCHED_IDLE, &idle) == 0;  // this thread's
    if (idle_policy) {
      st = FillFor(cache, vol_, {.epochs_after = 0, .requested = true}, /*one_cpu=*/true);
    }
  });
  maker.join();
  stop = true;
  spinner.join();
  if (!idle_policy) GTEST_SKIP() << "SCHED_IDLE not allowed here";
  EXPECT_GT(st.windows_filled, 2u);
  const double wall = st.scan_seconds + st.fill_seconds;
  const double queued = st.scan_queued_seconds + st.fill_queued_seconds;
  EXPECT_GT(queued, 0.02 * wall) << "queued " << queued << " s of " << wall << " s";
  EXPECT_LE(queued, 1.05 * wall);
}

// Decided not to fill: only the probe's two windows were read.
void ExpectNoFillAfterTheProbe(const SequentialFill::Stats& st) {
  EXPECT_TRUE(st.decided);
  EXPECT_FALSE(st.decision.fill) << st.decision.reason;
  EXPECT_EQ(st.windows_filled, 2u);
}

TEST_F(SequentialFillTest, AFillThatDoesNotPayStopsAfterItsProbe) {
  auto cache = Cache();
  ASSERT_TRUE(cache);
  // The caller never waits for data: caching would save it nothing.
  ExpectNoFillAfterTheProbe(FillFor(cache, vol_, Caller([](uint64_t) { return 0.0; }, 100)));
  EXPECT_LT(cache->stats().samples, vol_->size());
}

// A caller that keeps waiting for its data (0.1 s per MB) is saved that in
// every later epoch: the fill goes on.
TEST_F(SequentialFillTest, SteadyWaitsAreSavings) {
  auto cache = Cache();
  ASSERT_TRUE(cache);
  const auto st = FillFor(cache, vol_, Caller([](uint64_t) { return 0.1; }, 10));
  EXPECT_TRUE(st.decision.fill) << st.decision.reason;
  EXPECT_EQ(st.windows_filled, st.windows);
  ExpectAllCached(*cache);
}

// A fill not asked for decides again as it goes, on what its windows cost
// and the epochs left: this caller waits 0.1 s per MB, one epoch after
// this one, and reads on while the fill runs (each question about its
// progress finds 1 MB more), so before the volume's 15 windows are in the
// job has no epoch left to save, and the fill stops.
TEST_F(SequentialFillTest, AFillStopsOnceTheRestWouldNotPay) {
  auto cache = Cache();
  ASSERT_TRUE(cache);
  const auto st = FillFor(cache, vol_, Caller([](uint64_t) { return 0.1; }, 1));
  EXPECT_FALSE(st.decision.fill);
  EXPECT_NE(st.decision.reason.find("stopped after"), std::string::npos) << st.decision.reason;
  EXPECT_NE(st.decision.reason.find("was fill:"), std::string::npos) << st.decision.reason;
  EXPECT_GT(st.windows_filled, 1u);
  EXPECT_LT(st.windows_filled, st.windows);
  EXPECT_LT(cache->stats().samples, vol_->size());
}

// The first batches of a run wait for the whole pipeline (0.1-0.3 s here):
// that is no saving of a later epoch. This caller waited 10 s for its first
// megabyte and nothing since: a fill saves it nothing.
TEST_F(SequentialFillTest, TheRunsStartIsNotASaving) {
  auto cache = Cache();
  ASSERT_TRUE(cache);
  ExpectNoFillAfterTheProbe(FillFor(
      cache, vol_, Caller([](uint64_t bytes) { return bytes <= 1'000'000 ? 10.0 : 0.0; }, 100)));
}

// What the caller waits while the probe fills is the fill's own doing where
// both compete for a core (ranks bound to one core each): it is not what a
// cached epoch saves. This caller waits only once the probe has put samples
// in the cache.
TEST_F(SequentialFillTest, WaitsDuringTheProbeAreNotSavings) {
  auto cache = Cache();
  ASSERT_TRUE(cache);
  ExpectNoFillAfterTheProbe(
      FillFor(cache, vol_,
              Caller([cache](uint64_t) { return cache->stats().samples > 0 ? 1.0 : 0.0; }, 100)));
}

// Through the page cache a first epoch reads the device and the later ones
// memory: where the fill competes with the reader for the cores (here: the
// fill's thread may run on one core only, as a rank bound to its core), a
// cached epoch saves what a warm one waits. Unless the first epoch is sure
// (never, with this margin), that is measured in the second epoch.
// This caller waits 1 s per MB in its first epoch (5 MB), then 0.1 s per MB
// or nothing.
TEST_F(SequentialFillTest, OnABusyNodeAnUnsureReaderIsMeasuredWarm) {
  for (const bool second_waits : {false, true}) {
    SCOPED_TRACE(second_waits ? "the second epoch waits" : "only the first epoch waits");
    auto cache = Cache();
    ASSERT_TRUE(cache);
    SequentialFill::Options o = WarmSecondEpoch(second_waits);
    const auto st = FillFor(cache, vol_, std::move(o), /*one_cpu=*/true);
    EXPECT_TRUE(st.decided);
    EXPECT_EQ(st.decision.fill, second_waits) << st.decision.reason;
    // Decided after the first epoch: fewer than ten more to come (this
    // caller moves on each time it is asked).
    EXPECT_EQ(st.decision.reason.find("over 10 epochs"), std::string::npos) << st.decision.reason;
    cache.reset();  // the last handle removes the region: the next round starts afresh
  }
}

// Where the page warmer holds the volume, the later epochs are warm for any
// number of processes: the caller is measured in its second epoch, and a
// fill decided then is done at once, the readers waiting for it
// (readers_wait: now), counted as lasting no epoch and costing them all its
// time.
// This caller waits 1 s per MB in its first epoch (5 MB), then 0.1 s per
// MB, or nothing: only then is it not filled.
TEST_F(SequentialFillTest, AFillDecidedWarmIsDoneWhileTheReadersWait) {
  for (const bool second_waits : {false, true}) {
    SCOPED_TRACE(second_waits ? "the second epoch waits" : "only the first epoch waits");
    auto cache = Cache();
    ASSERT_TRUE(cache);
    SequentialFill::Options o = WarmSecondEpoch(second_waits);
    o.later_epochs_warm = true;
    SequentialFill fill(cache, vol_, std::move(o));
    EXPECT_EQ(fill.readers_wait(), SequentialFill::ReadersWait::kNo);
    fill.Start();
    bool burst_seen = false;
    while (fill.stats().running) {
      burst_seen = burst_seen || fill.readers_wait() == SequentialFill::ReadersWait::kNow;
    }
    fill.WaitFilled();
    const auto st = fill.stats();
    EXPECT_EQ(fill.readers_wait(), SequentialFill::ReadersWait::kNo);  // over once the fill is
    ASSERT_TRUE(st.decided);
    EXPECT_EQ(st.decision.fill, second_waits) << st.decision.reason;
    EXPECT_EQ(burst_seen, second_waits) << st.decision.reason;
    EXPECT_EQ(st.decision.reason.find("over 10 epochs"), std::string::npos) << st.decision.reason;
    EXPECT_EQ(st.decision.reason.find("lasting"), std::string::npos) << st.decision.reason;
    EXPECT_NE(st.decision.reason.find("100 % of it taken from the reader"), std::string::npos)
        << st.decision.reason;
    if (second_waits) {
      EXPECT_NE(st.decision.reason.find("the readers wait for it"), std::string::npos)
          << st.decision.reason;
      ExpectAllCached(*cache);
    } else {
      EXPECT_EQ(st.windows_filled, 2u);  // the probe's
    }
    cache.reset();  // the last handle removes the region: the next round starts afresh
  }
}

// The first epoch decides where it is sure. This reader costs 1 s of CPU
// per MB in every epoch: a fill that a fifth of that repays many times over
// is decided at once and made beside the epochs; where the fill competes
// with the reader for the cores (here: one core, as a rank bound to its
// own), the first epoch's end waits for it. One that even all of it would
// not repay (a reader that costs nothing) is not made, and the second
// epoch is not awaited.
TEST_F(SequentialFillTest, WhereTheFirstEpochIsSureItDecides) {
  struct Case {
    bool costs;     // the reader costs 1 s per MB, or nothing
    bool one_core;  // the fill competes with it for its core
  };
  for (const Case c : {Case{true, false}, Case{true, true}, Case{false, false}}) {
    SCOPED_TRACE(std::string(c.costs ? "a reader that costs" : "a reader that costs nothing") +
                 (c.one_core ? ", one core" : ""));
    auto cache = Cache();
    ASSERT_TRUE(cache);
    // Epochs of 500 MB: this caller (1 MB per call) stays in its first.
    SequentialFill::Options o =
        Caller([c](uint64_t) { return c.costs ? 1.0 : 0.0; }, 10, /*busy=*/true);
    o.epoch_bytes = 500'000'000;
    o.page_cached = true;
    o.later_epochs_warm = true;
    cpu_set_t all;
    ASSERT_EQ(::sched_getaffinity(0, sizeof all, &all), 0);
    const cpu_set_t one = FirstCpu();
    if (c.one_core) {
      ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
    }
    SequentialFill fill(cache, vol_, std::move(o));  // its thread takes this one's mask
    ASSERT_EQ(::sched_setaffinity(0, sizeof all, &all), 0);
    fill.Start();
    bool now_seen = false, at_end_seen = false;
    while (fill.stats().running) {
      const SequentialFill::ReadersWait w = fill.readers_wait();
      now_seen = now_seen || w == SequentialFill::ReadersWait::kNow;
      at_end_seen = at_end_seen || w == SequentialFill::ReadersWait::kAtEpochEnd;
    }
    fill.WaitFilled();
    const auto st = fill.stats();
    ASSERT_TRUE(st.decided);
    EXPECT_EQ(st.decision.fill, c.costs) << st.decision.reason;
    EXPECT_FALSE(now_seen) << st.decision.reason;
    EXPECT_EQ(at_end_seen, c.costs && c.one_core) << st.decision.reason;
    EXPECT_NE(st.decision.reason.find("over 10 epochs"), std::string::npos) << st.decision.reason;
    EXPECT_EQ(st.decision.reason.find("the readers wait"), std::string::npos) << st.decision.reason;
    if (c.costs) ExpectAllCached(*cache);
    cache.reset();
  }
}

// Measured warm, with one epoch left, a fill cannot repay its copying: no
// probe either (it would cost a window of fresh memory in a short epoch).
TEST_F(SequentialFillTest, OnABusyNodeOneEpochLeftIsNotProbed) {
  auto cache = Cache();
  ASSERT_TRUE(cache);
  // Three epochs planned: after the first, this caller still waits (0.1 s
  // per MB), but only one epoch is left once it is measured.
  SequentialFill::Options o = Caller([](uint64_t) { return 0.1; }, 2);
  o.epoch_bytes = 5'000'000;
  o.page_cached = true;
  const auto st = FillFor(cache, vol_, std::move(o), /*one_cpu=*/true);
  EXPECT_TRUE(st.decided);
  EXPECT_FALSE(st.decision.fill) << st.decision.reason;
  EXPECT_EQ(st.windows_filled, 0u) << st.decision.reason;
  EXPECT_EQ(cache->stats().samples, 0u);
}

// The same for one process with cores to spare, measured in its first
// epoch: read through the page cache, the one epoch after it reads warm
// pages, which filling cannot beat.
TEST_F(SequentialFillTest, APageCachedReaderWithOneEpochLeftIsNotProbed) {
  auto cache = Cache();
  ASSERT_TRUE(cache);
  SequentialFill::Options o = Caller([](uint64_t) { return 0.1; }, 1);
  o.page_cached = true;
  const auto st = FillFor(cache, vol_, std::move(o));
  EXPECT_TRUE(st.decided);
  EXPECT_FALSE(st.decision.fill) << st.decision.reason;
  EXPECT_NE(st.decision.reason.find("one epoch left"), std::string::npos) << st.decision.reason;
  EXPECT_EQ(st.windows_filled, 0u);
}

// With no epoch left after the one being read, nothing is probed or filled.
TEST_F(SequentialFillTest, NoEpochLeftNoProbe) {
  auto cache = Cache();
  ASSERT_TRUE(cache);
  // One epoch planned: none after it.
  const auto st = FillFor(cache, vol_, Caller([](uint64_t) { return 1.0; }, 0));
  EXPECT_TRUE(st.decided);
  EXPECT_FALSE(st.decision.fill) << st.decision.reason;
  EXPECT_EQ(st.windows_filled, 0u);
  EXPECT_EQ(cache->stats().samples, 0u);
}

// The node's processes decide from one measurement: the first to start
// measures and probes, the others take its figures instead of their own,
// so they agree (with their own epochs: here all the same) and only one
// probe (two windows) is read.
TEST_F(SequentialFillTest, TheNodesProcessesDecideFromOneMeasurement) {
  for (const bool pays : {false, true}) {
    SCOPED_TRACE(pays ? "the first caller waits" : "the first caller never waits");
    std::vector<std::shared_ptr<NodeCache>> caches = {Cache(), Cache(), Cache()};
    for (auto& c : caches) ASSERT_TRUE(c);
    SequentialFill::Options o = Caller([pays](uint64_t) { return pays ? 0.1 : 0.0; }, 10);
    // Every fill is held before each window it would fill (the first one
    // after its probe's two) until all have decided, so that they decide
    // with most of the volume still to fill.
    // (A hold ends at `go`, or after 30 s so that a broken test ends too.)
    auto go = std::make_shared<std::atomic<bool>>(false);
    auto held = [go](int free_asks) {
      return [go, asked = 0, free_asks]() mutable {
        if (asked++ >= free_asks) (void)testing::WaitUntil([&] { return go->load(); });
        return false;
      };
    };
    o.memory_short = held(2);
    auto decided = [](SequentialFill& f) {
      return testing::WaitUntil([&] { return f.stats().decided; });
    };
    auto first = std::make_unique<SequentialFill>(caches[0], vol_, std::move(o));
    first->Start();
    ASSERT_TRUE(decided(*first));
    std::vector<std::unique_ptr<SequentialFill>> fills;
    fills.push_back(std::move(first));
    // The others' callers would decide the other way on their own.
    for (int k = 1; k < 3; ++k) {
      SequentialFill::Options other = Caller([pays](uint64_t) { return pays ? 0.0 : 0.1; }, 10);
      other.memory_short = held(0);
      fills.push_back(std::make_unique<SequentialFill>(caches[k], vol_, std::move(other)));
      fills.back()->Start();
    }
    for (int k = 1; k < 3; ++k) EXPECT_TRUE(decided(*fills[k]));
    *go = true;
    uint64_t filled = 0, windows = 0;
    for (auto& f : fills) {
      f->WaitFilled();
      const auto st = f->stats();
      EXPECT_TRUE(st.decided);
      EXPECT_EQ(st.decision.fill, pays) << st.decision.reason;
      filled += st.windows_filled;
      windows = std::max(windows, st.windows);
    }
    EXPECT_EQ(filled, pays ? windows : 2u);
    if (pays) ExpectAllCached(*caches[1]);
    fills.clear();
    caches.clear();  // the last handle removes the region: the next round starts afresh
  }
}

// The cache never takes the last of the job's memory: with memory short
// before its first window, even a requested fill reads nothing, and says so.
TEST_F(SequentialFillTest, NoFillWhileMemoryIsShort) {
  auto cache = Cache();
  ASSERT_TRUE(cache);
  int asked = 0;
  SequentialFill fill(cache, vol_, {.epochs_after = 10, .requested = true, .memory_short = [&] {
                                      ++asked;
                                      return true;
                                    }});
  fill.WaitFilled();
  const auto st = fill.stats();
  EXPECT_GE(asked, 1);
  EXPECT_TRUE(st.memory_short);
  EXPECT_EQ(st.windows_filled, 0u);
  EXPECT_EQ(cache->stats().samples, 0u);
}

// Memory short in the middle of a fill: it stops, and whoever waits for it
// (a reader filling first, or at its first epoch's end) is let go at once,
// not after the wait for a process that died (2 s).
TEST_F(SequentialFillTest, AFillStoppedShortLetsItsReadersGo) {
  auto cache = Cache();
  ASSERT_TRUE(cache);
  int asked = 0;
  SequentialFill fill(cache, vol_, {.epochs_after = 10, .requested = true, .memory_short = [&] {
                                      return ++asked > 3;  // three windows, then short
                                    }});
  const auto start = std::chrono::steady_clock::now();
  fill.WaitFilled(/*stall_seconds=*/30);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto st = fill.stats();
  EXPECT_TRUE(st.memory_short);
  EXPECT_GT(st.windows_filled, 0u);
  EXPECT_LT(st.windows_filled, st.windows);
  EXPECT_LT(waited, 10.0);  // not the 30 s of a stalled node
}

// The fill's thread exists from construction but asks and reads nothing
// until Start(). "Nothing" is bounded by an event, not a time: a requested
// fill of another volume, made after it, fills that whole volume meanwhile
// (so this thread had every chance to run); once started, it does ask.
TEST_F(SequentialFillTest, NothingStartsBeforeTheReader) {
  auto other = testing::MakeSyntheticVolume(
      fs::path(tmp_.path()) / "other.dlfs",
      {.samples = 300,
       .bytes = [](uint64_t i) { return testing::RandomBytes(4000, static_cast<uint32_t>(i)); }});
  ASSERT_TRUE(other);
  auto cache = Cache();
  ASSERT_TRUE(cache);
  // Whatever the fill asks (its reader's progress, whether memory is
  // short) says whether it was started by then.
  std::atomic<bool> started{false}, asked_early{false}, asked{false};
  auto note = [&] {
    if (!started) asked_early = true;
    asked = true;
  };
  SequentialFill::Options o = Caller([](uint64_t) { return 0.0; }, 10);
  o.progress = [&note, progress = std::move(o.progress)] {
    note();
    return progress();
  };
  o.memory_short = [&note] {
    note();
    return true;  // stops it at its first window, once started
  };
  {
    SequentialFill fill(cache, vol_, std::move(o));
    std::string note;
    auto other_cache = NodeCache::Open(*other, {.budget = uint64_t{1} << 30}, &note);
    ASSERT_TRUE(other_cache) << note;
    SequentialFill reference(other_cache, other, {.epochs_after = 0, .requested = true});
    reference.WaitFilled();
    ASSERT_GT(reference.stats().windows_filled, 0u);
    EXPECT_FALSE(asked_early);
    EXPECT_EQ(fill.stats().windows_filled, 0u);
    EXPECT_FALSE(fill.stats().decided);

    started = true;
    fill.Start();
    EXPECT_TRUE(testing::WaitUntil([&] { return asked.load(); })) << "started, it never asked";
  }
  EXPECT_FALSE(asked_early);
  EXPECT_EQ(cache->stats().samples, 0u);  // memory was short: nothing filled
}

// Destroyed without being started: its thread stops cleanly, having read
// nothing.
TEST_F(SequentialFillTest, DestroyedBeforeTheReaderStopsCleanly) {
  auto cache = Cache();
  ASSERT_TRUE(cache);
  { SequentialFill fill(cache, vol_, {.epochs_after = 10}); }
  EXPECT_EQ(cache->stats().samples, 0u);
}

// The loader's rule (hold_when_it_fits): a cache that holds the whole
// volume is filled at once, as for a budget given, when two epochs or more
// follow; with one, nothing is read; a cache too small for the volume is
// decided on measured costs (this caller never waits: no fill after the
// probe).
TEST_F(SequentialFillTest, AVolumeThatFitsIsHeldByTheEpochsThatFollow) {
  auto cache = Cache();
  ASSERT_TRUE(cache && cache->holds_all());
  {
    SequentialFill fill(cache, vol_, {.epochs_after = 2, .hold_when_it_fits = true});
    EXPECT_TRUE(fill.requested());  // started at once: no Start() needed
    fill.WaitFilled();
    const auto st = fill.stats();
    EXPECT_TRUE(st.decision.fill);
    EXPECT_NE(st.decision.reason.find(cache_internal::kHeldWhole), std::string::npos)
        << st.decision.reason;
    ExpectAllCached(*cache);
  }

  fs::remove_all(fs::path(shm_.path()) / "shm");
  fs::create_directories(fs::path(shm_.path()) / "shm");
  cache = Cache();
  ASSERT_TRUE(cache);
  auto one = FillFor(cache, vol_, {.epochs_after = 1, .hold_when_it_fits = true});
  EXPECT_TRUE(one.decided);
  EXPECT_FALSE(one.decision.fill);
  EXPECT_NE(one.decision.reason.find("no fill: 1 epoch after this one"), std::string::npos)
      << one.decision.reason;
  EXPECT_EQ(one.windows_filled, 0u);
  EXPECT_EQ(cache->stats().samples, 0u);

  fs::remove_all(fs::path(shm_.path()) / "shm");
  fs::create_directories(fs::path(shm_.path()) / "shm");
  std::string note;
  auto small = NodeCache::Open(*vol_, {.budget = vol_->info().data_bytes / 2}, &note);
  ASSERT_TRUE(small) << note;
  EXPECT_FALSE(small->holds_all());
  SequentialFill::Options o = Caller([](uint64_t) { return 0.0; }, 100);
  o.hold_when_it_fits = true;
  ExpectNoFillAfterTheProbe(FillFor(small, vol_, std::move(o)));
}

}  // namespace sequential_fill_test
}  // namespace dlfs
