// Resuming a Loader mid-epoch from a saved SourceState (SaveState /
// LoadState), and the state's text form.
#include <algorithm>
#include <optional>
#include <random>
#include <set>

#include "dlfs/loader.h"
#include "synthetic_volume.h"
#include "testutil.h"

namespace dlfs {
namespace resume_test {

using testing::SampleOracle;
using testing::StatusIs;
using testing::TempDir;

// Sample i holds its index and random bytes, some over 1 MiB.
testing::SyntheticVolume ResumeVolume(uint64_t n) {
  testing::SyntheticVolume spec{.samples = n};
  spec.bytes = [](uint64_t i) {
    std::mt19937 rng(static_cast<uint32_t>(i) + 3);
    size_t len = 8 + rng() % 6000;
    if (i % 211 == 3) len = (1 << 20) + rng() % 300000;
    return testing::RandomBytes(len, static_cast<uint32_t>(i));
  };
  return spec;
}
std::shared_ptr<Volume> MakeVolume(const std::string& path, uint64_t n) {
  return testing::MakeSyntheticVolume(path, ResumeVolume(n));
}

// Hands out batches until the epoch ends (or `limit` batches), checking
// that they follow on from `first_sequence` and hold the bytes `want` says.
std::vector<uint64_t> Take(Loader& loader, SampleOracle& want, uint64_t epoch,
                           uint64_t first_sequence, uint64_t limit = ~uint64_t{0}) {
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
      EXPECT_TRUE(testing::SameBytes(batch.sample(i), want(batch.index(i))))
          << "sample " << batch.index(i);
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
  void SetUp() override {
    vol_ = testing::CopySyntheticVolume("resume-600", ResumeVolume(600), tmp_ / "v.dlfs");
    if (vol_) want_.emplace(*vol_);
  }

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
  std::optional<SampleOracle> want_;
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
        first = Take(*a, *want_, 2, 0, k);
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
      EXPECT_EQ(Concat(first, Take(*b, *want_, 2, k)), epoch2);
      ASSERT_OK_AND_ASSIGN(SourceState done, b->SaveState());
      EXPECT_EQ(done.batches, batches);
      b->SetEpoch(3);
      EXPECT_EQ(Take(*b, *want_, 3, 0), epoch3);
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
  SampleOracle want(*vol);
  const std::vector<uint64_t> rest = Take(*loader, want, 0, 80);
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
  SampleOracle want(*vol);
  EXPECT_EQ(Take(*loader, want, 5, 0), loader->RankIndices(5));
  // And a restored epoch is kept by its first SetEpoch only.
  ASSERT_OK(loader->LoadState(s));
  loader->SetEpoch(4);
  Batch b;
  ASSERT_TRUE(*loader->Next(&b));
  EXPECT_EQ(b.sequence(), 6u);
  loader->SetEpoch(4);
  EXPECT_EQ(Take(*loader, want, 4, 0), loader->RankIndices(4));
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
  SampleOracle want(*vol);
  Take(*a, want, 1, 0, 3);
  const SourceState saved = *a->SaveState();

  struct Case {
    std::shared_ptr<Volume> vol;
    LoaderOptions options;
    std::string expect;
  };
  // (World size and batch size may differ: see the elastic tests below.)
  LoaderOptions seed = base, drop = base, shuffle = base, subset = base;
  seed.sampler.seed = 8;
  drop.sampler.drop_last = true;
  shuffle.sampler.shuffle = false;
  subset.subset = {1, 2, 3};
  const std::vector<Case> cases = {
      {vol, seed, "seed 7, this loader has seed 8"},
      {vol, drop, "drop_last off, this loader has drop_last on"},
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

// A state of order 1 (Fisher-Yates: dlfs before the order had versions)
// resumes at an epoch boundary only; mid-epoch it is refused, saying how to
// resume instead.
TEST(ResumeOrderTest, AnOlderOrderResumesAtEpochBoundariesOnly) {
  TempDir tmp;
  auto vol = MakeVolume(tmp / "v.dlfs", 100);
  const LoaderOptions base{.sampler = {.seed = 7, .batch_size = 10}, .cache_budget = 0};
  auto make = [&] { return std::move(Loader::Create(vol, base)).value(); };
  auto a = make();
  a->SetEpoch(3);
  SampleOracle want(*vol);
  Take(*a, want, 3, 0, 4);
  SourceState old = *a->SaveState();
  EXPECT_EQ(old.order, kOrderVersion);
  old.order = 1;
  const Status st = make()->LoadState(old);
  EXPECT_THAT(st, StatusIs(StatusCode::kInvalidArgument,
                           "cannot resume from this state: it was saved in the middle of epoch 3 "
                           "(4 batches handed out) with epoch order 1 (Fisher-Yates"));
  EXPECT_NE(st.message().find("with epoch 4 and batches 0 it goes on with the next epoch"),
            std::string::npos)
      << st.message();
  // So does one of another shape (an elastic resume), or with earlier parts.
  SourceState other = old;
  other.sampler.world_size = 2;
  EXPECT_THAT(make()->LoadState(other), StatusIs(StatusCode::kInvalidArgument, "epoch order 1"));
  SourceState parts = old;
  parts.batches = 0;
  parts.done = {{2, 1, 10, 3}};
  EXPECT_THAT(make()->LoadState(parts), StatusIs(StatusCode::kInvalidArgument, "epoch order 1"));
  // At an epoch boundary it resumes: the start of epoch 3, or its end.
  for (uint64_t batches : {uint64_t{0}, a->batches_per_epoch()}) {
    SourceState boundary = old;
    boundary.batches = batches;
    auto b = make();
    ASSERT_OK(b->LoadState(boundary));
    b->SetEpoch(3);
    const std::vector<uint64_t> got = Take(*b, want, 3, batches);
    EXPECT_EQ(got.size(), batches == 0 ? 100u : 0u);
    if (batches == 0) EXPECT_EQ(got, b->RankIndices(3));
  }
  // A state without an order line is order 1.
  std::string text = old.Serialize();
  text.replace(text.find("state 3"), 7, "state 2");
  text.erase(text.find("order 1\n"), std::string("order 1\n").size());
  ASSERT_OK_AND_ASSIGN(SourceState parsed, SourceState::Parse(text));
  EXPECT_THAT(make()->LoadState(parsed), StatusIs(StatusCode::kInvalidArgument, "epoch order 1"));
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
    EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument, "source state")) << t;
    return r.status().message();
  };
  EXPECT_NE(error("").find("empty"), std::string::npos);
  EXPECT_NE(error("hello\n").find("line 1: expected 'dlfs-source-state 3'"), std::string::npos);
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

TEST(SourceStateTest, SegmentsRoundTripAndVersionOneStillParses) {
  SourceState s;
  s.volume_uuid = "u";
  s.done = {{4, 2, 32, 7}, {3, 1, 64, 0}};
  const std::string text = s.Serialize();
  EXPECT_NE(text.find("segments world_size=4,workers=2,batch_size=32,batches=7;world_size=3,"
                      "workers=1,batch_size=64,batches=0\n"),
            std::string::npos)
      << text;
  ASSERT_OK_AND_ASSIGN(SourceState back, SourceState::Parse(text));
  EXPECT_EQ(back.done, s.done);
  // Version 2 (before the order had versions) has no order line: order 1.
  std::string v2 = SourceState{}.Serialize();
  EXPECT_NE(v2.find("\norder 2\n"), std::string::npos) << v2;
  v2.replace(v2.find("state 3"), 7, "state 2");
  v2.erase(v2.find("order 2\n"), std::string("order 2\n").size());
  ASSERT_OK_AND_ASSIGN(SourceState older, SourceState::Parse(v2));
  EXPECT_EQ(older.order, 1u);
  EXPECT_THAT(SourceState::Parse(SourceState{}.Serialize() + "order 0\n"),
              StatusIs(StatusCode::kInvalidArgument, "'order' appears twice"));
  // Version 1 (before elastic resume) has no segments line either.
  std::string v1 = v2;
  v1.replace(v1.find("state 2"), 7, "state 1");
  v1.erase(v1.find("segments "), std::string("segments \n").size());
  ASSERT_OK_AND_ASSIGN(SourceState old, SourceState::Parse(v1));
  EXPECT_TRUE(old.done.empty());
  EXPECT_EQ(old.order, 1u);
  for (const char* bad : {"world_size=4", "world_size=0,workers=1,batch_size=1,batches=0",
                          "world_size=1,workers=1,batch_size=1,batches=x",
                          "world_size=1,workers=1,batch_size=1,batches=0,colour=2"}) {
    std::string t = text;
    const size_t at = t.find("segments ") + 9;
    t.replace(at, t.find('\n', at) - at, bad);
    const auto r = SourceState::Parse(t);
    EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument,
                            std::string("'segments' has a bad value '") + bad + "'"));
  }
}

// Elastic resume in the sampler: a job of one shape (ranks x DataLoader
// workers, batch size) hands out k batches per rank; a job of another
// shape reads the rest. Together they read every sample once (drop_last:
// at most once, leaving out fewer than a new shard count times batch size).
struct Shape {
  uint32_t world, workers, batch;
};

// What shape `a` read of `epoch` in its first `k` DataLoader batches per
// rank, after the parts `done`; and the whole part.
std::vector<uint64_t> PartRead(uint64_t n, SamplerOptions base, uint64_t epoch, Shape a, uint64_t k,
                               const std::vector<EpochSegment>& done) {
  std::vector<uint64_t> read;
  const uint32_t shards = a.world * a.workers;
  for (uint32_t s = 0; s < shards; ++s) {
    SamplerOptions o = base;
    o.world_size = shards;
    o.rank = s;
    o.batch_size = a.batch;
    auto sampler = Sampler::Create(n, o);
    EXPECT_OK(sampler);
    auto mine = sampler->RankIndices(epoch, done, {});
    EXPECT_OK(mine);
    // Worker w = s % workers hands out batches w, w + workers, ... of its rank.
    const uint32_t w = s % a.workers;
    const uint64_t batches = k / a.workers + (w < k % a.workers ? 1 : 0);
    const uint64_t take = std::min<uint64_t>(mine->size(), batches * a.batch);
    read.insert(read.end(), mine->begin(), mine->begin() + take);
  }
  return read;
}

uint64_t PartBatches(uint64_t n, SamplerOptions base, uint64_t epoch, Shape a,
                     const std::vector<EpochSegment>& done) {
  SamplerOptions o = base;
  o.world_size = a.world * a.workers;
  o.batch_size = a.batch;
  auto mine = Sampler::Create(n, o)->RankIndices(epoch, done, {});
  EXPECT_OK(mine);
  return a.workers * ((mine->size() + a.batch - 1) / a.batch);
}

TEST(ElasticSamplerTest, RestOfAnEpochIsReadOnceAtAnotherShape) {
  const std::vector<Shape> shapes = {{1, 1, 10}, {2, 1, 7}, {3, 2, 4},
                                     {4, 1, 5},  {6, 1, 3}, {2, 3, 8}};
  int checked = 0;
  for (const uint64_t n : {1, 37, 250}) {
    for (const bool shuffle : {true, false}) {
      for (const bool drop_last : {false, true}) {
        const SamplerOptions base{.shuffle = shuffle, .seed = 5, .drop_last = drop_last};
        for (const Shape& a : shapes) {
          const uint64_t total = PartBatches(n, base, 3, a, {});
          for (const uint64_t k : {uint64_t{1}, total / 2, total - 1}) {
            if (k == 0 || k >= total) continue;
            for (const Shape& b : shapes) {
              if (a.world == b.world && a.workers == b.workers && a.batch == b.batch) continue;
              SCOPED_TRACE(::testing::Message()
                           << "n " << n << " shuffle " << shuffle << " drop_last " << drop_last
                           << " from " << a.world << "x" << a.workers << "x" << a.batch << " after "
                           << k << " to " << b.world << "x" << b.workers << "x" << b.batch);
              const std::vector<EpochSegment> done = {{a.world, a.workers, a.batch, k}};
              std::vector<uint64_t> first = PartRead(n, base, 3, a, k, {});
              std::vector<uint64_t> rest = PartRead(n, base, 3, b, uint64_t{1} << 30, done);
              std::multiset<uint64_t> all(first.begin(), first.end());
              all.insert(rest.begin(), rest.end());
              const uint64_t shards = b.world * b.workers;
              std::set<uint64_t> distinct(all.begin(), all.end());
              const std::set<uint64_t> first_set(first.begin(), first.end());
              for (uint64_t i : rest) {
                ASSERT_EQ(first_set.count(i), 0u) << "sample " << i << " read twice";
              }
              if (drop_last) {
                EXPECT_EQ(all.size(), distinct.size());
                EXPECT_LT(n - distinct.size(), shards * b.batch);
              } else {
                EXPECT_EQ(distinct.size(), n);
                // Padding: each part's wrap-around (the first part's, when
                // it reached into it, and the rest's).
                const std::set<uint64_t> rest_set(rest.begin(), rest.end());
                EXPECT_LT(rest.size() - rest_set.size(), shards);
                EXPECT_LT(all.size() - n, shards + a.world * a.workers);
              }
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 300);
}

TEST(ElasticSamplerTest, ChainedResumesReadEverySampleOnce) {
  const uint64_t n = 1000;
  const SamplerOptions base{.seed = 9};
  const Shape a{4, 2, 16}, b{3, 1, 20}, c{5, 3, 7};
  std::vector<EpochSegment> done;
  std::vector<uint64_t> read = PartRead(n, base, 0, a, 5, done);
  done.push_back({a.world, a.workers, a.batch, 5});
  const std::vector<uint64_t> second = PartRead(n, base, 0, b, 4, done);
  read.insert(read.end(), second.begin(), second.end());
  done.push_back({b.world, b.workers, b.batch, 4});
  const std::vector<uint64_t> third = PartRead(n, base, 0, c, uint64_t{1} << 30, done);
  read.insert(read.end(), third.begin(), third.end());
  std::set<uint64_t> distinct(read.begin(), read.end());
  EXPECT_EQ(distinct.size(), n);
  EXPECT_LT(read.size() - n, uint64_t{c.world * c.workers});
  // A part that handed out all its batches ends the epoch; one claiming more is refused.
  const uint64_t whole = PartBatches(n, base, 0, a, {});
  auto sampler = Sampler::Create(n, {.seed = 9, .batch_size = 8});
  ASSERT_OK_AND_ASSIGN(auto none, sampler->RankIndices(0, {{{4, 2, 16, whole}}}, {}));
  EXPECT_TRUE(none.empty());
  auto over = sampler->RankIndices(0, {{{4, 2, 16, whole + 1}}}, {});
  ASSERT_THAT(over, StatusIs(StatusCode::kInvalidArgument,
                             "part 1 of epoch 0 says 17 batches were handed out of its 16"));
}

// The Loader: a job of 3 ranks stops after k batches; rank 0's state resumes
// on 2 ranks with twice the batch size, which are stopped again and resumed
// on 4 ranks. Every sample is read once (padding aside), a state resumed at
// the same shape continues the same order, and the next epoch is whole.
TEST(ElasticLoaderTest, StateResumesOnAnotherNumberOfRanks) {
  TempDir tmp;
  auto vol = MakeVolume(tmp / "v.dlfs", 500);
  auto make = [&](uint32_t rank, uint32_t world, uint32_t batch) {
    LoaderOptions o{.sampler = {.seed = 3, .rank = rank, .world_size = world, .batch_size = batch},
                    .prefetch_batches = 2,
                    .cache_budget = 0};
    auto l = Loader::Create(vol, o);
    EXPECT_OK(l);
    return std::move(l).value();
  };
  std::multiset<uint64_t> read;
  auto take = [&](Loader& l, uint64_t limit) {
    Batch batch;
    uint64_t got = 0;
    for (; got < limit; ++got) {
      auto more = l.Next(&batch);
      EXPECT_OK(more);
      if (!more.ok() || !*more) break;
      for (size_t i = 0; i < batch.size(); ++i) {
        read.insert(batch.index(i));
        auto want = l.volume().Read(batch.index(i));
        EXPECT_TRUE(want.ok() && testing::SameBytes(batch.sample(i), *want));
      }
    }
    return got;
  };
  SourceState saved;
  for (uint32_t r = 0; r < 3; ++r) {
    auto l = make(r, 3, 10);
    l->SetEpoch(2);
    EXPECT_EQ(take(*l, 4), 4u);
    if (r == 0) saved = *l->SaveState();
  }
  ASSERT_OK_AND_ASSIGN(SourceState text, SourceState::Parse(saved.Serialize()));
  SourceState again;
  std::vector<uint64_t> rank1_rest;
  for (uint32_t r = 0; r < 2; ++r) {
    auto l = make(r, 2, 20);
    ASSERT_OK(l->LoadState(text));
    l->SetEpoch(2);  // keeps the restored position
    EXPECT_EQ(take(*l, 2), 2u);
    ASSERT_OK_AND_ASSIGN(SourceState s, l->SaveState());
    EXPECT_EQ(s.batches, 2u);
    ASSERT_EQ(s.done.size(), 1u);
    EXPECT_EQ(s.done[0], (EpochSegment{3, 1, 10, 4}));
    if (r == 0) again = s;
    if (r == 1) {
      // The same shape resumes this part exactly where it stopped.
      auto same = make(1, 2, 20);
      ASSERT_OK(same->LoadState(s));
      same->SetEpoch(2);
      const std::vector<uint64_t> rest = same->RankIndices(2);
      EXPECT_EQ(rest, l->RankIndices(2));
      Batch mine, theirs;
      ASSERT_TRUE(*same->Next(&mine));
      ASSERT_TRUE(*l->Next(&theirs));
      EXPECT_TRUE(std::ranges::equal(mine.indices(), theirs.indices()));
    }
  }
  for (uint32_t r = 0; r < 4; ++r) {
    auto l = make(r, 4, 7);
    ASSERT_OK(l->LoadState(again));
    l->SetEpoch(2);
    take(*l, ~uint64_t{0});
    // The next epoch is a fresh one of this shape.
    l->SetEpoch(3);
    Batch b;
    ASSERT_TRUE(*l->Next(&b));
    EXPECT_EQ(b.sequence(), 0u);
    const std::vector<uint64_t> fresh = make(r, 4, 7)->RankIndices(3);
    EXPECT_TRUE(std::ranges::equal(b.indices(), std::span(fresh).first(b.size())));
  }
  const std::set<uint64_t> distinct(read.begin(), read.end());
  EXPECT_EQ(distinct.size(), 500u);
  EXPECT_LT(read.size() - 500, 4u);
}

}  // namespace resume_test
}  // namespace dlfs
