// DecideFill: the node cache is filled when what it saves over the epochs
// to come exceeds what reading and copying the bytes cost, with costs as
// measured on a VM (slow fresh memory) and on a bare node.
#include "cache/fill_plan.h"

#include <gtest/gtest.h>

namespace dlfs {
namespace fill_plan_test {

using cache_internal::DecideFill;
using cache_internal::FillCosts;
using cache_internal::FillInputs;

constexpr double kGB = 1e9;

// Fashion-MNIST (55 MB) on this VM: 6 s/GB to touch fresh memory, an epoch
// of 4 KiB random reads costing the reader ~0.3 s.
const FillCosts kSmallOnVm{.scan = 0.3 / kGB, .fill = 6.0 / kGB, .read = 0.3 / 0.055 / kGB};
// 16,000 x 100 KB (1.6 GB) on the same VM: an epoch of 1.6 s.
const FillCosts kLargeOnVm{.scan = 0.3 / kGB, .fill = 6.0 / kGB, .read = 1.0 / kGB};
// The same volume on a bare node, where fresh memory costs 0.5 s/GB.
const FillCosts kLargeOnBareNode{.scan = 0.3 / kGB, .fill = 0.5 / kGB, .read = 1.0 / kGB};

TEST(FillPlanTest, PaysWhenLaterEpochsSaveMoreThanTheFillCosts) {
  FillInputs in{.cacheable_bytes = 55'000'000, .costs = kSmallOnVm};
  in.epochs_after = 1;  // --epochs 2: one epoch to gain, less than the fill's cost
  EXPECT_FALSE(DecideFill(in).fill) << DecideFill(in).reason;
  in.epochs_after = 4;  // --epochs 5
  EXPECT_TRUE(DecideFill(in).fill) << DecideFill(in).reason;
  in.epochs_after = 19;
  EXPECT_TRUE(DecideFill(in).fill);
}

TEST(FillPlanTest, SlowMemoryNeedsMoreEpochsThanABareNode) {
  FillInputs in{.cacheable_bytes = 1'600'000'000, .epochs_after = 2, .costs = kLargeOnVm};
  EXPECT_FALSE(DecideFill(in).fill) << DecideFill(in).reason;  // --epochs 3 here
  in.costs = kLargeOnBareNode;
  EXPECT_TRUE(DecideFill(in).fill) << DecideFill(in).reason;  // pays there
  in.costs = kLargeOnVm;
  in.epochs_after = 9;  // --epochs 10
  EXPECT_TRUE(DecideFill(in).fill) << DecideFill(in).reason;
}

// Where the fill's copying runs on a core the reader leaves idle, the
// reader loses only the device time of the fill's reading: one epoch to
// gain can pay for it. Not for a large volume, whose reading alone costs
// more than the epochs save.
TEST(FillPlanTest, AFillBesideTheReaderCostsItItsReadingAndWhatItTakes) {
  FillInputs in{.cacheable_bytes = 55'000'000, .epochs_after = 1, .costs = kSmallOnVm};
  EXPECT_FALSE(DecideFill(in).fill) << DecideFill(in).reason;  // 100 %: all of it
  in.costs.slowed = 0.1;
  const auto d = DecideFill(in);
  EXPECT_TRUE(d.fill) << d.reason;
  EXPECT_NEAR(d.cost_seconds, 0.055 * (0.3 + 0.1 * 6.0), 1e-9);
  EXPECT_NE(d.reason.find("10 % of it taken from the reader"), std::string::npos) << d.reason;
  FillInputs large{.cacheable_bytes = 1'600'000'000, .epochs_after = 2, .costs = kLargeOnVm};
  large.costs.scan = 3.5 / kGB;  // 1.6 GB read beside the reader's own reads
  large.costs.slowed = 0;
  EXPECT_FALSE(DecideFill(large).fill) << DecideFill(large).reason;
}

TEST(FillPlanTest, ReadsThatCostNothingAreNotWorthCaching) {
  // A compute-bound loop never waits for data: caching saves it nothing.
  FillInputs in{.cacheable_bytes = 1'000'000,
                .epochs_after = 100,
                .costs = {.scan = 0.3 / kGB, .fill = 6.0 / kGB, .read = 0}};
  EXPECT_FALSE(DecideFill(in).fill);
}

TEST(FillPlanTest, AGivenBudgetIsFilledWhateverItCosts) {
  FillInputs in{
      .cacheable_bytes = 1'600'000'000, .epochs_after = 0, .requested = true, .costs = kLargeOnVm};
  const auto d = DecideFill(in);
  EXPECT_TRUE(d.fill);
  EXPECT_NEAR(d.cost_seconds, 1.6 * 6.3, 1e-6);
  EXPECT_EQ(d.saving_seconds, 0);
  EXPECT_NE(d.reason.find("budget given"), std::string::npos) << d.reason;
}

// The fill runs beside the epochs: those it lasts save half on average,
// and a fill that outlasts the job saves only what it had cached meanwhile.
TEST(FillPlanTest, TheEpochsTheFillLastsSaveHalf) {
  FillInputs in{.cacheable_bytes = 55'000'000,
                .epochs_after = 3,
                .costs = {.scan = 1.5 / kGB, .fill = 1.5 / kGB, .read = 1.2 / kGB, .slowed = 0.2}};
  const auto instant = DecideFill(in);  // wall and pace not measured: as before
  EXPECT_EQ(instant.fill_epochs, 0);
  EXPECT_NEAR(instant.saving_seconds, 3 * 0.066, 1e-9);
  EXPECT_NEAR(instant.cost_seconds, 0.0825 * 1.2, 1e-9);
  EXPECT_TRUE(instant.fill) << instant.reason;
  in.costs.wall = 2.0 / kGB;  // the fill lasts two epochs of the reader's pace
  in.costs.pace = 1.0 / kGB;
  const auto two = DecideFill(in);
  EXPECT_NEAR(two.fill_epochs, 2, 1e-9);
  EXPECT_NEAR(two.saving_seconds, (3 - 1) * 0.066, 1e-9);
  EXPECT_NE(two.reason.find("the fill lasting 2 of them"), std::string::npos) << two.reason;
  in.costs.wall = 4.0 / kGB;  // outlasts the 3 epochs: 3^2 / (2 * 4) of one saved
  const auto four = DecideFill(in);
  EXPECT_NEAR(four.saving_seconds, 9.0 / 8 * 0.066, 1e-9);
  EXPECT_FALSE(four.fill) << four.reason;  // 0.074 s saved for 0.099 s
  in.costs.wall = 6.0 / kGB;               // outlasts the 3 epochs: 3^2 / (2 * 6) of one saved
  EXPECT_NEAR(DecideFill(in).saving_seconds, 0.75 * 0.066, 1e-9);
  in.epochs_after = 30;  // a long job: the fill's duration hardly matters
  EXPECT_TRUE(DecideFill(in).fill) << DecideFill(in).reason;
}

// Decided again with part of the volume filled, the rest lasts its share of
// the time the whole would: a fifth of an epoch's bytes, a fifth as long.
TEST(FillPlanTest, TheRestOfAFillLastsItsShareOfTheWhole) {
  FillInputs in{.cacheable_bytes = 11'000'000,
                .epochs_after = 12,
                .epoch_bytes = 55'000'000,
                .costs = {.scan = 0.1 / kGB,
                          .fill = 2.4 / kGB,
                          .read = 0.25 / kGB,
                          .slowed = 1,
                          .wall = 35.0 / kGB,
                          .pace = 5.0 / kGB}};
  const auto rest = DecideFill(in);
  EXPECT_NEAR(rest.fill_epochs, 7.0 / 5, 1e-9);
  EXPECT_NEAR(rest.saving_seconds, (12 - 0.7) * 0.25 * 0.011, 1e-9);
  EXPECT_TRUE(rest.fill) << rest.reason;  // 0.031 s saved for 0.0275 s
  in.epoch_bytes = 0;  // counted as a whole volume's fill: 7 epochs, 0.023 s saved
  EXPECT_NEAR(DecideFill(in).fill_epochs, 7, 1e-9);
  EXPECT_FALSE(DecideFill(in).fill) << DecideFill(in).reason;
  in.epoch_bytes = 27'500'000;  // two ranks, each handed half the volume per epoch
  EXPECT_NEAR(DecideFill(in).fill_epochs, 2.8, 1e-9);
}

// Two ranks of a node, each handed half the volume per epoch, both fill:
// the node's fill lasts half what one of them alone would take.
TEST(FillPlanTest, ProcessesFillingSideBySideShortenTheFill) {
  FillInputs in{.cacheable_bytes = 55'000'000,
                .epochs_after = 16,
                .epoch_bytes = 27'500'000,
                .costs = {.scan = 0.1 / kGB,
                          .fill = 2.2 / kGB,
                          .read = 0.35 / kGB,
                          .slowed = 1,
                          .wall = 10.0 / kGB,
                          .pace = 1.0 / kGB}};
  const auto alone = DecideFill(in);
  EXPECT_NEAR(alone.fill_epochs, 20, 1e-9);  // outlasts the job: 16^2 / 40 epochs saved
  EXPECT_FALSE(alone.fill) << alone.reason;  // 0.123 s saved for 0.127 s
  in.fillers = 2;
  const auto both = DecideFill(in);
  EXPECT_NEAR(both.fill_epochs, 10, 1e-9);
  EXPECT_NEAR(both.saving_seconds, (16 - 10.0 / 2) * 0.35 * 0.055, 1e-9);
  EXPECT_TRUE(both.fill) << both.reason;                      // 0.212 s saved for 0.127 s
  EXPECT_NEAR(both.cost_seconds, alone.cost_seconds, 1e-12);  // the same work, shared
}

TEST(FillPlanTest, NothingToFillIsNeverAFill) {
  FillInputs in{.cacheable_bytes = 0, .epochs_after = 50, .requested = true, .costs = kSmallOnVm};
  EXPECT_FALSE(DecideFill(in).fill);
  EXPECT_NE(DecideFill(in).reason.find("nothing to fill"), std::string::npos);
}

// Where the cache holds the whole volume, the loader's rule: held from the
// first epoch when two or more epochs follow it; else not, saying why.
TEST(FillPlanTest, AVolumeThatFitsIsHeldWhenTwoEpochsFollow) {
  using cache_internal::DecideHoldWhole;
  EXPECT_FALSE(DecideHoldWhole(0).hold);
  EXPECT_EQ(DecideHoldWhole(0).reason, "no fill: no epoch after this one");
  EXPECT_FALSE(DecideHoldWhole(1).hold);
  EXPECT_EQ(DecideHoldWhole(1).reason, "no fill: 1 epoch after this one (held from 2)");
  EXPECT_TRUE(DecideHoldWhole(2).hold);
  EXPECT_TRUE(DecideHoldWhole(2).reason.empty());
  EXPECT_TRUE(DecideHoldWhole(cache_internal::kAssumedEpochsAfter).hold);  // epochs not said
}

}  // namespace fill_plan_test
}  // namespace dlfs
