// Antialiased resampling with PIL's arithmetic (Pillow's
// libImaging/Resample.c: the filter — bilinear's triangle by default, or
// box, hamming, bicubic, lanczos — widened by the downscale factor, 22-bit
// fixed-point coefficients, horizontal pass rounded to 8 bits before the
// vertical pass), computing only a window of the output — so
// Resize + CenterCrop costs the crop, not the whole resize, and gives the
// same bytes as PIL's resize followed by crop.
#pragma once

#include <cstdint>

#include "decode/codecs.h"
#include "dlfs/image_prep.h"

namespace dlfs::decode_internal {

struct ResampleSpec {
  // The image PIL would resize: its size bounds the filter taps (PIL never
  // reads outside its image).
  uint32_t image_width = 0;
  uint32_t image_height = 0;
  // The region of it that is resampled (PIL's `box`; may be fractional).
  float box[4] = {0, 0, 0, 0};  // x0, y0, x1, y1
  uint32_t out_width = 0;       // the box becomes out_width x out_height ...
  uint32_t out_height = 0;
  uint32_t win_left = 0;  // ... of which this window is computed
  uint32_t win_top = 0;
  uint32_t win_width = 0;
  uint32_t win_height = 0;
  ResizeFilter filter = ResizeFilter::kBilinear;
};

// A prepared resample: its weights (kept in the workspace) and the pixels of
// the image the window reads, [x0, x1) x [y0, y1).
struct ResamplePlan {
  bool need_h = false;  // PIL skips a pass whose output would equal its input
  bool need_v = false;
  int ksize_h = 0;
  int ksize_v = 0;
  uint32_t x0 = 0, x1 = 0, y0 = 0, y1 = 0;
};

// Computes the weights of `spec` into `ws` and what the window reads.
// REQUIRES: the window lies inside the output and the box inside the image.
ResamplePlan PrepareResample(const ResampleSpec& spec, ImageWorkspace::State& ws);

// Runs the resample prepared last on `ws` (one Run per Prepare). `view`
// holds pixels of the image whose first pixel is image pixel (view_x,
// view_y) — possibly left of or above the image's own origin, when the view
// is a larger decoded region — and covers at least the plan's [x0, x1) x
// [y0, y1). Writes win_height rows of win_width * channels bytes, densely,
// to `out`. REQUIRES: view.channels is 1 or 3.
void RunResample(const PixelView& view, int64_t view_x, int64_t view_y, const ResampleSpec& spec,
                 const ResamplePlan& plan, ImageWorkspace::State& ws, uint8_t* out);

}  // namespace dlfs::decode_internal
