// Images for the decode and image-preparation tests: pixels that compress
// like photographs, and their PNG and JPEG bytes. Shared so that both suites
// test the same encoders' output (a fixture copied per file drifts).
#pragma once

#include <turbojpeg.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "dlfs/decode.h"
#include "testutil.h"

namespace dlfs::testing {

// A width x height image with smooth gradients and a little noise: what
// photographs look like to a codec. A pure function of its arguments.
inline Image Gradient(uint32_t width, uint32_t height, uint32_t channels, uint32_t seed) {
  std::mt19937 rng(seed);
  Image img{width, height, channels, std::vector<uint8_t>(size_t{width} * height * channels)};
  for (uint32_t y = 0; y < height; ++y) {
    for (uint32_t x = 0; x < width; ++x) {
      for (uint32_t c = 0; c < channels; ++c) {
        const int v = static_cast<int>((x * 255 / width + y * 91 / height + c * 60 + seed) % 256) +
                      static_cast<int>(rng() % 7) - 3;
        img.pixels[(size_t{y} * width + x) * channels + c] =
            static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
    }
  }
  return img;
}

// Smooth gradients, a few edges and a little noise: a resize has detail to
// lose and a re-encode something to cost. A pure function of its arguments.
inline Image Photo(uint32_t width, uint32_t height, uint32_t channels, uint32_t seed) {
  std::mt19937 rng(seed);
  Image img{width, height, channels, std::vector<uint8_t>(size_t{width} * height * channels)};
  for (uint32_t y = 0; y < height; ++y) {
    for (uint32_t x = 0; x < width; ++x) {
      for (uint32_t c = 0; c < channels; ++c) {
        int v = static_cast<int>((x * 200 / width + y * 120 / height + c * 50 + seed) % 256);
        if ((x / 17 + y / 13) % 5 == 0) v = 255 - v;
        v += static_cast<int>(rng() % 9) - 4;
        img.pixels[(size_t{y} * width + x) * channels + c] =
            static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
    }
  }
  return img;
}

// `img` as PNG, by dlfs's own encoder (empty, and a test failure, when it
// fails).
inline std::vector<std::byte> Png(const Image& img) {
  auto png = EncodePng(img);
  EXPECT_OK(png);
  return png.ok() ? *png : std::vector<std::byte>{};
}

// `img` as JPEG, by TurboJPEG: `subsamp` and `flags` are tjCompress2's
// (gray images are always TJSAMP_GRAY).
inline std::vector<std::byte> Jpeg(const Image& img, int quality = 90, int subsamp = TJSAMP_420,
                                   int flags = 0) {
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int rc =
      tjCompress2(tj, img.pixels.data(), static_cast<int>(img.width), 0,
                  static_cast<int>(img.height), img.channels == 1 ? TJPF_GRAY : TJPF_RGB, &out,
                  &size, img.channels == 1 ? TJSAMP_GRAY : subsamp, quality, flags);
  EXPECT_EQ(rc, 0) << tjGetErrorStr2(tj);
  std::vector<std::byte> v(size);
  if (size > 0) std::memcpy(v.data(), out, size);
  tjFree(out);
  tjDestroy(tj);
  return v;
}

}  // namespace dlfs::testing
