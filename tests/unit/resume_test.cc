// Resuming a Loader mid-epoch from a saved SourceState (SaveState /
// LoadState), and the state's text form.
#include <algorithm>
#include <random>

#include "dlfs/loader.h"
#include "synthetic_volume.h"
#include "testutil.h"

namespace dlfs {
namespace {

using testing::TempDir;

// Sample i holds its index and random bytes, some over 1 MiB.
std::shared_ptr<Volume> MakeVolume(const std::string& path, uint64_t n) {
  testing::SyntheticVolume spec{.samples = n};
  spec.bytes = [](uint64_t i) {
    std::mt19937 rng(static_cast<uint32_t>(i) + 3);
    size_t len = 8 + rng() % 6000;
    if (i % 211 == 3) len = (1 << 20) + rng() % 300000;
    return testing::RandomBytes(len, static_cast<uint32_t>(i));
  };
  return testing::MakeSyntheticVolume(path, spec);
}

// Hands out batches until the epoch ends (or `limit` batches), checking
// that they follow on from `first_sequence` and hold the volume's bytes.
std::vector<uint64_t> Take(Loader& loader, uint64_t epoch, uint64_t first_sequence,
                           uint64_t limit = ~uint64_t{0}) {
  std::vector<uint64_t> order;
  Batch batch;
  for (uint64_t n = 0; n < limit; ++n) {
    auto more = loader.Next(&batch);
    EXPECT_OK(more);
    if (!more.ok() || !*more) break;
    EXPECT_EQ(batch.epoch(), epoch);
    EXPECT_EQ(batch.sequence(), first_sequence + n);
    for (size_t i = 0; i < batch.size(); ++i) {
      order.push_back(batch.index(i));
      auto want = loader.volume().Read(batch.index(i));
      EXPECT_OK(want);
      EXPECT_TRUE(std::ranges::equal(batch.sample(i), *want)) << "sample " << batch.index(i);
    }
  }
  return order;
}

std::vector<uint64_t> Concat(std::vector<uint64_t> a, const std::vector<uint64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

using ResumeParam = std::tuple<EngineKind, bool>;  // engine, node cache

class ResumeTest : public ::testing::TestWithParam<ResumeParam> {
 protected:
  void SetUp() override { vol_ = MakeVolume(tmp_ / "v.dlfs", 600); }

  std::unique_ptr<Loader> Make(LoaderOptions o) {
    o.engine.kind = std::get<0>(GetParam());
    o.cache_budget = std::get<1>(GetParam()) ? (uint64_t{1} << 30) : 0;
    auto l = Loader::Create(vol_, o);
    if (!l.ok() && l.status().code() == StatusCode::kUnavailable) return nullptr;
    EXPECT_OK(l);
    return l.ok() ? std::move(l).value() : nullptr;
  }

  TempDir tmp_;
  std::shared_ptr<Volume> vol_;
};

// Interrupted after batch k, resumed by a new loader from the state's text:
// the two runs together are the epoch, each sample once, in order; the
// next epoch is whole.
TEST_P(ResumeTest, TwoRunsMakeTheEpochInOrder) {
  std::vector<uint64_t> subset;
  for (uint64_t i = 0; i < 600; i += 2) subset.push_back(i);
  const std::vector<LoaderOptions> configs = {
      {.sampler = {.seed = 11, .batch_size = 32}, .prefetch_batches = 3},
      {.sampler = {.seed = 4, .rank = 1, .world_size = 3, .batch_size = 7},
       .prefetch_batches = 5,
       .io_threads = 2},
      {.sampler = {.shuffle = false, .batch_size = 10}, .subset = subset},
  };
  for (const LoaderOptions& o : configs) {
    auto probe = Make(o);
    if (!probe) GTEST_SKIP() << "engine unavailable";
    const uint64_t batches = probe->batches_per_epoch();
    const std::vector<uint64_t> epoch2 = probe->RankIndices(2);
    const std::vector<uint64_t> epoch3 = probe->RankIndices(3);
    probe.reset();
    for (uint64_t k : {uint64_t{0}, uint64_t{1}, uint64_t{5}, batches - 1, batches}) {
      SCOPED_TRACE("batch size " + std::to_string(o.sampler.batch_size) + ", k " +
                   std::to_string(k));
      std::string saved;
      std::vector<uint64_t> first;
      {
        auto a = Make(o);
        a->SetEpoch(2);
        first = Take(*a, 2, 0, k);
        ASSERT_OK_AND_ASSIGN(SourceState s, a->SaveState());
        EXPECT_EQ(s.epoch, 2u);
        EXPECT_EQ(s.batches, k);
        saved = s.Serialize();
      }  // interrupted: the loader and its read-ahead are gone
      auto b = Make(o);
      ASSERT_OK_AND_ASSIGN(SourceState s, SourceState::Parse(saved));
      ASSERT_OK(b->LoadState(s));
      ASSERT_OK_AND_ASSIGN(SourceState now, b->SaveState());
      EXPECT_EQ(now.epoch, 2u);
      EXPECT_EQ(now.batches, k);
      b->SetEpoch(2);  // the usual loop sets the restored epoch first: kept
      EXPECT_EQ(Concat(first, Take(*b, 2, k)), epoch2);
      ASSERT_OK_AND_ASSIGN(SourceState done, b->SaveState());
      EXPECT_EQ(done.batches, batches);
      b->SetEpoch(3);
      EXPECT_EQ(Take(*b, 3, 0), epoch3);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, ResumeTest,
                         ::testing::Combine(::testing::Values(EngineKind::kUring,
                                                              EngineKind::kPread),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(EngineKindName(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_tier" : "_device");
                         });

// Resuming at batch 80 of 100 reads the last 20 batches (and what reads
// ahead into the next epoch), not the 80 before.
TEST(ResumeIoTest, SkippedBatchesAreNotRead) {
  TempDir tmp;
  auto vol = MakeVolume(tmp / "v.dlfs", 1000);
  const LoaderOptions o = {
      .sampler = {.shuffle = false, .batch_size = 10}, .prefetch_batches = 2, .cache_budget = 0};
  uint64_t skipped_bytes = 0;
  for (uint64_t i = 0; i < 800; ++i) skipped_bytes += vol->directory().sample(i).length;
  ASSERT_OK_AND_ASSIGN(auto loader, Loader::Create(vol, o));
  SourceState s = *loader->SaveState();
  s.epoch = 0;
  s.batches = 80;
  ASSERT_OK(loader->LoadState(s));
  const std::vector<uint64_t> rest = Take(*loader, 0, 80);
  ASSERT_EQ(rest.size(), 200u);
  EXPECT_EQ(rest.front(), 800u);
  const uint64_t read = loader->source_stats().io.bytes;
  EXPECT_GT(read, 0u);
  EXPECT_LT(read, vol->info().data_bytes - skipped_bytes / 2)
      << "read " << read << " bytes; the skipped batches hold " << skipped_bytes;
}

TEST(ResumeIoTest, AnotherEpochAfterLoadStateStartsAfresh) {
  TempDir tmp;
  auto vol = MakeVolume(tmp / "v.dlfs", 100);
  ASSERT_OK_AND_ASSIGN(auto loader, Loader::Create(vol, {.sampler = {.seed = 3, .batch_size = 9}}));
  SourceState s = *loader->SaveState();
  s.epoch = 4;
  s.batches = 6;
  ASSERT_OK(loader->LoadState(s));
  loader->SetEpoch(5);
  EXPECT_EQ(Take(*loader, 5, 0), loader->RankIndices(5));
  // And a restored epoch is kept by its first SetEpoch only.
  ASSERT_OK(loader->LoadState(s));
  loader->SetEpoch(4);
  Batch b;
  ASSERT_TRUE(*loader->Next(&b));
  EXPECT_EQ(b.sequence(), 6u);
  loader->SetEpoch(4);
  EXPECT_EQ(Take(*loader, 4, 0), loader->RankIndices(4));
}

// A state from a loader ordering samples differently is refused, naming
// what differs, and the loader goes on as before.
TEST(ResumeIoTest, MismatchedStateIsRefused) {
  TempDir tmp;
  auto vol = MakeVolume(tmp / "v.dlfs", 100);
  auto other = MakeVolume(tmp / "w.dlfs", 100);  // same shape, another uuid
  auto make = [](std::shared_ptr<Volume> v, LoaderOptions o) {
    auto l = Loader::Create(std::move(v), o);
    EXPECT_OK(l);
    return std::move(l).value();
  };
  const LoaderOptions base = {.sampler = {.seed = 7, .batch_size = 10}};
  auto a = make(vol, base);
  a->SetEpoch(1);
  Take(*a, 1, 0, 3);
  const SourceState saved = *a->SaveState();

  struct Case {
    std::shared_ptr<Volume> vol;
    LoaderOptions options;
    std::string expect;
  };
  LoaderOptions seed = base, batch = base, ranks = base, shuffle = base, subset = base;
  seed.sampler.seed = 8;
  batch.sampler.batch_size = 20;
  ranks.sampler.world_size = 2;
  shuffle.sampler.shuffle = false;
  subset.subset = {1, 2, 3};
  const std::vector<Case> cases = {
      {vol, seed, "seed 7, this loader has seed 8"},
      {vol, batch, "batch size 10, this loader has batch size 20"},
      {vol, ranks, "rank 0 of 1, this loader has rank 0 of 2"},
      {vol, shuffle, "shuffle on, this loader has shuffle off"},
      {vol, subset, "sample count 100, this loader has sample count 3"},
      {other, base, "it was saved with volume " + vol->info().uuid},
  };
  for (const Case& c : cases) {
    auto b = make(c.vol, c.options);
    const Status st = b->LoadState(saved);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("cannot resume"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(c.vol->path()), std::string::npos) << st.message();
    // Left as it was: epoch 0 from its first batch.
    Batch first;
    ASSERT_TRUE(*b->Next(&first));
    EXPECT_EQ(first.epoch(), 0u);
    EXPECT_EQ(first.sequence(), 0u);
  }
  SourceState past = saved;
  past.batches = a->batches_per_epoch() + 1;
  const Status st = make(vol, base)->LoadState(past);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("11 batches were handed out of an epoch of 10"), std::string::npos)
      << st.message();
  // Another subset of the same size.
  LoaderOptions s1 = base, s2 = base;
  s1.subset = {1, 2, 3};
  s2.subset = {1, 2, 4};
  const Status sub = make(vol, s2)->LoadState(*make(vol, s1)->SaveState());
  EXPECT_NE(sub.message().find("another subset"), std::string::npos) << sub.message();
}

TEST(SourceStateTest, TextRoundTripsAndBadTextIsNamed) {
  SourceState s;
  s.epoch = 12;
  s.batches = 345;
  s.volume_uuid = "0123456789abcdef0123456789abcdef";
  s.volume_samples = 1000;
  s.samples = 700;
  s.subset_crc = 0xdeadbeef;
  s.sampler = {.shuffle = false,
               .seed = ~uint64_t{0},
               .rank = 2,
               .world_size = 5,
               .batch_size = 64,
               .drop_last = true};
  const std::string text = s.Serialize();
  ASSERT_OK_AND_ASSIGN(SourceState back, SourceState::Parse(text));
  EXPECT_EQ(back.Serialize(), text);
  EXPECT_EQ(back.sampler.seed, ~uint64_t{0});
  EXPECT_TRUE(back.sampler.drop_last);
  EXPECT_FALSE(back.sampler.shuffle);

  auto error = [](const std::string& t) {
    auto r = SourceState::Parse(t);
    EXPECT_FALSE(r.ok()) << t;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    return r.status().message();
  };
  EXPECT_NE(error("").find("empty"), std::string::npos);
  EXPECT_NE(error("hello\n").find("line 1: expected 'dlfs-source-state 1'"), std::string::npos);
  std::string missing = text;
  missing.erase(missing.find("seed "),
                missing.find('\n', missing.find("seed ")) - missing.find("seed ") + 1);
  EXPECT_NE(error(missing).find("'seed' is missing"), std::string::npos);
  EXPECT_NE(error(text + "seed 3\n").find("'seed' appears twice"), std::string::npos);
  EXPECT_NE(error(text + "colour blue\n").find("unknown key 'colour'"), std::string::npos);
  std::string bad = text;
  bad.replace(bad.find("epoch 12"), 8, "epoch -1");
  EXPECT_NE(error(bad).find("'epoch' has a bad value '-1'"), std::string::npos);
  std::string flag = text;
  flag.replace(flag.find("shuffle 0"), 9, "shuffle 2");
  EXPECT_NE(error(flag).find("'shuffle' has a bad value"), std::string::npos);
}

}  // namespace
}  // namespace dlfs
