// The cluster cache (ShardLoaderOptions::cluster_cache) under mpirun -np 4 on
// two fake nodes of two ranks: batches equal to the plain loader's for
// budgets from none to the whole volume, one placement on every rank,
// storage left alone once the caches hold the volume, damaged samples
// named by the rank that hands them out. Tests are collective; checks use
// EXPECT so a failure on one rank never leaves the others waiting.
#include <mpi.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "cache/placement.h"
#include "dlfs/distributed.h"
#include "dlfs/loader.h"
#include "dlfs/volume.h"
#include "mpi/mpi_testutil.h"
#include "synthetic_volume.h"
#include "testutil.h"

namespace dlfs {
namespace {

using testing::Rank;
using testing::Ranks;
using testing::SharedTempDir;

std::vector<std::byte> SampleBytes(uint64_t i) {
  return testing::RandomBytes(100 + (i * 7919) % 9000, static_cast<uint32_t>(i));
}

class ClusterCacheTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new SharedTempDir();
    if (Rank() == 0) {
      testing::SyntheticVolume spec{
          .samples = kSamples, .classes = 5, .volume = {.align = 4096}, .bytes = SampleBytes};
      EXPECT_OK(testing::WriteSyntheticVolume(*dir_ / "one.dlfs", spec));
      std::filesystem::create_directories(*dir_ / "shm");
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  // Two fake nodes, and node caches in the test's own directory.
  void SetUp() override {
    ::setenv("DLFS_RANKS_PER_NODE", std::to_string(Ranks() / 2).c_str(), 1);
    ::setenv("DLFS_CACHE_DIR", (*dir_ / "shm").c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("DLFS_RANKS_PER_NODE");
    ::unsetenv("DLFS_CACHE_DIR");
  }

  static std::shared_ptr<Volume> OpenVolume(const std::string& path) {
    auto v = Volume::Open(path);
    EXPECT_OK(v);
    return v.ok() ? *v : nullptr;
  }

  static constexpr uint64_t kSamples = 1000;
  static SharedTempDir* dir_;
};

SharedTempDir* ClusterCacheTest::dir_ = nullptr;

struct EpochRead {
  std::vector<uint64_t> indices;
  std::vector<std::vector<std::byte>> bytes;
  uint64_t storage_bytes = 0, peer_bytes = 0;
  bool operator==(const EpochRead& o) const { return indices == o.indices && bytes == o.bytes; }
};

// Every batch of epoch `e`, in order.
EpochRead ReadEpoch(BatchSource& source, uint64_t e) {
  EpochRead out;
  source.SetEpoch(e);
  Batch batch;
  while (true) {
    auto more = source.Next(&batch);
    EXPECT_OK(more);
    if (!more.ok() || !*more) break;
    for (size_t i = 0; i < batch.size(); ++i) {
      out.indices.push_back(batch.index(i));
      out.bytes.emplace_back(batch.sample(i).begin(), batch.sample(i).end());
    }
    out.storage_bytes += batch.device_bytes();
    out.peer_bytes += batch.peer_bytes();
  }
  return out;
}

// A cluster cache whose budget holds the whole volume, batches of 16.
ShardLoaderOptions WholeVolumeCached(const Volume& volume) {
  ShardLoaderOptions so;
  so.loader.sampler.batch_size = 16;
  so.loader.cache_budget = volume.info().data_bytes;
  so.cluster_cache = true;
  return so;
}

uint64_t SumOverRanks(uint64_t mine) {
  uint64_t sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  return sum;
}

// Every rank receives exactly the samples the plain loader gives it, in the
// same order, whatever the budget: none, part of the volume, all of it.
TEST_F(ClusterCacheTest, BatchesEqualThePlainLoadersForEveryBudget) {
  auto volume = OpenVolume(*dir_ / "one.dlfs");
  ASSERT_TRUE(volume);
  const uint64_t data = volume->info().data_bytes;
  LoaderOptions o;
  o.sampler.batch_size = 24;
  o.sampler.seed = 9;
  o.cache_budget = 0;
  auto plain = CreateLoader(MPI_COMM_WORLD, volume, o);
  ASSERT_OK(plain);
  std::vector<EpochRead> expected;
  for (uint64_t e = 0; e < 3; ++e) expected.push_back(ReadEpoch(**plain, e));

  struct Case {
    uint64_t budget;  // per node
    uint32_t window;
    bool read_ahead;
  };
  for (const Case c : {Case{0, 4, false}, Case{data / 5, 4, false}, Case{data * 2 / 5, 1, true},
                       Case{data * 2, 4, true}, Case{data * 2, 3, false}}) {
    ShardLoaderOptions so;
    so.loader = o;
    so.loader.cache_budget = c.budget;
    so.window_batches = c.window;
    so.read_ahead = c.read_ahead;
    so.cluster_cache = true;
    auto cluster = ShardLoader::Create(MPI_COMM_WORLD, volume, so);
    ASSERT_OK(cluster);
    const std::string what = "rank " + std::to_string(Rank()) + ", budget " +
                             std::to_string(c.budget) + ", window " + std::to_string(c.window);
    std::vector<EpochRead> got;
    for (uint64_t e = 0; e < 3; ++e) {
      got.push_back(ReadEpoch(**cluster, e));
      EXPECT_TRUE(got[e] == expected[e]) << what << ", epoch " << e;
    }
    // What the caches keep (this node's part within its capacity), and what
    // storage serves from the third epoch on.
    const int my_node = Rank() / (Ranks() / 2);
    uint64_t kept = 0, mine = 0;
    for (uint64_t i = 0; i < volume->size(); ++i) {
      const int32_t owner = (*cluster)->cluster_owner(i);
      kept += owner >= 0;
      if (owner == my_node)
        mine += cache_internal::CachedBytes(volume->directory().sample(i).length);
    }
    EXPECT_LE(mine, (*cluster)->stats().cache_capacity) << what;
    const uint64_t storage0 = SumOverRanks(got[0].storage_bytes);
    const uint64_t storage2 = SumOverRanks(got[2].storage_bytes);
    const uint64_t peer2 = SumOverRanks(got[2].peer_bytes);
    if (c.budget == 0) {
      EXPECT_EQ(kept, 0u) << what;
      EXPECT_EQ(peer2, 0u) << what;
      EXPECT_EQ(storage2, storage0) << what;
    } else if (c.budget >= data) {
      EXPECT_EQ(kept, volume->size()) << what;
      EXPECT_EQ(storage2, 0u) << what;
      // The other node's half of the samples, about.
      EXPECT_GT(peer2, data / 4) << what;
    } else {
      EXPECT_GT(kept, 0u) << what;
      EXPECT_LT(kept, volume->size()) << what;
      EXPECT_LT(storage2, storage0) << what;
      EXPECT_GT(peer2, 0u) << what;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // The last loader detached: the regions are gone.
  EXPECT_TRUE(std::filesystem::is_empty(*dir_ / "shm"));
}

// One placement on every rank, within each node's capacity, and mostly on
// the node that reads a sample first.
TEST_F(ClusterCacheTest, PlacementIsTheSameOnEveryRank) {
  auto volume = OpenVolume(*dir_ / "one.dlfs");
  ASSERT_TRUE(volume);
  auto cluster = ShardLoader::Create(MPI_COMM_WORLD, volume, WholeVolumeCached(*volume));
  ASSERT_OK(cluster);
  std::vector<int32_t> owners(volume->size());
  for (uint64_t i = 0; i < owners.size(); ++i) owners[i] = (*cluster)->cluster_owner(i);
  EXPECT_EQ((*cluster)->cluster_owner(volume->size()), -1);
  std::vector<int32_t> first = owners;
  MPI_Bcast(first.data(), static_cast<int>(first.size()), MPI_INT32_T, 0, MPI_COMM_WORLD);
  EXPECT_TRUE(std::ranges::equal(first, owners)) << "rank " << Rank();
  // Balanced (by count, so by bytes within the samples' spread): each node about half.
  uint64_t node_bytes[2] = {0, 0};
  for (uint64_t i = 0; i < first.size(); ++i) {
    EXPECT_TRUE(first[i] == 0 || first[i] == 1) << "sample " << i;
    if (first[i] == 0 || first[i] == 1)
      node_bytes[first[i]] += volume->directory().sample(i).length;
  }
  const uint64_t data = volume->info().data_bytes;
  EXPECT_NEAR(static_cast<double>(node_bytes[0]), data / 2.0, data * 0.05);
  // Epoch 0's samples of this rank: nearly all owned by its node.
  const EpochRead e0 = ReadEpoch(**cluster, 0);
  const int my_node = Rank() / (Ranks() / 2);
  uint64_t mine = 0;
  for (uint64_t i : e0.indices) mine += first[i] == my_node ? 1 : 0;
  EXPECT_GT(mine, e0.indices.size() * 9 / 10) << "rank " << Rank();
}

// A sample damaged on storage: the rank that hands it out names it, in every
// epoch, whichever node owns it (no cache keeps a sample that fails its
// checksum); skip_bad_samples leaves it out there.
TEST_F(ClusterCacheTest, DamagedSampleIsNamedByItsReader) {
  const std::string bad = *dir_ / "bad.dlfs";
  if (Rank() == 0) {
    std::vector<std::byte> file = testing::ReadFile(*dir_ / "one.dlfs");
    auto one = OpenVolume(*dir_ / "one.dlfs");
    file[one->directory().sample(7).offset + 3] ^= std::byte{0x10};
    testing::WriteFile(bad, file);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  auto volume = OpenVolume(bad);
  ASSERT_TRUE(volume);
  ShardLoaderOptions so = WholeVolumeCached(*volume);
  auto cluster = ShardLoader::Create(MPI_COMM_WORLD, volume, so);
  ASSERT_OK(cluster);
  for (uint64_t e = 0; e < 3; ++e) {
    (*cluster)->SetEpoch(e);
    int named = 0;
    Batch batch;
    for (uint64_t k = 0; k < (*cluster)->batches_per_epoch(); ++k) {
      auto more = (*cluster)->Next(&batch);
      if (more.ok()) continue;
      EXPECT_NE(more.status().message().find("sample 7 "), std::string::npos)
          << more.status().message();
      ++named;
    }
    int total = 0;
    MPI_Allreduce(&named, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(total, 1) << "epoch " << e;
  }
  cluster->reset();

  so.loader.skip_bad_samples = true;
  auto skipping = ShardLoader::Create(MPI_COMM_WORLD, volume, so);
  ASSERT_OK(skipping);
  for (uint64_t e = 0; e < 2; ++e) {
    const EpochRead got = ReadEpoch(**skipping, e);
    uint64_t sevens = 0;
    for (uint64_t i : got.indices) sevens += i == 7;
    EXPECT_EQ(sevens, 0u);
    EXPECT_EQ(SumOverRanks(got.indices.size()), kSamples - 1) << "epoch " << e;
  }
}

// A batch keeps what its samples point into, the node cache included: it
// stays readable after its loader is gone.
TEST_F(ClusterCacheTest, BatchesOutliveTheLoader) {
  auto volume = OpenVolume(*dir_ / "one.dlfs");
  ASSERT_TRUE(volume);
  auto cluster = ShardLoader::Create(MPI_COMM_WORLD, volume, WholeVolumeCached(*volume));
  ASSERT_OK(cluster);
  ReadEpoch(**cluster, 0);  // fills the caches
  (*cluster)->SetEpoch(1);
  Batch batch;
  auto more = (*cluster)->Next(&batch);
  EXPECT_OK(more);
  // Drain the epoch (Next is collective), keeping the first batch.
  for (Batch other; more.ok() && *more;) more = (*cluster)->Next(&other);
  EXPECT_GT((*cluster)->stats().cached_samples, 0u);
  cluster->reset();
  MPI_Barrier(MPI_COMM_WORLD);  // every loader gone: the regions are unlinked
  for (size_t i = 0; i < batch.size(); ++i) {
    auto want = volume->Read(batch.index(i));
    EXPECT_OK(want);
    if (want.ok()) {
      EXPECT_TRUE(testing::SameBytes(batch.sample(i), *want)) << batch.index(i);
    }
  }
}

// Interrupted mid-epoch (read-ahead on, so a planned window with its gifts
// is dropped) and resumed by a new loader from the saved state: the rest of
// the epoch equals the plain loader's, and the next epoch too.
TEST_F(ClusterCacheTest, ResumesMidEpoch) {
  auto volume = OpenVolume(*dir_ / "one.dlfs");
  ASSERT_TRUE(volume);
  LoaderOptions o;
  o.sampler.batch_size = 8;
  o.sampler.seed = 4;
  o.cache_budget = 0;
  auto plain = CreateLoader(MPI_COMM_WORLD, volume, o);
  ASSERT_OK(plain);
  const EpochRead e0 = ReadEpoch(**plain, 0), e1 = ReadEpoch(**plain, 1);

  ShardLoaderOptions so;
  so.loader = o;
  so.loader.cache_budget = volume->info().data_bytes / 3;
  so.window_batches = 2;
  so.read_ahead = true;
  so.cluster_cache = true;
  auto first = ShardLoader::Create(MPI_COMM_WORLD, volume, so);
  ASSERT_OK(first);
  (*first)->SetEpoch(0);
  std::vector<uint64_t> got;
  Batch batch;
  for (int k = 0; k < 5; ++k) {
    auto more = (*first)->Next(&batch);
    EXPECT_OK(more);
    for (size_t i = 0; i < batch.size(); ++i) got.push_back(batch.index(i));
  }
  auto state = (*first)->SaveState();
  EXPECT_OK(state);
  (*first)->SetEpoch(0);  // restart the epoch: drops the window read ahead
  const EpochRead again = ReadEpoch(**first, 0);
  EXPECT_EQ(again.indices, e0.indices);
  first->reset();

  auto second = ShardLoader::Create(MPI_COMM_WORLD, volume, so);
  ASSERT_OK(second);
  if (state.ok()) {
    EXPECT_OK((*second)->LoadState(*state));
  }
  (*second)->SetEpoch(0);
  for (Batch b;;) {
    auto more = (*second)->Next(&b);
    EXPECT_OK(more);
    if (!more.ok() || !*more) break;
    for (size_t i = 0; i < b.size(); ++i) got.push_back(b.index(i));
  }
  EXPECT_EQ(got, e0.indices) << "rank " << Rank();
  EXPECT_TRUE(ReadEpoch(**second, 1) == e1) << "rank " << Rank();
}

}  // namespace
}  // namespace dlfs

int main(int argc, char** argv) { return dlfs::testing::RunMpiTests(argc, argv); }
