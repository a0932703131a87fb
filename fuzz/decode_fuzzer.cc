// Fuzzes the image decode pipeline (dlfs/decode.h) through its public API:
// ProbeImage, ImagePipeline (Plan, Run) and DecodeImage. The first
// kHeaderBytes bytes choose the options; the rest is the image (JPEG, PNG or
// raw pixels).
//   byte 0: bit 0 RandomResizedCrop (else Resize + CenterCrop), bit 1 flip,
//           bit 2 float32 (else uint8), bit 3 NCHW (else NHWC), bit 4 DCT
//           scaling, bits 5-6 colour (auto, rgb, gray, auto), bit 7 a raw
//           shape is given
//   byte 1: output size 1 + b % 48
//   byte 2: Resize: below 128 none (= size), else size + (b & 63)
//   byte 3: bits 0-3 max_pixels = 16 << min(b & 15, 14); bits 4-5 format
//           (auto, auto, jpeg, png); bit 6 raw forced; bit 7 raw RGB
//   byte 4: raw height 1 + b (the width follows from the image's length)
//   bytes 5-7: seed, epoch, sample index
//   byte 8: RandomResizedCrop scale_min (1 + (b & 63)) / 64, bits 6-7 the
//           ratio range (torchvision's, 1..1, 0.1..10, 0.001..1000)
//   byte 9: DecodeImage's scale 1 << (b & 3) and channels (0, 1, 3)[(b >> 2)
//           % 3]; bits 4-5 float32's mean/std (none, one value, per channel)
//
// Invariants (a failure aborts: the input is kept as a crash):
// - errors are InvalidArgument with a message, never exceptions or aborts;
// - ProbeImage's info is consistent: a known format, 1 or 3 channels, at
//   least one and at most max_pixels pixels; Run succeeds only where the
//   probe does;
// - Plan (also for headers made up from the input bytes, up to the default
//   pixel limit and the largest resize) puts the box inside the image and
//   the window inside the resized image;
// - a successful Run's output has exactly size x size x channels elements
//   of the dtype and the shape of the layout, and equals what a uint8 NHWC
//   pipeline run on a fresh workspace gives, transposed and normalised
//   (so results depend on neither layout nor the workspace's history);
// - DecodeImage gives ceil(w / scale) x ceil(h / scale) pixels (JPEG; PNG
//   and raw at full size) of the requested channels;
// - no single allocation exceeds a bound set by the image's dimensions and
//   the output size (what the pixel limit promises), measured with the
//   sanitizer's malloc hook.
#include <sanitizer/allocator_interface.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "dlfs/decode.h"
#include "fuzz_util.h"

using namespace dlfs;

namespace {

constexpr size_t kHeaderBytes = 10;

// The largest single allocation while `armed`.
std::atomic<bool> armed{false};
std::atomic<size_t> largest{0};

void MallocHook(const volatile void*, size_t size) {
  if (!armed.load(std::memory_order_relaxed)) return;
  size_t cur = largest.load(std::memory_order_relaxed);
  while (size > cur && !largest.compare_exchange_weak(cur, size, std::memory_order_relaxed)) {
  }
}
void FreeHook(const volatile void*) {}

void CheckError(const Status& s, const char* where) {
  if (s.ok()) return;
  if (s.code() != StatusCode::kInvalidArgument) {
    std::fprintf(stderr, "%s: %s\n", where, s.ToString().c_str());
    fuzz::Broken("a decode error that is not InvalidArgument");
  }
  if (s.message().empty()) fuzz::Broken("an error without a message");
}

// Plan's promises for any header: the box inside the image, the window
// inside the resized image, a valid DCT scale; or, only when Resize's long
// side would exceed 2^31 - 1, a resized side of 0 (which Execute refuses).
// Returns whether the plan is executable.
bool CheckPlan(const SamplePlan& p, const ImageInfo& info, const TransformOptions& t) {
  const uint32_t size = t.size;
  if (p.image_width != info.width || p.image_height != info.height) {
    fuzz::Broken("plan of another image size");
  }
  if (p.resized_width == 0 || p.resized_height == 0) {
    const double target = t.resize != 0 ? t.resize : t.size;
    const double ratio =
        static_cast<double>(std::max(info.width, info.height)) / std::min(info.width, info.height);
    if (t.crop != CropMode::kCenter || target * ratio <= 0x7fffffff) {
      fuzz::Broken("plan with a resized side of 0 for a resizable image");
    }
    return false;
  }
  if (p.box.width == 0 || p.box.height == 0 || uint64_t{p.box.left} + p.box.width > info.width ||
      uint64_t{p.box.top} + p.box.height > info.height) {
    fuzz::Broken("plan's crop box outside the image");
  }
  if (uint64_t{p.window_left} + size > p.resized_width ||
      uint64_t{p.window_top} + size > p.resized_height) {
    std::fprintf(stderr, "image %ux%u resized %ux%u window (%u, %u) size %u\n", info.width,
                 info.height, p.resized_width, p.resized_height, p.window_left, p.window_top, size);
    fuzz::Broken("plan's output window outside the resized image");
  }
  if (p.scale_denom != 1 && p.scale_denom != 2 && p.scale_denom != 4 && p.scale_denom != 8) {
    fuzz::Broken("plan's DCT scale not 1, 2, 4 or 8");
  }
  return true;
}

uint32_t Scaled(uint32_t dim, uint32_t d) { return (dim + d - 1) / d; }

// The largest allocation decoding and transforming an image of `info` to
// `size` may make: the decoder's buffers (at most 16 bytes a pixel, with
// the dimensions rounded up to JPEG's largest MCU), the resampler's
// horizontal pass (rows x size x 3) and coefficients, the output (float32,
// 3 channels) and 1 MiB of codec state.
size_t AllocationBound(const ImageInfo& info, uint32_t size) {
  const uint64_t w = info.width + 32ull, h = info.height + 32ull;
  return static_cast<size_t>(16 * w * h + 16ull * size * size * 3 + 8 * h * size * 3 +
                             64 * (w + h) + (1u << 20));
}

const float kMeans[3] = {0.485f, 0.456f, 0.406f};
const float kStds[3] = {0.229f, 0.224f, 0.225f};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  __sanitizer_install_malloc_and_free_hooks(MallocHook, FreeHook);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) try {
  if (size < kHeaderBytes) return 0;
  static ImageWorkspace ws;  // reused across inputs, as a decode thread's
  const uint8_t* h = data;
  const std::span<const std::byte> image(reinterpret_cast<const std::byte*>(data + kHeaderBytes),
                                         size - kHeaderBytes);

  ImageOptions o;
  DecodeOptions& d = o.decode;
  TransformOptions& t = o.transform;
  OutputOptions& out = o.output;
  t.crop = h[0] & 1 ? CropMode::kRandomResized : CropMode::kCenter;
  t.flip = (h[0] & 2) != 0;
  out.dtype = h[0] & 4 ? DType::kFloat32 : DType::kUint8;
  out.layout = h[0] & 8 ? OutputLayout::kNCHW : OutputLayout::kNHWC;
  d.dct_scaling = (h[0] & 16) != 0;
  const ColorMode colors[4] = {ColorMode::kAuto, ColorMode::kRgb, ColorMode::kGray,
                               ColorMode::kAuto};
  d.color = colors[(h[0] >> 5) & 3];
  t.size = 1 + h[1] % 48;
  t.resize = h[2] < 128 ? 0 : t.size + (h[2] & 63);
  d.max_pixels = uint64_t{16} << std::min(h[3] & 15, 14);
  const ImageFormat formats[4] = {ImageFormat::kAuto, ImageFormat::kAuto, ImageFormat::kJpeg,
                                  ImageFormat::kPng};
  d.format = h[3] & 64 ? ImageFormat::kRaw : formats[(h[3] >> 4) & 3];
  if (h[0] & 128) {
    d.raw.channels = h[3] & 128 ? 3 : 1;
    d.raw.height = 1u + h[4];
    d.raw.width = static_cast<uint32_t>(
        std::min<size_t>(image.size() / (d.raw.height * d.raw.channels), 1u << 16));
    if (d.raw.width == 0) d.raw.width = 1;
  }
  t.seed = h[5];
  const uint64_t epoch = h[6], index = h[7];
  t.random_resized.scale_min = (1 + (h[8] & 63)) / 64.0;
  const double ratios[4][2] = {{3.0 / 4.0, 4.0 / 3.0}, {1, 1}, {0.1, 10}, {0.001, 1000}};
  t.random_resized.ratio_min = ratios[h[8] >> 6][0];
  t.random_resized.ratio_max = ratios[h[8] >> 6][1];
  const uint32_t scale_denom = 1u << (h[9] & 3);
  const uint32_t channel_choices[3] = {0, 1, 3};
  const uint32_t channels_asked = channel_choices[(h[9] >> 2) % 3];
  const int norm = (h[9] >> 4) & 3;
  if (out.dtype == DType::kFloat32 && norm != 0) {
    const size_t n = norm == 1 || d.color == ColorMode::kGray ? 1 : 3;
    out.mean.assign(kMeans, kMeans + n);
    out.std.assign(kStds, kStds + n);
  }

  auto created = ImagePipeline::Create(o);
  if (!created.ok()) {
    // Only a forced raw format without a shape is unusable here.
    if (!(d.format == ImageFormat::kRaw && d.raw.empty())) {
      std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
      fuzz::Broken("options the harness thinks valid are refused");
    }
    return 0;
  }
  const ImagePipeline& pipeline = *created;

  // Plan on a header made up from the input, up to the default pixel limit
  // and the largest resize Create accepts: arithmetic only, no decode.
  if (image.size() >= 8) {
    uint32_t w = 0, hh = 0;
    std::memcpy(&w, image.data(), 4);
    std::memcpy(&hh, image.data() + 4, 4);
    w = 1 + w % (1u << 26);
    hh = 1 + hh % std::max<uint32_t>(1, (1u << 26) / w);
    ImageOptions big = o;
    big.decode.max_pixels = uint64_t{1} << 26;
    big.transform.resize = t.crop == CropMode::kCenter && (h[2] & 64) ? 65536 : t.resize;
    big.transform.size = h[2] & 32 ? 16384 : t.size;
    if (big.transform.resize != 0 && big.transform.resize < big.transform.size) {
      big.transform.resize = big.transform.size;
    }
    auto bp = ImagePipeline::Create(big);
    if (bp.ok()) {
      const ImageInfo info{h[2] & 16 ? ImageFormat::kJpeg : ImageFormat::kPng, w, hh, 3};
      const SamplePlan plan = bp->Plan(info, epoch, index);
      if (!CheckPlan(plan, info, big.transform)) {
        // Refused before anything is decoded or written.
        const Status s = bp->Execute(ws, image, plan, 3, nullptr);
        if (s.ok() || s.message().find("cannot be resized") == std::string::npos) {
          fuzz::Broken("Execute does not refuse a plan of a resized side of 0");
        }
      }
    }
  }

  largest.store(0);
  armed.store(true);
  auto probed = ProbeImage(image, d);
  std::vector<int64_t> shape;
  auto run = pipeline.Run(ws, image, epoch, index, &shape);
  auto decoded = DecodeImage(ws, image, d, scale_denom, channels_asked);
  armed.store(false);

  CheckError(probed.status(), "ProbeImage");
  CheckError(run.status(), "Run");
  CheckError(decoded.status(), "DecodeImage");
  if (!probed.ok()) {
    if (run.ok() || decoded.ok()) fuzz::Broken("decoded an image whose probe fails");
    if (largest.load() > (1u << 20) + 4 * image.size()) {
      std::fprintf(stderr, "largest allocation %zu bytes for a %zu-byte input\n", largest.load(),
                   image.size());
      fuzz::Broken("a refused image allocated more than its size allows");
    }
    return 0;
  }
  const ImageInfo info = *probed;
  if (info.format == ImageFormat::kAuto || (info.channels != 1 && info.channels != 3) ||
      info.width == 0 || info.height == 0 || uint64_t{info.width} * info.height > d.max_pixels) {
    fuzz::Broken("ProbeImage's info breaks its contract");
  }
  if (largest.load() > AllocationBound(info, t.size)) {
    std::fprintf(stderr, "largest allocation %zu bytes for a %ux%u image, size %u\n",
                 largest.load(), info.width, info.height, t.size);
    fuzz::Broken("an allocation above what the image's dimensions allow");
  }
  if (!CheckPlan(pipeline.Plan(info, epoch, index), info, t)) return 0;

  // A plan for an image of another size (the Python binding lets users
  // edit plans) is refused, never read past the decoded pixels.
  {
    const uint32_t pw = 1 + h[4] % 64, ph = 1 + h[5] % 64;
    const ImageInfo other{info.format, pw, ph, info.channels};
    const uint32_t c = pipeline.OutputChannels(info);
    std::vector<std::byte> buf(pipeline.OutputElements(c) * DTypeSize(out.dtype));
    const Status s = pipeline.Execute(ws, image, pipeline.Plan(other, epoch, index), c, buf.data());
    CheckError(s, "Execute of another size's plan");
    if (s.ok() && (pw != info.width || ph != info.height)) {
      fuzz::Broken("Execute accepted the plan of an image of another size");
    }
  }

  if (decoded.ok()) {
    const Image& img = *decoded;
    const uint32_t s = info.format == ImageFormat::kJpeg ? scale_denom : 1;
    const uint32_t want_c = channels_asked != 0           ? channels_asked
                            : d.color == ColorMode::kRgb  ? 3
                            : d.color == ColorMode::kGray ? 1
                                                          : info.channels;
    if (img.width != Scaled(info.width, s) || img.height != Scaled(info.height, s) ||
        img.channels != want_c ||
        img.pixels.size() != size_t{img.width} * img.height * img.channels) {
      fuzz::Broken("DecodeImage's image has the wrong dimensions");
    }
  }

  if (!run.ok()) return 0;
  const uint32_t c = pipeline.OutputChannels(info);
  if (c != 1 && c != 3) fuzz::Broken("output channels not 1 or 3");
  const size_t elements = size_t{t.size} * t.size * c;
  if (run->size() != elements * DTypeSize(out.dtype)) fuzz::Broken("output of the wrong size");
  const int64_t sz = t.size;
  const std::vector<int64_t> want_shape = out.layout == OutputLayout::kNCHW
                                              ? std::vector<int64_t>{c, sz, sz}
                                              : std::vector<int64_t>{sz, sz, c};
  if (shape != want_shape) fuzz::Broken("output shape does not match the layout");

  // The same sample through a uint8 NHWC pipeline on a fresh workspace: the
  // output is its transposition and normalisation, bit for bit.
  ImageOptions plain = o;
  plain.output = {};
  auto reference_pipeline = ImagePipeline::Create(plain);
  if (!reference_pipeline.ok()) fuzz::Broken("the uint8 NHWC variant is refused");
  ImageWorkspace fresh;
  auto reference = reference_pipeline->Run(fresh, image, epoch, index);
  if (!reference.ok()) {
    std::fprintf(stderr, "%s\n", reference.status().ToString().c_str());
    fuzz::Broken("a sample decodes in one layout and dtype and not in another");
  }
  if (reference->size() != elements) fuzz::Broken("uint8 output of the wrong size");
  const auto* ref = reinterpret_cast<const uint8_t*>(reference->data());
  for (uint32_t y = 0; y < t.size; ++y) {
    for (uint32_t x = 0; x < t.size; ++x) {
      for (uint32_t k = 0; k < c; ++k) {
        const uint8_t v = ref[(size_t{y} * t.size + x) * c + k];
        const size_t at = out.layout == OutputLayout::kNCHW ? (size_t{k} * t.size + y) * t.size + x
                                                            : (size_t{y} * t.size + x) * c + k;
        if (out.dtype == DType::kUint8) {
          if (reinterpret_cast<const uint8_t*>(run->data())[at] != v) {
            fuzz::Broken("uint8 output differs from the reference (layout or workspace)");
          }
        } else {
          const float mean = out.mean.empty() ? 0.f : out.mean[out.mean.size() == 1 ? 0 : k];
          const float sd = out.std.empty() ? 1.f : out.std[out.std.size() == 1 ? 0 : k];
          const float want = (static_cast<float>(v) / 255.0f - mean) / sd;
          float got;
          std::memcpy(&got, run->data() + at * 4, 4);
          if (std::memcmp(&got, &want, 4) != 0) {
            fuzz::Broken("float32 output is not the reference's ToTensor + Normalize");
          }
        }
      }
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "exception: %s\n", e.what());
  fuzz::Broken("an exception escaped the decode API");
} catch (...) {
  fuzz::Broken("an exception escaped the decode API");
}
