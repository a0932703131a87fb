// The options of pack-time image preparation (ImagePrepOptions) and the
// names they use: what a volume records of how its images were prepared
// (docs/format.md §4.9.1) and what its images section says each changed
// image became (§4.9.2). Plain values only, so that the directory
// (VolumeImages, ImageOrigin in dlfs/directory.h) can hold them without
// reaching the decoder; what the options do, and PrepareImage that does
// it, are in dlfs/image_prep.h, which includes this header.
//
// Thread safety: options are immutable values.
#pragma once

#include <cstdint>

#include "dlfs/enum_names.h"

namespace dlfs {

// Channels of a decoded image: kAuto keeps the sample's own (1 for gray
// and gray+alpha images, 3 for colour, palette and CMYK ones); kRgb and kGray
// force 3 or 1. Alpha is always dropped (as PIL's convert("RGB")). Used by
// DecodeOptions (dlfs/decode.h) and ImagePrepOptions; the values are the
// format's codes (§4.9.1).
enum class ColorMode : uint8_t { kAuto, kRgb, kGray };
inline constexpr EnumName<ColorMode> kColorModeNames[] = {
    {ColorMode::kAuto, "auto"}, {ColorMode::kRgb, "rgb"}, {ColorMode::kGray, "gray"}};

// Images of more pixels (width x height) are refused from their header,
// before anything is allocated (DecodeOptions::max_pixels,
// ImagePrepOptions::max_pixels): decoding needs at most about 8 bytes per
// pixel (16-bit RGBA PNG), so this bounds a decode's memory (~512 MiB).
inline constexpr uint64_t kDefaultMaxPixels = uint64_t{1} << 26;

// PIL's resampling filters (Image.resize; Pillow's Resample.c), all
// antialiased when reducing. Values are the format's codes (§4.9.1).
enum class ResizeFilter : uint8_t {
  kBilinear = 1,
  kBicubic = 2,
  kLanczos = 3,
  kBox = 4,
  kHamming = 5
};
inline constexpr EnumName<ResizeFilter> kResizeFilterNames[] = {
    {ResizeFilter::kBilinear, "bilinear"},
    {ResizeFilter::kBicubic, "bicubic"},
    {ResizeFilter::kLanczos, "lanczos"},
    {ResizeFilter::kBox, "box"},
    {ResizeFilter::kHamming, "hamming"}};

// How prepared images are stored (values are the format's codes).
enum class ImageStoreMode : uint8_t { kKeep = 0, kJpeg = 1, kRaw = 2, kSmart = 3, kProportion = 4 };
inline constexpr EnumName<ImageStoreMode> kImageStoreModeNames[] = {
    {ImageStoreMode::kKeep, "keep"},
    {ImageStoreMode::kJpeg, "jpeg"},
    {ImageStoreMode::kRaw, "raw"},
    {ImageStoreMode::kSmart, "smart"},
    {ImageStoreMode::kProportion, "proportion"}};

// What a changed image was stored as (values are the format's codes).
enum class StoredImage : uint8_t { kJpeg = 1, kPng = 2, kRaw = 3 };
inline constexpr EnumName<StoredImage> kStoredImageNames[] = {
    {StoredImage::kJpeg, "jpeg"}, {StoredImage::kPng, "png"}, {StoredImage::kRaw, "raw"}};

// FFCV's default quality, and what encoded JPEGs use when none is asked for.
inline constexpr uint32_t kDefaultJpegQuality = 90;
// kSmart's default threshold: the pixels of a 256 x 256 RGB image.
inline constexpr uint64_t kDefaultSmartThreshold = 256 * 256 * 3;

// What PrepareImage (dlfs/image_prep.h) does to each image, as its header
// describes.
struct ImagePrepOptions {
  // ---- What is done (recorded in the volume, docs/format.md §4.9.1) ----
  uint32_t max_side = 0;  // cap the longer side (pixels); 0: no cap
  ResizeFilter filter = ResizeFilter::kBilinear;
  // 1..100: re-encode JPEGs at this quality (see "kept" in
  // dlfs/image_prep.h); 0: JPEGs needing no other change keep their bytes,
  // encoded ones use kDefaultJpegQuality.
  uint32_t jpeg_quality = 0;
  // Re-encode images that need no resize too, and keep the result even when
  // it is larger than the original.
  bool always_reencode = false;
  ImageStoreMode mode = ImageStoreMode::kKeep;
  // Channels of decoded images: kRgb (PIL's convert("RGB"), the default),
  // kGray (convert("L")), or kAuto (1 for gray sources, 3 for the others).
  // Kept originals keep theirs (the decode stage converts them on reading).
  ColorMode color = ColorMode::kRgb;
  uint64_t smart_threshold = kDefaultSmartThreshold;  // kSmart: raw up to this many pixel bytes
  double jpeg_probability = 0.5;                      // kProportion: FFCV's compress_probability
  uint64_t seed = 0;                                  // kProportion: which images are JPEG

  // ---- How (not recorded) ----
  // Threads preparing images while a VolumeBuilder writes; 0: one per core.
  uint32_t threads = 0;
  // Images that cannot be prepared (not JPEG or PNG, damaged, too large):
  // false fails the sample (its Add/EndSample, or a later call, returns the
  // error naming it; the builder stays usable), true leaves it out and
  // counts it (VolumeBuilder::image_stats). Pack sets it from
  // PackOptions::skip_unreadable.
  bool skip_unreadable = false;
  // Sources of more pixels are refused before anything is allocated.
  uint64_t max_pixels = kDefaultMaxPixels;

  // Whether anything is to be done: a cap, a quality, a mode other than
  // kKeep, or always_reencode. (color alone changes nothing: it applies to
  // images decoded for one of those.)
  bool enabled() const {
    return max_side != 0 || jpeg_quality != 0 || mode != ImageStoreMode::kKeep || always_reencode;
  }
};

}  // namespace dlfs
