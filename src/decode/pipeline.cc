// ImagePipeline: the plan of one sample (torchvision's geometry and the
// specified random draws), its execution (decode, resample a window, store
// as the output dtype and layout), and the public one-image helpers.
#include <spng.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/xoshiro.h"
#include "decode/codecs.h"
#include "decode/resample.h"
#include "decode/store.h"
#include "dlfs/decode.h"

namespace dlfs {

using decode_internal::PixelView;

namespace {

// ---- the specified random stream (see RandomChoices in dlfs/decode.h) ------

uint64_t SplitMix64(uint64_t x) { return SplitMixOutput(x + kSplitMixGamma); }

// xoshiro256** (common/xoshiro.h) seeded by four SplitMix64 steps from
// (seed, epoch, index), as RandomChoices specifies.
Xoshiro256ss SampleRng(uint64_t seed, uint64_t epoch, uint64_t index) {
  uint64_t h = SplitMix64(seed ^ 0x6a09e667f3bcc909ull);
  h = SplitMix64(h ^ epoch);
  h = SplitMix64(h ^ index);
  uint64_t state[4];
  for (uint64_t& w : state) {
    w = SplitMix64(h);
    h += kSplitMixGamma;
  }
  return Xoshiro256ss(state);
}

// Python's round(): to nearest, ties to even (independent of the FPU mode).
int64_t RoundHalfEven(double x) {
  double r = std::floor(x + 0.5);
  if (r - x == 0.5 && std::fmod(r, 2.0) != 0.0) r -= 1.0;
  return static_cast<int64_t>(r);
}

// PIL draft(): the largest of 8, 4, 2, 1 not above min(w // tw, h // th).
uint32_t DraftDenom(uint32_t w, uint32_t h, uint32_t tw, uint32_t th) {
  const uint32_t scale = std::min(w / tw, h / th);
  for (uint32_t d : {8u, 4u, 2u}) {
    if (scale >= d) return d;
  }
  return 1;
}

Status Invalid(const std::string& what) { return Status::InvalidArgument(what); }

// The longest side a resized image may have: PIL's (and the resampler's)
// sizes are C ints. Resize(224) of a 1 x 20,000,000 image would be 224 x
// 4,480,000,000.
constexpr uint64_t kMaxResizedSide = 0x7fffffff;

}  // namespace

RandomChoices DrawRandomChoices(uint64_t seed, uint64_t epoch, uint64_t index, uint32_t width,
                                uint32_t height, const RandomResizedCropOptions& o) {
  Xoshiro256ss rng = SampleRng(seed, epoch, index);
  RandomChoices out;
  out.flip = (rng.Next() >> 63) != 0;
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(o.ratio_min), log_hi = std::log(o.ratio_max);
  for (uint32_t attempt = 0; attempt < o.attempts; ++attempt) {
    const double target_area = area * rng.Uniform(o.scale_min, o.scale_max);
    const double aspect = std::exp(rng.Uniform(log_lo, log_hi));
    const int64_t w = RoundHalfEven(std::sqrt(target_area * aspect));
    const int64_t h = RoundHalfEven(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      out.box.top = static_cast<uint32_t>(rng.Below(height - h + 1));
      out.box.left = static_cast<uint32_t>(rng.Below(width - w + 1));
      out.box.width = static_cast<uint32_t>(w);
      out.box.height = static_cast<uint32_t>(h);
      return out;
    }
  }
  // torchvision's fallback: the central crop of the nearest allowed ratio.
  const double in_ratio = static_cast<double>(width) / height;
  int64_t w = width, h = height;
  if (in_ratio < o.ratio_min) {
    h = RoundHalfEven(w / o.ratio_min);
  } else if (in_ratio > o.ratio_max) {
    w = RoundHalfEven(h * o.ratio_max);
  }
  out.box.width = static_cast<uint32_t>(std::clamp<int64_t>(w, 1, width));
  out.box.height = static_cast<uint32_t>(std::clamp<int64_t>(h, 1, height));
  out.box.top = (height - out.box.height) / 2;
  out.box.left = (width - out.box.width) / 2;
  return out;
}

ImagePipeline::ImagePipeline(const ImageOptions& options) : options_(options) {
  const OutputOptions& out = options_.output;
  if (out.dtype != DType::kFloat32) return;
  lut_.resize(3 * 256);
  for (int c = 0; c < 3; ++c) {
    const float mean = out.mean.empty() ? 0.f : out.mean.size() == 1 ? out.mean[0] : out.mean[c];
    const float std = out.std.empty() ? 1.f : out.std.size() == 1 ? out.std[0] : out.std[c];
    for (int v = 0; v < 256; ++v) {
      // torchvision: ToTensor's float(x).div(255), then Normalize's
      // sub_(mean).div_(std), each rounded to float32.
      const float x = static_cast<float>(v) / 255.0f;
      lut_[c * 256 + v] = (x - mean) / std;
    }
  }
}

Result<ImagePipeline> ImagePipeline::Create(const ImageOptions& o) {
  const TransformOptions& t = o.transform;
  if (t.size == 0) return Invalid("image size must be at least 1");
  if (t.size > 16384) return Invalid("image size " + std::to_string(t.size) + " above 16384");
  if (t.crop == CropMode::kCenter && t.resize != 0 && t.resize < t.size) {
    return Invalid("resize " + std::to_string(t.resize) + " is smaller than the crop size " +
                   std::to_string(t.size));
  }
  if (t.resize > 65536) return Invalid("resize " + std::to_string(t.resize) + " above 65536");
  const RandomResizedCropOptions& r = t.random_resized;
  if (!(r.scale_min > 0 && r.scale_min <= r.scale_max && r.scale_max <= 1)) {
    return Invalid("RandomResizedCrop scale must satisfy 0 < min <= max <= 1");
  }
  if (!(r.ratio_min > 0 && r.ratio_min <= r.ratio_max && std::isfinite(r.ratio_max))) {
    return Invalid("RandomResizedCrop ratio must satisfy 0 < min <= max");
  }
  const OutputOptions& out = o.output;
  if (out.dtype == DType::kUint8 && (!out.mean.empty() || !out.std.empty())) {
    return Invalid("mean and std need float32 output");
  }
  for (const std::vector<float>* v : {&out.mean, &out.std}) {
    if (v->size() > 3 || v->size() == 2) {
      return Invalid("mean and std take 1 value or one per channel (3), not " +
                     std::to_string(v->size()));
    }
  }
  for (float s : out.std) {
    if (!(s != 0 && std::isfinite(s))) return Invalid("std must be finite and non-zero");
  }
  if (o.decode.color == ColorMode::kGray && (out.mean.size() == 3 || out.std.size() == 3)) {
    return Invalid("gray output takes one mean and std value, not three");
  }
  const RawShape& raw = o.decode.raw;
  if (!raw.empty() && raw.channels != 1 && raw.channels != 3) {
    return Invalid("raw samples have 1 or 3 channels, not " + std::to_string(raw.channels));
  }
  if (o.decode.max_pixels == 0) return Invalid("max_pixels must be at least 1");
  return ImagePipeline(o);
}

uint32_t ImagePipeline::OutputChannels(const ImageInfo& info) const {
  switch (options_.decode.color) {
    case ColorMode::kRgb:
      return 3;
    case ColorMode::kGray:
      return 1;
    case ColorMode::kAuto:
      break;
  }
  return info.channels;
}

uint64_t ImagePipeline::OutputElements(uint32_t channels) const {
  return uint64_t{options_.transform.size} * options_.transform.size * channels;
}

SamplePlan ImagePipeline::Plan(const ImageInfo& info, uint64_t epoch, uint64_t index) const {
  const TransformOptions& t = options_.transform;
  SamplePlan p;
  p.format = info.format;
  p.image_width = info.width;
  p.image_height = info.height;
  const RandomChoices rc =
      DrawRandomChoices(t.seed, epoch, index, info.width, info.height, t.random_resized);
  p.flip = t.flip && rc.flip;
  if (t.crop == CropMode::kRandomResized) {
    p.box = rc.box;
    p.resized_width = p.resized_height = t.size;
  } else {
    // torchvision Resize(int): the shorter side becomes `resize`, the
    // longer int(resize * long / short); then CenterCrop(size) at
    // round((dim - size) / 2).
    p.box = {0, 0, info.height, info.width};
    const uint64_t target = t.resize != 0 ? t.resize : t.size;
    const bool portrait = info.width <= info.height;
    const uint64_t shorter = portrait ? info.width : info.height;
    const uint64_t longer = portrait ? info.height : info.width;
    const double long_side = static_cast<double>(target * longer) / static_cast<double>(shorter);
    // Too long to resize to (an extreme aspect ratio): 0, which Execute
    // refuses (casting it to uint32 could overflow, and did).
    const auto new_long =
        long_side <= kMaxResizedSide ? static_cast<uint32_t>(long_side) : uint32_t{0};
    p.resized_width = portrait ? static_cast<uint32_t>(target) : new_long;
    p.resized_height = portrait ? new_long : static_cast<uint32_t>(target);
    if (new_long != 0) {
      p.window_left = static_cast<uint32_t>(RoundHalfEven((p.resized_width - t.size) / 2.0));
      p.window_top = static_cast<uint32_t>(RoundHalfEven((p.resized_height - t.size) / 2.0));
    }
  }
  if (info.format == ImageFormat::kJpeg && options_.decode.dct_scaling && p.resized_width != 0 &&
      p.resized_height != 0) {
    p.scale_denom = DraftDenom(p.box.width, p.box.height, p.resized_width, p.resized_height);
  }
  return p;
}

Status ImagePipeline::Execute(ImageWorkspace& workspace, std::span<const std::byte> data,
                              const SamplePlan& p, uint32_t channels, void* out) const {
  ImageWorkspace::State& ws = workspace.state();
  if (channels != 1 && channels != 3) return Invalid("output channels must be 1 or 3");
  if (p.box.width == 0 || p.box.height == 0 || uint64_t{p.box.left} + p.box.width > p.image_width ||
      uint64_t{p.box.top} + p.box.height > p.image_height) {
    return Invalid("crop box outside the image");
  }
  const uint32_t size = options_.transform.size;
  if (p.resized_width == 0 || p.resized_height == 0 || p.resized_width > kMaxResizedSide ||
      p.resized_height > kMaxResizedSide) {
    return Invalid("a " + std::to_string(p.image_width) + "x" + std::to_string(p.image_height) +
                   " image cannot be resized to " + std::to_string(p.resized_width) + "x" +
                   std::to_string(p.resized_height) + " (each side 1 to 2^31 - 1; an aspect " +
                   "ratio too extreme gives 0)");
  }
  if (uint64_t{p.window_left} + size > p.resized_width ||
      uint64_t{p.window_top} + size > p.resized_height) {
    return Invalid("output window outside the resized image");
  }
  if (p.format == ImageFormat::kJpeg && p.scale_denom != 1 && p.scale_denom != 2 &&
      p.scale_denom != 4 && p.scale_denom != 8) {
    return Invalid("scale denominator must be 1, 2, 4 or 8, not " + std::to_string(p.scale_denom));
  }
  const ImageInfo info{p.format, p.image_width, p.image_height, channels};
  const uint32_t d = p.format == ImageFormat::kJpeg ? p.scale_denom : 1;
  const uint32_t sw = decode_internal::ScaledDim(p.image_width, d);
  const uint32_t sh = decode_internal::ScaledDim(p.image_height, d);
  // The image torchvision's resize sees, as a rectangle (rx, ry) of the
  // decoded image: the crop (RandomResizedCrop crops, then resizes), or the
  // whole image. At full scale the box is exactly it; at a reduced scale the
  // box is scaled, may be fractional, and the rectangle encloses it.
  decode_internal::ResampleSpec spec;
  uint32_t rx = p.box.left, ry = p.box.top;
  if (d == 1) {
    spec.image_width = p.box.width;
    spec.image_height = p.box.height;
    spec.box[2] = static_cast<float>(p.box.width);
    spec.box[3] = static_cast<float>(p.box.height);
  } else {
    const double fx = static_cast<double>(sw) / p.image_width;
    const double fy = static_cast<double>(sh) / p.image_height;
    const double x0 = p.box.left * fx, x1 = (p.box.left + p.box.width) * fx;
    const double y0 = p.box.top * fy, y1 = (p.box.top + p.box.height) * fy;
    rx = static_cast<uint32_t>(std::floor(x0));
    ry = static_cast<uint32_t>(std::floor(y0));
    spec.image_width = std::min(sw, static_cast<uint32_t>(std::ceil(x1))) - rx;
    spec.image_height = std::min(sh, static_cast<uint32_t>(std::ceil(y1))) - ry;
    spec.box[0] = static_cast<float>(x0 - rx);
    spec.box[1] = static_cast<float>(y0 - ry);
    spec.box[2] = static_cast<float>(std::min<double>(x1 - rx, spec.image_width));
    spec.box[3] = static_cast<float>(std::min<double>(y1 - ry, spec.image_height));
  }
  spec.out_width = p.resized_width;
  spec.out_height = p.resized_height;
  spec.win_left = p.window_left;
  spec.win_top = p.window_top;
  spec.win_width = spec.win_height = size;
  const decode_internal::ResamplePlan rp = decode_internal::PrepareResample(spec, ws);
  // Decode (at least) what the window reads.
  DLFS_ASSIGN_OR_RETURN(
      decode_internal::DecodedRegion region,
      decode_internal::DecodeRegion(ws, data, info, options_.decode, d, channels, rx + rp.x0,
                                    ry + rp.y0, rx + rp.x1, ry + rp.y1));
  const size_t win_bytes = size_t{size} * size * channels;
  if (ws.window.size() < win_bytes) ws.window.resize(win_bytes);
  decode_internal::RunResample(region.view, int64_t{region.x} - rx, int64_t{region.y} - ry, spec,
                               rp, ws, ws.window.data());
  decode_internal::StoreWindow(ws.window.data(), size, channels, p.flip, options_.output,
                               lut_.data(), out);
  return Status::Ok();
}

Result<std::vector<std::byte>> ImagePipeline::Run(ImageWorkspace& ws,
                                                  std::span<const std::byte> data, uint64_t epoch,
                                                  uint64_t index,
                                                  std::vector<int64_t>* shape) const {
  DLFS_ASSIGN_OR_RETURN(ImageInfo info, decode_internal::Probe(ws.state(), data, options_.decode));
  const uint32_t c = OutputChannels(info);
  const SamplePlan plan = Plan(info, epoch, index);
  std::vector<std::byte> out(OutputElements(c) * DTypeSize(options_.output.dtype));
  DLFS_RETURN_IF_ERROR(Execute(ws, data, plan, c, out.data()));
  if (shape != nullptr) {
    const int64_t s = options_.transform.size;
    *shape = options_.output.layout == OutputLayout::kNCHW ? std::vector<int64_t>{c, s, s}
                                                           : std::vector<int64_t>{s, s, c};
  }
  return out;
}

Result<ImageInfo> ProbeImage(std::span<const std::byte> data, const DecodeOptions& options) {
  thread_local ImageWorkspace ws;
  return decode_internal::Probe(ws.state(), data, options);
}

Result<Image> DecodeImage(ImageWorkspace& ws, std::span<const std::byte> data,
                          const DecodeOptions& options, uint32_t scale_denom, uint32_t channels) {
  if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8) {
    return Invalid("scale denominator must be 1, 2, 4 or 8, not " + std::to_string(scale_denom));
  }
  if (channels > 3 || channels == 2) return Invalid("channels must be 0, 1 or 3");
  DLFS_ASSIGN_OR_RETURN(ImageInfo info, decode_internal::Probe(ws.state(), data, options));
  if (channels == 0) {
    channels = options.color == ColorMode::kRgb    ? 3
               : options.color == ColorMode::kGray ? 1
                                                   : info.channels;
  }
  if (info.format != ImageFormat::kJpeg) scale_denom = 1;
  DLFS_ASSIGN_OR_RETURN(
      PixelView v, decode_internal::Decode(ws.state(), data, info, options, scale_denom, channels));
  Image img;
  img.width = v.width;
  img.height = v.height;
  img.channels = channels;
  img.pixels.resize(size_t{v.width} * v.height * channels);
  for (uint32_t y = 0; y < v.height; ++y) {
    std::memcpy(img.pixels.data() + size_t{y} * v.width * channels, v.data + y * v.stride,
                size_t{v.width} * channels);
  }
  return img;
}

Result<std::vector<std::byte>> EncodePng(const Image& image) {
  if (image.channels != 1 && image.channels != 3) {
    return Invalid("PNG output takes 1 or 3 channels, not " + std::to_string(image.channels));
  }
  if (image.pixels.size() != size_t{image.width} * image.height * image.channels ||
      image.width == 0 || image.height == 0) {
    return Invalid("image buffer does not match its dimensions");
  }
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  if (ctx == nullptr) return Status::Unavailable("PNG: spng_ctx_new failed");
  spng_ihdr ihdr{};
  ihdr.width = image.width;
  ihdr.height = image.height;
  ihdr.bit_depth = 8;
  ihdr.color_type = image.channels == 1 ? SPNG_COLOR_TYPE_GRAYSCALE : SPNG_COLOR_TYPE_TRUECOLOR;
  int err = spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  if (err == 0) err = spng_set_ihdr(ctx, &ihdr);
  if (err == 0) {
    err = spng_encode_image(ctx, image.pixels.data(), image.pixels.size(), SPNG_FMT_PNG,
                            SPNG_ENCODE_FINALIZE);
  }
  size_t len = 0;
  void* png = err == 0 ? spng_get_png_buffer(ctx, &len, &err) : nullptr;
  spng_ctx_free(ctx);
  if (png == nullptr) {
    return Status::InvalidArgument(std::string("PNG: cannot encode: ") + spng_strerror(err));
  }
  std::vector<std::byte> out(len);
  std::memcpy(out.data(), png, len);
  std::free(png);
  return out;
}

}  // namespace dlfs
