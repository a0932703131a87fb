// The last step of ImagePipeline::Execute: the resampled window (size x size
// pixels, HWC uint8) written as the output tensor of one image — uint8 or
// float32 (torchvision's ToTensor + Normalize), HWC or CHW, mirrored or not.
#pragma once

#include <cstdint>

#include "dlfs/decode.h"

namespace dlfs::decode_internal {

// Writes `win` (size x size x c bytes, dense) to `dst` as `out` asks, mirrored
// left-right when `flip`. `lut` holds c x 256 floats, lut[k * 256 + v] =
// (v / 255.0f - mean[k]) / std[k] as float32 arithmetic gives it (needed
// for float32 only). Every path gives exactly the bytes of the scalar
// reference, StoreWindowReference: the vector ones compute the same IEEE
// float32 divisions and subtraction, which are correctly rounded in any
// width. REQUIRES: c is 1 or 3; `mean`/`std` of `out` as ImagePipeline
// validated them.
void StoreWindow(const uint8_t* win, uint32_t size, uint32_t c, bool flip, const OutputOptions& out,
                 const float* lut, void* dst);

// The straightforward version (a table lookup per value), for tests.
void StoreWindowReference(const uint8_t* win, uint32_t size, uint32_t c, bool flip,
                          const OutputOptions& out, const float* lut, void* dst);

// Whether the resampler and the store may use AVX2 (and AVX-512) code: the
// CPU's support, unless a test turned them off to compare with the scalar
// code. Not thread-safe to change while images are being processed.
bool SimdEnabled();
void SetSimdForTesting(bool enabled);

}  // namespace dlfs::decode_internal
