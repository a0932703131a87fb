// Fuzzes the tar importer through Pack() and the key index over the same
// shard: the input is a shard (plain or compressed: libarchive detects the
// filter from the bytes). Inputs of odd length pack with skip_unreadable.
// A volume that packs must open and verify.
#include "dlfs/pack.h"
#include "dlfs/volume.h"
#include "exercise.h"
#include "fuzz_util.h"
#include "pack/tar_shards.h"

using namespace dlfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string shard = fuzz::ScratchDir() + "/shard.tar";
  fuzz::WriteFile(shard, data, size);
  (void)pack_internal::TarKeyIndex::Build({shard});
  const std::string out = fuzz::ScratchDir() + "/tar.dlfs";
  PackOptions options;
  options.from = SourceKind::kTar;
  options.volume.overwrite = true;
  options.skip_unreadable = size % 2 == 1;
  auto stats = Pack(shard, out, options);
  if (!stats.ok()) return 0;
  auto v = Volume::Open(out);
  if (!v.ok()) fuzz::Broken("a packed tar volume does not open");
  if ((*v)->size() != stats->samples) fuzz::Broken("sample count differs from PackStats");
  if (fuzz::ExerciseVolume(**v) != 0) fuzz::Broken("a packed tar volume does not verify");
  return 0;
}
