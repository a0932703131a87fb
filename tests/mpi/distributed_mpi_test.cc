// Distributed reading under MPI (run with `mpirun -np 4`; CTest does): the
// loader built from a communicator and the shard-local loader, on two fake
// nodes of two ranks. Tests are collective; checks use EXPECT so a failure on
// one rank never leaves the others waiting.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dlfs/builder.h"
#include "dlfs/distributed.h"
#include "dlfs/loader.h"
#include "dlfs/mpi.h"
#include "dlfs/volume.h"
#include "format/format.h"
#include "mpi/mpi_testutil.h"
#include "synthetic_volume.h"
#include "testutil.h"

namespace dlfs {
namespace {

using testing::Rank;
using testing::RankRange;
using testing::Ranks;
using testing::RanksPerNode;
using testing::SharedTempDir;

// Two fake nodes of two ranks each, for the scope.
class TwoFakeNodes {
 public:
  TwoFakeNodes() { ::setenv("DLFS_RANKS_PER_NODE", std::to_string(Ranks() / 2).c_str(), 1); }
  ~TwoFakeNodes() { ::unsetenv("DLFS_RANKS_PER_NODE"); }
};

std::vector<std::byte> SampleBytes(uint64_t i) {
  return testing::RandomBytes(100 + (i * 7919) % 9000, static_cast<uint32_t>(i));
}

class DistributedTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new SharedTempDir();
    if (Rank() == 0) {
      // The tree layout, whose directory the collective open reads once and
      // shares per node (a compact one: compact.dlfs, mapped by every rank).
      testing::SyntheticVolume spec{.samples = kSamples,
                                    .classes = 5,
                                    .volume = {.layout = DirectoryLayout::kTree, .align = 4096},
                                    .bytes = SampleBytes};
      EXPECT_OK(testing::WriteSyntheticVolume(*dir_ / "one.dlfs", spec));
      spec.volume.layout = DirectoryLayout::kCompact;
      EXPECT_OK(testing::WriteSyntheticVolume(*dir_ / "compact.dlfs", spec));
      // The same samples over two targets: one per fake node.
      spec.volume.layout = DirectoryLayout::kTree;
      spec.volume.targets = 2;
      EXPECT_OK(testing::WriteSyntheticVolume(*dir_ / "two.dlfs", spec));
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static std::shared_ptr<Volume> OpenVolume(const std::string& name) {
    auto v = Volume::Open(*dir_ / name);
    EXPECT_OK(v);
    return v.ok() ? *v : nullptr;
  }

  static constexpr uint64_t kSamples = 1000;
  static SharedTempDir* dir_;
};

SharedTempDir* DistributedTest::dir_ = nullptr;

// Every rank of the job computes the same permutation: rank 0's is
// broadcast and compared, for several epochs.
TEST_F(DistributedTest, SamePermutationOnEveryRank) {
  auto volume = OpenVolume("one.dlfs");
  ASSERT_TRUE(volume);
  LoaderOptions o;
  o.sampler.batch_size = 16;
  o.sampler.seed = 42;
  auto loader = CreateLoader(MPI_COMM_WORLD, volume, o);
  ASSERT_OK(loader);
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<uint64_t> perm = (*loader)->sampler().Permutation(epoch);
    std::vector<uint64_t> root = perm;
    MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_UINT64_T, 0, MPI_COMM_WORLD);
    EXPECT_EQ(perm, root) << "epoch " << epoch;
    // Shards are disjoint and complete: every sample once over all ranks.
    std::vector<uint32_t> hits(kSamples), total(kSamples);
    for (uint64_t i : (*loader)->RankIndices(epoch)) ++hits[i];
    MPI_Allreduce(hits.data(), total.data(), static_cast<int>(kSamples), MPI_UINT32_T, MPI_SUM,
                  MPI_COMM_WORLD);
    for (uint64_t i = 0; i < kSamples; ++i) EXPECT_EQ(total[i], 1u) << "sample " << i;
  }
  // Every rank gets the same number of batches.
  uint64_t mine = (*loader)->batches_per_epoch(), lo = 0, hi = 0;
  MPI_Allreduce(&mine, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&mine, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi);
}

TEST_F(DistributedTest, RanksThatDisagreeAreRefused) {
  auto volume = OpenVolume("one.dlfs");
  ASSERT_TRUE(volume);
  LoaderOptions o;
  o.sampler.seed = Rank() == 1 ? 7 : 8;
  auto loader = CreateLoader(MPI_COMM_WORLD, volume, o);
  EXPECT_EQ(loader.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(loader.status().message().find("ranks disagree on seed ("), std::string::npos)
      << loader.status().ToString();
  EXPECT_NE(loader.status().message().find("7 on rank 1"), std::string::npos)
      << loader.status().ToString();
  // Shard exchanges must line up: the window size too.
  ShardLoaderOptions so;
  so.window_batches = Rank() == 1 ? 2 : 3;
  auto shard = ShardLoader::Create(MPI_COMM_WORLD, volume, so);
  EXPECT_EQ(shard.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(shard.status().message().find("window_batches"), std::string::npos);
  // An invalid window on one rank is the disagreement on every rank, not an
  // early return on that rank.
  so.window_batches = Rank() == 1 ? 0 : 3;
  shard = ShardLoader::Create(MPI_COMM_WORLD, volume, so);
  EXPECT_EQ(shard.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(shard.status().message().find("0 on rank 1"), std::string::npos)
      << shard.status().ToString();
  // Another volume on one rank.
  auto other = OpenVolume(Rank() == 1 ? "two.dlfs" : "one.dlfs");
  ASSERT_TRUE(other);
  loader = CreateLoader(MPI_COMM_WORLD, other, LoaderOptions{});
  EXPECT_EQ(loader.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(loader.status().message().find("the volume"), std::string::npos)
      << loader.status().ToString();
}

// DLFS_RANKS_PER_NODE set on some ranks only: the collective open and the
// shard-local loader fail on every rank, naming the ranks; none hangs.
TEST_F(DistributedTest, RanksThatDisagreeOnTheLayoutFailTogether) {
  auto volume = OpenVolume("two.dlfs");
  ASSERT_TRUE(volume);
  RanksPerNode env(Rank() < Ranks() / 2 ? std::to_string(Ranks() / 2) : "");
  auto shared = OpenShared(MPI_COMM_WORLD, *dir_ / "two.dlfs");
  EXPECT_EQ(shared.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(shared.status().message().find("DLFS_RANKS_PER_NODE"), std::string::npos)
      << shared.status().ToString();
  EXPECT_NE(shared.status().message().find(RankRange(Ranks() / 2, Ranks() - 1)), std::string::npos)
      << shared.status().ToString();
  auto shard = ShardLoader::Create(MPI_COMM_WORLD, volume, ShardLoaderOptions{});
  EXPECT_EQ(shard.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(shard.status().message().find("DLFS_RANKS_PER_NODE"), std::string::npos)
      << shard.status().ToString();
}

// The file (device, inode) and size of the mapping that holds `p` in this
// process, from /proc/self/maps; inode 0 for anonymous memory.
struct Backing {
  uint64_t device = 0, inode = 0, bytes = 0;
};
Backing BackingOf(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::FILE* f = std::fopen("/proc/self/maps", "r");
  char line[4096];
  Backing b;
  while (f && std::fgets(line, sizeof line, f)) {
    unsigned long lo, hi, offset, inode;
    unsigned major, minor;
    if (std::sscanf(line, "%lx-%lx %*s %lx %x:%x %lu", &lo, &hi, &offset, &major, &minor, &inode) ==
            6 &&
        lo <= addr && addr < hi) {
      b = {uint64_t{major} << 32 | minor, inode, hi - lo};
      break;
    }
  }
  if (f) std::fclose(f);
  return b;
}

// Counts the distinct memory objects that hold the directory across all
// ranks: a shared window is one file-backed object per node, a private copy
// one anonymous mapping per rank.
uint64_t DistinctDirectoryCopies(const Volume& v) {
  const Backing mine = BackingOf(v.metadata().directory.get());
  // Anonymous memory is private to each process: make it distinct by rank.
  const uint64_t key[2] = {mine.device, mine.inode == 0 ? ~uint64_t(Rank()) : mine.inode};
  std::vector<uint64_t> all(2 * Ranks());
  MPI_Allgather(key, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, MPI_COMM_WORLD);
  std::set<std::pair<uint64_t, uint64_t>> distinct;
  for (int r = 0; r < Ranks(); ++r) distinct.insert({all[2 * r], all[2 * r + 1]});
  return distinct.size();
}

// A collective open puts one directory copy in each node's region,
// reads the metadata from storage on one rank only, and reads back the same
// samples as a private open.
TEST_F(DistributedTest, CollectiveOpenSharesTheDirectoryPerNode) {
  TwoFakeNodes nodes;
  SharedOpenStats stats;
  auto shared = OpenShared(MPI_COMM_WORLD, *dir_ / "one.dlfs", {}, &stats);
  ASSERT_OK(shared);
  auto own = OpenVolume("one.dlfs");
  ASSERT_TRUE(own);
  const uint64_t dir_bytes = (*shared)->info().directory_bytes;

  // Measured, not assumed: which memory holds each rank's directory.
  EXPECT_EQ(DistinctDirectoryCopies(**shared), 2u);  // one per fake node
  EXPECT_EQ(DistinctDirectoryCopies(*own), static_cast<uint64_t>(Ranks()));
  EXPECT_NE(BackingOf((*shared)->metadata().directory.get()).inode, 0u);
  EXPECT_GE(BackingOf((*shared)->metadata().directory.get()).bytes, dir_bytes);

  uint64_t read_here = stats.metadata_bytes_read, read_total = 0, window = stats.window_bytes,
           window_total = 0;
  MPI_Allreduce(&read_here, &read_total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&window, &window_total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(read_here > 0, Rank() == 0);
  EXPECT_GE(read_total, dir_bytes);
  EXPECT_EQ(window_total, 2 * dir_bytes);

  for (uint64_t i = 0; i < kSamples; i += 37) {
    auto a = (*shared)->Read(i);
    auto b = own->Read(i);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b);
    EXPECT_EQ((*shared)->directory().Path(i), own->directory().Path(i));
  }
}

// A compact directory (format v3) is mapped from the volume file by every
// rank: the page cache holds it once, the collective open hands over only
// the superblocks, and no node region is made.
TEST_F(DistributedTest, CollectiveOpenMapsACompactDirectory) {
  TwoFakeNodes nodes;
  SharedOpenStats stats;
  auto shared = OpenShared(MPI_COMM_WORLD, *dir_ / "compact.dlfs", {}, &stats);
  ASSERT_OK(shared);
  EXPECT_TRUE((*shared)->directory().compact());
  EXPECT_EQ((*shared)->directory_region(), "");
  // One memory object on every rank: the file's pages.
  EXPECT_EQ(DistinctDirectoryCopies(**shared), 1u);
  EXPECT_NE(BackingOf((*shared)->metadata().directory.get()).inode, 0u);
  uint64_t read_here = stats.metadata_bytes_read, window = stats.window_bytes;
  EXPECT_LE(read_here, uint64_t{format::kSuperblockSize});  // the superblock only
  EXPECT_EQ(window, 0u);
  auto own = OpenVolume("one.dlfs");
  ASSERT_TRUE(own);
  for (uint64_t i = 0; i < kSamples; i += 37) {
    const uint64_t j = *own->directory().Lookup((*shared)->directory().Path(i));
    auto a = (*shared)->Read(i);
    auto b = own->Read(j);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b);
  }
}

// Where no node region can be made (here: no such directory for regions),
// the collective open still works: each rank gets a copy of its own, from
// its node leader, and the note says so.
TEST_F(DistributedTest, CollectiveOpenWithoutSharedMemoryGivesEachRankACopy) {
  TwoFakeNodes nodes;
  ::setenv("DLFS_CACHE_DIR", (*dir_ / "no/such/dir").c_str(), 1);
  SharedOpenStats stats;
  auto shared = OpenShared(MPI_COMM_WORLD, *dir_ / "one.dlfs", {}, &stats);
  ::unsetenv("DLFS_CACHE_DIR");
  ASSERT_OK(shared);
  EXPECT_NE(stats.note.find("a copy per rank instead"), std::string::npos) << stats.note;
  EXPECT_EQ((*shared)->directory_region(), "");
  EXPECT_EQ(DistinctDirectoryCopies(**shared), static_cast<uint64_t>(Ranks()));
  auto own = OpenVolume("one.dlfs");
  ASSERT_TRUE(own);
  for (uint64_t i = 0; i < kSamples; i += 53) {
    auto a = (*shared)->Read(i);
    auto b = own->Read(i);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b);
  }
}

// A weighted mixture under MPI: each rank reads what a mixture of its rank
// alone reads, and ranks that disagree on the weights are refused together.
TEST_F(DistributedTest, MixtureUnderMpiReadsEachRanksShare) {
  auto one = OpenVolume("one.dlfs");
  auto two = OpenVolume("two.dlfs");
  ASSERT_TRUE(one && two);
  MixtureOptions m;
  m.weights = {3, 1};
  m.sampler.batch_size = 32;
  m.sampler.seed = 4;
  LoaderOptions o;
  o.cache_budget = 0;
  auto mixed = CreateMixture(MPI_COMM_WORLD, {one, two}, m, o);
  ASSERT_OK(mixed);
  MixtureOptions alone = m;
  alone.sampler.rank = static_cast<uint32_t>(Rank());
  alone.sampler.world_size = static_cast<uint32_t>(Ranks());
  auto expected = MixtureSource::Create({one, two}, alone, o);
  ASSERT_OK(expected);
  (*mixed)->SetEpoch(1);
  (*expected)->SetEpoch(1);
  Batch a, b;
  uint64_t batches = 0;
  while (true) {
    auto more_a = (*mixed)->Next(&a);
    auto more_b = (*expected)->Next(&b);
    ASSERT_TRUE(more_a.ok() && more_b.ok());
    ASSERT_EQ(*more_a, *more_b);
    if (!*more_a) break;
    ++batches;
    EXPECT_TRUE(
        std::equal(a.indices().begin(), a.indices().end(), b.indices().begin(), b.indices().end()));
    EXPECT_TRUE(
        std::equal(a.sources().begin(), a.sources().end(), b.sources().begin(), b.sources().end()));
  }
  EXPECT_GT(batches, 0u);
  m.weights = {Rank() == 2 ? 2.0 : 3.0, 1};
  auto refused = CreateMixture(MPI_COMM_WORLD, {one, two}, m, o);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("ranks disagree on weights"), std::string::npos)
      << refused.status().ToString();
}

TEST_F(DistributedTest, CollectiveOpenErrorsReachEveryRank) {
  auto missing = OpenShared(MPI_COMM_WORLD, *dir_ / "missing.dlfs");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("missing.dlfs"), std::string::npos);
}

// Collects every batch of `epochs` epochs as (indices, bytes).
template <typename L>
std::vector<std::pair<std::vector<uint64_t>, std::vector<std::vector<std::byte>>>> ReadAll(
    L& loader, int epochs) {
  std::vector<std::pair<std::vector<uint64_t>, std::vector<std::vector<std::byte>>>> out;
  for (int e = 0; e < epochs; ++e) {
    loader.SetEpoch(e);
    Batch batch;
    while (true) {
      auto more = loader.Next(&batch);
      EXPECT_OK(more);
      if (!more.ok() || !*more) break;
      std::vector<std::vector<std::byte>> bytes;  // per sample, each field
      for (size_t i = 0; i < batch.size(); ++i) {
        for (size_t f = 0; f < batch.field_count(); ++f) {
          bytes.emplace_back(batch.field(i, f).begin(), batch.field(i, f).end());
        }
      }
      out.emplace_back(std::vector<uint64_t>(batch.indices().begin(), batch.indices().end()),
                       std::move(bytes));
    }
  }
  return out;
}

// Shard-local mode returns exactly what the plain loader returns, for every
// rank and epoch. With a one-target volume node 0 holds everything, so the
// ranks of node 1 fetch every sample over MPI.
TEST_F(DistributedTest, ShardLocalEqualsLocalReading) {
  TwoFakeNodes nodes;
  auto volume = OpenVolume("one.dlfs");
  ASSERT_TRUE(volume);
  LoaderOptions o;
  o.sampler.batch_size = 24;
  o.sampler.seed = 3;
  for (const auto& [window, ahead] : {std::pair{1u, true}, {5u, true}, {5u, false}}) {
    auto local = CreateLoader(MPI_COMM_WORLD, volume, o);
    ASSERT_OK(local);
    ShardLoaderOptions so;
    so.loader = o;
    so.window_batches = window;
    so.read_ahead = ahead;
    auto shard = ShardLoader::Create(MPI_COMM_WORLD, volume, so);
    ASSERT_OK(shard);
    const auto expected = ReadAll(**local, 2);
    const auto got = ReadAll(**shard, 2);
    EXPECT_EQ(got.size(), expected.size());
    EXPECT_TRUE(got == expected) << "rank " << Rank() << " window " << window;
    const ShardLoaderStats& st = (*shard)->stats();
    if (Rank() < Ranks() / 2) {
      EXPECT_EQ(st.remote_samples, 0u);
      EXPECT_GT(st.served_samples, 0u);
    } else {
      EXPECT_EQ(st.local_samples, 0u);
      EXPECT_GT(st.bytes_received, 0u);
    }
  }
}

// LoaderOptions::fields reach the shard-local loader: the same fields (a
// zstd one decoded) as the plain loader's, equal to Volume::Read(i, field).
TEST_F(DistributedTest, ShardLocalReadsFields) {
  TwoFakeNodes nodes;
  if (Rank() == 0) {
    VolumeBuilder::Options opt;
    opt.compress.zstd = true;
    auto b = VolumeBuilder::Create(*dir_ / "fields.dlfs", opt);
    EXPECT_OK(b);
    for (int i = 0; b.ok() && i < 60; ++i) {
      std::string caption = "{\"id\": " + std::to_string(i) + ", \"text\": \"";
      for (int k = 0; k < 20; ++k) caption += "a cat on a mat ";
      EXPECT_OK((*b)->BeginSample("s/" + std::to_string(1000 + i)));
      EXPECT_OK((*b)->AddField("jpg", SampleBytes(i)));
      EXPECT_OK((*b)->AddField("json", testing::Bytes(caption + "\"}")));
      EXPECT_OK((*b)->EndSample());
    }
    if (b.ok()) {
      EXPECT_OK((*b)->Finish());
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  auto volume = OpenVolume("fields.dlfs");
  ASSERT_TRUE(volume);
  LoaderOptions o;
  o.sampler.batch_size = 7;
  o.fields = {"json", "jpg"};
  auto local = CreateLoader(MPI_COMM_WORLD, volume, o);
  ASSERT_OK(local);
  ShardLoaderOptions so;
  so.loader = o;
  so.window_batches = 2;
  auto shard = ShardLoader::Create(MPI_COMM_WORLD, volume, so);
  ASSERT_OK(shard);
  const auto expected = ReadAll(**local, 1);
  const auto got = ReadAll(**shard, 1);
  EXPECT_TRUE(got == expected) << "rank " << Rank();
  ASSERT_FALSE(got.empty());
  const auto& [indices, bytes] = got.front();
  ASSERT_EQ(bytes.size(), 2 * indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    auto json = volume->Read(indices[i], "json");
    ASSERT_OK(json);
    EXPECT_EQ(bytes[2 * i], *json);
    EXPECT_EQ(bytes[2 * i + 1], SampleBytes(indices[i]));
  }
}

// The ranks of a job on one node share one node cache: one region, every
// rank attached, and what one rank cached the others read from memory.
TEST_F(DistributedTest, RanksShareOneNodeCache) {
  const std::string shm = *dir_ / "shm";
  if (Rank() == 0) std::filesystem::create_directories(shm);
  MPI_Barrier(MPI_COMM_WORLD);
  ::setenv("DLFS_CACHE_DIR", shm.c_str(), 1);
  auto volume = OpenVolume("one.dlfs");
  ASSERT_TRUE(volume);
  LoaderOptions o;
  o.sampler.batch_size = 16;
  o.cache_budget = uint64_t{1} << 30;
  auto loader = CreateLoader(MPI_COMM_WORLD, volume, o);
  ASSERT_OK(loader);
  MPI_Barrier(MPI_COMM_WORLD);  // every rank attached
  EXPECT_EQ((*loader)->source_stats().cache_sharers, static_cast<uint32_t>(Ranks()));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(shm), {}), 1);
  // Epochs until the ranks together cached the volume (each fills its shard).
  uint64_t used = 0;
  auto epoch = [&](uint64_t e) {
    (*loader)->SetEpoch(e);
    Batch b;
    while (true) {
      auto more = (*loader)->Next(&b);
      EXPECT_OK(more);
      if (!more.ok() || !*more) break;
      // A millisecond of "compute" per batch, as training: the filler runs.
      // Simulated work, not a wait: the loop below ends on the cache's
      // bytes (an event, with a deadline), whatever this sleep's length.
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      for (size_t i = 0; i < b.size(); ++i) {
        auto want = volume->Read(b.index(i));
        EXPECT_OK(want);
        if (want.ok()) {
          EXPECT_TRUE(testing::SameBytes(b.sample(i), *want))
              << "rank " << Rank() << " sample " << b.index(i);
        }
      }
    }
  };
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (int e = 0; std::chrono::steady_clock::now() < give_up; ++e) {
    epoch(e);
    used = (*loader)->source_stats().cache_used_bytes;
    uint64_t least = used;
    MPI_Allreduce(&used, &least, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    if (least >= volume->info().data_bytes) break;
  }
  EXPECT_EQ(used, volume->info().data_bytes);
  const SourceStats before = (*loader)->source_stats();
  epoch(500);
  EXPECT_EQ(((*loader)->source_stats() - before).io.requests, 0u) << "rank " << Rank();
  loader->reset();
  MPI_Barrier(MPI_COMM_WORLD);  // every rank detached: the last removed it
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(shm), {}), 0);
  ::unsetenv("DLFS_CACHE_DIR");
}

// A volume of one compressed field (a --compress pack of an ImageFolder)
// read with no fields: every rank's samples, local or fetched from the
// other node, are the bytes that were packed, decompressed.
TEST_F(DistributedTest, ShardLocalDecodesCompressedSamples) {
  TwoFakeNodes nodes;
  auto packed = [](uint64_t i) {
    std::string s = "sample " + std::to_string(i) + ":";
    for (int k = 0; k < 40; ++k) s += " the same words again";
    return testing::Bytes(s);
  };
  if (Rank() == 0) {
    VolumeBuilder::Options opt;
    opt.compress.zstd = true;
    auto b = VolumeBuilder::Create(*dir_ / "zstd.dlfs", opt);
    EXPECT_OK(b);
    for (uint64_t i = 0; b.ok() && i < 50; ++i) {
      EXPECT_OK((*b)->Add("s/" + std::to_string(1000 + i), packed(i)));
    }
    if (b.ok()) {
      EXPECT_OK((*b)->Finish());
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  auto volume = OpenVolume("zstd.dlfs");
  ASSERT_TRUE(volume);
  ASSERT_TRUE(volume->directory().has_field_records());  // stored compressed
  LoaderOptions o;
  o.sampler.batch_size = 6;
  ShardLoaderOptions so;
  so.loader = o;
  so.window_batches = 2;
  auto shard = ShardLoader::Create(MPI_COMM_WORLD, volume, so);
  ASSERT_OK(shard);
  uint64_t seen = 0;
  (*shard)->SetEpoch(0);
  Batch batch;
  while (true) {
    auto more = (*shard)->Next(&batch);
    EXPECT_OK(more);
    if (!more.ok() || !*more) break;
    for (size_t i = 0; i < batch.size(); ++i, ++seen) {
      // Sample paths are s/1000.. in index order.
      const auto want = packed(batch.index(i));
      EXPECT_EQ(std::vector<std::byte>(batch.sample(i).begin(), batch.sample(i).end()), want)
          << "rank " << Rank() << " sample " << batch.index(i);
    }
  }
  EXPECT_GT(seen, 0u);
}

// One target per fake node: each node reads its own target and fetches the
// other's samples; the batches still equal local reading of every target,
// and the bytes equal the one-target volume's.
TEST_F(DistributedTest, ShardLocalOverTwoTargets) {
  TwoFakeNodes nodes;
  // Each node opens only its own target: node 0's ranks are even told that
  // target 1 is somewhere that does not exist, and never notice.
  const int node = Rank() / (Ranks() / 2);
  VolumeOpenOptions oo;
  oo.open_only = ShardTargetsOfNode(node, 2);
  if (node == 0) oo.target_map[1] = *dir_ / "not-on-this-node";
  auto two = OpenShared(MPI_COMM_WORLD, *dir_ / "two.dlfs", oo);
  ASSERT_OK(two);
  ASSERT_EQ((*two)->target_count(), 2u);
  EXPECT_TRUE((*two)->target_open(node));
  EXPECT_EQ((*two)->target_open(1 - node), node == 1);  // target 0 is always open
  if (node == 0) {
    // Reading a sample of the other node's target directly is refused.
    uint64_t other = 0;
    while ((*two)->directory().sample(other).target != 1) ++other;
    EXPECT_EQ((*two)->Read(other).status().code(), StatusCode::kUnavailable);
  }
  auto one = OpenVolume("one.dlfs");
  ASSERT_TRUE(one);
  LoaderOptions o;
  o.sampler.batch_size = 16;
  o.sampler.seed = 11;
  ShardLoaderOptions so;
  so.loader = o;
  so.window_batches = 3;
  auto shard = ShardLoader::Create(MPI_COMM_WORLD, *two, so);
  ASSERT_OK(shard);
  auto all_targets = OpenVolume("two.dlfs");
  ASSERT_TRUE(all_targets);
  auto local = CreateLoader(MPI_COMM_WORLD, all_targets, o);
  auto single = CreateLoader(MPI_COMM_WORLD, one, o);
  ASSERT_TRUE(local.ok() && single.ok());
  const auto got = ReadAll(**shard, 2);
  EXPECT_TRUE(got == ReadAll(**local, 2)) << "rank " << Rank();
  EXPECT_TRUE(got == ReadAll(**single, 2)) << "rank " << Rank();
  // Both nodes hold about half: each rank reads some and fetches some.
  const ShardLoaderStats& st = (*shard)->stats();
  EXPECT_GT(st.local_samples, 0u);
  EXPECT_GT(st.remote_samples, 0u);
  EXPECT_GT(st.served_samples, 0u);
}

// A read failure on the owner reaches the requester as an error naming the
// sample and the owner, without a hang, and later batches still come.
TEST_F(DistributedTest, OwnerReadFailureReachesTheRequester) {
  TwoFakeNodes nodes;
  auto volume = OpenVolume("one.dlfs");
  ASSERT_TRUE(volume);
  ShardLoaderOptions so;
  so.loader.sampler.batch_size = 24;
  so.loader.engine.kind = EngineKind::kPread;
  so.loader.engine.faults = {.eio_every = 97};
  so.window_batches = 4;
  auto shard = ShardLoader::Create(MPI_COMM_WORLD, volume, so);
  ASSERT_OK(shard);
  uint64_t errors = 0, batches = 0, owner_errors = 0;
  Batch batch;
  for (uint64_t k = 0; k < (*shard)->batches_per_epoch(); ++k) {
    auto more = (*shard)->Next(&batch);
    if (more.ok()) {
      EXPECT_TRUE(*more);
      ++batches;
      continue;
    }
    ++errors;
    EXPECT_NE(more.status().message().find("sample "), std::string::npos);
    if (more.status().message().find("could not read it") != std::string::npos) ++owner_errors;
  }
  EXPECT_GT(batches, 0u);
  EXPECT_GT(errors, 0u);
  // Node 1's ranks read nothing themselves: their errors are all the owner's.
  if (Rank() >= Ranks() / 2) {
    EXPECT_EQ(owner_errors, errors);
  }
}

// Interrupted after batch k and resumed by a new ShardLoader from each
// rank's saved state: the two runs make every rank's epoch in order, and the
// resumed one neither reads nor exchanges the batches before k.
TEST_F(DistributedTest, ShardLoaderResumesExactly) {
  TwoFakeNodes nodes;
  auto volume = OpenVolume("one.dlfs");
  ASSERT_TRUE(volume);
  ShardLoaderOptions so;
  so.loader.sampler.batch_size = 24;
  so.loader.sampler.seed = 5;
  so.window_batches = 4;
  auto plain = CreateLoader(MPI_COMM_WORLD, volume, so.loader);
  ASSERT_OK(plain);
  const std::vector<uint64_t> want = (*plain)->RankIndices(1);
  auto take = [](ShardLoader& l, uint64_t first, uint64_t limit) {
    std::vector<uint64_t> got;
    Batch batch;
    for (uint64_t n = 0; n < limit; ++n) {
      auto more = l.Next(&batch);
      EXPECT_OK(more);
      if (!more.ok() || !*more) break;
      EXPECT_EQ(batch.sequence(), first + n);
      got.insert(got.end(), batch.indices().begin(), batch.indices().end());
    }
    return got;
  };
  for (uint64_t k : {uint64_t{0}, uint64_t{5}, uint64_t{6}}) {  // window edge, inside, start
    std::string saved;
    std::vector<uint64_t> got;
    {
      auto a = ShardLoader::Create(MPI_COMM_WORLD, volume, so);
      ASSERT_OK(a);
      (*a)->SetEpoch(1);
      got = take(**a, 0, k);
      auto s = (*a)->SaveState();
      ASSERT_OK(s);
      EXPECT_EQ(s->batches, k);
      EXPECT_EQ(s->sampler.rank, static_cast<uint32_t>(Rank()));
      saved = s->Serialize();
    }
    auto b = ShardLoader::Create(MPI_COMM_WORLD, volume, so);
    ASSERT_OK(b);
    auto s = SourceState::Parse(saved);
    ASSERT_OK(s);
    ASSERT_OK((*b)->LoadState(*s));
    (*b)->SetEpoch(1);
    const std::vector<uint64_t> rest = take(**b, k, ~uint64_t{0});
    const ShardLoaderStats& st = (*b)->stats();
    EXPECT_EQ(st.local_samples + st.remote_samples, rest.size()) << "rank " << Rank();
    got.insert(got.end(), rest.begin(), rest.end());
    EXPECT_TRUE(got == want) << "rank " << Rank() << " k " << k;
  }

  // Ranks restoring different positions, or a state of other options on one
  // rank: refused on every rank, no hang.
  auto c = ShardLoader::Create(MPI_COMM_WORLD, volume, so);
  ASSERT_OK(c);
  SourceState s = *(*c)->SaveState();
  s.batches = Rank() == 0 ? 3 : 4;
  Status st = (*c)->LoadState(s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("the batches handed out"), std::string::npos) << st.message();
  s.batches = 2;
  if (Rank() == 1) s.sampler.seed = 6;
  st = (*c)->LoadState(s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("seed 6, this loader has seed 5"), std::string::npos) << st.message();
  // Still usable, from the start of epoch 0.
  Batch batch;
  auto more = (*c)->Next(&batch);
  ASSERT_OK(more);
  EXPECT_EQ(batch.sequence(), 0u);
}

// The indices of up to `limit` batches of `l`, each sample checked against
// `volume`'s bytes.
std::vector<uint64_t> ReadBatches(ShardLoader& l, const Volume& volume, uint64_t limit) {
  std::vector<uint64_t> got;
  Batch batch;
  for (uint64_t n = 0; n < limit; ++n) {
    auto more = l.Next(&batch);
    EXPECT_OK(more);
    if (!more.ok() || !*more) break;
    for (size_t i = 0; i < batch.size(); ++i) {
      auto want = volume.Read(batch.index(i));
      EXPECT_TRUE(want.ok() && testing::SameBytes(batch.sample(i), *want));
    }
    got.insert(got.end(), batch.indices().begin(), batch.indices().end());
  }
  return got;
}

// Every rank's `mine` in one vector (collective on `comm`).
std::vector<uint64_t> Gather(MPI_Comm comm, const std::vector<uint64_t>& mine) {
  int ranks = 0;
  MPI_Comm_size(comm, &ranks);
  int count = static_cast<int>(mine.size());
  std::vector<int> counts(ranks), displs(ranks);
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm);
  int total = 0;
  for (int r = 0; r < ranks; ++r) {
    displs[r] = total;
    total += counts[r];
  }
  std::vector<uint64_t> all(total);
  MPI_Allgatherv(mine.data(), count, MPI_UINT64_T, all.data(), counts.data(), displs.data(),
                 MPI_UINT64_T, comm);
  return all;
}

// Elastic resume of the shard-local loader: 4 ranks on two fake nodes stop
// after 3 batches; rank 0's state resumes on 3 ranks (another batch size),
// which read the rest of the epoch; together every sample once (padding
// aside), with samples still served by their node.
TEST_F(DistributedTest, ShardLoaderResumesOnFewerRanks) {
  TwoFakeNodes nodes;
  auto volume = OpenVolume("one.dlfs");
  ASSERT_TRUE(volume);
  ShardLoaderOptions so;
  so.loader.sampler.batch_size = 20;
  so.loader.sampler.seed = 7;
  so.window_batches = 2;
  std::string saved;
  std::vector<uint64_t> first;
  {
    auto a = ShardLoader::Create(MPI_COMM_WORLD, volume, so);
    ASSERT_OK(a);
    (*a)->SetEpoch(2);
    first = Gather(MPI_COMM_WORLD, ReadBatches(**a, *volume, 3));
    saved = (*a)->SaveState()->Serialize();
  }
  // Rank 0's state, on every rank.
  int len = static_cast<int>(saved.size());
  MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
  saved.resize(len);
  MPI_Bcast(saved.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
  ASSERT_OK_AND_ASSIGN(SourceState state, SourceState::Parse(saved));

  const int world = Ranks();
  MPI_Comm fewer;
  MPI_Comm_split(MPI_COMM_WORLD, Rank() < world - 1 ? 0 : MPI_UNDEFINED, Rank(), &fewer);
  if (fewer != MPI_COMM_NULL) {
    so.loader.sampler.batch_size = 16;
    auto b = ShardLoader::Create(fewer, volume, so);
    ASSERT_OK(b);
    ASSERT_OK((*b)->LoadState(state));
    (*b)->SetEpoch(2);
    const std::vector<uint64_t> rest = Gather(fewer, ReadBatches(**b, *volume, ~uint64_t{0}));
    ASSERT_OK_AND_ASSIGN(SourceState now, (*b)->SaveState());
    ASSERT_EQ(now.done.size(), 1u);
    EXPECT_EQ(now.done[0], (EpochSegment{static_cast<uint32_t>(world), 1, 20, 3}));
    std::vector<uint64_t> all = first;
    all.insert(all.end(), rest.begin(), rest.end());
    const std::set<uint64_t> distinct(all.begin(), all.end());
    EXPECT_EQ(distinct.size(), kSamples);
    EXPECT_LT(all.size() - kSamples, static_cast<size_t>(world));
    // A state that leaves a sample out: the rest again, without it.
    SourceState quarantining = state;
    quarantining.quarantined = {rest.front()};
    ASSERT_OK((*b)->LoadState(quarantining));
    (*b)->SetEpoch(2);
    const std::vector<uint64_t> again = Gather(fewer, ReadBatches(**b, *volume, ~uint64_t{0}));
    EXPECT_EQ(again.size(), rest.size() - std::count(rest.begin(), rest.end(), rest.front()));
    EXPECT_EQ(std::count(again.begin(), again.end(), rest.front()), 0);
    MPI_Comm_free(&fewer);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Quarantine on the shard-local loader: a sample with a flipped byte is left
// out of the batch of the rank that reads it (whichever node served it),
// listed there, and every other sample arrives.
TEST_F(DistributedTest, ShardLoaderLeavesBadSamplesOut) {
  TwoFakeNodes nodes;
  const std::string bad = *dir_ / "bad.dlfs";
  if (Rank() == 0) {
    std::vector<std::byte> file = testing::ReadFile(*dir_ / "one.dlfs");
    auto one = OpenVolume("one.dlfs");
    file[one->directory().sample(7).offset + 3] ^= std::byte{0x10};
    testing::WriteFile(bad, file);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  auto volume = Volume::Open(bad);
  ASSERT_OK(volume);
  ShardLoaderOptions so;
  so.loader.sampler.batch_size = 16;
  so.loader.engine.direct_io = false;
  so.loader.skip_bad_samples = true;
  auto shard = ShardLoader::Create(MPI_COMM_WORLD, *volume, so);
  ASSERT_OK(shard);
  (*shard)->SetEpoch(0);
  const std::vector<uint64_t> mine = ReadBatches(**shard, **volume, ~uint64_t{0});
  const std::vector<uint64_t> all = Gather(MPI_COMM_WORLD, mine);
  const std::set<uint64_t> distinct(all.begin(), all.end());
  EXPECT_EQ(distinct.size(), kSamples - 1);
  EXPECT_EQ(distinct.count(7), 0u);
  const std::vector<BadSample> q = (*shard)->quarantine();
  int listed = q.size() == 1 && q[0].index == 7 ? 1 : 0, total = 0;
  MPI_Allreduce(&listed, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(total, 1);  // by the rank that read it
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace dlfs

int main(int argc, char** argv) { return dlfs::testing::RunMpiTests(argc, argv); }
