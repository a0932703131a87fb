// Quarantine (LoaderOptions::skip_bad_samples): samples that cannot be
// read or fail their checksum are left out of their batch and recorded; the
// record travels in the state; past the budget every batch fails.
#include <set>

#include "dlfs/loader.h"
#include "synthetic_volume.h"
#include "testutil.h"

namespace dlfs {
namespace quarantine_test {

using testing::StatusIs;
using testing::TempDir;

constexpr uint64_t kSamples = 200;

class QuarantineTest : public ::testing::TestWithParam<bool> {  // node cache on
 protected:
  void SetUp() override {
    path_ = tmp_ / "v.dlfs";
    testing::SyntheticVolume spec{.samples = kSamples, .volume = {.align = 4096}};
    ASSERT_OK(testing::WriteSyntheticVolume(path_, spec));
    auto v = Volume::Open(path_);
    ASSERT_OK(v);
    // Flip a byte of samples 17 and 90 on disk.
    std::vector<std::byte> file = testing::ReadFile(path_);
    for (uint64_t i : {17, 90}) file[(*v)->directory().sample(i).offset + 1] ^= std::byte{0x40};
    testing::WriteFile(path_, file);
    bad_read_ = (*v)->directory().sample(150);
  }

  std::unique_ptr<Loader> Make(LoaderOptions o) {
    o.sampler.shuffle = false;
    o.sampler.batch_size = 16;
    o.engine.direct_io = false;  // the flipped bytes, not a stale cached page
    o.cache_budget = GetParam() ? (uint64_t{64} << 20) : 0;
    o.cache_shared = false;
    auto v = Volume::Open(path_);
    EXPECT_OK(v);
    auto l = Loader::Create(*v, o);
    EXPECT_OK(l);
    return std::move(l).value();
  }

  // Reads `epoch` whole; the samples handed out, and each batch's size.
  std::vector<uint64_t> Epoch(Loader& l, uint64_t epoch, std::vector<size_t>* sizes = nullptr) {
    l.SetEpoch(epoch);
    std::vector<uint64_t> got;
    Batch b;
    while (true) {
      auto more = l.Next(&b);
      EXPECT_OK(more);
      if (!more.ok() || !*more) break;
      if (sizes) sizes->push_back(b.size());
      for (size_t i = 0; i < b.size(); ++i) {
        got.push_back(b.index(i));
        auto want = l.volume().Read(b.index(i));
        EXPECT_TRUE(want.ok() && testing::SameBytes(b.sample(i), *want)) << b.index(i);
      }
    }
    return got;
  }

  TempDir tmp_;
  std::string path_;
  SampleInfo bad_read_;
};

TEST_P(QuarantineTest, BadSamplesAreLeftOutRecordedAndCarriedInTheState) {
  std::vector<uint64_t> good;
  for (uint64_t i = 0; i < kSamples; ++i) {
    if (i != 17 && i != 90 && i != 150) good.push_back(i);
  }
  SourceState saved;
  {
    LoaderOptions o{.skip_bad_samples = true};
    o.engine.faults = {.eio_offset = bad_read_.offset, .eio_length = 1};
    auto l = Make(o);
    std::vector<size_t> sizes;
    EXPECT_EQ(Epoch(*l, 0, &sizes), good);
    // Batches keep their place: the one holding 17 is one shorter.
    ASSERT_EQ(sizes.size(), 13u);
    EXPECT_EQ(sizes[1], 15u);
    EXPECT_EQ(sizes[5], 15u);
    EXPECT_EQ(sizes[9], 15u);
    EXPECT_EQ(sizes[0], 16u);
    const std::vector<BadSample> bad = l->quarantine();
    ASSERT_EQ(bad.size(), 3u);
    EXPECT_EQ(bad[0].index, 17u);
    EXPECT_NE(bad[0].reason.find("checksum mismatch"), std::string::npos) << bad[0].reason;
    EXPECT_EQ(bad[0].path, l->volume().directory().Path(17));
    EXPECT_EQ(bad[2].index, 150u);
    EXPECT_FALSE(bad[2].reason.empty());
    // Later epochs leave them out without failing on them again.
    EXPECT_EQ(Epoch(*l, 1).size(), good.size());
    EXPECT_EQ(l->quarantine().size(), 3u);
    l->SetEpoch(2);
    Batch b;
    ASSERT_TRUE(*l->Next(&b));
    saved = *l->SaveState();
    EXPECT_EQ(saved.quarantined, (std::vector<uint64_t>{17, 90, 150}));
  }
  // Resumed where sample 150 reads again: the run's decisions stand.
  ASSERT_OK_AND_ASSIGN(SourceState text, SourceState::Parse(saved.Serialize()));
  auto r = Make({});  // no skip_bad_samples: the state's list alone
  ASSERT_OK(r->LoadState(text));
  r->SetEpoch(2);
  Batch b;
  std::vector<uint64_t> rest;
  while (*r->Next(&b)) rest.insert(rest.end(), b.indices().begin(), b.indices().end());
  EXPECT_EQ(rest, std::vector<uint64_t>(good.begin() + 16, good.end()));
  EXPECT_EQ(r->quarantine().size(), 3u);
}

TEST_P(QuarantineTest, PastTheBudgetEveryBatchFailsNamingThem) {
  auto l = Make({.skip_bad_samples = true, .max_bad_samples = 1});
  l->SetEpoch(0);
  Batch b;
  int failures = 0;
  std::string message;
  while (true) {
    auto more = l->Next(&b);
    if (!more.ok()) {
      ++failures;
      message = more.status().message();
      continue;
    }
    if (!*more) break;
  }
  EXPECT_EQ(failures, 13 - 5);  // from the batch of sample 90 (the 6th) on
  EXPECT_NE(message.find("2 bad samples, more than max_bad_samples=1"), std::string::npos)
      << message;
  EXPECT_NE(message.find("sample 17"), std::string::npos) << message;
  EXPECT_NE(message.find("sample 90"), std::string::npos) << message;
}

TEST_P(QuarantineTest, ListedSamplesAreLeftOutAndOutOfRangeRefused) {
  auto l = Make({.quarantine = {17, 90, 3}});
  const std::vector<uint64_t> got = Epoch(*l, 0);
  EXPECT_EQ(got.size(), kSamples - 3);
  EXPECT_EQ(std::set<uint64_t>(got.begin(), got.end()).count(3), 0u);
  auto v = Volume::Open(path_);
  auto bad = Loader::Create(*v, {.quarantine = {kSamples}});
  ASSERT_THAT(bad,
              StatusIs(StatusCode::kInvalidArgument, "quarantined sample 200 is out of range"));
  // Without skip_bad_samples a bad sample still fails its batch.
  auto strict = Make({});
  strict->SetEpoch(0);
  Batch b;
  ASSERT_TRUE(*strict->Next(&b));
  auto second = strict->Next(&b);
  ASSERT_THAT(second, StatusIs(StatusCode::kCorruption, "checksum mismatch"));
}

INSTANTIATE_TEST_SUITE_P(Cache, QuarantineTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "cache" : "device"; });

}  // namespace quarantine_test
}  // namespace dlfs
