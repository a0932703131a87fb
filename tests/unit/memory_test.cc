// The memory a job may use, read from fake /proc and cgroup trees (v1, v2,
// hybrid, nested limits), and the cache budget made of it.
#include "dlfs/memory.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "loader/slab_pool.h"
#include "testutil.h"

namespace dlfs {
namespace memory_test {

namespace fs = std::filesystem;
constexpr uint64_t kGiB = uint64_t{1} << 30;

void Write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

class FakeSystem {
 public:
  explicit FakeSystem(uint64_t mem_available_kb, const std::string& self_cgroup) {
    Write(root() / "proc/meminfo",
          "MemTotal:       24000000 kB\nMemFree:         1000 kB\n"
          "MemAvailable:   " +
              std::to_string(mem_available_kb) + " kB\n");
    Write(root() / "proc/self/cgroup", self_cgroup);
  }
  fs::path root() const { return dir_.path(); }
  void V1(const std::string& rel, const std::string& limit, uint64_t usage, uint64_t inactive) {
    const fs::path d = root() / "sys/fs/cgroup/memory" / rel;
    Write(d / "memory.limit_in_bytes", limit + "\n");
    Write(d / "memory.usage_in_bytes", std::to_string(usage) + "\n");
    Write(d / "memory.stat", "cache 5\ntotal_inactive_file " + std::to_string(inactive) + "\n");
  }
  void V2(const std::string& top, const std::string& rel, const std::string& max,
          uint64_t current) {
    const fs::path d = root() / top / rel;
    Write(d / "memory.max", max + "\n");
    Write(d / "memory.current", std::to_string(current) + "\n");
    Write(d / "memory.stat", "anon 1\ninactive_file 0\n");
  }
  MemoryLimit Read() const { return ReadMemoryLimit(root().string()); }

 private:
  testing::TempDir dir_;
};

TEST(MemoryLimitTest, NoCgroupLimitIsMemAvailable) {
  FakeSystem sys(8 * 1024 * 1024, "4:memory:/\n0::/\n");
  sys.V1("", "9223372036854771712", 5 * kGiB, 0);  // v1's "unlimited"
  const MemoryLimit m = sys.Read();
  EXPECT_EQ(m.mem_available, 8 * kGiB);
  EXPECT_EQ(m.cgroup_limit, 0u);
  EXPECT_EQ(m.usable(), 8 * kGiB);
}

TEST(MemoryLimitTest, V1LimitLessWorkingSet) {
  FakeSystem sys(20 * 1024 * 1024, "9:pids:/\n4:memory:/slurm/job7\n1:cpu,cpuacct:/\n");
  sys.V1("", "9223372036854771712", 0, 0);
  sys.V1("slurm", "9223372036854771712", 0, 0);
  // 1 GiB limit, 400 MiB used of which 100 MiB inactive page cache.
  sys.V1("slurm/job7", std::to_string(kGiB), 400 << 20, 100 << 20);
  const MemoryLimit m = sys.Read();
  EXPECT_EQ(m.cgroup_limit, kGiB);
  EXPECT_EQ(m.cgroup_usage, uint64_t{300} << 20);
  EXPECT_EQ(m.usable(), kGiB - (uint64_t{300} << 20));
  EXPECT_NE(m.cgroup.find("slurm/job7/memory.limit_in_bytes"), std::string::npos) << m.cgroup;
}

TEST(MemoryLimitTest, TightestAncestorWins) {
  FakeSystem sys(20 * 1024 * 1024, "0::/user.slice/job/step\n");
  sys.V2("sys/fs/cgroup", "", "max", 0);
  sys.V2("sys/fs/cgroup", "user.slice", std::to_string(2 * kGiB), 1900 << 20);
  sys.V2("sys/fs/cgroup", "user.slice/job", std::to_string(4 * kGiB), 10 << 20);
  sys.V2("sys/fs/cgroup", "user.slice/job/step", "max", 10 << 20);
  const MemoryLimit m = sys.Read();
  EXPECT_EQ(m.cgroup_limit, 2 * kGiB);  // the parent leaves 148 MiB, the job 4 GiB
  EXPECT_EQ(m.usable(), uint64_t{148} << 20);
  EXPECT_NE(m.cgroup.find("user.slice/memory.max"), std::string::npos) << m.cgroup;
}

TEST(MemoryLimitTest, HybridUnifiedMount) {
  FakeSystem sys(20 * 1024 * 1024, "4:memory:/\n0::/box\n");
  sys.V1("", "9223372036854771712", 0, 0);
  sys.V2("sys/fs/cgroup/unified", "box", std::to_string(kGiB / 2), 0);
  EXPECT_EQ(sys.Read().usable(), kGiB / 2);
}

TEST(MemoryLimitTest, MissingFilesMeanNoLimit) {
  FakeSystem sys(1024, "garbage\n");
  EXPECT_EQ(sys.Read().usable(), 1024u * 1024);
  EXPECT_EQ(ReadMemoryLimit("/nonexistent/root").usable(), 0u);
}

TEST(CacheBudgetTest, DefaultIsAQuarterAndLargeBudgetsAreClamped) {
  ::unsetenv("DLFS_CACHE_BUDGET");
  MemoryLimit m;
  m.mem_available = 20 * kGiB;
  m.cgroup_limit = kGiB;
  m.cgroup_usage = 0;
  m.cgroup = "/sys/fs/cgroup/memory/job/memory.limit_in_bytes";
  std::string note;
  EXPECT_EQ(ResolveCacheBudget(kAutoCacheBudget, m, &note), kGiB / 4);
  EXPECT_EQ(note, "");
  EXPECT_EQ(ResolveCacheBudget(100 << 20, m, &note), uint64_t{100} << 20);
  EXPECT_EQ(ResolveCacheBudget(0, m, &note), 0u);
  EXPECT_EQ(ResolveCacheBudget(4 * kGiB, m, &note), kGiB / 2);
  EXPECT_NE(note.find("reduced to 536.9 MB"), std::string::npos) << note;
  EXPECT_NE(note.find("job/memory.limit_in_bytes"), std::string::npos) << note;
}

TEST(CacheBudgetTest, EnvironmentSetsTheDefault) {
  MemoryLimit m;
  m.mem_available = 20 * kGiB;
  std::string note;
  ::setenv("DLFS_CACHE_BUDGET", "300M", 1);
  EXPECT_EQ(ResolveCacheBudget(kAutoCacheBudget, m, &note), uint64_t{300} << 20);
  EXPECT_EQ(ResolveCacheBudget(7, m, &note), 7u);  // an explicit budget wins
  ::setenv("DLFS_CACHE_BUDGET", "0", 1);
  EXPECT_EQ(ResolveCacheBudget(kAutoCacheBudget, m, &note), 0u);
  ::setenv("DLFS_CACHE_BUDGET", "lots", 1);
  EXPECT_EQ(ResolveCacheBudget(kAutoCacheBudget, m, &note), 5 * kGiB);
  EXPECT_NE(note.find("DLFS_CACHE_BUDGET: cache budget 'lots'"), std::string::npos) << note;
  ::unsetenv("DLFS_CACHE_BUDGET");
}

TEST(CacheBudgetTest, ParsesSizes) {
  EXPECT_EQ(*ParseByteBudget("auto"), kAutoCacheBudget);
  EXPECT_EQ(*ParseByteBudget("0"), 0u);
  EXPECT_EQ(*ParseByteBudget("1536"), 1536u);
  EXPECT_EQ(*ParseByteBudget("2G"), 2 * kGiB);
  EXPECT_EQ(*ParseByteBudget("3MiB"), uint64_t{3} << 20);
  EXPECT_EQ(*ParseByteBudget("1kb"), 1024u);
  for (const char* bad : {"", "G", "2X", "2GG", "-1", "99999999999T"}) {
    EXPECT_EQ(ParseByteBudget(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

// The batch buffers of a loader within its share of memory.
uint64_t Pages(uint64_t bytes) { return (bytes + 4095) / 4096 * 4096; }

TEST(PlanBuffersTest, UnchangedWhenTheyFit) {
  using loader_internal::PlanBuffers;
  ASSERT_OK_AND_ASSIGN(const loader_internal::BufferPlan p, PlanBuffers({.window = 4,
                                                                         .held = 3,
                                                                         .batch_size = 256,
                                                                         .mean_sample = 100000,
                                                                         .alignment = 4096,
                                                                         .usable = 64 * kGiB}));
  EXPECT_EQ(p.window, 4u);
  EXPECT_EQ(p.per_thread, 7u);
  EXPECT_EQ(p.slab, Pages((100000 + 4096) * 256 / 4 * 5 + 4096));  // a quarter to spare
  EXPECT_EQ(p.total, 7 * p.slab);
  EXPECT_EQ(p.note, "");
  // No limit known: as asked.
  ASSERT_OK_AND_ASSIGN(
      const loader_internal::BufferPlan unknown,
      PlanBuffers({.window = 4, .held = 3, .batch_size = 256, .mean_sample = 100000}));
  EXPECT_EQ(unknown.window, 4u);
}

TEST(PlanBuffersTest, ShortOfMemoryReadsAheadLess) {
  using loader_internal::PlanBuffers;
  // resnet50 as MLPerf Storage has it: 400 samples of 114,660 bytes.
  const uint64_t slab = Pages((114660 + 4096) * 400 + 4096);  // no spare quarter
  ASSERT_OK_AND_ASSIGN(const loader_internal::BufferPlan p,
                       PlanBuffers({.window = 4,
                                    .held = 3,
                                    .batch_size = 400,
                                    .mean_sample = 114660,
                                    .largest_sample = 114660,
                                    .alignment = 4096,
                                    .usable = 8 * (5 * slab + 100)}));
  EXPECT_EQ(p.window, 2u);  // 2 + 3 held = 5 slabs
  EXPECT_EQ(p.per_thread, 5u);
  EXPECT_EQ(p.slab, slab);
  EXPECT_EQ(p.total, 5 * slab);
  EXPECT_NE(p.note.find("read-ahead shortened from 4 to 2 batches so that the batch buffers, " +
                        HumanBytes(static_cast<double>(p.total)) + " (5 of "),
            std::string::npos)
      << p.note;

  // Two I/O threads: each pool holds its share of the window and its own held slabs.
  ASSERT_OK_AND_ASSIGN(const loader_internal::BufferPlan two,
                       PlanBuffers({.window = 4,
                                    .threads = 2,
                                    .held = 2,
                                    .batch_size = 400,
                                    .mean_sample = 114660,
                                    .alignment = 4096,
                                    .usable = 8 * 6 * slab}));
  EXPECT_EQ(two.window, 2u);  // 2 threads x (1 + 2)
  EXPECT_EQ(two.total, uint64_t{two.per_thread} * 2 * two.slab);
  EXPECT_LE(two.total, 6 * slab);
}

TEST(PlanBuffersTest, SlabsCoverTheSpreadOfSampleSizes) {
  using loader_internal::PlanBuffers;
  // ~100 KB samples, standard deviation 66 KB (bench/data's log-normal),
  // batches of 256: 4 sigma of a batch is 4 * 16 * 66 KB above the mean.
  ASSERT_OK_AND_ASSIGN(const loader_internal::BufferPlan p, PlanBuffers({.window = 4,
                                                                         .held = 3,
                                                                         .batch_size = 256,
                                                                         .mean_sample = 100000,
                                                                         .largest_sample = 900000,
                                                                         .sample_stddev = 66000,
                                                                         .alignment = 4096,
                                                                         .usable = 400 << 20}));
  EXPECT_EQ(p.slab, Pages((100000 + 4096) * 256 + 4096 + 4 * 16 * 66000));
  // Few, large samples: the largest among mean ones.
  ASSERT_OK_AND_ASSIGN(const loader_internal::BufferPlan few,
                       PlanBuffers({.window = 4,
                                    .held = 3,
                                    .batch_size = 2,
                                    .mean_sample = 10 << 20,
                                    .largest_sample = 30 << 20,
                                    .sample_stddev = 1 << 20,
                                    .alignment = 4096,
                                    .usable = 400 << 20}));
  EXPECT_EQ(few.slab, Pages((30 << 20) + 4096 + (10 << 20) + 4096 + 4096));
}

TEST(PlanBuffersTest, TwoBuffersBeyondTheEighthAreSaidWithTheirFigure) {
  using loader_internal::PlanBuffers;
  // unet3d: 7 samples of ~147 MB in a 3.2 GiB limit; 2 buffers of ~1 GB.
  ASSERT_OK_AND_ASSIGN(const loader_internal::BufferPlan p,
                       PlanBuffers({.window = 4,
                                    .held = 3,
                                    .batch_size = 7,
                                    .mean_sample = 146600628,
                                    .largest_sample = 146600628,
                                    .alignment = 4096,
                                    .usable = uint64_t{3200} << 20}));
  EXPECT_EQ(p.window, 1u);
  EXPECT_EQ(p.per_thread, 2u);
  EXPECT_EQ(p.total, 2 * p.slab);
  EXPECT_EQ(p.note, "the batch buffers, " + HumanBytes(static_cast<double>(p.total)) + " (2 of " +
                        HumanBytes(static_cast<double>(p.slab)) + "), exceed the " +
                        HumanBytes((uint64_t{3200} << 20) / 8) +
                        " they may take, an eighth of the " + HumanBytes(uint64_t{3200} << 20) +
                        " this process may use: reading one batch ahead");
}

TEST(PlanBuffersTest, RefusedWhereTwoBuffersDoNotFit) {
  using loader_internal::PlanBuffers;
  const Result<loader_internal::BufferPlan> p = PlanBuffers({.window = 4,
                                                             .held = 3,
                                                             .batch_size = 7,
                                                             .mean_sample = 146600628,
                                                             .largest_sample = 146600628,
                                                             .alignment = 4096,
                                                             .usable = 2 * kGiB});
  EXPECT_THAT(p.status(),
              testing::StatusIs(StatusCode::kInvalidArgument, "a batch of 7 samples needs"));
  EXPECT_THAT(p.status(),
              testing::StatusIs(StatusCode::kInvalidArgument, "a smaller batch_size lowers"));
  const Result<loader_internal::BufferPlan> threads = PlanBuffers({.window = 4,
                                                                   .threads = 2,
                                                                   .held = 3,
                                                                   .batch_size = 7,
                                                                   .mean_sample = 146600628,
                                                                   .alignment = 4096,
                                                                   .usable = 4 * kGiB});
  EXPECT_THAT(threads.status(),
              testing::StatusIs(StatusCode::kInvalidArgument, "or fewer io_threads"));
}

}  // namespace memory_test
}  // namespace dlfs
