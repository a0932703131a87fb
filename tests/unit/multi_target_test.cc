// Multi-target volumes (docs/format.md §2.6): samples spread over several
// files that read back exactly, stay balanced, are published atomically, and
// are refused with an error naming the file when a target is missing, foreign,
// swapped, truncated or damaged.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "dlfs/builder.h"
#include "dlfs/loader.h"
#include "dlfs/verify.h"
#include "dlfs/volume.h"
#include "format/format.h"
#include "format/superblock.h"
#include "synthetic_volume.h"
#include "testutil.h"

namespace dlfs {
namespace multi_target_test {

namespace fs = std::filesystem;
using testing::Bytes;
using testing::StatusIs;
using testing::TempDir;

constexpr uint32_t kTargets = 3;

// Sample i's bytes (empty to ~70 KB, so balance is non-trivial) and name.
std::vector<std::byte> SampleBytes(uint64_t i) { return testing::SyntheticBytes(i); }
std::string SampleName(uint64_t i) { return testing::SyntheticName(i, 3); }

Status Build(const std::string& path, uint64_t n, VolumeBuilder::Options o) {
  return testing::WriteSyntheticVolume(path, {.samples = n, .classes = 3, .volume = o});
}

std::vector<std::string> DirEntries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

format::Superblock ReadSuperblock(const std::string& path, uint64_t offset = 0) {
  const std::vector<std::byte> bytes = testing::ReadFile(path);
  format::Superblock sb{};
  if (bytes.size() >= offset + sizeof sb) std::memcpy(&sb, bytes.data() + offset, sizeof sb);
  return sb;
}

void Poke(const std::string& path, uint64_t offset, std::byte value) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::pwrite(fd, &value, 1, static_cast<off_t>(offset)), 1);
  ::close(fd);
}

class MultiTargetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = tmp_ / "v.dlfs";
    ASSERT_OK(Build(path_, kN, {.align = 1, .targets = kTargets}));
    for (uint32_t t = 0; t < kTargets; ++t) {
      originals_.push_back(testing::ReadFile(VolumeBuilder::DefaultTargetPath(path_, t)));
    }
  }

  std::string Target(uint32_t t) const { return VolumeBuilder::DefaultTargetPath(path_, t); }

  // Expects Open to fail with `code` and a message containing every piece.
  void ExpectRefused(StatusCode code, std::initializer_list<std::string> pieces,
                     const VolumeOpenOptions& o = {}) {
    auto v = Volume::Open(path_, o);
    ASSERT_THAT(v, StatusIs(code)) << "accepted";
    for (const std::string& p : pieces) {
      EXPECT_NE(v.status().message().find(p), std::string::npos)
          << "'" << p << "' not in: " << v.status().message();
    }
  }

  static constexpr uint64_t kN = 600;
  TempDir tmp_;
  std::string path_;
  std::vector<std::vector<std::byte>> originals_;
};

TEST_F(MultiTargetTest, ReadsBackExactlyThroughVolumeAndVerify) {
  EXPECT_EQ(DirEntries(tmp_.path()),
            (std::vector<std::string>{"v.dlfs", "v.dlfs.t1", "v.dlfs.t2"}));
  auto v = Volume::Open(path_);
  ASSERT_OK(v);
  ASSERT_EQ((*v)->target_count(), kTargets);
  const SampleDirectory& d = (*v)->directory();
  ASSERT_EQ(d.size(), kN);
  std::vector<int> per_target(kTargets, 0);
  for (uint64_t i = 0; i < kN; ++i) {
    auto idx = d.Lookup(SampleName(i));
    ASSERT_OK(idx);
    auto bytes = (*v)->Read(*idx);
    ASSERT_OK(bytes);
    EXPECT_EQ(*bytes, SampleBytes(i)) << SampleName(i);
    ++per_target[d.sample(*idx).target];
  }
  for (uint32_t t = 0; t < kTargets; ++t) EXPECT_GT(per_target[t], 100) << "target " << t;

  const VolumeInfo& info = (*v)->info();
  ASSERT_EQ(info.target_details.size(), kTargets);
  for (uint32_t t = 0; t < kTargets; ++t) {
    EXPECT_EQ(info.targets[t], Target(t));
    EXPECT_EQ(info.target_details[t].size, originals_[t].size());
    EXPECT_EQ(info.target_details[t].stored_path, t == 0 ? "" : "v.dlfs.t" + std::to_string(t));
  }

  VerifyReport report;
  ASSERT_OK(VerifyVolume(**v, {}, &report));
  EXPECT_EQ(report.samples_checked, kN);
  EXPECT_EQ(report.bad_samples, 0u);
  EXPECT_OK(report.backup_superblock);
}

TEST_F(MultiTargetTest, BytesAreBalancedAndPlacementIsDeterministic) {
  auto v = Volume::Open(path_);
  ASSERT_OK(v);
  const SampleDirectory& d = (*v)->directory();
  std::vector<uint64_t> bytes(kTargets, 0);
  uint64_t largest = 0;  // the largest unit placed: a sample, or a compact directory's block
  const uint64_t unit = d.compact() ? d.block_samples() : 1;
  for (uint64_t first = 0; first < d.size(); first += unit) {
    uint64_t b = 0;
    for (uint64_t i = first; i < std::min(d.size(), first + unit); ++i) {
      bytes[d.sample(i).target] += d.sample(i).length;
      b += d.sample(i).length;
    }
    largest = std::max(largest, b);
  }
  EXPECT_EQ(unit, d.compact() ? 32u : 1u);  // several targets: 32 samples per block
  // Greedy placement keeps every target within one unit of the others.
  const auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
  EXPECT_LE(*hi - *lo, largest) << bytes[0] << " " << bytes[1] << " " << bytes[2];

  // The same samples in the same order land on the same targets and offsets.
  TempDir again;
  ASSERT_OK(Build(again / "v.dlfs", kN, {.align = 1, .targets = kTargets}));
  auto w = Volume::Open(again / "v.dlfs");
  ASSERT_OK(w);
  for (uint64_t i = 0; i < d.size(); ++i) {
    const SampleInfo a = d.sample(i), b = (*w)->directory().sample(i);
    ASSERT_EQ(a.target, b.target) << i;
    ASSERT_EQ(a.offset, b.offset) << i;
  }
}

TEST_F(MultiTargetTest, EverySuperblockDescribesTheWholeVolume) {
  const format::Superblock sb0 = ReadSuperblock(Target(0));
  EXPECT_EQ(sb0.target_count, kTargets);
  EXPECT_EQ(sb0.region_count, kTargets + 1);
  for (uint32_t t = 0; t < kTargets; ++t) {
    const format::Superblock sb = ReadSuperblock(Target(t));
    EXPECT_EQ(sb.target_index, t);
    EXPECT_EQ(sb.volume_size, originals_[t].size());
    EXPECT_EQ(std::memcmp(sb.uuid, sb0.uuid, sizeof sb.uuid), 0);
    EXPECT_EQ(std::memcmp(sb.targets, sb0.targets, sizeof sb.targets), 0);
    EXPECT_EQ(std::memcmp(sb.regions, sb0.regions, sizeof sb.regions), 0);
    EXPECT_OK(format::CheckSuperblock(sb, originals_[t].size(), Target(t)));
    // The copy at the end is the same bytes.
    const format::Superblock copy = ReadSuperblock(Target(t), originals_[t].size() - 4096);
    EXPECT_EQ(std::memcmp(&sb, &copy, sizeof sb), 0) << "target " << t;
  }
}

// The loader's I/O threads over several targets: the one test of this file
// that runs more than one thread, so its own fixture, which the
// ThreadSanitizer build runs and the other tests here it leaves out
// (tests/CMakeLists.txt; each of them took 2-12 s under TSan).
class MultiTargetLoaderTest : public MultiTargetTest {};

TEST_F(MultiTargetLoaderTest, ReadsEveryTargetWithEachEngine) {
  auto v = Volume::Open(path_);
  ASSERT_OK(v);
  for (EngineKind engine : {EngineKind::kUring, EngineKind::kPread}) {
    for (bool coalesce : {true, false}) {
      auto l = Loader::Create(*v, {.sampler = {.seed = 3, .batch_size = 50},
                                   .engine = {.kind = engine, .queue_depth = 8},
                                   .plan = {.coalesce = coalesce, .coalesce_gap = 1 << 20},
                                   .io_threads = 2});
      if (!l.ok() && l.status().code() == StatusCode::kUnavailable) continue;
      ASSERT_OK(l);
      Batch batch;
      uint64_t seen = 0;
      while (true) {
        auto more = (*l)->Next(&batch);
        ASSERT_OK(more);
        if (!*more) break;
        for (size_t k = 0; k < batch.size(); ++k) {
          const uint64_t idx = batch.index(k);
          const std::vector<std::byte> want = SampleBytes(
              std::stoull(std::string((*v)->directory().name(idx))));  // names are the source index
          const auto got = batch.sample(k);
          ASSERT_EQ(got.size(), want.size()) << idx;
          ASSERT_TRUE(testing::SameBytes(got, want)) << idx;
          ++seen;
        }
      }
      EXPECT_EQ(seen, kN) << EngineKindName(engine);
    }
  }
}

TEST_F(MultiTargetTest, MissingTargetIsNamed) {
  fs::remove(Target(2));
  ExpectRefused(StatusCode::kNotFound, {path_ + ": target 2 (" + Target(2) + ")"});
}

TEST_F(MultiTargetTest, OpeningAnotherTargetSaysWhichItIs) {
  auto v = Volume::Open(Target(1));
  ASSERT_THAT(v, StatusIs(StatusCode::kInvalidArgument, "is target 1 of 3"));
  EXPECT_NE(v.status().message().find("target 0"), std::string::npos);
}

TEST_F(MultiTargetTest, TargetOfAnotherVolumeIsRefused) {
  TempDir other;
  ASSERT_OK(Build(other / "v.dlfs", kN, {.align = 1, .targets = kTargets}));
  fs::copy_file(other / "v.dlfs.t1", Target(1), fs::copy_options::overwrite_existing);
  ExpectRefused(StatusCode::kCorruption,
                {"target 1 (" + Target(1) + ")", "uuid", "differs from target 0", "wrong file?"});
}

TEST_F(MultiTargetTest, SwappedTargetsAreRefused) {
  fs::rename(Target(1), tmp_ / "x");
  fs::rename(Target(2), Target(1));
  fs::rename(tmp_ / "x", Target(2));
  ExpectRefused(StatusCode::kCorruption,
                {"target 1 (" + Target(1) + ")", "is target 2 of the volume, not target 1"});
}

TEST_F(MultiTargetTest, TruncatedOrGrownTargetIsRefused) {
  const uint64_t size = originals_[2].size();
  for (uint64_t len :
       {uint64_t{0}, uint64_t{4096}, uint64_t{8191}, size - 4096, size - 1, size + 4096}) {
    testing::WriteFile(Target(2), originals_[2]);
    fs::resize_file(Target(2), len);
    ExpectRefused(StatusCode::kCorruption, {"target 2 (" + Target(2) + ")"});
  }
  // A target from another packing of the same volume would need its uuid
  // too; a resized but resealed one is caught against target 0's table.
  testing::WriteFile(Target(2), originals_[2]);
  format::Superblock sb = ReadSuperblock(Target(2));
  const uint64_t bigger = size + 4096;
  sb.volume_size = bigger;
  sb.targets[2].size = bigger;
  format::SealSuperblock(&sb);
  std::vector<std::byte> bytes = originals_[2];
  bytes.insert(bytes.end() - 4096, 4096, std::byte{0});
  std::memcpy(bytes.data(), &sb, sizeof sb);
  std::memcpy(bytes.data() + bigger - 4096, &sb, sizeof sb);
  testing::WriteFile(Target(2), bytes);
  ExpectRefused(StatusCode::kCorruption, {"target 2 (" + Target(2) + ")", "target 0's table"});
}

TEST_F(MultiTargetTest, EveryFlippedSuperblockByteOfATargetIsRefused) {
  for (uint64_t off = 0; off < format::kSuperblockSize; ++off) {
    Poke(Target(1), off, originals_[1][off] ^ std::byte{0x5a});
    auto v = Volume::Open(path_);
    Poke(Target(1), off, originals_[1][off]);
    ASSERT_THAT(v, StatusIs(StatusCode::kCorruption, "target 1 (" + Target(1) + ")"))
        << "byte " << off;
  }
  // A damaged primary whose magic survives says the copy is intact.
  Poke(Target(1), 50, originals_[1][50] ^ std::byte{1});
  ExpectRefused(StatusCode::kCorruption, {"target 1", "copy at the end of the file is intact"});
}

TEST_F(MultiTargetTest, ResealedInconsistentTargetIsRefused) {
  // Same uuid, index and size, but a different description (e.g. another
  // class count): a stale or hand-edited target.
  format::Superblock sb = ReadSuperblock(Target(1));
  sb.class_count += 1;
  format::SealSuperblock(&sb);
  std::vector<std::byte> bytes = originals_[1];
  std::memcpy(bytes.data(), &sb, sizeof sb);
  testing::WriteFile(Target(1), bytes);
  ExpectRefused(StatusCode::kCorruption, {"target 1", "disagrees with target 0's"});
}

TEST_F(MultiTargetTest, DamageOnATargetIsFoundByReadAndVerify) {
  auto v0 = Volume::Open(path_);
  ASSERT_OK(v0);
  const SampleDirectory& d = (*v0)->directory();
  uint64_t victim = 0;
  while (d.sample(victim).target != 2 || d.sample(victim).length == 0) ++victim;
  const SampleInfo s = d.sample(victim);
  Poke(Target(2), s.offset, originals_[2][s.offset] ^ std::byte{1});
  // And the copy superblock of target 1.
  const uint64_t copy_at = originals_[1].size() - 100;
  Poke(Target(1), copy_at, originals_[1][copy_at] ^ std::byte{1});

  auto v = Volume::Open(path_);
  ASSERT_OK(v);
  auto bytes = (*v)->Read(victim);
  ASSERT_THAT(bytes, StatusIs(StatusCode::kCorruption, "checksum mismatch"));
  std::vector<uint64_t> bad;
  VerifyOptions o;
  o.on_bad_sample = [&](uint64_t i, const Status&) { bad.push_back(i); };
  VerifyReport report;
  ASSERT_OK(VerifyVolume(**v, o, &report));
  EXPECT_EQ(report.samples_checked, kN);
  EXPECT_EQ(bad, std::vector<uint64_t>{victim});
  ASSERT_THAT(report.backup_superblock,
              StatusIs(StatusCode::kCorruption, "target 1 (" + Target(1) + ")"));
}

TEST_F(MultiTargetTest, TargetMapFindsMovedTargets) {
  const std::string elsewhere = tmp_ / "elsewhere";
  fs::create_directories(elsewhere);
  fs::rename(Target(2), elsewhere + "/renamed");
  ExpectRefused(StatusCode::kNotFound, {"target 2"});

  VolumeOpenOptions o;
  o.target_map = {{2, elsewhere + "/renamed"}};
  auto v = Volume::Open(path_, o);
  ASSERT_OK(v);
  EXPECT_EQ((*v)->info().targets[2], elsewhere + "/renamed");
  EXPECT_EQ((*v)->info().target_details[2].stored_path, "v.dlfs.t2");
  for (uint64_t i = 0; i < kN; ++i) ASSERT_OK((*v)->Read(i)) << i;
  VerifyReport report;
  ASSERT_OK(VerifyVolume(**v, {}, &report));
  EXPECT_EQ(report.bad_samples, 0u);
  EXPECT_OK(report.backup_superblock);

  // A map to the wrong file is checked like the table's path.
  o.target_map = {{2, Target(1)}};
  ExpectRefused(StatusCode::kCorruption, {"target 2 (" + Target(1) + ")", "is target 1"}, o);
  // Targets the volume does not have, or target 0.
  for (uint32_t t : {0u, 3u, 8u}) {
    o.target_map = {{t, elsewhere + "/renamed"}};
    ExpectRefused(StatusCode::kInvalidArgument, {"target map names target " + std::to_string(t)},
                  o);
  }
}

TEST_F(MultiTargetTest, VolumeMovesAsASet) {
  const std::string moved = tmp_ / "moved";
  fs::create_directories(moved);
  for (uint32_t t = 0; t < kTargets; ++t) {
    fs::rename(Target(t), moved + "/" + fs::path(Target(t)).filename().string());
  }
  auto v = Volume::Open(moved + "/v.dlfs");
  ASSERT_OK(v);
  EXPECT_EQ((*v)->info().targets[1], moved + "/v.dlfs.t1");
  auto five = (*v)->directory().Lookup(SampleName(5));
  ASSERT_OK(five);
  EXPECT_EQ(*(*v)->Read(*five), SampleBytes(5));
  // Opened by a relative name, the other targets resolve relative to it too.
  const fs::path cwd = fs::current_path();
  fs::current_path(moved);
  auto r = Volume::Open("v.dlfs");
  fs::current_path(cwd);
  ASSERT_OK(r);
  EXPECT_EQ((*r)->info().targets[2], "v.dlfs.t2");
}

TEST(MultiTargetPathsTest, ExplicitPathsAreStoredRelativeWhenInsideElseAbsolute) {
  TempDir tmp;
  const std::string inside = tmp / "sub/deeper/part1";
  const std::string outside = fs::path(tmp.path()).parent_path() /
                              (fs::path(tmp.path()).filename().string() + "-outside-part2");
  fs::create_directories(tmp / "sub/deeper");
  struct Cleanup {
    std::string p;
    ~Cleanup() { fs::remove(p); }
  } cleanup{outside};
  ASSERT_OK(
      Build(tmp / "v.dlfs", 50, {.align = 4096, .targets = 3, .target_paths = {inside, outside}}));
  const format::Superblock sb = ReadSuperblock(tmp / "v.dlfs");
  EXPECT_EQ(format::TargetPath(sb.targets[1]), "sub/deeper/part1");
  EXPECT_EQ(format::TargetPath(sb.targets[2]), outside);
  auto v = Volume::Open(tmp / "v.dlfs");
  ASSERT_OK(v);
  EXPECT_EQ((*v)->info().targets[1], tmp / "sub/deeper/part1");
  for (uint64_t i = 0; i < 50; ++i) {
    auto idx = (*v)->directory().Lookup(SampleName(i));
    ASSERT_OK(idx);
    EXPECT_EQ(*(*v)->Read(*idx), SampleBytes(i));
    EXPECT_EQ((*v)->directory().sample(*idx).offset % 4096, 0u);
  }
}

TEST(MultiTargetPathsTest, TargetPathsAloneImplyTheCount) {
  EXPECT_EQ(VolumeBuilder::Options{}.TargetCount(), 1u);
  EXPECT_EQ(VolumeBuilder::Options{}.TargetPaths("v"), std::vector<std::string>{"v"});
  VolumeBuilder::Options o{.target_paths = {"/d/a", "/d/b"}};
  EXPECT_EQ(o.TargetCount(), 3u);
  EXPECT_EQ(o.TargetPaths("v"), (std::vector<std::string>{"v", "/d/a", "/d/b"}));
  o = {.targets = 3};
  EXPECT_EQ(o.TargetPaths("v"), (std::vector<std::string>{"v", "v.t1", "v.t2"}));
  o = {.targets = 4, .target_paths = {"/d/a"}};  // refused by Create
  EXPECT_EQ(o.TargetPaths("v"), (std::vector<std::string>{"v", "/d/a"}));
  o = {.targets = 100};
  EXPECT_EQ(o.TargetPaths("v").size(), 8u);
}

TEST(MultiTargetPathsTest, BadTargetOptionsAreRefused) {
  TempDir tmp;
  const std::string vol = tmp / "v.dlfs";
  for (uint32_t n : {9u, 100u}) {
    auto b = VolumeBuilder::Create(vol, {.targets = n});
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument) << n;
  }
  auto b = VolumeBuilder::Create(vol, {.targets = 3, .target_paths = {tmp / "a"}});
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  b = VolumeBuilder::Create(vol, {.targets = 3, .target_paths = {tmp / "a", tmp / "./a"}});
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument) << b.status().ToString();
  b = VolumeBuilder::Create(vol, {.targets = 2, .target_paths = {vol}});
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  b = VolumeBuilder::Create(vol, {.targets = 2, .target_paths = {"/" + std::string(300, 'x')}});
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("240"), std::string::npos) << b.status().message();
  EXPECT_EQ(DirEntries(tmp.path()), std::vector<std::string>{});
}

TEST(MultiTargetAtomicityTest, ExistingTargetIsNotReplacedAndNothingIsLeft) {
  TempDir tmp;
  const std::string vol = tmp / "v.dlfs";
  testing::WriteFile(vol + ".t2", Bytes("precious"));
  auto b = VolumeBuilder::Create(vol, {.targets = 3});
  ASSERT_THAT(b, StatusIs(StatusCode::kAlreadyExists, vol + ".t2: already exists"));
  EXPECT_EQ(DirEntries(tmp.path()), std::vector<std::string>{"v.dlfs.t2"});
  EXPECT_EQ(testing::ReadFile(vol + ".t2"), Bytes("precious"));

  // With overwrite, all three are replaced.
  ASSERT_OK(Build(vol, 20, {.overwrite = true, .targets = 3}));
  EXPECT_OK(Volume::Open(vol));
  EXPECT_EQ(DirEntries(tmp.path()), (std::vector<std::string>{"v.dlfs", "v.dlfs.t1", "v.dlfs.t2"}));
}

TEST(MultiTargetAtomicityTest, TargetAppearingDuringPackRollsBackTheOthers) {
  // Any target's path may be taken while packing; target 0 (published last)
  // and a middle one both make Finish fail and leave only what was there.
  for (const char* taken : {"v.dlfs", "v.dlfs.t1"}) {
    TempDir tmp;
    const std::string vol = tmp / "v.dlfs";
    auto b = VolumeBuilder::Create(vol, {.targets = 3});
    ASSERT_OK(b);
    for (uint64_t i = 0; i < 30; ++i) ASSERT_OK((*b)->Add(SampleName(i), SampleBytes(i)));
    EXPECT_EQ(DirEntries(tmp.path()).size(), 3u);  // the temporary files
    testing::WriteFile(tmp / taken, Bytes("appeared meanwhile"));
    const Status st = (*b)->Finish();
    EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st.ToString();
    EXPECT_EQ(DirEntries(tmp.path()), std::vector<std::string>{taken});
    EXPECT_EQ(testing::ReadFile(tmp / taken), Bytes("appeared meanwhile"));
  }
}

TEST(MultiTargetAtomicityTest, UnfinishedBuilderLeavesNothingAndTempsAreNotVolumes) {
  TempDir tmp;
  {
    auto b = VolumeBuilder::Create(tmp / "v.dlfs", {.targets = 4});
    ASSERT_OK(b);
    for (uint64_t i = 0; i < 40; ++i) ASSERT_OK((*b)->Add(SampleName(i), SampleBytes(i)));
    const std::vector<std::string> temps = (*b)->temp_paths();
    ASSERT_EQ(temps.size(), 4u);
    for (const std::string& t : temps) {
      EXPECT_TRUE(fs::exists(t));
      EXPECT_THAT(Volume::Open(t), StatusIs(StatusCode::kCorruption, t + ": not a dlfs volume"));
    }
  }
  EXPECT_EQ(DirEntries(tmp.path()), std::vector<std::string>{});
}

TEST(MultiTargetAtomicityTest, EmptyTargetsAndEmptyVolumes) {
  // More targets than samples: the extra targets hold an empty data region.
  TempDir tmp;
  ASSERT_OK(Build(tmp / "v.dlfs", 2, {.targets = 5}));
  auto v = Volume::Open(tmp / "v.dlfs");
  ASSERT_OK(v);
  EXPECT_EQ((*v)->info().target_details[4].size, 8192u);
  EXPECT_EQ(*(*v)->Read(0), SampleBytes(0));
  ASSERT_OK(Build(tmp / "empty.dlfs", 0, {.targets = 2}));
  auto e = Volume::Open(tmp / "empty.dlfs");
  ASSERT_OK(e);
  EXPECT_EQ((*e)->size(), 0u);
}

TEST(SingleTargetLayoutTest, UnchangedByMultiTargetSupport) {
  // The single-target layout of docs/format.md §1/§7: two regions, target 0
  // of 1 with no path, every other table entry zero.
  TempDir tmp;
  ASSERT_OK(Build(tmp / "v.dlfs", 10, {}));
  EXPECT_EQ(DirEntries(tmp.path()), std::vector<std::string>{"v.dlfs"});
  const format::Superblock sb = ReadSuperblock(tmp / "v.dlfs");
  EXPECT_EQ(sb.target_count, 1u);
  EXPECT_EQ(sb.target_index, 0u);
  EXPECT_EQ(sb.region_count, 2u);
  EXPECT_EQ(sb.regions[0].kind, static_cast<uint32_t>(format::RegionKind::kData));
  EXPECT_EQ(sb.regions[0].offset, 4096u);
  EXPECT_EQ(sb.regions[1].kind, static_cast<uint32_t>(format::RegionKind::kDirectory));
  EXPECT_EQ(sb.targets[0].size, sb.volume_size);
  EXPECT_EQ(sb.targets[0].path_length, 0u);
  const std::vector<std::byte> raw = testing::ReadFile(tmp / "v.dlfs");
  const size_t after_regions = offsetof(format::Superblock, regions) + 2 * 32;
  const size_t after_target0 = offsetof(format::Superblock, targets) + 8;
  EXPECT_TRUE(std::all_of(raw.begin() + after_regions,
                          raw.begin() + offsetof(format::Superblock, targets),
                          [](std::byte b) { return b == std::byte{0}; }));
  EXPECT_TRUE(std::all_of(raw.begin() + after_target0,
                          raw.begin() + offsetof(format::Superblock, crc32c),
                          [](std::byte b) { return b == std::byte{0}; }));
}

}  // namespace multi_target_test
}  // namespace dlfs
