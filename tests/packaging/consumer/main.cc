// Writes a volume with VolumeBuilder, reads it back through Volume and the
// batch Loader, and checks every byte: the installed library, headers and
// dependencies all work. Usage: consumer VOLUME_PATH. Prints "ok ...".
#include <cstdio>
#include <string>
#include <vector>

#include "dlfs/builder.h"
#include "dlfs/loader.h"
#include "dlfs/version.h"
#include "dlfs/volume.h"

namespace {

std::vector<std::byte> Bytes(int i) {
  std::vector<std::byte> out(100 + i * 37 % 5000);
  for (size_t k = 0; k < out.size(); ++k) out[k] = static_cast<std::byte>(i * 31 + k);
  return out;
}

int Fail(const dlfs::Status& st) {
  std::fprintf(stderr, "consumer: %s\n", st.message().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  constexpr int kSamples = 300;
  auto builder = dlfs::VolumeBuilder::Create(argv[1]);
  if (!builder.ok()) return Fail(builder.status());
  (*builder)->SetClassNames({"even", "odd"});
  for (int i = 0; i < kSamples; ++i) {
    dlfs::Status st = (*builder)->Add("s/" + std::to_string(i), Bytes(i), i % 2);
    if (!st.ok()) return Fail(st);
  }
  if (dlfs::Status st = (*builder)->Finish(); !st.ok()) return Fail(st);

  auto volume = dlfs::Volume::Open(argv[1]);
  if (!volume.ok()) return Fail(volume.status());
  dlfs::LoaderOptions options;
  options.sampler.batch_size = 32;
  options.sampler.seed = 7;
  auto loader = dlfs::Loader::Create(*volume, options);
  if (!loader.ok()) return Fail(loader.status());
  (*loader)->SetEpoch(1);
  int seen = 0;
  dlfs::Batch batch;
  while (true) {
    auto more = (*loader)->Next(&batch);
    if (!more.ok()) return Fail(more.status());
    if (!*more) break;
    for (size_t k = 0; k < batch.size(); ++k) {
      const int i = std::stoi((*volume)->directory().Path(batch.index(k)).substr(2));
      const std::vector<std::byte> want = Bytes(i);
      const auto got = batch.sample(k);
      if (got.size() != want.size() || !std::equal(got.begin(), got.end(), want.begin()) ||
          batch.label(k) != static_cast<uint32_t>(i % 2)) {
        std::fprintf(stderr, "consumer: sample %d differs\n", i);
        return 1;
      }
      ++seen;
    }
  }
  std::printf("ok dlfs %s: %d samples read back\n", DLFS_VERSION_STRING, seen);
  return seen == kSamples ? 0 : 1;
}
