#include "dlfs/sample_image.h"

#include <cstdio>
#include <cstring>
#include <string>

namespace dlfs {

Result<Image> DecodeSample(const Volume& volume, uint64_t index, const ImageOptions& options,
                           std::optional<uint64_t> epoch, bool verify) {
  DLFS_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, volume.Read(index, verify));
  const std::string sample = volume.path() + ": sample " + std::to_string(index) + " (" +
                             volume.directory().Path(index) + ")";
  ImageWorkspace ws;
  if (!epoch) {
    auto decoded = DecodeImage(ws, bytes, options.decode);
    if (!decoded.ok()) return decoded.status().WithContext(sample);
    return decoded;
  }
  ImageOptions o = options;
  o.output = {};  // uint8 HWC
  auto pipeline = ImagePipeline::Create(o);
  if (!pipeline.ok()) return pipeline.status();
  std::vector<int64_t> shape;
  auto out = pipeline->Run(ws, bytes, *epoch, index, &shape);
  if (!out.ok()) return out.status().WithContext(sample);
  Image image;
  image.height = static_cast<uint32_t>(shape[0]);
  image.width = static_cast<uint32_t>(shape[1]);
  image.channels = static_cast<uint32_t>(shape[2]);
  image.pixels.resize(out->size());
  std::memcpy(image.pixels.data(), out->data(), out->size());
  return image;
}

Result<RawShape> ParseRawShape(std::string_view text) {
  const std::string s(text);
  unsigned h = 0, w = 0, c = 1;
  const int n = std::sscanf(s.c_str(), "%ux%ux%u", &h, &w, &c);
  // Printed back, the numbers must give the text (no sign, tail or overflow).
  std::string canonical = std::to_string(h) + "x" + std::to_string(w);
  if (n == 3) canonical += "x" + std::to_string(c);
  if (n < 2 || canonical != s || h == 0 || w == 0) {
    return Status::InvalidArgument("a raw shape is HxW or HxWxC, e.g. 28x28, not '" + s + "'");
  }
  return RawShape{h, w, c};
}

}  // namespace dlfs
