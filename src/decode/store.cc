#include "decode/store.h"

#include <immintrin.h>

#include <array>
#include <cstring>

namespace dlfs::decode_internal {

namespace {

bool simd_enabled = __builtin_cpu_supports("avx2");

// ---- the reference: a table lookup per value --------------------------------

// One loop per case, so each inner loop is a plain walk the compiler can
// unroll.
template <typename T, typename Convert>
void StoreAs(const uint8_t* win, uint32_t size, uint32_t c, bool flip, bool chw, T* o,
             Convert convert) {
  const size_t plane = size_t{size} * size;
  for (uint32_t y = 0; y < size; ++y) {
    const uint8_t* row = win + size_t{y} * size * c;
    if (chw) {
      for (uint32_t k = 0; k < c; ++k) {
        T* dst = o + k * plane + size_t{y} * size;
        if (flip) {
          for (uint32_t x = 0; x < size; ++x) dst[x] = convert(k, row[(size - 1 - x) * c + k]);
        } else {
          for (uint32_t x = 0; x < size; ++x) dst[x] = convert(k, row[x * c + k]);
        }
      }
    } else {
      T* dst = o + size_t{y} * size * c;
      for (uint32_t x = 0; x < size; ++x) {
        const uint8_t* px = row + size_t{flip ? size - 1 - x : x} * c;
        for (uint32_t k = 0; k < c; ++k) dst[x * c + k] = convert(k, px[k]);
      }
    }
  }
}

// ---- AVX2: planar output, 16 pixels at a time ---------------------------------
//
// Three 16-byte loads hold 16 RGB pixels; pshufb masks pick each channel's
// 16 bytes (in mirrored order for a flip) straight into the output planes.
// float32 values are computed, not looked up: x / 255.0f, minus mean,
// divided by std, each a correctly rounded float32 operation as in the
// table (ImagePipeline's constructor), so the floats are the table's, bit
// for bit; 8 divisions at a time beat 8 dependent table loads.

// kShuffle[flip][k][r]: bytes of source register r that go to channel k.
using Masks = std::array<std::array<std::array<std::array<int8_t, 16>, 3>, 3>, 2>;
constexpr Masks MakeMasks() {
  Masks m{};
  for (int f = 0; f < 2; ++f) {
    for (int k = 0; k < 3; ++k) {
      for (int r = 0; r < 3; ++r) {
        for (int i = 0; i < 16; ++i) {
          const int offset = 3 * (f ? 15 - i : i) + k;
          m[f][k][r][i] = offset / 16 == r ? static_cast<int8_t>(offset % 16) : int8_t{-128};
        }
      }
    }
  }
  return m;
}
constexpr Masks kShuffle = MakeMasks();

struct FloatParams {
  float mean[3];
  float std[3];
};

__attribute__((target("avx2"))) inline void ConvertStore16(__m128i v, __m256 mean, __m256 std,
                                                           float* dst) {
  const __m256 k255 = _mm256_set1_ps(255.0f);
  const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
  const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)));
  _mm256_storeu_ps(dst, _mm256_div_ps(_mm256_sub_ps(_mm256_div_ps(lo, k255), mean), std));
  _mm256_storeu_ps(dst + 8, _mm256_div_ps(_mm256_sub_ps(_mm256_div_ps(hi, k255), mean), std));
}

// c == 3, CHW; `fo` (float32) or `bo` (uint8) is the output.
__attribute__((target("avx2"))) void StorePlanar3Avx2(const uint8_t* win, uint32_t size, bool flip,
                                                      const FloatParams& fp, const float* lut,
                                                      float* fo, uint8_t* bo) {
  const size_t plane = size_t{size} * size;
  __m128i masks[3][3];
  for (int k = 0; k < 3; ++k) {
    for (int r = 0; r < 3; ++r) {
      masks[k][r] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kShuffle[flip][k][r].data()));
    }
  }
  __m256 mean[3], std[3];
  for (int k = 0; k < 3; ++k) {
    mean[k] = _mm256_set1_ps(fp.mean[k]);
    std[k] = _mm256_set1_ps(fp.std[k]);
  }
  const uint32_t vec_end = size / 16 * 16;
  for (uint32_t y = 0; y < size; ++y) {
    const uint8_t* row = win + size_t{y} * size * 3;
    const size_t o = size_t{y} * size;
    for (uint32_t x = 0; x < vec_end; x += 16) {
      const uint8_t* s = row + size_t{flip ? size - x - 16 : x} * 3;
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
      for (int k = 0; k < 3; ++k) {
        const __m128i v = _mm_or_si128(
            _mm_or_si128(_mm_shuffle_epi8(a, masks[k][0]), _mm_shuffle_epi8(b, masks[k][1])),
            _mm_shuffle_epi8(d, masks[k][2]));
        if (fo != nullptr) {
          ConvertStore16(v, mean[k], std[k], fo + k * plane + o + x);
        } else {
          _mm_storeu_si128(reinterpret_cast<__m128i*>(bo + k * plane + o + x), v);
        }
      }
    }
    for (uint32_t x = vec_end; x < size; ++x) {  // the last size % 16 pixels
      const uint8_t* px = row + size_t{flip ? size - 1 - x : x} * 3;
      for (uint32_t k = 0; k < 3; ++k) {
        if (fo != nullptr) {
          fo[k * plane + o + x] = lut[k * 256 + px[k]];
        } else {
          bo[k * plane + o + x] = px[k];
        }
      }
    }
  }
}

// c == 1 (either layout), float32: the row reversed for a flip, then converted.
__attribute__((target("avx2"))) void StoreGrayFloatAvx2(const uint8_t* win, uint32_t size,
                                                        bool flip, const FloatParams& fp,
                                                        const float* lut, float* fo) {
  static constexpr int8_t kReverse[16] = {15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  const __m128i reverse = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kReverse));
  const __m256 mean = _mm256_set1_ps(fp.mean[0]), std = _mm256_set1_ps(fp.std[0]);
  const uint32_t vec_end = size / 16 * 16;
  for (uint32_t y = 0; y < size; ++y) {
    const uint8_t* row = win + size_t{y} * size;
    float* dst = fo + size_t{y} * size;
    for (uint32_t x = 0; x < vec_end; x += 16) {
      __m128i v;
      if (flip) {
        v = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + size - x - 16)),
                             reverse);
      } else {
        v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + x));
      }
      ConvertStore16(v, mean, std, dst + x);
    }
    for (uint32_t x = vec_end; x < size; ++x) dst[x] = lut[row[flip ? size - 1 - x : x]];
  }
}

FloatParams ParamsOf(const OutputOptions& out) {
  FloatParams p;
  for (int c = 0; c < 3; ++c) {
    // As ImagePipeline's table: one value for all channels, or one each.
    p.mean[c] = out.mean.empty() ? 0.f : out.mean.size() == 1 ? out.mean[0] : out.mean[c];
    p.std[c] = out.std.empty() ? 1.f : out.std.size() == 1 ? out.std[0] : out.std[c];
  }
  return p;
}

}  // namespace

bool SimdEnabled() { return simd_enabled; }

void SetSimdForTesting(bool enabled) { simd_enabled = enabled && __builtin_cpu_supports("avx2"); }

void StoreWindowReference(const uint8_t* win, uint32_t size, uint32_t c, bool flip,
                          const OutputOptions& out, const float* lut, void* dst) {
  const bool chw = out.layout == OutputLayout::kNCHW;
  if (out.dtype == DType::kUint8) {
    StoreAs(win, size, c, flip, chw, static_cast<uint8_t*>(dst),
            [](uint32_t, uint8_t v) { return v; });
    return;
  }
  StoreAs(win, size, c, flip, chw, static_cast<float*>(dst),
          [lut](uint32_t k, uint8_t v) { return lut[k * 256 + v]; });
}

void StoreWindow(const uint8_t* win, uint32_t size, uint32_t c, bool flip, const OutputOptions& out,
                 const float* lut, void* dst) {
  const bool chw = out.layout == OutputLayout::kNCHW;
  const bool f32 = out.dtype == DType::kFloat32;
  if (!f32 && (!chw || c == 1) && !flip) {
    std::memcpy(dst, win, size_t{size} * size * c);
    return;
  }
  if (simd_enabled && c == 3 && chw) {
    StorePlanar3Avx2(win, size, flip, ParamsOf(out), lut, f32 ? static_cast<float*>(dst) : nullptr,
                     f32 ? nullptr : static_cast<uint8_t*>(dst));
    return;
  }
  if (simd_enabled && c == 1 && f32) {
    StoreGrayFloatAvx2(win, size, flip, ParamsOf(out), lut, static_cast<float*>(dst));
    return;
  }
  StoreWindowReference(win, size, c, flip, out, lut, dst);
}

}  // namespace dlfs::decode_internal
