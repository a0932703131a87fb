// Fuzzes the IDX importer through Pack(): the input holds both files of a
// split. Byte 0: bit 0 names the images file "...idx3-ubyte.gz" (its bytes
// as given: gzip data from the seeds, or plain bytes zlib reads through),
// bit 1 the same for the labels file, bit 2 gzips the images bytes in the
// harness. Bytes 1-2: the labels file's length (little-endian), then the
// labels bytes, then the images bytes. A volume that packs must verify.
#include <zlib.h>

#include <algorithm>
#include <filesystem>

#include "dlfs/pack.h"
#include "dlfs/volume.h"
#include "exercise.h"
#include "fuzz_util.h"

using namespace dlfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const uint8_t flags = data[0];
  const size_t labels_len = std::min<size_t>(data[1] | data[2] << 8, size - 3);
  const uint8_t* labels = data + 3;
  const uint8_t* images = labels + labels_len;
  const size_t images_len = size - 3 - labels_len;

  const std::string src = fuzz::ScratchDir() + "/idx";
  std::filesystem::remove_all(src);
  std::filesystem::create_directories(src);
  const std::string images_path =
      src + "/train-images-idx3-ubyte" + ((flags & 1) || (flags & 4) ? ".gz" : "");
  const std::string labels_path = src + "/train-labels-idx1-ubyte" + (flags & 2 ? ".gz" : "");
  if (flags & 4) {
    gzFile f = gzopen(images_path.c_str(), "wb1");
    if (images_len > 0) gzwrite(f, images, static_cast<unsigned>(images_len));
    gzclose(f);
  } else {
    fuzz::WriteFile(images_path, images, images_len);
  }
  fuzz::WriteFile(labels_path, labels, labels_len);

  const std::string out = fuzz::ScratchDir() + "/idx.dlfs";
  PackOptions options;
  options.from = SourceKind::kIdx;
  options.volume.overwrite = true;
  auto stats = Pack(src, out, options);
  if (!stats.ok()) return 0;
  auto v = Volume::Open(out);
  if (!v.ok()) fuzz::Broken("a packed IDX volume does not open");
  if (fuzz::ExerciseVolume(**v) != 0) fuzz::Broken("a packed IDX volume does not verify");
  return 0;
}
