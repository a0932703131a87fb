// Decoding and augmenting one image sample: JPEG (libjpeg-turbo's TurboJPEG
// API), PNG (libspng), raw pixels with their own header (what `dlfs pack
// --image-format raw` stores, docs/format.md §4.9.3) or raw fixed-shape
// pixels (IDX), then the torchvision
// geometry (Resize + CenterCrop, or RandomResizedCrop; horizontal flip) and
// the output element type and layout a model takes.
//
//   dlfs::ImageOptions o;
//   o.transform.size = 224;
//   o.transform.crop = dlfs::CropMode::kRandomResized;
//   o.transform.flip = true;
//   o.output = {.dtype = dlfs::DType::kFloat32, .layout = dlfs::OutputLayout::kNCHW,
//               .mean = {0.485f, 0.456f, 0.406f}, .std = {0.229f, 0.224f, 0.225f}};
//   auto pipeline = dlfs::ImagePipeline::Create(o);
//   dlfs::ImageWorkspace ws;                              // one per thread
//   auto image = pipeline->Run(ws, jpeg_bytes, epoch, sample_index);
//
// The batch version, which decodes a whole BatchSource's batches on a pool of
// threads into one tensor per batch, is DecodeStage (dlfs/decode_stage.h).
//
// Semantics (what the tests check against PIL and torchvision 0.14):
// - Decoding equals PIL's: PNG exactly (16-bit samples keep their high byte,
//   as PIL does for 16-bit RGB; 16-bit gray too, unless pil_gray16 asks for
//   PIL's clipping; palettes are expanded; alpha is dropped);
//   JPEG within ±1 per channel at full scale (the same libjpeg-turbo with
//   the same accurate integer IDCT and fancy upsampling), and at reduced
//   scale as PIL's draft() mode. CMYK JPEGs are converted as PIL converts
//   them. Colour to gray uses PIL's luma weights (ITU-R 601-2), except that
//   a colour JPEG decoded to gray takes libjpeg's own Y channel.
// - Raw pixels are not decoded: the pipeline resamples them in place, so
//   a sample stored raw gives exactly what the JPEG or PNG it was made from
//   gives at full scale (dct_scaling off), flips and crops included.
// - Geometry follows torchvision.transforms on PIL images: Resize(shorter
//   side) then CenterCrop, or RandomResizedCrop, each resampling with PIL's
//   antialiased bilinear filter (the same fixed-point arithmetic: equal to
//   torchvision's output, ±1 where a reduced JPEG scale was used).
// - Random choices (the RandomResizedCrop box, the flip) are a pure function
//   of (seed, epoch, sample index) — specified in RandomChoices below — so
//   they do not depend on threads, order, or the process.
//
// Work: a JPEG is decoded only around the region a sample's crop reads
// (libjpeg-turbo's partial decoding: rows below it and the IDCT of columns
// beside it are skipped; the pixels are identical to a full decode's), and
// at 1/2, 1/4 or 1/8 scale when that keeps the output's resolution
// (DecodeOptions::dct_scaling). Resampling computes only the output window.
//
// Bad input (a truncated or corrupt file, the wrong kind of data, an image
// larger than DecodeOptions::max_pixels) is an InvalidArgument error naming
// the problem; nothing is allocated for an image before its header has
// passed the pixel limit, so hostile headers cost no memory. A JPEG must end
// with its end-of-image marker (a truncated file is refused whatever its
// crop); libjpeg's warnings about damaged data are errors. (Damage inside a
// JPEG's compressed data outside the decoded region goes unnoticed; the
// volume's checksums still catch any change after packing.)
//
// Thread safety: options and ImagePipeline are immutable and may be shared;
// an ImageWorkspace is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dlfs/batch.h"
#include "dlfs/enum_names.h"
#include "dlfs/image_prep_options.h"  // ColorMode, kDefaultMaxPixels
#include "dlfs/status.h"

namespace dlfs {

enum class ImageFormat : uint8_t { kAuto, kJpeg, kPng, kRaw };
inline constexpr EnumName<ImageFormat> kImageFormatNames[] = {{ImageFormat::kAuto, "auto"},
                                                              {ImageFormat::kJpeg, "jpeg"},
                                                              {ImageFormat::kPng, "png"},
                                                              {ImageFormat::kRaw, "raw"}};

enum class CropMode : uint8_t {
  kCenter,         // torchvision Resize(resize) then CenterCrop(size)
  kRandomResized,  // torchvision RandomResizedCrop(size)
};
inline constexpr EnumName<CropMode> kCropModeNames[] = {
    {CropMode::kCenter, "center"}, {CropMode::kRandomResized, "random-resized"}};

enum class OutputLayout : uint8_t { kNHWC, kNCHW };  // per image: HWC or CHW
inline constexpr EnumName<OutputLayout> kOutputLayoutNames[] = {{OutputLayout::kNHWC, "NHWC"},
                                                                {OutputLayout::kNCHW, "NCHW"}};
inline constexpr EnumName<DType> kDTypeNames[] = {{DType::kUint8, "uint8"},
                                                  {DType::kFloat32, "float32"}};

// Raw samples: height x width x channels bytes, row-major, channels last
// (e.g. Fashion-MNIST's 28 x 28 x 1 as stored by `dlfs pack` from IDX).
struct RawShape {
  uint32_t height = 0;
  uint32_t width = 0;
  uint32_t channels = 1;  // 1 or 3
  bool empty() const { return height == 0 || width == 0; }
};

// How bytes become pixels.
struct DecodeOptions {
  // kAuto: JPEG or PNG by their signature; anything else is headerless raw
  // pixels of shape `raw` when it is set, else raw pixels with a raw image
  // header (docs/format.md §4.9.3) when they start with one, else an error.
  // kRaw: headerless raw pixels of shape `raw` when it is set, else raw
  // pixels with a header.
  ImageFormat format = ImageFormat::kAuto;
  RawShape raw;
  ColorMode color = ColorMode::kAuto;
  // Images of more pixels (width x height) are refused from their header,
  // before anything is allocated: decoding needs at most about 8 bytes per
  // pixel (16-bit RGBA PNG), so this bounds a decode's memory (~512 MiB here).
  uint64_t max_pixels = kDefaultMaxPixels;
  // JPEG: decode at 1/2, 1/4 or 1/8 scale (libjpeg's DCT scaling) when the
  // region that is resampled keeps at least the output's size at that scale
  // in both directions — the choice PIL's draft() makes. Much less work for
  // large images; off for decodes identical to a full-scale one.
  bool dct_scaling = true;
  // 16-bit gray PNGs: false keeps each value's high byte (as 16-bit colour,
  // and so the image's contrast); true clips values above 255 to 255, as
  // PIL's convert("RGB") / convert("L") of such an image (PIL's mode "I")
  // does — what torchvision's ImageFolder loader gives, and what pack-time
  // image preparation (dlfs/image_prep.h) stores.
  bool pil_gray16 = false;
};

// torchvision.transforms.RandomResizedCrop's parameters.
struct RandomResizedCropOptions {
  double scale_min = 0.08;  // fraction of the image's area
  double scale_max = 1.0;
  double ratio_min = 3.0 / 4.0;  // width / height
  double ratio_max = 4.0 / 3.0;
  uint32_t attempts = 10;  // then the central fallback
};

// The geometry: every output image is size x size.
struct TransformOptions {
  uint32_t size = 224;
  CropMode crop = CropMode::kCenter;
  // kCenter: the shorter side is first resized to this (torchvision
  // Resize(resize)); 0 means `size`. Must be >= size.
  uint32_t resize = 0;
  RandomResizedCropOptions random_resized;
  bool flip = false;  // horizontal flip with probability 0.5
  uint64_t seed = 0;  // random choices are a function of (seed, epoch, index)
};

// What one output image is: dtype, layout and (float32) normalisation.
struct OutputOptions {
  DType dtype = DType::kUint8;
  OutputLayout layout = OutputLayout::kNHWC;
  // float32 only: x = (pixel / 255 - mean[c]) / std[c], computed as
  // torchvision's ToTensor + Normalize compute it (float32). Empty: mean 0,
  // std 1 (plain ToTensor); one value applies to every channel; otherwise
  // one per channel. uint8 output must leave both empty.
  std::vector<float> mean;
  std::vector<float> std;
};

struct ImageOptions {
  DecodeOptions decode;
  TransformOptions transform;
  OutputOptions output;
};

// Dimensions and kind of an encoded image, from its header alone.
struct ImageInfo {
  ImageFormat format = ImageFormat::kAuto;  // what it is (never kAuto)
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t channels = 0;  // what ColorMode::kAuto decodes it to: 1 or 3
};

// Reads the header of `data`. InvalidArgument for data that is not a
// JPEG/PNG (nor raw of options.raw's size), a damaged header, or more than
// options.max_pixels pixels.
Result<ImageInfo> ProbeImage(std::span<const std::byte> data, const DecodeOptions& options);

// Pixels, height x width x channels uint8, row-major.
struct Image {
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t channels = 0;
  std::vector<uint8_t> pixels;
};

// Per-thread state of decoders: the TurboJPEG handle and scratch buffers,
// reused from image to image so that steady-state decoding allocates
// nothing. Use one per thread.
class ImageWorkspace {
 public:
  ImageWorkspace();
  ~ImageWorkspace();
  ImageWorkspace(const ImageWorkspace&) = delete;
  ImageWorkspace& operator=(const ImageWorkspace&) = delete;

  struct State;  // defined in src/decode
  State& state() { return *state_; }

 private:
  std::unique_ptr<State> state_;
};

// Decodes the whole image (no geometry): what PIL's Image.open(...)
// .convert("RGB" / "L") gives. `scale_denom` 2, 4 or 8 decodes a JPEG at
// that reduced scale (PIL: draft(mode, (w // d, h // d))); the result is
// ceil(width / d) x ceil(height / d). `channels`: 0 for the options' color
// mode, else 1 or 3 (overrides it).
Result<Image> DecodeImage(ImageWorkspace& ws, std::span<const std::byte> data,
                          const DecodeOptions& options, uint32_t scale_denom = 1,
                          uint32_t channels = 0);

// A PNG file of `image` (8-bit gray or RGB), e.g. to look at a decoded sample.
Result<std::vector<std::byte>> EncodePng(const Image& image);

// A box in an image's pixels (full resolution), as torchvision's (i, j, h, w).
struct CropBox {
  uint32_t top = 0;
  uint32_t left = 0;
  uint32_t height = 0;
  uint32_t width = 0;
};

// What happens to one sample: the region of the image that is resampled to
// resized_width x resized_height, and the size x size window of that result
// which becomes the output (then flipped or not).
//   kCenter:        box = the whole image, resized = Resize(resize)'s size,
//                   window = CenterCrop(size)'s offset;
//   kRandomResized: box = RandomResizedCrop's (i, j, h, w),
//                   resized = size x size, window = (0, 0).
// A side of the resized image longer than 2^31 - 1 pixels (Resize of an
// image of extreme aspect ratio, e.g. 1 x 20,000,000 to 224) cannot be
// resampled (nor by PIL): Plan gives it as 0, and Execute refuses the plan.
struct SamplePlan {
  ImageFormat format = ImageFormat::kAuto;  // the sample's (from its header)
  uint32_t image_width = 0;                 // full resolution, from the header
  uint32_t image_height = 0;
  CropBox box;
  uint32_t resized_width = 0;
  uint32_t resized_height = 0;
  uint32_t window_left = 0;
  uint32_t window_top = 0;
  bool flip = false;
  // JPEG only: decoded at 1/scale_denom (1, 2, 4 or 8; see dct_scaling).
  uint32_t scale_denom = 1;
};

// The random draws of one sample, as specified (a Python test re-derives
// them independently):
//   h = SplitMix64(seed ^ 0x6a09e667f3bcc909); h = SplitMix64(h ^ epoch);
//   h = SplitMix64(h ^ index), where SplitMix64(x) is Vigna's finaliser of
//   x + 0x9e3779b97f4a7c15; the generator is xoshiro256** seeded like the
//   Sampler's (four SplitMix64 steps from h; see dlfs/sampler.h). Draws:
//   1. flip = the top bit of the first output (drawn whether or not flips
//      are on, so switching them does not move the crops);
//   2. RandomResizedCrop, up to `attempts` times: scale = U(scale_min,
//      scale_max), log_ratio = U(log ratio_min, log ratio_max), where
//      U(a, b) = a + (b - a) * (next >> 11) * 2^-53; w = round(sqrt(area *
//      scale * exp(log_ratio))), h = round(sqrt(area * scale /
//      exp(log_ratio))) (round half to even, as Python's round); if 0 < w <=
//      width and 0 < h <= height: top = Below(height - h + 1), left =
//      Below(width - w + 1) (Lemire's unbiased bounded integers, as the
//      Sampler) and stop; else torchvision's central fallback.
struct RandomChoices {
  bool flip = false;
  CropBox box;  // RandomResizedCrop's box for a width x height image
};
RandomChoices DrawRandomChoices(uint64_t seed, uint64_t epoch, uint64_t index, uint32_t width,
                                uint32_t height, const RandomResizedCropOptions& options);

// One image's transformation, from encoded bytes to an output tensor.
class ImagePipeline {
 public:
  // InvalidArgument for unusable options (size 0, resize < size, bad
  // scale/ratio ranges, mean/std of the wrong length or with uint8 output,
  // a raw format without a shape, ...).
  static Result<ImagePipeline> Create(const ImageOptions& options);

  const ImageOptions& options() const { return options_; }

  // The output channel count for a sample of `info` (its own under
  // ColorMode::kAuto).
  uint32_t OutputChannels(const ImageInfo& info) const;
  // Elements of one output image: size * size * channels.
  uint64_t OutputElements(uint32_t channels) const;

  // What the pipeline does to sample `index` of `epoch`, an image of `info`.
  SamplePlan Plan(const ImageInfo& info, uint64_t epoch, uint64_t index) const;

  // Decodes `data` and applies `plan`, writing one output image of
  // `channels` (1 or 3; the sample is converted when its own differ) into
  // `out`: OutputElements(channels) elements of options().output.dtype in
  // options().output.layout. The plan should come from Plan() for this data
  // (or describe a box inside the image); one that does not — another image
  // size, a box or window outside, an unknown scale — is InvalidArgument.
  // On error `out` holds garbage.
  Status Execute(ImageWorkspace& ws, std::span<const std::byte> data, const SamplePlan& plan,
                 uint32_t channels, void* out) const;

  // Probe, Plan and Execute for one sample, into a new buffer (its own
  // channel count under kAuto). `shape` receives the output's dimensions in
  // layout order (H, W, C or C, H, W).
  Result<std::vector<std::byte>> Run(ImageWorkspace& ws, std::span<const std::byte> data,
                                     uint64_t epoch, uint64_t index,
                                     std::vector<int64_t>* shape = nullptr) const;

 private:
  explicit ImagePipeline(const ImageOptions& options);
  ImageOptions options_;
  // float32 output: per channel, the value of each byte after ToTensor and
  // Normalize (exactly torchvision's float32 arithmetic, looked up).
  std::vector<float> lut_;  // 3 x 256
};

}  // namespace dlfs
