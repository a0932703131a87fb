#include "dlfs/loader.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <optional>
#include <random>

#include "dlfs/builder.h"
#include "dlfs/testing.h"
#include "synthetic_volume.h"
#include "testutil.h"

namespace dlfs {
namespace {

using testing::TempDir;

// A volume of `n` samples of random sizes (some empty, some over 1 MiB);
// sample bytes are derived from the index so tests can check them.
std::shared_ptr<Volume> MakeVolume(const std::string& path, uint64_t n, uint32_t align = 1) {
  testing::SyntheticVolume spec{.samples = n, .volume = {.align = align}};
  spec.bytes = [](uint64_t i) {
    std::mt19937 rng(static_cast<uint32_t>(i) + 9);
    size_t len = rng() % 6000;
    if (i % 97 == 5) len = 0;
    if (i % 211 == 3) len = (1 << 20) + rng() % 300000;
    return testing::RandomBytes(len, static_cast<uint32_t>(i));
  };
  return testing::MakeSyntheticVolume(path, spec);
}

struct EpochResult {
  std::vector<uint64_t> order;
  Status error;
};

// Reads one epoch, checking every sample's bytes and label against the volume.
EpochResult ReadEpoch(Loader& loader, const Volume& vol, uint64_t epoch) {
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
      auto want = vol.Read(idx);
      EXPECT_OK(want);
      const auto got = batch.sample(i);
      EXPECT_EQ(got.size(), want->size()) << "sample " << idx;
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want->begin())) << "sample " << idx;
      EXPECT_EQ(batch.label(i), vol.directory().label(idx));
    }
  }
  return out;
}

class LoaderTest : public ::testing::TestWithParam<EngineKind> {
 protected:
  void SetUp() override { vol_ = MakeVolume(tmp_ / "v.dlfs", 1000); }

  std::unique_ptr<Loader> Make(LoaderOptions o) {
    o.engine.kind = GetParam();
    auto l = Loader::Create(vol_, o);
    if (!l.ok() && l.status().code() == StatusCode::kUnavailable) return nullptr;
    EXPECT_OK(l);
    return l.ok() ? std::move(l).value() : nullptr;
  }

  TempDir tmp_;
  std::shared_ptr<Volume> vol_;
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
        const EpochResult r = ReadEpoch(*loader, *vol_, epoch);
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
      const EpochResult r = ReadEpoch(*loader, *vol_, 4);
      ASSERT_OK(r.error);
      for (uint64_t i : r.order) ++seen[i];
    }
    for (auto& [i, c] : seen) EXPECT_EQ(c, 1) << i;
    EXPECT_GT(seen.size(), 1000u - world * 16);
  }
}

TEST_P(LoaderTest, EnginesAgreeByteForByte) {
  auto a = Make({.sampler = {.seed = 2, .batch_size = 64}});
  if (!a) GTEST_SKIP() << "engine unavailable";
  auto b = Loader::Create(vol_, {.sampler = {.seed = 2, .batch_size = 64},
                                 .engine = {.kind = EngineKind::kPread, .direct_io = false}});
  ASSERT_OK(b);
  a->SetEpoch(0);
  (*b)->SetEpoch(0);
  Batch x, y;
  while (*a->Next(&x)) {
    ASSERT_TRUE(*(*b)->Next(&y));
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(x.index(i), y.index(i));
      ASSERT_TRUE(std::ranges::equal(x.sample(i), y.sample(i)));
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
      ASSERT_TRUE(std::ranges::equal(b.sample(i), *want));
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
  loader->SetEpoch(0);
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

TEST_P(LoaderTest, InjectedFaults) {
  // Short reads and EAGAIN: retried, data exact.
  std::optional<testing::ScopedFaultInjection> faults;
  faults.emplace(testing::FaultInjection{.short_every = 3, .eagain_every = 4, .delay_us = 10});
  auto ok = Make({.sampler = {.batch_size = 40}, .engine = {.queue_depth = 8}});
  if (!ok) GTEST_SKIP() << "engine unavailable";
  const EpochResult r = ReadEpoch(*ok, *vol_, 0);
  ASSERT_OK(r.error);
  EXPECT_EQ(r.order.size(), 1000u);

  // EIO: an error naming the file and a sample; never data.
  faults.reset();
  faults.emplace(testing::FaultInjection{.eio_every = 7});
  auto bad = Make({.sampler = {.batch_size = 40}, .engine = {.queue_depth = 8}});
  bad->SetEpoch(0);
  Batch b;
  int errors = 0, batches = 0;
  while (true) {
    auto more = bad->Next(&b);
    if (!more.ok()) {
      ++errors;
      EXPECT_EQ(more.status().sys_errno(), EIO) << more.status().ToString();
      EXPECT_NE(more.status().message().find("v.dlfs: sample "), std::string::npos);
      continue;
    }
    if (!*more) break;
    ++batches;
    for (size_t i = 0; i < b.size(); ++i) {
      ASSERT_TRUE(std::ranges::equal(b.sample(i), *vol_->Read(b.index(i))));
    }
  }
  EXPECT_GT(errors, 0);
  EXPECT_EQ(errors + batches, static_cast<int>(bad->batches_per_epoch()));
}

TEST_P(LoaderTest, AlignedVolumeAndBufferedMode) {
  auto aligned = MakeVolume(tmp_ / "a.dlfs", 300, 4096);
  for (bool direct : {true, false}) {
    auto l = Loader::Create(aligned, {.sampler = {.batch_size = 32},
                                      .engine = {.kind = GetParam(), .direct_io = direct}});
    if (!l.ok()) GTEST_SKIP() << l.status().ToString();
    const EpochResult r = ReadEpoch(**l, *aligned, 0);
    ASSERT_OK(r.error);
    EXPECT_EQ(r.order.size(), 300u);
  }
}

TEST_P(LoaderTest, VolumeOnTmpfs) {
  if (!std::filesystem::exists("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  const std::string path = "/dev/shm/dlfs-loader-test-" + std::to_string(::getpid()) + ".dlfs";
  std::filesystem::remove(path);
  auto v = MakeVolume(path, 200);
  auto l = Loader::Create(v, {.sampler = {.batch_size = 32}, .engine = {.kind = GetParam()}});
  if (!l.ok()) {
    std::filesystem::remove(path);
    GTEST_SKIP() << l.status().ToString();
  }
  const EpochResult r = ReadEpoch(**l, *v, 0);
  EXPECT_OK(r.error);
  EXPECT_EQ(r.order.size(), 200u);
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Engines, LoaderTest,
                         ::testing::Values(EngineKind::kUring, EngineKind::kPread),
                         [](const auto& info) { return std::string(EngineKindName(info.param)); });

TEST(LoaderOptionsTest, BadOptionsAreRefused) {
  TempDir tmp;
  auto v = MakeVolume(tmp / "v.dlfs", 10);
  EXPECT_EQ(Loader::Create(v, {.sampler = {.rank = 3, .world_size = 2}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Loader::Create(v, {.sampler = {.batch_size = 0}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Loader::Create(v, {.io_threads = 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Loader::Create(nullptr, {}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dlfs
