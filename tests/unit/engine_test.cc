#include "dlfs/io_engine.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>

#include "testutil.h"

namespace dlfs {
namespace engine_test {

using testing::StatusIs;
using testing::TempDir;

constexpr size_t kFileSize = 4 << 20;

class EngineTest : public ::testing::TestWithParam<EngineKind> {
 protected:
  void SetUp() override {
    path_ = tmp_ / "data.bin";
    contents_ = testing::RandomBytes(kFileSize, 11);
    testing::WriteFile(path_, contents_);
  }

  // Creates an engine of the test's kind, or skips where it is unavailable.
  std::unique_ptr<IoEngine> Make(EngineOptions o, const std::string& path = "") {
    o.kind = GetParam();
    auto e = CreateEngine({path.empty() ? path_ : path}, o);
    if (!e.ok() && e.status().code() == StatusCode::kUnavailable) {
      skipped_ = e.status().message();
      return nullptr;
    }
    EXPECT_OK(e);
    return e.ok() ? std::move(e).value() : nullptr;
  }

  // Random aligned reads of the file; checks every byte.
  void ReadAndCheck(IoEngine& engine, int rounds, bool expect_all_ok = true) {
    const uint64_t a = std::max<uint32_t>(engine.alignment(), 1);
    std::mt19937 rng(3);
    for (int round = 0; round < rounds; ++round) {
      const size_t n = 1 + rng() % 200;
      std::vector<std::byte*> bufs;
      std::vector<ReadRequest> reqs(n);
      for (auto& r : reqs) {
        const uint64_t blocks = kFileSize / a;
        r.offset = (rng() % blocks) * a;
        r.length = std::min<uint64_t>((1 + rng() % 16) * a, kFileSize - r.offset);
        r.buffer =
            static_cast<std::byte*>(std::aligned_alloc(4096, (r.length + 4095) / 4096 * 4096));
        bufs.push_back(r.buffer);
      }
      std::vector<Status> results(n);
      ASSERT_OK(engine.Read(reqs, results));
      for (size_t i = 0; i < n; ++i) {
        if (!expect_all_ok && !results[i].ok()) {
          EXPECT_NE(results[i].message().find(path_), std::string::npos);
          continue;
        }
        ASSERT_OK(results[i]);
        ASSERT_EQ(std::memcmp(reqs[i].buffer, contents_.data() + reqs[i].offset, reqs[i].length), 0)
            << "request " << i;
      }
      for (auto* b : bufs) std::free(b);
    }
  }

  TempDir tmp_;
  std::string path_;
  std::vector<std::byte> contents_;
  std::string skipped_;
};

TEST_P(EngineTest, ReadsExactBytes) {
  for (bool direct : {true, false}) {
    auto e = Make({.direct_io = direct});
    if (!e) GTEST_SKIP() << skipped_;
    EXPECT_EQ(e->kind(), GetParam());
    EXPECT_FALSE(e->description().empty());
    ReadAndCheck(*e, 20);
  }
}

TEST_P(EngineTest, RegisteredBuffersReadTheSameBytes) {
  auto e = Make({});
  if (!e) GTEST_SKIP() << skipped_;
  const size_t len = 1 << 20;
  auto* buf = static_cast<std::byte*>(std::aligned_alloc(4096, len));
  const bool registered = e->RegisterBuffer(0, {buf, len});
  ReadRequest r{0, 8192, len / 2, buf + 4096, registered ? 0u : ReadRequest::kNoSlot};
  std::vector<Status> results(1);
  ASSERT_OK(e->Read({&r, 1}, results));
  ASSERT_OK(results[0]);
  EXPECT_EQ(std::memcmp(buf + 4096, contents_.data() + 8192, len / 2), 0);
  std::free(buf);
}

TEST_P(EngineTest, ShortReadsAndEagainAreRetriedToCompletion) {
  auto e = Make({.queue_depth = 8, .faults = {.short_every = 2, .eagain_every = 3}});
  if (!e) GTEST_SKIP() << skipped_;
  ReadAndCheck(*e, 10);
}

TEST_P(EngineTest, EioFailsOnlyTheAffectedRequestsNamingTheFile) {
  auto e = Make({.queue_depth = 4, .faults = {.eio_every = 5}});
  if (!e) GTEST_SKIP() << skipped_;
  ReadAndCheck(*e, 5, /*expect_all_ok=*/false);
  // Exactly which requests fail depends on completion order; some must.
  std::vector<ReadRequest> reqs(10);
  std::vector<std::byte*> bufs;
  for (size_t i = 0; i < reqs.size(); ++i) {
    bufs.push_back(static_cast<std::byte*>(std::aligned_alloc(4096, 4096)));
    reqs[i] = ReadRequest{0, i * 4096, 4096, bufs.back()};
  }
  std::vector<Status> results(reqs.size());
  ASSERT_OK(e->Read(reqs, results));
  int failed = 0;
  for (const Status& s : results) {
    if (!s.ok()) {
      ++failed;
      EXPECT_EQ(s.sys_errno(), EIO);
      EXPECT_NE(s.message().find("data.bin: read of 4096 bytes at offset"), std::string::npos)
          << s.message();
    }
  }
  EXPECT_EQ(failed, 2);
  for (auto* b : bufs) std::free(b);
}

TEST_P(EngineTest, ReadingPastTheEndIsAnError) {
  auto e = Make({.direct_io = false});
  if (!e) GTEST_SKIP() << skipped_;
  std::vector<std::byte> buf(8192);
  ReadRequest r{0, kFileSize - 4096, 8192, buf.data()};
  std::vector<Status> results(1);
  ASSERT_OK(e->Read({&r, 1}, results));
  ASSERT_THAT(results[0], StatusIs(StatusCode::kIOError, "unexpected end of file"));
}

// A file that shrinks under the mmap engine's mapping: the reads of the
// lost pages fail with EIO naming the file (map_guard catches the SIGBUS),
// and none hands out the zeros mapped in their place, before or after.
TEST(MmapEngineTest, AFileThatShrinksFailsItsReadsInsteadOfHandingOutZeros) {
  TempDir tmp;
  const std::string path = tmp / "shrinks.bin";
  const std::vector<std::byte> contents = testing::RandomBytes(1 << 20, 5);
  testing::WriteFile(path, contents);
  auto e = CreateEngine({path}, {.kind = EngineKind::kMmap});
  ASSERT_OK(e);
  EXPECT_EQ((*e)->kind(), EngineKind::kMmap);
  EXPECT_EQ((*e)->alignment(), 1u);  // never O_DIRECT
  std::vector<std::byte> buf(1000);
  ReadRequest r{0, 700000, 1000, buf.data()};
  std::vector<Status> results(1);
  ASSERT_OK((*e)->Read({&r, 1}, results));
  ASSERT_OK(results[0]);
  EXPECT_EQ(std::memcmp(buf.data(), contents.data() + 700000, 1000), 0);
  std::filesystem::resize_file(path, 4096);
  for (uint64_t offset : {uint64_t{800000}, uint64_t{700000}}) {
    r.offset = offset;
    ASSERT_OK((*e)->Read({&r, 1}, results));
    EXPECT_THAT(results[0], StatusIs(StatusCode::kIOError, path)) << offset;
  }
  r.offset = 0;  // a page still in the file: the mapping is no longer trusted
  ASSERT_OK((*e)->Read({&r, 1}, results));
  EXPECT_THAT(results[0], StatusIs(StatusCode::kIOError, path));
}

TEST(MmapEngineTest, RemoteTargetsAreRefused) {
  EXPECT_THAT(CreateEngine({"s3://bucket/v.dlfs"}, {.kind = EngineKind::kMmap}),
              StatusIs(StatusCode::kInvalidArgument, "engine mmap reads local files"));
}

// tmpfs may refuse O_DIRECT; either way the engine must work and say what it does.
TEST_P(EngineTest, TmpfsFallsBackOrWorks) {
  if (!std::filesystem::exists("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  const std::string shm = "/dev/shm/dlfs-engine-test-" + std::to_string(::getpid());
  testing::WriteFile(shm, contents_);
  {
    auto e = Make({.direct_io = true}, shm);
    if (!e) {
      std::filesystem::remove(shm);
      GTEST_SKIP() << skipped_;
    }
    if (e->alignment() == 1) {
      EXPECT_NE(e->description().find("buffered"), std::string::npos) << e->description();
    }
    auto* aligned = static_cast<std::byte*>(std::aligned_alloc(4096, 1 << 16));
    ReadRequest r{0, 4096 * 3, 1 << 16, aligned};
    std::vector<Status> results(1);
    ASSERT_OK(e->Read({&r, 1}, results));
    EXPECT_OK(results[0]);
    EXPECT_EQ(std::memcmp(aligned, contents_.data() + 4096 * 3, 1 << 16), 0);
    std::free(aligned);
  }
  std::filesystem::remove(shm);
}

// The streaming interface: requests queued well beyond the queue depth,
// reaped in pieces, tags matched, bytes exact; Read() refuses to mix in.
TEST_P(EngineTest, StreamedReadsKeepTheQueueFullAndMatchTags) {
  auto e = Make({.queue_depth = 8, .faults = {.short_every = 5, .eagain_every = 7}});
  if (!e) GTEST_SKIP() << skipped_;
  const uint64_t a = std::max<uint32_t>(e->alignment(), 1);
  constexpr size_t kN = 300;
  std::vector<std::byte*> bufs;
  std::vector<ReadRequest> reqs(kN);
  std::mt19937 rng(4);
  for (size_t i = 0; i < kN; ++i) {
    const uint64_t len = (1 + rng() % 8) * a;
    bufs.push_back(static_cast<std::byte*>(std::aligned_alloc(4096, (len + 4095) / 4096 * 4096)));
    reqs[i] = ReadRequest{0, (rng() % (kFileSize / a - 8)) * a, len, bufs.back()};
    e->Enqueue(reqs[i], 1000 + i);
  }
  EXPECT_EQ(e->pending(), kN);
  std::vector<Status> statuses;
  std::vector<ReadRequest> tmp(1);
  EXPECT_EQ(e->Read(tmp, statuses).code(), StatusCode::kInvalidArgument);  // streaming pending
  ASSERT_OK(e->Submit());
  std::vector<ReadCompletion> done;
  std::vector<int> seen(kN, 0);
  while (e->pending() > 0) {
    const size_t before = done.size();
    ASSERT_OK(e->Reap(&done, 3));
    EXPECT_GE(done.size() - before, std::min<size_t>(3, kN - before));
  }
  ASSERT_EQ(done.size(), kN);
  for (const ReadCompletion& c : done) {
    ASSERT_GE(c.tag, 1000u);
    const size_t i = c.tag - 1000;
    ASSERT_LT(i, kN);
    ++seen[i];
    ASSERT_OK(c.status);
    ASSERT_EQ(std::memcmp(bufs[i], contents_.data() + reqs[i].offset, reqs[i].length), 0) << i;
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<long>(kN));
  const EngineStats s = e->stats();
  EXPECT_EQ(s.requests, kN);
  EXPECT_GT(s.ops, kN);  // short reads and EAGAIN were resubmitted
  EXPECT_GT(s.in_flight_seconds, 0);
  EXPECT_LE(s.mean_in_flight(), 8.0);
  for (auto* b : bufs) std::free(b);
}

TEST_P(EngineTest, CancelDropsOnlyQueuedReads) {
  auto e = Make({.queue_depth = 2});
  if (!e) GTEST_SKIP() << skipped_;
  std::vector<std::byte*> bufs;
  for (uint64_t i = 0; i < 20; ++i) {
    bufs.push_back(static_cast<std::byte*>(std::aligned_alloc(4096, 4096)));
    e->Enqueue(ReadRequest{0, i * 4096, 4096, bufs.back()}, i);
  }
  ASSERT_OK(e->Submit());  // two in flight, eighteen queued
  e->Cancel([](uint64_t tag) { return tag % 2 == 1; });
  std::vector<ReadCompletion> done;
  while (e->pending() > 0) ASSERT_OK(e->Reap(&done, 1));
  ASSERT_EQ(done.size(), 20u);
  int cancelled = 0;
  for (const ReadCompletion& c : done) {
    if (!c.status.ok()) {
      EXPECT_EQ(c.status.code(), StatusCode::kCancelled);
      EXPECT_EQ(c.tag % 2, 1u);
      ++cancelled;
    } else {
      EXPECT_EQ(std::memcmp(bufs[c.tag], contents_.data() + c.tag * 4096, 4096), 0);
    }
  }
  // Tag 1 may have been in flight already; the other odd ones were queued.
  EXPECT_GE(cancelled, 9);
  for (auto* b : bufs) std::free(b);
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineTest,
                         ::testing::Values(EngineKind::kUring, EngineKind::kPread,
                                           EngineKind::kMmap),
                         [](const auto& info) { return std::string(EngineKindName(info.param)); });

TEST(EngineFactoryTest, MissingFileAndNames) {
  auto e = CreateEngine({"/nonexistent/x.dlfs"}, {});
  ASSERT_THAT(e, StatusIs(StatusCode::kNotFound, "/nonexistent/x.dlfs"));
  EXPECT_EQ(*ParseEngineKind("uring"), EngineKind::kUring);
  EXPECT_THAT(ParseEngineKind("spdk"),
              StatusIs(StatusCode::kInvalidArgument, "unknown engine 'spdk'"));
}

}  // namespace engine_test
}  // namespace dlfs
