#include "decode/resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dlfs::decode_internal {

namespace {

// PIL: 32 bits minus 8 for the pixel and 2 for overshoot of the sum.
constexpr int kPrecisionBits = 32 - 8 - 2;

inline uint8_t Clip8(int32_t v) {
  v >>= kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

double Bilinear(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Pillow's precompute_coeffs + normalize_coeffs_8bpc for outputs
// [first, first + count) of a resize of [in0, in1) (of an input in_size
// long) to out_size. bounds gets (first tap, tap count) per output; coeffs
// ksize fixed-point weights per output. Returns ksize.
int Coefficients(int in_size, float in0, float in1, int out_size, int first, int count,
                 ImageWorkspace::State& ws, std::vector<int32_t>& bounds,
                 std::vector<int32_t>& coeffs) {
  const double scale = static_cast<double>(in1 - in0) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * filterscale;  // bilinear: support 1
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
      w[x] = Bilinear((x + xmin - center + 0.5) * ss);
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

}  // namespace

void Resample(const PixelView& in, const ResampleSpec& spec, ImageWorkspace::State& ws,
              uint8_t* out) {
  const int c = static_cast<int>(in.channels);
  const int win_w = static_cast<int>(spec.win_width);
  const int win_h = static_cast<int>(spec.win_height);
  const int row_bytes = win_w * c;
  // PIL skips a pass whose output would equal its input.
  const bool need_h = spec.out_width != in.width || spec.box[0] != 0 ||
                      spec.box[2] != static_cast<float>(spec.out_width);
  const bool need_v = spec.out_height != in.height || spec.box[1] != 0 ||
                      spec.box[3] != static_cast<float>(spec.out_height);

  // Input rows the window needs, and the vertical weights over them.
  int y_first = static_cast<int>(spec.win_top), y_count = win_h, ksize_v = 0;
  if (need_v) {
    ksize_v = Coefficients(static_cast<int>(in.height), spec.box[1], spec.box[3],
                           static_cast<int>(spec.out_height), static_cast<int>(spec.win_top), win_h,
                           ws, ws.bounds_y, ws.coeffs_y);
    y_first = ws.bounds_y[0];
    y_count = ws.bounds_y[2 * (win_h - 1)] + ws.bounds_y[2 * (win_h - 1) + 1] - y_first;
    for (int y = 0; y < win_h; ++y) ws.bounds_y[2 * y] -= y_first;
  }

  // Horizontal pass over those rows, into a dense buffer; or, when none is
  // needed, the window's columns of the input itself.
  const uint8_t* mid = in.data + size_t(y_first) * in.stride + size_t(spec.win_left) * c;
  size_t mid_stride = in.stride;
  if (need_h) {
    const int ksize_h = Coefficients(
        static_cast<int>(in.width), spec.box[0], spec.box[2], static_cast<int>(spec.out_width),
        static_cast<int>(spec.win_left), win_w, ws, ws.bounds_x, ws.coeffs_x);
    if (ws.horizontal.size() < size_t(y_count) * row_bytes) {
      ws.horizontal.resize(size_t(y_count) * row_bytes);
    }
    const uint8_t* rows = in.data + size_t(y_first) * in.stride;
    if (c == 1) {
      HorizontalPass<1>(rows, in.stride, y_count, ws.bounds_x.data(), ws.coeffs_x.data(), ksize_h,
                        win_w, ws.horizontal.data());
    } else {
      HorizontalPass<3>(rows, in.stride, y_count, ws.bounds_x.data(), ws.coeffs_x.data(), ksize_h,
                        win_w, ws.horizontal.data());
    }
    mid = ws.horizontal.data();
    mid_stride = size_t(row_bytes);
  }

  if (need_v) {
    if (ws.accumulator.size() < size_t(row_bytes)) ws.accumulator.resize(row_bytes);
    VerticalPass(mid, mid_stride, win_h, ws.bounds_y.data(), ws.coeffs_y.data(), ksize_v, row_bytes,
                 out, ws.accumulator.data());
  } else {
    for (int y = 0; y < win_h; ++y) {
      std::memcpy(out + size_t(y) * row_bytes, mid + size_t(y) * mid_stride, row_bytes);
    }
  }
}

}  // namespace dlfs::decode_internal
