// MakeSyntheticVolume: the test volume most suites need — n samples named
// "c<i % classes>/<i, 6 digits>" with label i % classes, whose bytes are a
// function of i alone, so any test can recompute what sample i must hold.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "dlfs/builder.h"
#include "dlfs/volume.h"
#include "testutil.h"

namespace dlfs::testing {

// Default bytes of sample i: lengths from empty to ~9 KB, every 37th sample
// 40-70 KB, every 53rd empty.
inline std::vector<std::byte> SyntheticBytes(uint64_t i) {
  std::mt19937 rng(static_cast<uint32_t>(i) * 7 + 1);
  size_t len = rng() % 9000;
  if (i % 37 == 3) len = 40000 + rng() % 30000;
  if (i % 53 == 9) len = 0;
  return RandomBytes(len, static_cast<uint32_t>(i));
}

inline std::string SyntheticName(uint64_t i, uint32_t classes) {
  char name[48];
  std::snprintf(name, sizeof name, "c%llu/%06llu", static_cast<unsigned long long>(i % classes),
                static_cast<unsigned long long>(i));
  return name;
}

struct SyntheticVolume {
  uint64_t samples = 100;
  uint32_t classes = 4;
  VolumeBuilder::Options volume;  // alignment, targets, overwrite
  std::function<std::vector<std::byte>(uint64_t)> bytes = SyntheticBytes;

  std::string name(uint64_t i) const { return SyntheticName(i, classes); }
  uint32_t label(uint64_t i) const { return static_cast<uint32_t>(i % classes); }
};

// Writes the volume described by `spec` at `path` (its target 0).
inline Status WriteSyntheticVolume(const std::string& path, const SyntheticVolume& spec) {
  DLFS_ASSIGN_OR_RETURN(std::unique_ptr<VolumeBuilder> b, VolumeBuilder::Create(path, spec.volume));
  for (uint64_t i = 0; i < spec.samples; ++i) {
    DLFS_RETURN_IF_ERROR(b->Add(spec.name(i), spec.bytes(i), spec.label(i)));
  }
  return b->Finish();
}

// Writes and opens it; a failure is a test failure (and nullptr).
inline std::shared_ptr<Volume> MakeSyntheticVolume(const std::string& path,
                                                   const SyntheticVolume& spec) {
  const Status written = WriteSyntheticVolume(path, spec);
  EXPECT_OK(written);
  if (!written.ok()) return nullptr;
  auto v = Volume::Open(path);
  EXPECT_OK(v);
  return v.ok() ? *v : nullptr;
}

// The volume `spec` describes, written once per test program under `key`
// and copied to `path` for each caller, then opened: a test may damage its
// copy. Writing the volume anew for every test was about half of LoaderTest's
// time under the sanitizers; the kernel copies a file. The copies share
// the volume's uuid, so two open at once share a node cache. One target
// only; a failure is a test failure (and nullptr).
inline std::shared_ptr<Volume> CopySyntheticVolume(const std::string& key,
                                                   const SyntheticVolume& spec,
                                                   const std::string& path) {
  if (spec.volume.targets > 1 || !spec.volume.target_paths.empty()) {
    ADD_FAILURE() << "CopySyntheticVolume copies one target; " << key << " has several";
    return nullptr;
  }
  static TempDir masters;  // removed at exit
  const std::string master = masters / (key + ".dlfs");
  if (!std::filesystem::exists(master)) {
    const Status written = WriteSyntheticVolume(master, spec);
    EXPECT_OK(written);
    if (!written.ok()) return nullptr;
  }
  std::error_code ec;
  std::filesystem::copy_file(master, path, std::filesystem::copy_options::overwrite_existing, ec);
  EXPECT_FALSE(ec) << "copying " << master << " to " << path << ": " << ec.message();
  auto v = Volume::Open(path);
  EXPECT_OK(v);
  return v.ok() ? *v : nullptr;
}

// What each sample of a volume holds, read by Volume::Read on first use
// and kept: a test that reads the epochs many times checks each batch
// against it (reading each sample again for every batch was most of
// ResumeTest's time under TSan). Not thread-safe.
class SampleOracle {
 public:
  explicit SampleOracle(const Volume& volume) : volume_(volume), bytes_(volume.size()) {}
  const Volume& volume() const { return volume_; }
  const std::vector<std::byte>& operator()(uint64_t index) {
    std::optional<std::vector<std::byte>>& b = bytes_.at(index);
    if (!b) {
      auto read = volume_.Read(index);
      EXPECT_OK(read);
      b = read.ok() ? *std::move(read) : std::vector<std::byte>{};
    }
    return *b;
  }

 private:
  const Volume& volume_;
  std::vector<std::optional<std::vector<std::byte>>> bytes_;
};

}  // namespace dlfs::testing
