// Image preparation at pack time (`dlfs pack --max-side/--jpeg-quality/
// --image-format`, dlfs.Writer(max_side=...), VolumeBuilder::Options::images):
// cap an image's resolution, re-encode it as JPEG, or store its decoded
// pixels, so that reading it later costs less decoding — FFCV's
// RGBImageField (max_resolution, jpeg_quality, write_mode raw/jpg/smart/
// proportion), with torchvision's geometry and PIL's pixels.
//
//   dlfs::ImagePrepOptions o;
//   o.max_side = 256;                          // longer side at most 256 px
//   o.mode = dlfs::ImageStoreMode::kRaw;       // decoded uint8 HWC pixels
//   dlfs::ImageWorkspace ws;                   // one per thread
//   auto prepared = dlfs::PrepareImage(ws, jpeg_bytes, o, "cat/1.jpg", "");
//
// What an image becomes (docs/format.md §4.9.4 states it as the writer's
// rules):
// - Decoding is PIL's Image.open(f).convert("RGB") (or "L" for gray):
//   palette, gray, CMYK and 16-bit sources become RGB exactly as PIL
//   converts them (16-bit gray is clipped at 255, as PIL does), alpha is
//   dropped, and EXIF orientation is NOT applied — torchvision's ImageFolder
//   loader (PIL open + convert("RGB")) does not apply it either, so a
//   prepared image has the pixels training from the original files sees.
//   JPEGs are decoded at full scale with the accurate integer IDCT (as PIL).
// - An image whose longer side exceeds max_side is resized so that its
//   longer side is max_side and its shorter side int(max_side * shorter /
//   longer), at least 1 — torchvision's Resize(size=None, max_size=N) —
//   with PIL's Image.resize and the named filter (antialiased; the same
//   fixed-point arithmetic, so the same bytes as PIL). Never enlarged.
// - Stored as: kKeep its own format (JPEG or PNG); kJpeg JPEG; kRaw raw
//   pixels (docs/format.md §4.9.3); kSmart raw when its pixels take at most
//   smart_threshold bytes, JPEG above (FFCV's smart mode); kProportion JPEG
//   with probability jpeg_probability, else raw (FFCV's proportion mode,
//   but a pure function of seed, sample path and field: §4.9.4).
// - Encoded JPEGs: TurboJPEG, baseline, 4:2:0 for colour (PIL's and FFCV's
//   default), quality jpeg_quality (kDefaultJpegQuality when 0), no
//   metadata. Encoded PNGs (kKeep of a resized PNG): libspng, 8-bit.
// - The original bytes are kept (PreparedImage::changed false) when the
//   image needs no resize and would be stored in its own format, unless
//   re-encoding is asked for: a JPEG is then re-encoded when jpeg_quality is
//   set, and kept when that does not make it smaller — unless
//   always_reencode.
// - Only JPEG and PNG sources are prepared: anything else (BMP, TIFF, WebP,
//   a damaged file, more than max_pixels pixels) is an InvalidArgument
//   error naming the problem; the builder then skips the sample or fails
//   (skip_unreadable).
//
// Thread safety: options are immutable values; a workspace is used by one
// thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dlfs/decode.h"
#include "dlfs/image_prep_options.h"  // ImagePrepOptions and its enums
#include "dlfs/status.h"

namespace dlfs {

// InvalidArgument naming the option for a quality above 100, a probability
// outside [0, 1], a smart threshold of 0, a max_pixels of 0.
Status CheckImagePrepOptions(const ImagePrepOptions& options);

// Whether a sample's field of this name holds an image the builder
// prepares: the unnamed field "" (a whole sample) and "jpg", "jpeg", "png"
// in any case (WebDataset's image extensions dlfs decodes).
bool IsImageField(std::string_view field_name);

// The result for one image.
struct PreparedImage {
  // False: the original bytes are to be stored as they are (`bytes` is
  // empty); the fields below still describe the image.
  bool changed = false;
  std::vector<std::byte> bytes;             // the new bytes, when changed
  StoredImage stored = StoredImage::kJpeg;  // what they are, when changed
  bool resized = false;
  ImageInfo original;  // the source's format and size
  uint32_t width = 0;  // of the stored image
  uint32_t height = 0;
};

// Prepares one image (`data`, JPEG or PNG) as `options` say. `sample_path`
// and `field` name it for kProportion's choice (and nothing else).
// InvalidArgument for bad options or an image that cannot be prepared.
Result<PreparedImage> PrepareImage(ImageWorkspace& ws, std::span<const std::byte> data,
                                   const ImagePrepOptions& options, std::string_view sample_path,
                                   std::string_view field);

// The size an image of width x height gets under max_side (unchanged when
// it fits or max_side is 0); *resized says whether it changed.
void PreparedSize(uint32_t width, uint32_t height, uint32_t max_side, uint32_t* out_width,
                  uint32_t* out_height);

// A PIL resize of `image` (8-bit, 1 or 3 channels) to width x height with
// `filter`: Image.resize((width, height), filter) — exactly its bytes.
// InvalidArgument for an empty image or size.
Result<Image> ResizeImage(ImageWorkspace& ws, const Image& image, uint32_t width, uint32_t height,
                          ResizeFilter filter);

// How many images a builder prepared, and what became of them (PackStats,
// `dlfs pack`'s summary).
struct ImagePrepStats {
  uint64_t images = 0;   // image fields looked at
  uint64_t changed = 0;  // stored other than as they came (records in the volume)
  uint64_t resized = 0;
  uint64_t as_jpeg = 0;  // of the changed ones, by what they became
  uint64_t as_png = 0;
  uint64_t as_raw = 0;
  uint64_t bytes_in = 0;                      // image fields' bytes as given
  uint64_t bytes_out = 0;                     // as stored (before zstd compression)
  uint64_t skipped = 0;                       // left out (skip_unreadable)
  std::vector<std::string> skipped_examples;  // "path: reason", the first few
};

}  // namespace dlfs
