#include "dlfs/loader.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "dlfs/builder.h"
#include "dlfs/sample_reader.h"
#include "loader/batch_planner.h"
#include "synthetic_volume.h"
#include "testutil.h"

namespace dlfs {
namespace loader_test {

using testing::SampleOracle;
using testing::TempDir;

// A volume of `n` samples of random sizes (some empty, some over 1 MiB);
// sample bytes are derived from the index so tests can check them.
testing::SyntheticVolume LoaderVolume(uint64_t n, uint32_t align = 1) {
  testing::SyntheticVolume spec{.samples = n, .volume = {.align = align}};
  spec.bytes = [](uint64_t i) {
    std::mt19937 rng(static_cast<uint32_t>(i) + 9);
    size_t len = rng() % 6000;
    if (i % 97 == 5) len = 0;
    if (i % 211 == 3) len = (1 << 20) + rng() % 300000;
    return testing::RandomBytes(len, static_cast<uint32_t>(i));
  };
  return spec;
}
std::shared_ptr<Volume> MakeVolume(const std::string& path, uint64_t n, uint32_t align = 1) {
  return testing::MakeSyntheticVolume(path, LoaderVolume(n, align));
}

// `n` samples of `size` bytes back to back (no alignment): many share blocks.
std::shared_ptr<Volume> MakeSmallVolume(const std::string& path, uint64_t n, uint32_t size) {
  auto b = VolumeBuilder::Create(path, {});
  EXPECT_OK(b);
  for (uint64_t i = 0; i < n; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "s/%06llu", static_cast<unsigned long long>(i));
    EXPECT_OK((*b)->Add(name, testing::RandomBytes(size, static_cast<uint32_t>(i) + 7), 0));
  }
  EXPECT_OK((*b)->Finish());
  auto v = Volume::Open(path);
  EXPECT_OK(v);
  return *v;
}

struct EpochResult {
  std::vector<uint64_t> order;
  Status error;
};

// Reads one epoch, checking every sample's bytes and label against the
// volume `want` reads.
EpochResult ReadEpoch(Loader& loader, SampleOracle& want, uint64_t epoch) {
  EpochResult out;
  loader.SetEpoch(epoch);
  Batch batch;
  uint64_t expect_seq = 0;
  while (true) {
    auto more = loader.Next(&batch);
    if (!more.ok()) {
      out.error = more.status();
      return out;
    }
    if (!*more) break;
    EXPECT_EQ(batch.sequence(), expect_seq++);
    EXPECT_EQ(batch.epoch(), epoch);
    for (size_t i = 0; i < batch.size(); ++i) {
      const uint64_t idx = batch.index(i);
      out.order.push_back(idx);
      const auto got = batch.sample(i);
      EXPECT_EQ(got.size(), want(idx).size()) << "sample " << idx;
      EXPECT_TRUE(testing::SameBytes(got, want(idx))) << "sample " << idx;
      EXPECT_EQ(batch.label(i), want.volume().directory().label(idx));
    }
  }
  return out;
}

// Every loader test runs with each engine, reading from the device
// (cache_budget 0) and with a node cache the test volumes fit in (tests in
// node_cache_test.cc fill it first; here most reads find it filling).
using LoaderParam = std::tuple<EngineKind, bool>;

class LoaderTest : public ::testing::TestWithParam<LoaderParam> {
 protected:
  void SetUp() override {
    vol_ = testing::CopySyntheticVolume("loader-1000", LoaderVolume(1000), tmp_ / "v.dlfs");
    if (vol_) want_.emplace(*vol_);
  }

  EngineKind engine() const { return std::get<0>(GetParam()); }
  bool tier() const { return std::get<1>(GetParam()); }

  // The options as the parameters say.
  LoaderOptions With(LoaderOptions o) const {
    o.engine.kind = engine();
    o.cache_budget = tier() ? (uint64_t{1} << 30) : 0;
    return o;
  }

  std::unique_ptr<Loader> Make(LoaderOptions o, std::shared_ptr<Volume> vol = nullptr) {
    auto l = Loader::Create(vol ? vol : vol_, With(o));
    if (!l.ok() && l.status().code() == StatusCode::kUnavailable) return nullptr;
    EXPECT_OK(l);
    if (l.ok()) {
      const bool has_tier = (*l)->description().find("node cache") != std::string::npos;
      EXPECT_EQ(has_tier, tier()) << (*l)->description();
    }
    return l.ok() ? std::move(l).value() : nullptr;
  }

  TempDir tmp_;
  std::shared_ptr<Volume> vol_;
  std::optional<SampleOracle> want_;  // vol_'s samples
};

TEST_P(LoaderTest, BatchesFollowTheSamplerWithExactBytes) {
  for (bool coalesce : {true, false}) {
    for (uint32_t threads : {1u, 3u}) {
      auto loader = Make({.sampler = {.seed = 5, .batch_size = 37},
                          .engine = {.queue_depth = 16},
                          .plan = {.coalesce = coalesce},
                          .prefetch_batches = 3,
                          .io_threads = threads});
      if (!loader) GTEST_SKIP() << "engine unavailable";
      for (uint64_t epoch : {0, 1}) {
        const EpochResult r = ReadEpoch(*loader, *want_, epoch);
        ASSERT_OK(r.error);
        EXPECT_EQ(r.order, loader->sampler().RankIndices(epoch));
        EXPECT_EQ(r.order.size(), 1000u);
      }
    }
  }
}

TEST_P(LoaderTest, EverySampleOnceAcrossRanks) {
  for (uint32_t world : {2u, 3u}) {
    std::map<uint64_t, int> seen;
    for (uint32_t rank = 0; rank < world; ++rank) {
      auto loader = Make(
          {.sampler = {
               .seed = 1, .rank = rank, .world_size = world, .batch_size = 16, .drop_last = true}});
      if (!loader) GTEST_SKIP() << "engine unavailable";
      const EpochResult r = ReadEpoch(*loader, *want_, 4);
      ASSERT_OK(r.error);
      for (uint64_t i : r.order) ++seen[i];
    }
    for (auto& [i, c] : seen) EXPECT_EQ(c, 1) << i;
    EXPECT_GT(seen.size(), 1000u - world * 16);
  }
}

// Also: with a node cache, the same bytes.
TEST_P(LoaderTest, EnginesAgreeByteForByte) {
  auto a = Make({.sampler = {.seed = 2, .batch_size = 64}});
  if (!a) GTEST_SKIP() << "engine unavailable";
  auto b = Loader::Create(vol_, {.sampler = {.seed = 2, .batch_size = 64},
                                 .engine = {.kind = EngineKind::kPread, .direct_io = false},
                                 .cache_budget = 0});
  ASSERT_OK(b);
  a->SetEpoch(0);
  (*b)->SetEpoch(0);
  Batch x, y;
  while (*a->Next(&x)) {
    ASSERT_TRUE(*(*b)->Next(&y));
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(x.index(i), y.index(i));
      ASSERT_TRUE(testing::SameBytes(x.sample(i), y.sample(i)));
    }
  }
  EXPECT_FALSE(*(*b)->Next(&y));
}

TEST_P(LoaderTest, ViewsOutliveTheLoader) {
  std::vector<Batch> kept;
  {
    auto loader = Make({.sampler = {.batch_size = 50}, .prefetch_batches = 2});
    if (!loader) GTEST_SKIP() << "engine unavailable";
    loader->SetEpoch(0);
    Batch b;
    // Hold every batch: the pool must grow rather than recycle a held buffer.
    while (*loader->Next(&b)) kept.push_back(b);
  }
  uint64_t checked = 0;
  for (const Batch& b : kept) {
    for (size_t i = 0; i < b.size(); ++i, ++checked) {
      auto want = vol_->Read(b.index(i));
      ASSERT_TRUE(testing::SameBytes(b.sample(i), *want));
    }
  }
  EXPECT_EQ(checked, 1000u);
}

TEST_P(LoaderTest, ChecksumMismatchNamesTheSampleAndLoadingGoesOn) {
  // Damage one sample's bytes on disk.
  const uint64_t victim = *vol_->directory().Lookup("c2/000010");
  const SampleInfo s = vol_->directory().sample(victim);
  ASSERT_GT(s.length, 0u);
  {
    const int fd = ::open((tmp_ / "v.dlfs").c_str(), O_WRONLY);
    const char junk = 0x5a;
    ASSERT_EQ(::pwrite(fd, &junk, 1, static_cast<off_t>(s.offset + s.length / 2)), 1);
    ::close(fd);
  }
  auto loader = Make({.sampler = {.shuffle = false, .batch_size = 10}});
  if (!loader) GTEST_SKIP() << "engine unavailable";
  // Twice: the second epoch may find samples in the node cache (never the
  // damaged one: only bytes matching their checksum are cached).
  for (uint64_t epoch : {0, 1}) {
    loader->SetEpoch(epoch);
    Batch b;
    int errors = 0;
    uint64_t samples = 0;
    while (true) {
      auto more = loader->Next(&b);
      if (!more.ok()) {
        ++errors;
        EXPECT_EQ(more.status().code(), StatusCode::kCorruption);
        const std::string want =
            "v.dlfs: sample " + std::to_string(victim) + " 'c2/000010': checksum mismatch";
        EXPECT_NE(more.status().message().find(want), std::string::npos) << more.status().message();
        continue;
      }
      if (!*more) break;
      samples += b.size();
    }
    EXPECT_EQ(errors, 1);
    EXPECT_EQ(samples, 990u);  // every other batch arrived
  }
}

TEST_P(LoaderTest, InjectedFaults) {
  // Short reads and EAGAIN: retried, data exact.
  auto ok = Make({.sampler = {.batch_size = 40},
                  .engine = {.queue_depth = 8,
                             .faults = {.short_every = 3, .eagain_every = 4, .delay_us = 10}}});
  if (!ok) GTEST_SKIP() << "engine unavailable";
  const EpochResult r = ReadEpoch(*ok, *want_, 0);
  ASSERT_OK(r.error);
  EXPECT_EQ(r.order.size(), 1000u);

  // EIO: an error naming the file and a sample; never data.
  auto bad = Make(
      {.sampler = {.batch_size = 40}, .engine = {.queue_depth = 8, .faults = {.eio_every = 7}}});
  bad->SetEpoch(0);
  Batch b;
  int errors = 0, batches = 0;
  while (true) {
    auto more = bad->Next(&b);
    if (!more.ok()) {
      ++errors;
      EXPECT_EQ(more.status().sys_errno(), EIO) << more.status().ToString();
      EXPECT_NE(more.status().message().find("v.dlfs: sample"), std::string::npos)
          << more.status().message();
      continue;
    }
    if (!*more) break;
    ++batches;
    for (size_t i = 0; i < b.size(); ++i) {
      ASSERT_TRUE(testing::SameBytes(b.sample(i), *vol_->Read(b.index(i))));
    }
  }
  EXPECT_GT(errors, 0);
  EXPECT_EQ(errors + batches, static_cast<int>(bad->batches_per_epoch()));
}

TEST_P(LoaderTest, AlignedVolumeAndBufferedMode) {
  auto aligned = MakeVolume(tmp_ / "a.dlfs", 300, 4096);
  SampleOracle want(*aligned);
  for (bool direct : {true, false}) {
    auto l = Loader::Create(aligned,
                            With({.sampler = {.batch_size = 32}, .engine = {.direct_io = direct}}));
    if (!l.ok()) GTEST_SKIP() << l.status().ToString();
    const EpochResult r = ReadEpoch(**l, want, 0);
    ASSERT_OK(r.error);
    EXPECT_EQ(r.order.size(), 300u);
  }
}

TEST_P(LoaderTest, VolumeOnTmpfs) {
  if (!std::filesystem::exists("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  const std::string path = "/dev/shm/dlfs-loader-test-" + std::to_string(::getpid()) + ".dlfs";
  std::filesystem::remove(path);
  auto v = MakeVolume(path, 200);
  auto l = Loader::Create(v, With({.sampler = {.batch_size = 32}}));
  if (!l.ok()) {
    std::filesystem::remove(path);
    GTEST_SKIP() << l.status().ToString();
  }
  SampleOracle want(*v);
  const EpochResult r = ReadEpoch(**l, want, 0);
  EXPECT_OK(r.error);
  EXPECT_EQ(r.order.size(), 200u);
  std::filesystem::remove(path);
}

// Issue 13 #5: a damaged byte range under a coalesced read names the
// samples whose bytes lie in it, not the first sample the read held.
TEST_P(LoaderTest, DamagedRangeNamesExactlyTheSamplesInside) {
  // Small samples packed back to back, so a batch's reads coalesce.
  auto v = MakeSmallVolume(tmp_ / "s.dlfs", 64, 1000);
  const uint64_t victim = 21;
  const SampleInfo s = v->directory().sample(victim);
  auto loader = Make({.sampler = {.shuffle = false, .batch_size = 16},
                      .engine = {.faults = {.eio_target = 0,
                                            .eio_offset = s.offset + s.length / 2,
                                            .eio_length = 1}}},
                     v);
  if (!loader) GTEST_SKIP() << "engine unavailable";
  // The samples sharing the damaged 4 KiB block (only the victim may be
  // named when reads are not aligned), and the batches holding them.
  const uint64_t a = 4096;
  std::vector<uint64_t> hit;
  std::set<uint64_t> bad_batches;
  for (uint64_t i = 0; i < v->size(); ++i) {
    const SampleInfo x = v->directory().sample(i);
    const uint64_t bad = s.offset + s.length / 2;
    if (x.offset / a * a <= bad && bad < (x.offset + x.length + a - 1) / a * a) {
      hit.push_back(i);
      bad_batches.insert(i / 16);
    }
  }
  for (uint64_t epoch : {0, 1}) {
    loader->SetEpoch(epoch);
    Batch b;
    int errors = 0;
    uint64_t samples = 0;
    while (true) {
      auto more = loader->Next(&b);
      if (!more.ok()) {
        ++errors;
        const std::string m = more.status().message();
        EXPECT_EQ(more.status().sys_errno(), EIO) << m;
        EXPECT_NE(m.find("sample"), std::string::npos) << m;
        EXPECT_NE(m.find(std::to_string(victim) + " '"), std::string::npos) << m;
        // Every named sample lies in the damaged block; nothing else is.
        for (uint64_t i = 0; i < v->size(); ++i) {
          const bool named = m.find(" " + std::to_string(i) + " '") != std::string::npos;
          const bool damaged = std::find(hit.begin(), hit.end(), i) != hit.end();
          if (named) {
            EXPECT_TRUE(damaged) << "names healthy sample " << i << ": " << m;
          }
        }
        continue;
      }
      if (!*more) break;
      for (size_t i = 0; i < b.size(); ++i) {
        ASSERT_TRUE(testing::SameBytes(b.sample(i), *v->Read(b.index(i))));
        ++samples;
      }
    }
    // The victim's batch fails, perhaps a neighbour's that shares its
    // block; every other batch arrives whole.
    EXPECT_GE(errors, 1) << "epoch " << epoch;
    EXPECT_LE(errors, static_cast<int>(bad_batches.size())) << "epoch " << epoch;
    EXPECT_EQ(samples, 64u - 16 * errors);
  }
}

// Batches of the next epoch are read ahead, but only handed out once that
// epoch is set; going back or restarting an epoch works.
TEST_P(LoaderTest, ReadsPastAnEpochsEndNeverSurfaceEarly) {
  auto loader = Make({.sampler = {.seed = 3, .batch_size = 100}, .prefetch_batches = 6});
  if (!loader) GTEST_SKIP() << "engine unavailable";
  for (uint64_t epoch : {0, 1, 4, 2}) {  // forward, skipping, back
    const EpochResult r = ReadEpoch(*loader, *want_, epoch);
    ASSERT_OK(r.error);
    EXPECT_EQ(r.order, loader->RankIndices(epoch)) << "epoch " << epoch;
    Batch b;
    // Over: the next epoch's batches (already read) are not handed out.
    auto more = loader->Next(&b);
    ASSERT_OK(more);
    EXPECT_FALSE(*more);
    EXPECT_FALSE(*loader->Next(&b));
  }
  // Restart mid-epoch: from its first batch again.
  loader->SetEpoch(7);
  Batch b;
  ASSERT_TRUE(*loader->Next(&b));
  ASSERT_TRUE(*loader->Next(&b));
  const EpochResult r = ReadEpoch(*loader, *want_, 7);
  ASSERT_OK(r.error);
  EXPECT_EQ(r.order, loader->RankIndices(7));
}

// Loaders destroyed with reads queued and in flight (a slow device), at
// every stage: nothing may write into freed buffers (run under ASan too).
TEST_P(LoaderTest, DestroyedWithReadsInFlight) {
  for (int stage = 0; stage < 4; ++stage) {
    auto loader = Make({.sampler = {.batch_size = 50},
                        .engine = {.faults = {.delay_us = 300}},
                        .prefetch_batches = 8});
    if (!loader) GTEST_SKIP() << "engine unavailable";
    if (stage >= 1) loader->SetEpoch(0);
    Batch kept;
    if (stage >= 2) {
      ASSERT_TRUE(*loader->Next(&kept));
    }
    if (stage >= 3) loader->SetEpoch(5);  // a new generation while the old is in flight
    loader.reset();
    if (kept.size() > 0) {
      EXPECT_TRUE(testing::SameBytes(kept.sample(0), *vol_->Read(kept.index(0))));
    }
  }
}

TEST_P(LoaderTest, StatsSayWhereTheTimeWent) {
  auto loader = Make({.sampler = {.batch_size = 64}});
  if (!loader) GTEST_SKIP() << "engine unavailable";
  const SourceStats before = loader->source_stats();
  ASSERT_OK(ReadEpoch(*loader, *want_, 0).error);
  const SourceStats d = loader->source_stats() - before;
  // Every byte read at least once: from the device, or from the cache
  // (a budget that holds the volume: filled by sequential reads before the
  // loader's first, which it then never makes).
  EXPECT_GE(d.io.bytes + d.cache_hit_bytes, vol_->info().data_bytes);
  if (tier()) {
    EXPECT_EQ(d.io.requests, 0u);
    EXPECT_GE(d.cache_hit_bytes, vol_->info().data_bytes);
  } else {
    EXPECT_GT(d.io.requests, 0u);
    EXPECT_GT(d.io.wall_seconds, 0);
    EXPECT_GT(d.io.mean_in_flight(), 0);
    EXPECT_GT(d.verify_seconds, 0);
  }
  EXPECT_LE(d.ring_empty_seconds(), d.io.wall_seconds);
  EXPECT_EQ(d.engines, 1u);
  if (tier()) {
    EXPECT_GE(d.cache_bytes, vol_->info().data_bytes);
    // Looked up when read: the epoch and the next one's first batches.
    EXPECT_GE(d.cache_hits + d.cache_misses, 1000u);
    // The budget was given: the cache holds every sample once the first
    // epoch ends, and an epoch comes from memory: no device reads.
    ASSERT_EQ(loader->source_stats().cache_used_bytes, vol_->info().data_bytes);
    // A batch prefetched while the last sample was being filled may still
    // count its miss (and read) late; every worker has moved past it once a
    // whole epoch has been delivered, since each delivers its own batches.
    // Not epoch 299: the first batches of 300 would be looked up (counted)
    // while prefetched, before s1.
    ASSERT_OK(ReadEpoch(*loader, *want_, 298).error);
    const SourceStats s1 = loader->source_stats();
    ASSERT_OK(ReadEpoch(*loader, *want_, 300).error);
    const SourceStats s2 = loader->source_stats() - s1;
    EXPECT_EQ(s2.io.requests, 0u);
    EXPECT_GE(s2.cache_hits, 1000u);
    EXPECT_EQ(s2.cache_misses, 0u);
    EXPECT_GE(s2.cache_sharers, 1u);
  } else {
    EXPECT_GT(d.buffer_bytes, 0u);
    EXPECT_EQ(d.cache_bytes, 0u);
  }
  if (engine() == EngineKind::kUring) {
    // COOP_TASKRUN is 5.19, SINGLE_ISSUER 6.0: this kernel has them.
    utsname u;
    ASSERT_EQ(::uname(&u), 0);
    int major = 0, minor = 0;
    std::sscanf(u.release, "%d.%d", &major, &minor);
    if (major > 6 || (major == 6 && minor >= 1)) {
      EXPECT_NE(std::find(d.uring_flags.begin(), d.uring_flags.end(), "SINGLE_ISSUER"),
                d.uring_flags.end());
      EXPECT_NE(std::find(d.uring_flags.begin(), d.uring_flags.end(), "DEFER_TASKRUN"),
                d.uring_flags.end());
    }
  } else {
    EXPECT_TRUE(d.uring_flags.empty());
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, LoaderTest,
                         ::testing::Combine(::testing::Values(EngineKind::kUring,
                                                              EngineKind::kPread),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(EngineKindName(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_tier" : "_device");
                         });

// Samples much smaller than a block: the loader reads them through the page
// cache (O_DIRECT would read 4 KiB per 600-byte sample) and says so; the
// batches hold exactly the bytes, labels and order of one O_DIRECT read per
// sample (every sample compared with its CRC-checked read).
TEST(SmallSamplesTest, BufferedReadsGiveWhatOneReadPerSampleGives) {
  TempDir tmp;
  auto v = MakeSmallVolume(tmp / "s.dlfs", 3000, 600);
  ASSERT_TRUE(v);
  EXPECT_GT(loader_internal::DirectReadAmplification(v->directory(), {}, 4096), 6.0);
  EXPECT_LT(loader_internal::DirectReadAmplification(v->directory(), {}, 512), 2.5);
  LoaderOptions o{.sampler = {.seed = 5, .batch_size = 64}, .cache_budget = 0};
  ASSERT_OK_AND_ASSIGN(auto chosen, Loader::Create(v, o));
  LoaderOptions one_by_one = o;
  one_by_one.auto_direct_io = false;  // O_DIRECT as engine.direct_io says
  one_by_one.plan.coalesce = false;   // one read per sample
  ASSERT_OK_AND_ASSIGN(auto direct, Loader::Create(v, one_by_one));
  if (direct->description().find("O_DIRECT") == std::string::npos) {
    GTEST_SKIP() << "no O_DIRECT here: " << direct->description();
  }
  EXPECT_NE(chosen->description().find("buffered reads: with O_DIRECT each sample would read"),
            std::string::npos)
      << chosen->description();
  SampleOracle want(*v);
  for (uint64_t epoch : {0, 1}) {
    const EpochResult a = ReadEpoch(*chosen, want, epoch);
    const EpochResult b = ReadEpoch(*direct, want, epoch);
    ASSERT_OK(a.error);
    ASSERT_OK(b.error);
    EXPECT_EQ(a.order.size(), 3000u);
    EXPECT_EQ(a.order, b.order) << "epoch " << epoch;
  }
  // Bytes asked of the engine: the samples' own, not a block each (and
  // the next epoch's first batches, read ahead).
  EXPECT_LE(chosen->source_stats().io.bytes, 5 * 3000u * 600 / 2);
  EXPECT_GE(direct->source_stats().io.bytes, 2 * 3000u * 4096);
  // Aligned samples keep O_DIRECT.
  auto aligned = MakeVolume(tmp / "a.dlfs", 200, 4096);
  ASSERT_OK_AND_ASSIGN(auto l, Loader::Create(aligned, o));
  EXPECT_EQ(l->description().find("buffered reads"), std::string::npos) << l->description();
}

// Nothing is read ahead past the last planned epoch (nobody will ask for
// it), and an epoch past the plan is still read when asked for.
TEST(PlannedEpochsTest, NoReadsPastThePlanUnlessAsked) {
  TempDir tmp;
  auto v = MakeVolume(tmp / "v.dlfs", 300);
  ASSERT_TRUE(v);
  SampleOracle want(*v);
  LoaderOptions o{
      .sampler = {.seed = 1, .batch_size = 20}, .prefetch_batches = 6, .cache_budget = 0};
  o.planned_epochs = 1;
  ASSERT_OK_AND_ASSIGN(auto planned, Loader::Create(v, o));
  o.planned_epochs = 0;
  ASSERT_OK_AND_ASSIGN(auto unplanned, Loader::Create(v, o));
  for (Loader* l : {planned.get(), unplanned.get()}) {
    ASSERT_OK(ReadEpoch(*l, want, 0).error);
  }
  // The unplanned loader reads the next epoch's first batches ahead: once
  // it has (the event waited for), the planned one, read first and as fast,
  // has had every chance to read past its plan too.
  const uint64_t read = planned->source_stats().io.requests;
  EXPECT_TRUE(testing::WaitUntil([&] { return unplanned->source_stats().io.requests > read; }));
  EXPECT_EQ(planned->source_stats().io.requests, read);
  const EpochResult past = ReadEpoch(*planned, want, 1);
  ASSERT_OK(past.error);
  EXPECT_EQ(past.order, planned->RankIndices(1));
}

TEST(LoaderOptionsTest, BadOptionsAreRefused) {
  TempDir tmp;
  auto v = MakeVolume(tmp / "v.dlfs", 10);
  EXPECT_EQ(Loader::Create(v, {.sampler = {.rank = 3, .world_size = 2}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Loader::Create(v, {.sampler = {.batch_size = 0}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Loader::Create(v, {.io_threads = 65}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Loader::Create(nullptr, {}).status().code(), StatusCode::kInvalidArgument);
}

// io_threads 0: two I/O threads where io_uring reads through the page cache
// and the process has two cores of its own, one where O_DIRECT reads or the
// launcher says the node's cores are shared by more processes. Every sample
// arrives whichever is chosen.
TEST(LoaderOptionsTest, ChosenIoThreads) {
  TempDir tmp;
  auto v = MakeSmallVolume(tmp / "v.dlfs", 500, 700);
  SampleOracle want(*v);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  ASSERT_EQ(::sched_getaffinity(0, sizeof mask, &mask), 0);
  const uint32_t cores = static_cast<uint32_t>(CPU_COUNT(&mask));
  auto engines = [&](const LoaderOptions& o) -> uint32_t {
    auto l = Loader::Create(v, o);
    EXPECT_OK(l);
    if (!l.ok()) return 0;
    const EpochResult r = ReadEpoch(**l, want, 0);
    EXPECT_OK(r.error);
    EXPECT_EQ(r.order.size(), 500u);
    return (*l)->source_stats().engines;
  };
  const LoaderOptions buffered{.sampler = {.batch_size = 64},
                               .engine = {.kind = EngineKind::kUring, .direct_io = false}};
  auto uring = Loader::Create(v, buffered);
  if (!uring.ok()) GTEST_SKIP() << "no io_uring: " << uring.status().ToString();
  uring->reset();
  EXPECT_EQ(engines(buffered), cores >= 2 ? 2u : 1u);
  LoaderOptions given = buffered;
  given.io_threads = 3;
  EXPECT_EQ(engines(given), 3u);
  LoaderOptions pread = buffered;
  pread.engine.kind = EngineKind::kPread;
  EXPECT_EQ(engines(pread), 1u);
  // Four processes of a torchrun job on this node share its cores.
  const char* vars[][2] = {
      {"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "4"}};
  for (auto& [name, value] : vars) ::setenv(name, value, 1);
  const uint32_t shared = engines(buffered);
  for (auto& [name, value] : vars) ::unsetenv(name);
  EXPECT_EQ(shared, cores >= 8 ? 2u : 1u);
}

}  // namespace loader_test
}  // namespace dlfs

namespace dlfs {
namespace loader_test {

using testing::StatusIs;

TEST(SampleReaderTest, ManySamplesInOneCallWithExactBytes) {
  testing::TempDir tmp;
  auto v = MakeVolume(tmp / "v.dlfs", 400);
  for (EngineKind kind : {EngineKind::kUring, EngineKind::kPread}) {
    auto r = SampleReader::Create(v, {.engine = {.kind = kind}});
    if (!r.ok() && r.status().code() == StatusCode::kUnavailable) continue;
    ASSERT_OK(r);
    std::vector<uint64_t> want = {399, 0, 5, 5, 210, 3, 17, 211, 1};  // duplicates, huge, empty
    for (int round = 0; round < 3; ++round) {
      ASSERT_OK_AND_ASSIGN(Batch b, (*r)->Read(want));
      ASSERT_EQ(b.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(b.index(i), want[i]);
        EXPECT_EQ(b.label(i), v->directory().label(want[i]));
        EXPECT_TRUE(testing::SameBytes(b.sample(i), *v->Read(want[i]))) << want[i];
      }
      std::ranges::reverse(want);
    }
    const std::vector<uint64_t> bad = {1, 400};
    auto out = (*r)->Read(bad);
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find("400 out of range"), std::string::npos);
  }
}

TEST(SampleReaderTest, DamageIsNamedNeverReturned) {
  testing::TempDir tmp;
  auto v = MakeSmallVolume(tmp / "s.dlfs", 40, 700);
  const SampleInfo s = v->directory().sample(9);
  {
    const int fd = ::open((tmp / "s.dlfs").c_str(), O_WRONLY);
    const char junk = 0x33;
    ASSERT_EQ(::pwrite(fd, &junk, 1, static_cast<off_t>(s.offset + 3)), 1);
    ::close(fd);
  }
  auto r = SampleReader::Create(v, {});
  ASSERT_OK(r);
  const std::vector<uint64_t> idx = {2, 9, 30};
  auto out = (*r)->Read(idx);
  ASSERT_THAT(out, StatusIs(StatusCode::kCorruption, "sample 9 's/000009': checksum mismatch"));
  // Without verification the bytes are returned as stored.
  ASSERT_OK(((*r)->Read(idx, /*verify=*/false)));

  // A damaged device range: exactly the samples in it are named.
  const SampleInfo t = v->directory().sample(30);
  auto r2 = SampleReader::Create(  // the device path
      v, {.engine = {.faults = {.eio_offset = t.offset, .eio_length = 1}}, .cache_budget = 0});
  ASSERT_OK(r2);
  const std::vector<uint64_t> near = {26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36};
  auto failed = (*r2)->Read(near, false);
  ASSERT_THAT(failed, StatusIs(StatusCode::kIOError, " 30 's/000030'"));
  EXPECT_EQ(failed.status().sys_errno(), EIO);
  const std::string m = failed.status().message();
  for (uint64_t i : near) {
    const SampleInfo x = v->directory().sample(i);
    const bool shares =
        x.offset / 4096 * 4096 <= t.offset && t.offset < (x.offset + x.length + 4095) / 4096 * 4096;
    if (!shares) {
      EXPECT_EQ(m.find(" " + std::to_string(i) + " 's/"), std::string::npos) << i << ": " << m;
    }
  }
}

}  // namespace loader_test
}  // namespace dlfs
