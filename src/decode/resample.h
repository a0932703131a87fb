// Antialiased bilinear resampling with PIL's arithmetic (Pillow's
// libImaging/Resample.c: triangle filter widened by the downscale factor,
// 22-bit fixed-point coefficients, horizontal pass rounded to 8 bits before
// the vertical pass), computing only a window of the output — so
// Resize + CenterCrop costs the crop, not the whole resize, and gives the
// same bytes as PIL's resize followed by crop.
#pragma once

#include <cstdint>

#include "decode/codecs.h"

namespace dlfs::decode_internal {

struct ResampleSpec {
  // The region of the input that is resampled, in input pixels (PIL's
  // `box`; may be fractional). Filter taps never reach outside the input
  // view, as PIL never reads outside its image.
  float box[4] = {0, 0, 0, 0};  // x0, y0, x1, y1
  uint32_t out_width = 0;       // the box becomes out_width x out_height ...
  uint32_t out_height = 0;
  uint32_t win_left = 0;  // ... of which this window is computed
  uint32_t win_top = 0;
  uint32_t win_width = 0;
  uint32_t win_height = 0;
};

// Writes win_height rows of win_width * in.channels bytes, densely, to
// `out`. REQUIRES: in.channels is 1 or 3; the window lies inside the output
// and the box inside the view.
void Resample(const PixelView& in, const ResampleSpec& spec, ImageWorkspace::State& ws,
              uint8_t* out);

}  // namespace dlfs::decode_internal
