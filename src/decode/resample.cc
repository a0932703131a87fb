#include "decode/resample.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "decode/store.h"

namespace dlfs::decode_internal {

namespace {

// PIL: 32 bits minus 8 for the pixel and 2 for overshoot of the sum.
constexpr int kPrecisionBits = 32 - 8 - 2;

inline uint8_t Clip8(int32_t v) {
  v >>= kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// Pillow's filters (Resample.c), each with its support.
double Box(double x) { return x > -0.5 && x <= 0.5 ? 1.0 : 0.0; }

double Bilinear(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

double Hamming(double x) {
  if (x < 0.0) x = -x;
  if (x == 0.0) return 1.0;
  if (x >= 1.0) return 0.0;
  x = x * M_PI;
  return std::sin(x) / x * (0.54 + 0.46 * std::cos(x));
}

double Bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double Sinc(double x) {
  if (x == 0.0) return 1.0;
  x = x * M_PI;
  return std::sin(x) / x;
}

double Lanczos(double x) { return -3.0 <= x && x < 3.0 ? Sinc(x) * Sinc(x / 3) : 0.0; }

struct Filter {
  double (*f)(double);
  double support;
};

Filter FilterOf(ResizeFilter f) {
  switch (f) {
    case ResizeFilter::kBox:
      return {Box, 0.5};
    case ResizeFilter::kHamming:
      return {Hamming, 1.0};
    case ResizeFilter::kBicubic:
      return {Bicubic, 2.0};
    case ResizeFilter::kLanczos:
      return {Lanczos, 3.0};
    case ResizeFilter::kBilinear:
      break;
  }
  return {Bilinear, 1.0};
}

// Pillow's precompute_coeffs + normalize_coeffs_8bpc for outputs
// [first, first + count) of a resize of [in0, in1) (of an input in_size
// long) to out_size. bounds gets (first tap, tap count) per output; coeffs
// ksize fixed-point weights per output. Returns ksize.
int Coefficients(int in_size, float in0, float in1, int out_size, int first, int count,
                 ResizeFilter filter, ImageWorkspace::State& ws, std::vector<int32_t>& bounds,
                 std::vector<int32_t>& coeffs) {
  const Filter fl = FilterOf(filter);
  const double scale = static_cast<double>(in1 - in0) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = fl.support * filterscale;
  const int ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  bounds.resize(size_t(2) * count);
  coeffs.assign(size_t(ksize) * count, 0);
  ws.weights.resize(ksize);
  double* w = ws.weights.data();
  for (int i = 0; i < count; ++i) {
    const int xx = first + i;
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      // Bilinear (the decode stage's) inlined; the others through the pointer.
      const double t = (x + xmin - center + 0.5) * ss;
      w[x] = filter == ResizeFilter::kBilinear ? Bilinear(t) : fl.f(t);
      ww += w[x];
    }
    int32_t* k = &coeffs[size_t(i) * ksize];
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      k[x] = v < 0 ? static_cast<int32_t>(-0.5 + v * (1 << kPrecisionBits))
                   : static_cast<int32_t>(0.5 + v * (1 << kPrecisionBits));
    }
    bounds[2 * i] = xmin;
    bounds[2 * i + 1] = xmax;
  }
  return ksize;
}

template <int C>
void HorizontalPass(const uint8_t* in, size_t in_stride, int rows, const int32_t* bounds,
                    const int32_t* coeffs, int ksize, int out_w, uint8_t* out) {
  for (int y = 0; y < rows; ++y) {
    const uint8_t* row = in + y * in_stride;
    uint8_t* o = out + size_t(y) * out_w * C;
    for (int x = 0; x < out_w; ++x) {
      const uint8_t* p = row + size_t(bounds[2 * x]) * C;
      const int n = bounds[2 * x + 1];
      const int32_t* k = coeffs + size_t(x) * ksize;
      int32_t s[C];
      for (int c = 0; c < C; ++c) s[c] = 1 << (kPrecisionBits - 1);
      for (int t = 0; t < n; ++t) {
        for (int c = 0; c < C; ++c) s[c] += p[t * C + c] * k[t];
      }
      for (int c = 0; c < C; ++c) o[x * C + c] = Clip8(s[c]);
    }
  }
}

// Each output row is a weighted sum of whole input rows: the inner loop runs
// along the row with one weight, which the compiler vectorises.
void VerticalPass(const uint8_t* in, size_t in_stride, int rows_out, const int32_t* bounds,
                  const int32_t* coeffs, int ksize, int row_bytes, uint8_t* out, int32_t* acc) {
  for (int y = 0; y < rows_out; ++y) {
    const int ymin = bounds[2 * y];
    const int n = bounds[2 * y + 1];
    const int32_t* k = coeffs + size_t(y) * ksize;
    for (int i = 0; i < row_bytes; ++i) acc[i] = 1 << (kPrecisionBits - 1);
    for (int t = 0; t < n; ++t) {
      const uint8_t* r = in + size_t(ymin + t) * in_stride;
      const int32_t kt = k[t];
      for (int i = 0; i < row_bytes; ++i) acc[i] += r[i] * kt;
    }
    uint8_t* o = out + size_t(y) * row_bytes;
    for (int i = 0; i < row_bytes; ++i) o[i] = Clip8(acc[i]);
  }
}

// ---- AVX2 versions: the same integer arithmetic (so the same bytes), eight
// 32-bit lanes at a time. Chosen at run time (SimdEnabled).

// Vertical: eight output bytes per accumulator, the taps' weights broadcast.
__attribute__((target("avx2"))) void VerticalPassAvx2(const uint8_t* in, size_t in_stride,
                                                      int rows_out, const int32_t* bounds,
                                                      const int32_t* coeffs, int ksize,
                                                      int row_bytes, uint8_t* out) {
  const __m256i half = _mm256_set1_epi32(1 << (kPrecisionBits - 1));
  for (int y = 0; y < rows_out; ++y) {
    const int ymin = bounds[2 * y];
    const int n = bounds[2 * y + 1];
    const int32_t* k = coeffs + size_t(y) * ksize;
    const uint8_t* base = in + size_t(ymin) * in_stride;
    uint8_t* o = out + size_t(y) * row_bytes;
    int i = 0;
    for (; i + 16 <= row_bytes; i += 16) {
      __m256i a0 = half, a1 = half;
      for (int t = 0; t < n; ++t) {
        const __m128i px =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + size_t(t) * in_stride + i));
        const __m256i kk = _mm256_set1_epi32(k[t]);
        a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(px), kk));
        a1 = _mm256_add_epi32(a1,
                              _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(px, 8)), kk));
      }
      a0 = _mm256_srai_epi32(a0, kPrecisionBits);
      a1 = _mm256_srai_epi32(a1, kPrecisionBits);
      const __m128i w0 =
          _mm_packs_epi32(_mm256_castsi256_si128(a0), _mm256_extracti128_si256(a0, 1));
      const __m128i w1 =
          _mm_packs_epi32(_mm256_castsi256_si128(a1), _mm256_extracti128_si256(a1, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i), _mm_packus_epi16(w0, w1));
    }
    for (; i < row_bytes; ++i) {
      int32_t acc = 1 << (kPrecisionBits - 1);
      for (int t = 0; t < n; ++t) acc += base[size_t(t) * in_stride + i] * k[t];
      o[i] = Clip8(acc);
    }
  }
}

// Horizontal: eight rows at a time. Their needed columns are first copied
// into a block where each input column holds the eight rows' pixels side by
// side (8 x C bytes), so that every tap of an output pixel is one contiguous
// load for all eight rows, and the weights are broadcast as in the vertical
// pass. Rows left over (fewer than eight) take the scalar path.
template <int C>
__attribute__((target("avx2"))) void HorizontalPassAvx2(const uint8_t* in, size_t in_stride,
                                                        int rows, const int32_t* bounds,
                                                        const int32_t* coeffs, int ksize, int out_w,
                                                        uint8_t* out, std::vector<uint8_t>& block) {
  constexpr int kLane = 8 * C;    // bytes per input column in the block
  const int x_first = bounds[0];  // bounds are monotonic in the output x
  const int x_end = bounds[2 * (out_w - 1)] + bounds[2 * (out_w - 1) + 1];
  const int cols = x_end - x_first;
  if (block.size() < size_t(cols) * kLane) block.resize(size_t(cols) * kLane);
  const __m256i half = _mm256_set1_epi32(1 << (kPrecisionBits - 1));
  const size_t out_stride = size_t(out_w) * C;
  int y = 0;
  for (; y + 8 <= rows; y += 8) {
    for (int r = 0; r < 8; ++r) {
      const uint8_t* src = in + size_t(y + r) * in_stride + size_t(x_first) * C;
      uint8_t* dst = block.data() + r * C;
      for (int x = 0; x < cols; ++x) std::memcpy(dst + size_t(x) * kLane, src + x * C, C);
    }
    for (int xo = 0; xo < out_w; ++xo) {
      const int n = bounds[2 * xo + 1];
      const int32_t* k = coeffs + size_t(xo) * ksize;
      const uint8_t* p = block.data() + size_t(bounds[2 * xo] - x_first) * kLane;
      __m256i acc[C];
      for (int c = 0; c < C; ++c) acc[c] = half;
      for (int t = 0; t < n; ++t) {
        const __m256i kk = _mm256_set1_epi32(k[t]);
        for (int c = 0; c < C; ++c) {
          const __m128i px =
              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + size_t(t) * kLane + 8 * c));
          acc[c] = _mm256_add_epi32(acc[c], _mm256_mullo_epi32(_mm256_cvtepu8_epi32(px), kk));
        }
      }
      alignas(16) uint8_t res[8 * C + 8];
      for (int c = 0; c < C; ++c) {
        const __m256i v = _mm256_srai_epi32(acc[c], kPrecisionBits);
        const __m128i w =
            _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(res + 8 * c), _mm_packus_epi16(w, w));
      }
      uint8_t* o = out + size_t(y) * out_stride + size_t(xo) * C;
      for (int r = 0; r < 8; ++r) std::memcpy(o + r * out_stride, res + r * C, C);
    }
  }
  if (y < rows) {
    HorizontalPass<C>(in + size_t(y) * in_stride, in_stride, rows - y, bounds, coeffs, ksize, out_w,
                      out + size_t(y) * out_stride);
  }
}

// Horizontal, three channels, two output pixels per register: a tap loads
// four bytes (R, G, B and the next pixel's first byte, whose lane is
// discarded) of each pixel, side by side as eight 32-bit lanes, times the
// two pixels' weights of that tap. Every pixel runs ksize taps from
// ws.starts (its first tap moved left where ksize taps from it would pass
// the row's end, its weights shifted to match and zero elsewhere: adding
// 0 * pixel changes no sum), so the loop has no per-pixel tap count. The
// pixels whose four-byte loads would reach past the last pixel of a row
// (at most ksize + 1 at its end) take the scalar loop. The same integer
// sums as HorizontalPass, so the same bytes; no copying of rows into a
// transposed block as HorizontalPassAvx2 does, which cost more than the
// arithmetic on images of a few hundred pixels.
// REQUIRES: `width` (pixels readable in each row of `in`) >= ksize + 1;
// `out` has 8 bytes of slack after its last row.
__attribute__((target("avx2"))) void HorizontalPass3PairsAvx2(
    const uint8_t* in, size_t in_stride, int rows, int width, const int32_t* bounds,
    const int32_t* coeffs, int ksize, int out_w, uint8_t* out, ImageWorkspace::State& ws) {
  // The layout: starts[x]; pair_coeffs[(pair * ksize + t) * 8 + lane], lanes
  // 0-3 the pair's first pixel's weight of tap t, 4-7 the second's.
  ws.starts.resize(out_w);
  const int pairs = out_w / 2;
  ws.pair_coeffs.assign(size_t(pairs) * ksize * 8, 0);
  int vec_end = out_w;  // the first output pixel that needs the scalar loop
  for (int x = 0; x < out_w; ++x) {
    const int xmin = bounds[2 * x];
    const int start = std::min(xmin, width - ksize);
    ws.starts[x] = start;
    if (vec_end == out_w && start + ksize > width - 1) vec_end = x;  // starts are monotonic
    if (x / 2 >= pairs) continue;
    const int shift = xmin - start;
    const int n = bounds[2 * x + 1];
    int32_t* pc = ws.pair_coeffs.data() + size_t(x / 2) * ksize * 8 + (x % 2) * 4;
    for (int t = 0; t < n; ++t) {
      for (int l = 0; l < 4; ++l) pc[size_t(t + shift) * 8 + l] = coeffs[size_t(x) * ksize + t];
    }
  }
  const int vec_pairs = std::min(pairs, vec_end / 2);
  const __m256i half = _mm256_set1_epi32(1 << (kPrecisionBits - 1));
  // Bytes 0-2 and 4-6 of the packed result: the two pixels' RGB.
  const __m128i pick = _mm_setr_epi8(0, 1, 2, 4, 5, 6, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const int32_t* starts = ws.starts.data();
  for (int y = 0; y < rows; ++y) {
    const uint8_t* row = in + size_t(y) * in_stride;
    uint8_t* o = out + size_t(y) * out_w * 3;
    for (int pr = 0; pr < vec_pairs; ++pr) {
      const uint8_t* p0 = row + size_t(starts[2 * pr]) * 3;
      const uint8_t* p1 = row + size_t(starts[2 * pr + 1]) * 3;
      const int32_t* k = ws.pair_coeffs.data() + size_t(pr) * ksize * 8;
      __m256i acc = half;
      for (int t = 0; t < ksize; ++t) {
        int32_t a, b;
        std::memcpy(&a, p0 + 3 * t, 4);
        std::memcpy(&b, p1 + 3 * t, 4);
        const __m256i px =
            _mm256_cvtepu8_epi32(_mm_unpacklo_epi32(_mm_cvtsi32_si128(a), _mm_cvtsi32_si128(b)));
        const __m256i kk = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + t * 8));
        acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(px, kk));
      }
      acc = _mm256_srai_epi32(acc, kPrecisionBits);
      const __m128i w =
          _mm_packs_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
      // Eight bytes stored, six meant: the two after them are the next
      // pair's (or pixel's, or the next row's), written later; `out` has 8
      // bytes of slack after the last row (RunResample).
      _mm_storel_epi64(reinterpret_cast<__m128i*>(o + size_t(pr) * 6),
                       _mm_shuffle_epi8(_mm_packus_epi16(w, w), pick));
    }
    for (int x = 2 * vec_pairs; x < out_w; ++x) {
      const uint8_t* p = row + size_t(bounds[2 * x]) * 3;
      const int n = bounds[2 * x + 1];
      const int32_t* k = coeffs + size_t(x) * ksize;
      int32_t s[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1),
                      1 << (kPrecisionBits - 1)};
      for (int t = 0; t < n; ++t) {
        for (int c = 0; c < 3; ++c) s[c] += p[t * 3 + c] * k[t];
      }
      for (int c = 0; c < 3; ++c) o[x * 3 + c] = Clip8(s[c]);
    }
  }
}

}  // namespace

ResamplePlan PrepareResample(const ResampleSpec& spec, ImageWorkspace::State& ws) {
  ResamplePlan p;
  const int win_w = static_cast<int>(spec.win_width);
  const int win_h = static_cast<int>(spec.win_height);
  p.need_h = spec.out_width != spec.image_width || spec.box[0] != 0 ||
             spec.box[2] != static_cast<float>(spec.out_width);
  p.need_v = spec.out_height != spec.image_height || spec.box[1] != 0 ||
             spec.box[3] != static_cast<float>(spec.out_height);
  if (p.need_v) {
    p.ksize_v = Coefficients(static_cast<int>(spec.image_height), spec.box[1], spec.box[3],
                             static_cast<int>(spec.out_height), static_cast<int>(spec.win_top),
                             win_h, spec.filter, ws, ws.bounds_y, ws.coeffs_y);
    // Taps are monotonic in the output row: the first and last rows bound them.
    p.y0 = ws.bounds_y[0];
    p.y1 = ws.bounds_y[2 * (win_h - 1)] + ws.bounds_y[2 * (win_h - 1) + 1];
  } else {
    p.y0 = spec.win_top;
    p.y1 = spec.win_top + spec.win_height;
  }
  if (p.need_h) {
    p.ksize_h = Coefficients(static_cast<int>(spec.image_width), spec.box[0], spec.box[2],
                             static_cast<int>(spec.out_width), static_cast<int>(spec.win_left),
                             win_w, spec.filter, ws, ws.bounds_x, ws.coeffs_x);
    p.x0 = ws.bounds_x[0];
    p.x1 = ws.bounds_x[2 * (win_w - 1)] + ws.bounds_x[2 * (win_w - 1) + 1];
  } else {
    p.x0 = spec.win_left;
    p.x1 = spec.win_left + spec.win_width;
  }
  return p;
}

void RunResample(const PixelView& view, int64_t view_x, int64_t view_y, const ResampleSpec& spec,
                 const ResamplePlan& p, ImageWorkspace::State& ws, uint8_t* out) {
  const int c = static_cast<int>(view.channels);
  const int win_w = static_cast<int>(spec.win_width);
  const int win_h = static_cast<int>(spec.win_height);
  const int row_bytes = win_w * c;
  const int y_count = static_cast<int>(p.y1 - p.y0);
  // The rows the window reads, from the view's first row.
  const uint8_t* rows = view.data + size_t(int64_t{p.y0} - view_y) * view.stride;
  if (p.need_v) {
    for (int y = 0; y < win_h; ++y) ws.bounds_y[2 * y] -= static_cast<int32_t>(p.y0);
  }

  // Horizontal pass over those rows, into a dense buffer; or, when none is
  // needed, the window's columns of the view itself.
  const uint8_t* mid = rows + size_t(int64_t{p.x0} - view_x) * c;
  size_t mid_stride = view.stride;
  if (p.need_h) {
    for (int x = 0; x < win_w; ++x) ws.bounds_x[2 * x] -= static_cast<int32_t>(view_x);
    // 8 bytes of slack: HorizontalPass3PairsAvx2 stores 8 bytes for 6.
    if (ws.horizontal.size() < size_t(y_count) * row_bytes + 8) {
      ws.horizontal.resize(size_t(y_count) * row_bytes + 8);
    }
    const int32_t* b = ws.bounds_x.data();
    const int32_t* k = ws.coeffs_x.data();
    uint8_t* h = ws.horizontal.data();
    // view.width from the view's first column: what each row holds.
    if (SimdEnabled() && c == 3 && static_cast<int64_t>(view.width) >= p.ksize_h + 1) {
      HorizontalPass3PairsAvx2(rows, view.stride, y_count, static_cast<int>(view.width), b, k,
                               p.ksize_h, win_w, h, ws);
    } else if (SimdEnabled() && c == 3) {
      HorizontalPassAvx2<3>(rows, view.stride, y_count, b, k, p.ksize_h, win_w, h, ws.block);
    } else if (SimdEnabled()) {
      HorizontalPassAvx2<1>(rows, view.stride, y_count, b, k, p.ksize_h, win_w, h, ws.block);
    } else if (c == 3) {
      HorizontalPass<3>(rows, view.stride, y_count, b, k, p.ksize_h, win_w, h);
    } else {
      HorizontalPass<1>(rows, view.stride, y_count, b, k, p.ksize_h, win_w, h);
    }
    mid = ws.horizontal.data();
    mid_stride = size_t(row_bytes);
  }

  if (p.need_v) {
    if (SimdEnabled()) {
      VerticalPassAvx2(mid, mid_stride, win_h, ws.bounds_y.data(), ws.coeffs_y.data(), p.ksize_v,
                       row_bytes, out);
      return;
    }
    if (ws.accumulator.size() < size_t(row_bytes)) ws.accumulator.resize(row_bytes);
    VerticalPass(mid, mid_stride, win_h, ws.bounds_y.data(), ws.coeffs_y.data(), p.ksize_v,
                 row_bytes, out, ws.accumulator.data());
  } else {
    for (int y = 0; y < win_h; ++y) {
      std::memcpy(out + size_t(y) * row_bytes, mid + size_t(y) * mid_stride, row_bytes);
    }
  }
}

}  // namespace dlfs::decode_internal
