// DirectorySharing::kNode: one copy of a volume's directory per node,
// shared by the processes that open it (here: opens from several threads,
// each its own open file and lock, as processes would be), made once,
// refused when not to be trusted, removed by its last user.
// Regions go to a temporary DLFS_CACHE_DIR per test, not /dev/shm.
#include "volume/node_directory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "common/shm_region.h"
#include "dlfs/volume.h"
#include "synthetic_volume.h"
#include "testutil.h"

namespace dlfs {
namespace node_directory_test {

namespace fs = std::filesystem;

class NodeDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shm_ = fs::path(tmp_.path()) / "shm";
    fs::create_directories(shm_);
    ::setenv("DLFS_CACHE_DIR", shm_.c_str(), 1);
    path_ = (fs::path(tmp_.path()) / "v.dlfs").string();
    // A node copy is made of a directory read from storage: the tree (v1)
    // one. (A compact directory is mapped from the file instead.)
    ASSERT_OK(testing::WriteSyntheticVolume(
        path_, {.samples = 300, .volume = {.layout = DirectoryLayout::kTree}}));
  }
  void TearDown() override { ::unsetenv("DLFS_CACHE_DIR"); }

  Result<std::shared_ptr<Volume>> OpenShared(const std::string& node = "") {
    return Volume::Open(path_, {.directory_sharing = DirectorySharing::kNode, .node_name = node});
  }
  // The region files in the cache directory (no temporary or lock files).
  std::vector<std::string> Regions() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(shm_)) {
      const std::string name = e.path().filename().string();
      if (name[0] != '.') out.push_back(name);
    }
    return out;
  }

  testing::TempDir tmp_;
  fs::path shm_;
  std::string path_;
};

TEST_F(NodeDirectoryTest, OpensShareOneCopyRemovedByTheLastUser) {
  ASSERT_OK_AND_ASSIGN(auto a, OpenShared());
  ASSERT_OK_AND_ASSIGN(auto b, OpenShared());
  ASSERT_EQ(Regions().size(), 1u);
  EXPECT_FALSE(a->directory_region().empty());
  EXPECT_EQ(a->directory_region(), b->directory_region());
  EXPECT_EQ(a->directory_note(), "");
  ASSERT_OK_AND_ASSIGN(auto priv, Volume::Open(path_));
  EXPECT_EQ(priv->directory_region(), "");
  for (uint64_t i = 0; i < priv->size(); i += 7) {
    EXPECT_EQ(a->directory().Path(i), priv->directory().Path(i));
    EXPECT_EQ(b->directory().sample(i).offset, priv->directory().sample(i).offset);
    ASSERT_OK_AND_ASSIGN(auto bytes, b->Read(i));
    ASSERT_OK_AND_ASSIGN(auto expected, priv->Read(i));
    ASSERT_EQ(bytes, expected) << i;
  }
  a.reset();
  EXPECT_EQ(Regions().size(), 1u);  // b still holds it
  b.reset();
  EXPECT_TRUE(Regions().empty());
}

TEST_F(NodeDirectoryTest, ConcurrentOpensReadTheDirectoryOnce) {
  ASSERT_OK_AND_ASSIGN(auto probe, Volume::Open(path_));
  const VolumeInfo& info = probe->info();
  std::vector<std::byte> stored(info.directory_bytes);
  std::memcpy(stored.data(), probe->metadata().directory.get(), stored.size());
  const volume_internal::NodeDirectoryKey key{
      .uuid = info.uuid, .bytes = stored.size(), .crc32c = 0, .dir = shm_.string()};
  std::atomic<int> fills{0}, arrived{0};
  std::vector<std::shared_ptr<const std::byte>> got(6);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] {
      arrived.fetch_add(1);
      auto nd = volume_internal::GetNodeDirectory(key, [&](std::byte* dst) {
        fills.fetch_add(1);
        // The read goes on until every thread has come to open the
        // directory, so that the others find it being built. (Those that
        // come after it is built attach to it: one fill either way.)
        EXPECT_TRUE(testing::WaitUntil([&] { return arrived.load() == 6; }));
        std::memcpy(dst, stored.data(), stored.size());
        return Status::Ok();
      });
      EXPECT_OK(nd);
      if (nd.ok()) got[t] = nd->bytes;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(fills.load(), 1);  // the others waited for it and attached
  EXPECT_EQ(Regions().size(), 1u);
  for (const auto& g : got) {
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(std::memcmp(g.get(), stored.data(), stored.size()), 0);
  }
}

TEST_F(NodeDirectoryTest, FakeNodesKeepTheirOwnCopy) {
  ASSERT_OK_AND_ASSIGN(auto n0, OpenShared("-node0"));
  ASSERT_OK_AND_ASSIGN(auto n1, OpenShared("-node1"));
  EXPECT_NE(n0->directory_region(), n1->directory_region());
  EXPECT_EQ(Regions().size(), 2u);
}

TEST_F(NodeDirectoryTest, RegionOthersCouldWriteIsRefused) {
  ASSERT_OK_AND_ASSIGN(auto a, OpenShared());
  ASSERT_EQ(::chmod(a->directory_region().c_str(), 0644), 0);
  ASSERT_OK_AND_ASSIGN(auto b, OpenShared());
  EXPECT_EQ(b->directory_region(), "");
  EXPECT_THAT(b->directory_note(), ::testing::HasSubstr("mode 0644 lets others in"));
  EXPECT_THAT(b->directory_note(), ::testing::HasSubstr("a private copy instead"));
  ASSERT_OK_AND_ASSIGN(auto bytes, b->Read(5));
  ASSERT_OK_AND_ASSIGN(auto priv, Volume::Open(path_));
  ASSERT_OK_AND_ASSIGN(auto expected, priv->Read(5));
  EXPECT_EQ(bytes, expected);
}

TEST_F(NodeDirectoryTest, TamperedCopyIsRefusedNotUsed) {
  ASSERT_OK_AND_ASSIGN(auto a, OpenShared());
  const std::string region = a->directory_region();
  {
    // Flip one byte of the directory (past the 4 KiB header).
    std::fstream f(region, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(4096 + 100);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x5a;
    f.seekp(4096 + 100);
    f.write(&c, 1);
  }
  ASSERT_OK_AND_ASSIGN(auto b, OpenShared());
  EXPECT_EQ(b->directory_region(), "");
  EXPECT_THAT(b->directory_note(), ::testing::HasSubstr("checksum mismatch"));
  ASSERT_OK_AND_ASSIGN(auto priv, Volume::Open(path_));
  for (uint64_t i = 0; i < b->size(); i += 11) {
    ASSERT_OK_AND_ASSIGN(auto bytes, b->Read(i));
    ASSERT_OK_AND_ASSIGN(auto expected, priv->Read(i));
    ASSERT_EQ(bytes, expected) << i;
  }
}

TEST_F(NodeDirectoryTest, HeaderOfAnotherVolumeIsRefused) {
  ASSERT_OK_AND_ASSIGN(auto probe, Volume::Open(path_));
  // A region under this volume's name that describes another directory.
  const std::string name = volume_internal::NodeDirectoryName(
      {.uuid = probe->info().uuid, .bytes = probe->info().directory_bytes});
  {
    std::ofstream f(shm_ / name, std::ios::binary);
    // The header's layout (node_directory.cc): magic, version, header
    // bytes, uuid[40], directory bytes, directory CRC — here a wrong CRC.
    std::vector<char> junk(4096 + probe->info().directory_bytes, 'x');
    const uint32_t version = 1, header_bytes = 4096, crc = 0x12345678;
    const uint64_t bytes = probe->info().directory_bytes;
    std::memcpy(junk.data(), "DLFSND01", 8);
    std::memcpy(junk.data() + 8, &version, 4);
    std::memcpy(junk.data() + 12, &header_bytes, 4);
    std::memset(junk.data() + 16, 0, 40);
    std::memcpy(junk.data() + 16, probe->info().uuid.data(), probe->info().uuid.size());
    std::memcpy(junk.data() + 56, &bytes, 8);
    std::memcpy(junk.data() + 64, &crc, 4);
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  ASSERT_EQ(::chmod((shm_ / name).c_str(), 0600), 0);
  // Held, as by a process using it (one nobody holds would be swept).
  const int fd = ::open((shm_ / name).c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_SH), 0);
  ASSERT_OK_AND_ASSIGN(auto v, OpenShared());
  EXPECT_EQ(v->directory_region(), "");
  EXPECT_THAT(v->directory_note(),
              ::testing::HasSubstr("refused (holds another directory than the volume's"));
  ::close(fd);
}

TEST_F(NodeDirectoryTest, RegionOfAKilledJobIsSweptAndRemade) {
  ASSERT_OK_AND_ASSIGN(auto probe, Volume::Open(path_));
  const std::string name = volume_internal::NodeDirectoryName(
      {.uuid = probe->info().uuid, .bytes = probe->info().directory_bytes});
  // Nobody holds it: what a job killed with SIGKILL leaves behind, here
  // with contents that would be refused.
  { std::ofstream(shm_ / name) << "left behind"; }
  ASSERT_EQ(::chmod((shm_ / name).c_str(), 0600), 0);
  ASSERT_OK_AND_ASSIGN(auto v, OpenShared());
  EXPECT_EQ(v->directory_note(), "");
  EXPECT_EQ(v->directory_region(), (shm_ / name).string());
}

TEST_F(NodeDirectoryTest, NoUsableDirectoryMeansAPrivateCopy) {
  ::setenv("DLFS_CACHE_DIR", (shm_ / "no/such/dir").c_str(), 1);
  ASSERT_OK_AND_ASSIGN(auto v, OpenShared());
  EXPECT_EQ(v->directory_region(), "");
  EXPECT_THAT(v->directory_note(), ::testing::HasSubstr("a private copy instead"));
  ASSERT_OK_AND_ASSIGN(auto bytes, v->Read(3));
  ASSERT_OK_AND_ASSIGN(auto priv, Volume::Open(path_));
  ASSERT_OK_AND_ASSIGN(auto expected, priv->Read(3));
  EXPECT_EQ(bytes, expected);
}

// The build lock is a file, and SweepStale removes the lock file of a
// build nobody runs. A process that opened the lock file just before a
// sweep removed it would wait on the removed file, get its lock, and build
// alongside the next process, which makes a new lock file: the directory
// read twice (ConcurrentOpensReadTheDirectoryOnce saw two fills in about
// 1 run of 250 on 2 busy cores). Here the sweep comes while the first
// waits for the lock.
TEST_F(NodeDirectoryTest, BuildLockRemovedByASweepStillLetsOneBuildAtATime) {
  const std::string name = shm::UserPrefix() + "build-lock-test";
  const fs::path lock = shm_ / ("." + name + ".lock");
  { std::ofstream(lock).flush(); }
  ASSERT_EQ(::chmod(lock.c_str(), 0600), 0);
  // A sweep under way: it holds the unused lock file exclusively and is
  // about to remove it.
  const int sweeper = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(sweeper, 0);
  ASSERT_EQ(::flock(sweeper, LOCK_EX | LOCK_NB), 0);

  // This process's descriptors open on the lock file's name (not on a
  // removed file: that one reads as "... (deleted)").
  const auto opened = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
      std::error_code ec;
      if (fs::read_symlink(e.path(), ec) == lock) ++n;
    }
    return n;
  };
  std::atomic<bool> first_building{false}, overlapped{false}, second_done{false};
  std::thread first([&] {
    EXPECT_OK(shm::WithBuildLock(shm_.string(), name, [&] {
      first_building = true;
      // The build lasts until the second builder has the lock file open
      // (its and ours: it is about to wait for our lock) or has built
      // alongside (the bug this test is for).
      EXPECT_TRUE(testing::WaitUntil([&] { return second_done || opened() >= 2; }));
      first_building = false;
      return Status::Ok();
    }));
  });
  // Once the first has the lock file open (and waits for its lock), the
  // sweep removes it and lets go.
  ASSERT_TRUE(testing::WaitUntil([&] { return opened() >= 2; }))  // the sweeper's and the first's
      << "the first builder never opened the lock file";
  ASSERT_EQ(::unlink(lock.c_str()), 0);
  ::close(sweeper);
  ASSERT_TRUE(testing::WaitUntil([&] { return first_building.load(); }));
  // A second builder now: it must wait for the first.
  EXPECT_OK(shm::WithBuildLock(shm_.string(), name, [&] {
    overlapped = first_building.load();
    return Status::Ok();
  }));
  second_done = true;
  first.join();
  EXPECT_FALSE(overlapped) << "two builds at once";
}

}  // namespace node_directory_test
}  // namespace dlfs
