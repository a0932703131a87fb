// How a volume's samples look as files, for `dlfs mount` and `dlfs cat`:
// field f of sample i is the file KEY.FIELD in the sample's directory (KEY
// alone for a sample's unnamed field; docs/format.md §4.8.5), and an image
// the writer stored as raw pixels (`--image-format raw`, §4.9.3), which no
// image reader opens, is shown as a binary PPM (P6, or P5 for gray: what
// PIL and torchvision's ImageFolder read) named with ".ppm" appended
// ("cat/001.jpg.ppm"): the same pixels behind a 32-byte header instead of
// the 16-byte raw one, so its size is known without reading it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dlfs/directory.h"
#include "dlfs/status.h"

namespace dlfs {

// Bytes of the PPM header a raw image is shown with (vs 16 stored).
inline constexpr uint64_t kPpmHeaderBytes = 32;

// One file of the view: field `field` of sample `sample`, shown as a PPM
// when `ppm`.
struct ViewFile {
  uint64_t sample = 0;
  FieldInfo info;
  bool ppm = false;
};

// Field f of sample i holds raw pixels the writer made (its image record).
bool IsRawImageField(const SampleDirectory& d, uint64_t i, uint32_t f);

// The file's name in its directory ("000123.jpg", "001.jpg.ppm").
std::string ViewFileName(const SampleDirectory& d, uint64_t i, uint32_t f);

// The file's size: the field's decoded length, plus the PPM header's
// growth over the raw one when shown as a PPM.
uint64_t ViewFileSize(const ViewFile& file);

// The file `name` (no '/') names in directory `dir` ("" for the root):
// KEY.FIELD (the shortest KEY first: WebDataset's rule), then a sample's
// unnamed field by its whole name, then NAME.ppm for a raw image of NAME.
// nullopt when it names no file.
std::optional<ViewFile> ResolveViewFile(const SampleDirectory& d, std::string_view dir,
                                        std::string_view name);

// As ResolveViewFile, for a '/'-separated path from the root.
std::optional<ViewFile> ResolveViewPath(const SampleDirectory& d, std::string_view path);

// The PPM made of raw image bytes (§4.9.3: its 16-byte header and pixels);
// Corruption naming `what` when they are not raw pixels.
Result<std::vector<std::byte>> RawImageToPpm(std::span<const std::byte> raw,
                                             const std::string& what);

}  // namespace dlfs
