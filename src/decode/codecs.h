// Decoders behind dlfs/decode.h: JPEG through TurboJPEG, PNG through libspng,
// raw pixels; each checks the pixel limit from the header before it
// allocates, and leaves its pixels in the workspace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dlfs/decode.h"

namespace dlfs {

// Scratch memory of one thread; vectors only grow, so steady-state decoding
// allocates nothing.
struct ImageWorkspace::State {
  void* tj = nullptr;           // TurboJPEG decompressor, created on first JPEG
  void* tj_compress = nullptr;  // TurboJPEG compressor (image preparation), on first use
  std::vector<uint8_t> pixels;  // the decoded image
  std::vector<uint8_t> convert;
  std::vector<uint8_t> horizontal;   // resampler: after the horizontal pass
  std::vector<uint8_t> window;       // resampler: the output window
  std::vector<uint8_t> block;        // resampler: eight rows side by side
  std::vector<int32_t> pair_coeffs;  // resampler: two output pixels' weights per tap
  std::vector<int32_t> starts;       // resampler: each output pixel's first tap, shifted in
  std::vector<int32_t> coeffs_x, coeffs_y;
  std::vector<int32_t> bounds_x, bounds_y;
  std::vector<double> weights;
  std::vector<int32_t> accumulator;
  std::vector<uint8_t> resized;  // image preparation: the resized image
  std::vector<uint8_t> encoded;  // image preparation: TurboJPEG's output
};

namespace decode_internal {

// Pixels somewhere in memory: height rows of width * channels bytes, rows
// `stride` bytes apart.
struct PixelView {
  const uint8_t* data = nullptr;
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t channels = 0;
  size_t stride = 0;
};

// Raw pixels (docs/format.md §4.9.3): where they are and their shape.
struct RawPixels {
  const uint8_t* pixels = nullptr;  // height x width x channels, dense
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t channels = 0;
};

// Parses raw image bytes (header and pixels): InvalidArgument for a bad
// magic, version, channel count or reserved field, no pixels, more than
// `max_pixels` pixels, or a length other than 16 + h x w x c. The pixels
// point into `data`.
Result<RawPixels> ParseRawImage(std::span<const std::byte> data, uint64_t max_pixels);

// Raw image bytes of `height` rows of width x channels pixels, rows `stride`
// bytes apart. REQUIRES: channels 1 or 3, width and height >= 1.
std::vector<std::byte> RawImageBytes(const uint8_t* pixels, uint32_t width, uint32_t height,
                                     uint32_t channels, size_t stride);

// The format of `data` (kAuto resolved), or an error.
Result<ImageFormat> DetectFormat(std::span<const std::byte> data, const DecodeOptions& options);

Result<ImageInfo> Probe(ImageWorkspace::State& ws, std::span<const std::byte> data,
                        const DecodeOptions& options);

// Whether a JPEG uses a quantization or Huffman table it does not define
// (before the scan that uses it): a workspace's decompressor, which keeps
// the previous image's tables, must not decode it (codecs.cc, WalkJpeg).
bool JpegBorrowsTables(std::span<const std::byte> data);

// Decodes `data` (whose header gave `info`) at 1/scale_denom (JPEG only;
// 1 otherwise) to `channels` (1 or 3) into ws.pixels; the view points there
// (or into `data` itself for raw samples that need no conversion).
Result<PixelView> Decode(ImageWorkspace::State& ws, std::span<const std::byte> data,
                         const ImageInfo& info, const DecodeOptions& options, uint32_t scale_denom,
                         uint32_t channels);

// Part of a decoded image: `view` starts at pixel (x, y) of the image (as
// decoded, i.e. scaled).
struct DecodedRegion {
  PixelView view;
  uint32_t x = 0;
  uint32_t y = 0;
};

// Decodes at least the pixels [x0, x1) x [y0, y1) of `data` decoded at
// 1/scale_denom, as Decode() would give them. JPEGs are decoded only around
// that region when it is clearly smaller than the image (libjpeg-turbo's
// jpeg_crop_scanline / jpeg_skip_scanlines, which TurboJPEG 2.1 does not
// offer; the pixels are identical to a full decode's); other formats whole.
Result<DecodedRegion> DecodeRegion(ImageWorkspace::State& ws, std::span<const std::byte> data,
                                   const ImageInfo& info, const DecodeOptions& options,
                                   uint32_t scale_denom, uint32_t channels, uint32_t x0,
                                   uint32_t y0, uint32_t x1, uint32_t y1);

// TJSCALED: the size of a dimension decoded at 1/scale_denom.
inline uint32_t ScaledDim(uint32_t dim, uint32_t scale_denom) {
  return (dim + scale_denom - 1) / scale_denom;
}

// PIL's RGB -> L (ITU-R 601-2 luma, 16-bit fixed point, rounded).
inline uint8_t Luma(uint8_t r, uint8_t g, uint8_t b) {
  return static_cast<uint8_t>((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

}  // namespace decode_internal
}  // namespace dlfs
