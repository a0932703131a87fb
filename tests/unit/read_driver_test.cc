// ReadDriver: a job's rounds run in order, each after the previous one
// completed; streamed jobs finish independently and are reported once;
// cancelled jobs ask for no further round; bytes and jobs are accounted.
// Over both the io_uring and the pread engine (and pread on the caller's
// thread, the sequential fill's).
#include "io/read_driver.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include "testutil.h"

namespace dlfs {
namespace read_driver_test {

using io_internal::ReadDriver;
using io_internal::ReadJob;
using io_internal::RequestList;

constexpr size_t kFileSize = 1 << 20;

struct Engine {
  EngineKind kind;
  bool caller_thread;
};

// Reads `rounds` rounds of `per_round` 4 KiB reads at distinct offsets into
// one buffer, recording the order in which it was called.
class RoundsJob final : public ReadJob {
 public:
  RoundsJob(int rounds, int per_round, uint64_t first_block)
      : rounds_(rounds),
        per_round_(per_round),
        first_block_(first_block),
        buffer_(static_cast<size_t>(rounds) * per_round * 4096) {}

  bool NextRound(std::vector<ReadRequest>* out) override {
    out->clear();
    EXPECT_EQ(outstanding_, 0) << "a round was asked for before the last completed";
    if (round_ == rounds_) return false;
    for (int r = 0; r < per_round_; ++r) {
      const uint64_t k = static_cast<uint64_t>(round_) * per_round_ + r;
      out->push_back(ReadRequest{0, (first_block_ + k) * 4096, 4096, buffer_.data() + k * 4096,
                                 ReadRequest::kNoSlot});
    }
    outstanding_ = per_round_;
    ++round_;
    return true;
  }
  void Complete(size_t r, const Status& status) override {
    EXPECT_LT(r, static_cast<size_t>(per_round_));
    if (!status.ok()) failures_.push_back(status);
    --outstanding_;
  }

  int rounds_done() const { return round_; }
  const std::vector<Status>& failures() const { return failures_; }
  const std::vector<std::byte>& buffer() const { return buffer_; }
  uint64_t first_block() const { return first_block_; }

 private:
  int rounds_, per_round_;
  uint64_t first_block_;
  std::vector<std::byte> buffer_;
  int round_ = 0;
  int outstanding_ = 0;
  std::vector<Status> failures_;
};

class ReadDriverTest : public ::testing::TestWithParam<Engine> {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::path(tmp_.path()) / "data.bin").string();
    contents_ = testing::RandomBytes(kFileSize, 5);
    testing::WriteFile(path_, contents_);
    EngineOptions o;
    o.kind = GetParam().kind;
    o.caller_thread = GetParam().caller_thread;
    o.direct_io = false;
    o.queue_depth = 8;
    auto e = CreateEngine({path_}, o);
    if (!e.ok() && e.status().code() == StatusCode::kUnavailable) {
      GTEST_SKIP() << e.status().message();
    }
    ASSERT_OK(e.status());
    engine_ = std::move(*e);
  }

  void ExpectContents(const RoundsJob& job) {
    const std::vector<std::byte>& b = job.buffer();
    EXPECT_EQ(std::memcmp(b.data(), contents_.data() + job.first_block() * 4096, b.size()), 0);
  }

  testing::TempDir tmp_;
  std::string path_;
  std::vector<std::byte> contents_;
  std::unique_ptr<IoEngine> engine_;
};

TEST_P(ReadDriverTest, RunsEveryRoundInOrderAndAccounts) {
  ReadDriver driver(*engine_);
  RoundsJob job(3, 5, 10);
  ASSERT_OK(driver.Run(job));
  EXPECT_EQ(job.rounds_done(), 3);
  EXPECT_TRUE(job.failures().empty());
  ExpectContents(job);
  EXPECT_EQ(job.bytes_read(), 15u * 4096);
  EXPECT_GE(job.seconds(), 0.0);
  const io_internal::ReadDriverStats s = driver.stats();
  EXPECT_EQ(s.jobs, 1u);
  EXPECT_EQ(s.requests, 15u);
  EXPECT_EQ(s.bytes, 15u * 4096);
}

TEST_P(ReadDriverTest, RequestListKeepsEachOutcome) {
  ReadDriver driver(*engine_);
  std::vector<std::byte> a(100), b(10);
  std::vector<Status> results;
  // The second read runs past the end of the file: an error, never partial.
  ASSERT_OK(driver.Read(
      {ReadRequest{0, 7, a.size(), a.data()}, ReadRequest{0, kFileSize - 5, b.size(), b.data()}},
      &results));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_OK(results[0]);
  EXPECT_EQ(std::memcmp(a.data(), contents_.data() + 7, a.size()), 0);
  EXPECT_FALSE(results[1].ok());
}

TEST_P(ReadDriverTest, StreamedJobsAreEachReportedOnce) {
  ReadDriver driver(*engine_);
  std::vector<std::unique_ptr<RoundsJob>> jobs;
  std::set<uint64_t> ids;
  for (int k = 0; k < 6; ++k) {
    jobs.push_back(std::make_unique<RoundsJob>(1 + k % 3, 1 + k, 20 * k));
    ids.insert(driver.Start(jobs.back().get()));
  }
  ASSERT_EQ(ids.size(), jobs.size());
  std::vector<uint64_t> finished;
  while (driver.in_flight() > 0) ASSERT_OK(driver.Poll(true, &finished));
  std::sort(finished.begin(), finished.end());
  EXPECT_EQ(std::set<uint64_t>(finished.begin(), finished.end()), ids);
  EXPECT_EQ(finished.size(), ids.size());
  for (const auto& j : jobs) ExpectContents(*j);
  // A job with nothing to read is reported by the next Poll.
  RoundsJob empty(0, 1, 0);
  const uint64_t id = driver.Start(&empty);
  finished.clear();
  ASSERT_OK(driver.Poll(false, &finished));
  EXPECT_EQ(finished, std::vector<uint64_t>{id});
}

TEST_P(ReadDriverTest, CancelledJobsAskForNoFurtherRound) {
  ReadDriver driver(*engine_);
  RoundsJob keep(4, 4, 0), drop(4, 4, 100);
  const uint64_t keep_id = driver.Start(&keep);
  const uint64_t drop_id = driver.Start(&drop);
  driver.Cancel([&](uint64_t id) { return id == drop_id; });
  std::vector<uint64_t> finished;
  while (driver.in_flight() > 0) ASSERT_OK(driver.Poll(true, &finished));
  EXPECT_EQ(finished.size(), 2u);
  EXPECT_NE(std::find(finished.begin(), finished.end(), keep_id), finished.end());
  EXPECT_EQ(keep.rounds_done(), 4);
  ExpectContents(keep);
  EXPECT_EQ(drop.rounds_done(), 1);  // its first round was under way
  // Its reads still queued completed as Cancelled; those in flight, whole.
  for (const Status& st : drop.failures()) EXPECT_EQ(st.code(), StatusCode::kCancelled);
}

INSTANTIATE_TEST_SUITE_P(Engines, ReadDriverTest,
                         ::testing::Values(Engine{EngineKind::kUring, false},
                                           Engine{EngineKind::kPread, false},
                                           Engine{EngineKind::kPread, true}),
                         [](const ::testing::TestParamInfo<Engine>& info) {
                           return std::string(EngineKindName(info.param.kind)) +
                                  (info.param.caller_thread ? "_caller_thread" : "");
                         });

}  // namespace read_driver_test
}  // namespace dlfs
