// MixtureSource in C++: samples a volume's loader leaves out stay out of the
// merged batch, and an explicit Loader order that does not fit fails every
// batch of its epoch (never reads out of range).
#include <set>

#include "dlfs/mixture.h"
#include "synthetic_volume.h"
#include "testutil.h"

namespace dlfs {
namespace mixture_test {

using testing::StatusIs;
using testing::TempDir;

TEST(MixtureTest, LeftOutSamplesStayOutAndTheRestIsWhole) {
  TempDir tmp;
  auto a = testing::MakeSyntheticVolume(tmp / "a.dlfs", {.samples = 300});
  const std::string b_path = tmp / "b.dlfs";
  ASSERT_OK(testing::WriteSyntheticVolume(b_path, {.samples = 100}));
  {
    auto b = Volume::Open(b_path);
    ASSERT_OK(b);
    std::vector<std::byte> file = testing::ReadFile(b_path);
    file[(*b)->directory().sample(42).offset] ^= std::byte{1};
    testing::WriteFile(b_path, file);
  }
  auto b = Volume::Open(b_path);
  ASSERT_OK(b);
  MixtureOptions m{.weights = {2, 1}, .sampler = {.seed = 4, .batch_size = 32}};
  auto mix = MixtureSource::Create(
      {a, *b}, m, {.engine = {.direct_io = false}, .cache_budget = 0, .skip_bad_samples = true});
  ASSERT_OK(mix);
  EXPECT_EQ((*mix)->epoch_samples(), 300u);  // b's 100 samples at a third
  EXPECT_EQ((*mix)->shares(), (std::vector<uint64_t>{200, 100}));
  (*mix)->SetEpoch(0);
  Batch batch;
  std::set<std::pair<uint32_t, uint64_t>> seen;
  while (*(*mix)->Next(&batch)) {
    for (size_t i = 0; i < batch.size(); ++i) {
      const std::shared_ptr<Volume>& v = batch.sources()[i] == 0 ? a : *b;
      auto want = v->Read(batch.index(i));
      ASSERT_OK(want);
      EXPECT_TRUE(testing::SameBytes(batch.sample(i), *want));
      EXPECT_TRUE(seen.insert({batch.sources()[i], batch.index(i)}).second);
    }
  }
  EXPECT_EQ(seen.size(), 299u);
  EXPECT_EQ(seen.count({1, 42}), 0u);
  ASSERT_EQ((*mix)->loader(1).quarantine().size(), 1u);
  EXPECT_EQ((*mix)->loader(1).quarantine()[0].index, 42u);
}

TEST(MixtureTest, AnExplicitOrderThatDoesNotFitFailsItsBatches) {
  TempDir tmp;
  auto v = testing::MakeSyntheticVolume(tmp / "v.dlfs", {.samples = 10});
  LoaderOptions o{.cache_budget = 0};
  o.order_batches = 2;
  o.order = [](uint64_t) {
    auto order = std::make_shared<LoaderOrder>();
    order->indices = {1, 2, 99};  // 99 is out of range
    order->batch_starts = {0, 2, 3};
    return order;
  };
  auto l = Loader::Create(v, o);
  ASSERT_OK(l);
  Batch batch;
  for (int k = 0; k < 2; ++k) {
    auto more = (*l)->Next(&batch);
    ASSERT_THAT(more,
                StatusIs(StatusCode::kInvalidArgument, "explicit order of epoch 0 does not fit"));
  }
  EXPECT_FALSE(*(*l)->Next(&batch));
}

}  // namespace mixture_test
}  // namespace dlfs
