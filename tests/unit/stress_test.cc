// Concurrency stress (docs/reliability.md): many threads reading one Volume,
// loaders destroyed with reads in flight, several loaders at once, and
// injected EIO / EAGAIN / short reads. Each test runs for a fixed time
// (DLFS_STRESS_MS, default 1500 ms), with a minimum amount of work for slow
// builds, so it costs about the same in the plain, ASan and ThreadSanitizer
// builds; the TSan build (scripts/test.sh) is where a data race fails it.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "dlfs/builder.h"
#include "dlfs/loader.h"
#include "dlfs/volume.h"
#include "testutil.h"

namespace dlfs {
namespace stress_test {

using Clock = std::chrono::steady_clock;
using testing::TempDir;

std::chrono::milliseconds StressTime() {
  const char* env = std::getenv("DLFS_STRESS_MS");
  return std::chrono::milliseconds(env && *env ? std::atoi(env) : 1500);
}

// Bytes of sample i: a function of i, so any thread can check any read.
std::vector<std::byte> SampleBytes(uint64_t i) {
  return testing::RandomBytes((i * 7919) % 9000 + (i % 50 == 0 ? 70000 : 0),
                              static_cast<uint32_t>(i));
}

class StressTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    auto b = VolumeBuilder::Create(*tmp_ / "v.dlfs");
    ASSERT_OK(b);
    for (uint64_t i = 0; i < kSamples; ++i) {
      ASSERT_OK((*b)->Add("d" + std::to_string(i % 7) + "/" + std::to_string(i), SampleBytes(i),
                          static_cast<uint32_t>(i % 7)));
    }
    ASSERT_OK((*b)->Finish());
  }
  static void TearDownTestSuite() {
    delete tmp_;
    tmp_ = nullptr;
  }
  void SetUp() override {
    auto v = Volume::Open(*tmp_ / "v.dlfs");
    ASSERT_OK(v);
    vol_ = *v;
  }

  // What sample `index` of the volume holds: it was added as number
  // name(index) (the directory orders samples by path, not by addition).
  std::vector<std::byte> Expected(uint64_t index) const {
    return SampleBytes(std::stoull(std::string(vol_->directory().name(index))));
  }

  // Checks every sample of `b` against Expected; false on a mismatch.
  bool BatchIsExact(const Batch& b) const {
    for (size_t i = 0; i < b.size(); ++i) {
      const auto want = Expected(b.index(i));
      const auto got = b.sample(i);
      if (!testing::SameBytes(got, want)) {
        return false;
      }
    }
    return true;
  }

  static constexpr uint64_t kSamples = 1500;
  static constexpr uint64_t kMinBatches = 40;  // per loader thread
  static inline TempDir* tmp_ = nullptr;
  std::shared_ptr<Volume> vol_;
};

TEST_F(StressTest, ConcurrentVolumeReads) {
  const auto until = Clock::now() + StressTime();
  std::atomic<uint64_t> reads{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<std::byte> buf;
      while (Clock::now() < until) {
        const uint64_t i = rng() % kSamples;
        // Both Read and ReadInto, verified or not, on the shared Volume.
        bool ok;
        if (rng() % 2) {
          auto r = vol_->Read(i, /*verify=*/true);
          ok = r.ok() && *r == Expected(i);
        } else {
          buf.resize(vol_->directory().sample(i).length);
          ok = vol_->ReadInto(i, buf, /*verify=*/false).ok() && buf == Expected(i);
        }
        (void)vol_->directory().Lookup(vol_->directory().Path(i));
        if (!ok) ++wrong;
        ++reads;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(reads.load(), 100u);
  std::printf("concurrent Volume reads: %llu\n", static_cast<unsigned long long>(reads.load()));
}

// Loaders created, read from for 0..3 batches and destroyed with the rest
// of their reads in flight; batches handed out must stay valid and exact
// after their loader is gone.
TEST_F(StressTest, LoadersDestroyedWithReadsInFlight) {
  const auto until = Clock::now() + StressTime();
  std::mt19937 rng(3);
  std::vector<Batch> kept;
  uint64_t loaders = 0;
  while (Clock::now() < until || loaders < 20) {
    for (EngineKind kind : {EngineKind::kPread, EngineKind::kUring}) {
      LoaderOptions o;
      o.engine.kind = kind;
      o.engine.queue_depth = 16;
      o.sampler.batch_size = 1 + rng() % 64;
      o.sampler.seed = rng();
      o.prefetch_batches = 1 + rng() % 8;
      o.io_threads = 1 + rng() % 3;
      auto l = Loader::Create(vol_, o);
      if (!l.ok() && l.status().code() == StatusCode::kUnavailable) continue;  // no io_uring
      ASSERT_OK(l);
      (*l)->SetEpoch(rng() % 5);
      const int take = rng() % 4;
      for (int k = 0; k < take; ++k) {
        Batch b;
        auto more = (*l)->Next(&b);
        ASSERT_OK(more);
        if (!*more) break;
        if (rng() % 3 == 0) kept.push_back(b);
      }
      if (rng() % 2) (*l)->SetEpoch(rng() % 5);  // restart with reads in flight
      ++loaders;
      // ~Loader here, with prefetch reads outstanding.
    }
    if (kept.size() > 16) kept.erase(kept.begin(), kept.begin() + 8);
  }
  for (const Batch& b : kept) EXPECT_TRUE(BatchIsExact(b));
  EXPECT_GE(loaders, 20u);
  std::printf("loaders destroyed mid-epoch: %llu\n", static_cast<unsigned long long>(loaders));
}

// Several loaders on one volume at once, each in its own thread, with
// faults injected: EAGAIN and short reads are retried (exact data); EIO is
// an error naming a sample, the loader goes on, and no batch is wrong.
TEST_F(StressTest, ConcurrentLoadersWithInjectedFaults) {
  for (const bool eio : {false, true}) {
    FaultInjection f{.short_every = 5, .eagain_every = 3, .delay_us = 20};
    if (eio) f.eio_every = 101;
    const auto until = Clock::now() + StressTime() / 2;
    std::atomic<uint64_t> batches{0}, errors{0}, wrong{0}, unnamed{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&, t] {
        LoaderOptions o;
        o.engine.kind = t == 0 ? EngineKind::kUring : EngineKind::kPread;
        o.engine.queue_depth = 8;
        o.engine.faults = f;
        o.sampler.batch_size = 8;
        o.sampler.seed = t;
        o.io_threads = 2;
        // Per-sample reads every epoch: the node cache would serve samples
        // instead of the reads that get the injected EIOs.
        o.cache_budget = 0;
        auto l = Loader::Create(vol_, o);
        if (!l.ok()) {
          o.engine.kind = EngineKind::kPread;
          l = Loader::Create(vol_, o);
        }
        if (!l.ok()) {
          ++wrong;
          return;
        }
        // At least kMinBatches whatever the speed (TSan is ~10x slower).
        uint64_t mine = 0;
        const auto more_work = [&] { return Clock::now() < until || mine < kMinBatches; };
        for (uint64_t epoch = 0; more_work(); ++epoch) {
          (*l)->SetEpoch(epoch);
          Batch b;
          while (more_work()) {
            ++mine;
            auto more = (*l)->Next(&b);
            if (!more.ok()) {
              ++errors;
              if (more.status().message().find("sample ") == std::string::npos) ++unnamed;
              continue;
            }
            if (!*more) break;
            if (!BatchIsExact(b)) ++wrong;
            ++batches;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(wrong.load(), 0u);
    EXPECT_EQ(unnamed.load(), 0u);
    EXPECT_GT(batches.load(), 3u);
    if (eio) {
      EXPECT_GT(errors.load(), 0u);
    } else {
      EXPECT_EQ(errors.load(), 0u);
    }
    std::printf("%s: %llu batches, %llu failed batches\n", eio ? "with EIO" : "EAGAIN + short",
                static_cast<unsigned long long>(batches.load()),
                static_cast<unsigned long long>(errors.load()));
  }
}

}  // namespace stress_test
}  // namespace dlfs
