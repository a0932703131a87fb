// Image preparation (dlfs/image_prep.h): one image from its source bytes to
// what a volume stores — decoded as PIL does, resized with PIL's filter,
// encoded by TurboJPEG or libspng, or kept as it came.
#include <turbojpeg.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "common/xoshiro.h"
#include "decode/codecs.h"
#include "decode/resample.h"
#include "dlfs/image_prep.h"

namespace dlfs {

namespace {

using decode_internal::PixelView;

Result<tjhandle> Compressor(ImageWorkspace::State& ws) {
  if (ws.tj_compress == nullptr) {
    ws.tj_compress = tjInitCompress();
    if (ws.tj_compress == nullptr) return Status::Unavailable("TurboJPEG: tjInitCompress failed");
  }
  return static_cast<tjhandle>(ws.tj_compress);
}

// A JPEG of `v` as PIL's Image.save(f, "JPEG", quality=q) writes one:
// baseline, standard Huffman tables, 4:2:0 for colour, the accurate integer
// DCT (TurboJPEG's default is the fast one, hence the flag).
Result<std::vector<std::byte>> EncodeJpeg(ImageWorkspace::State& ws, const PixelView& v,
                                          int quality) {
  DLFS_ASSIGN_OR_RETURN(tjhandle tj, Compressor(ws));
  const int subsamp = v.channels == 1 ? TJSAMP_GRAY : TJSAMP_420;
  const unsigned long cap =
      tjBufSize(static_cast<int>(v.width), static_cast<int>(v.height), subsamp);
  if (ws.encoded.size() < cap) ws.encoded.resize(cap);
  unsigned char* out = ws.encoded.data();
  unsigned long size = cap;
  if (tjCompress2(tj, v.data, static_cast<int>(v.width), static_cast<int>(v.stride),
                  static_cast<int>(v.height), v.channels == 1 ? TJPF_GRAY : TJPF_RGB, &out, &size,
                  subsamp, quality, TJFLAG_ACCURATEDCT | TJFLAG_NOREALLOC) != 0) {
    Status st = Status::InvalidArgument(std::string("JPEG: cannot encode: ") + tjGetErrorStr2(tj));
    tjDestroy(tj);  // a fresh compressor for the next image, whatever state this one is in
    ws.tj_compress = nullptr;
    return st;
  }
  const auto* b = reinterpret_cast<const std::byte*>(out);
  return std::vector<std::byte>(b, b + size);
}

// kProportion's choice (docs/format.md §4.9.4): u < p, with u from
// SplitMix64(seed ^ FNV-1a-64(path, NUL, field)).
bool ChooseJpeg(const ImagePrepOptions& o, std::string_view path, std::string_view field) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto mix = [&h](std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  };
  mix(path);
  mix(std::string_view("\0", 1));
  mix(field);
  const uint64_t r = SplitMixOutput((o.seed ^ h) + kSplitMixGamma);
  return static_cast<double>(r >> 11) * 0x1.0p-53 < o.jpeg_probability;
}

uint32_t ChannelsOf(const ImagePrepOptions& o, const ImageInfo& info) {
  return o.color == ColorMode::kRgb ? 3 : o.color == ColorMode::kGray ? 1 : info.channels;
}

}  // namespace

Status CheckImagePrepOptions(const ImagePrepOptions& o) {
  if (o.jpeg_quality > 100) {
    return Status::InvalidArgument("jpeg_quality is 1..100 (0: not set), not " +
                                   std::to_string(o.jpeg_quality));
  }
  if (!(o.jpeg_probability >= 0 && o.jpeg_probability <= 1)) {
    return Status::InvalidArgument("jpeg_probability must be in [0, 1]");
  }
  if (o.smart_threshold == 0) return Status::InvalidArgument("smart_threshold must be at least 1");
  if (o.max_pixels == 0) return Status::InvalidArgument("max_pixels must be at least 1");
  if (NameOf(kResizeFilterNames, o.filter) == "?") {
    return Status::InvalidArgument("unknown resize filter " +
                                   std::to_string(static_cast<int>(o.filter)));
  }
  if (NameOf(kImageStoreModeNames, o.mode) == "?") {
    return Status::InvalidArgument("unknown image mode " +
                                   std::to_string(static_cast<int>(o.mode)));
  }
  return Status::Ok();
}

bool IsImageField(std::string_view name) {
  if (name.empty()) return true;
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "jpg" || lower == "jpeg" || lower == "png";
}

void PreparedSize(uint32_t width, uint32_t height, uint32_t max_side, uint32_t* out_width,
                  uint32_t* out_height) {
  *out_width = width;
  *out_height = height;
  const uint32_t longer = std::max(width, height);
  if (max_side == 0 || longer <= max_side) return;
  // torchvision's Resize(size=None, max_size=N): int(N * short / long) in
  // double precision (N * short is exact, the division correctly rounded).
  const uint32_t shorter = std::min(width, height);
  const double s = static_cast<double>(uint64_t{max_side} * shorter) / longer;
  const uint32_t new_short = std::max<uint32_t>(1, static_cast<uint32_t>(s));
  if (width >= height) {
    *out_width = max_side;
    *out_height = new_short;
  } else {
    *out_width = new_short;
    *out_height = max_side;
  }
}

namespace {

// Resizes `v` to w x h into ws.resized (dense), as PIL's Image.resize.
PixelView Resize(ImageWorkspace::State& ws, const PixelView& v, uint32_t w, uint32_t h,
                 ResizeFilter filter) {
  decode_internal::ResampleSpec spec;
  spec.image_width = v.width;
  spec.image_height = v.height;
  spec.box[2] = static_cast<float>(v.width);
  spec.box[3] = static_cast<float>(v.height);
  spec.out_width = w;
  spec.out_height = h;
  spec.win_width = w;
  spec.win_height = h;
  spec.filter = filter;
  const decode_internal::ResamplePlan plan = decode_internal::PrepareResample(spec, ws);
  // RunResample may use ws's other buffers, not this one.
  std::vector<uint8_t> out = std::move(ws.resized);
  if (out.size() < size_t{w} * h * v.channels) out.resize(size_t{w} * h * v.channels);
  decode_internal::RunResample(v, 0, 0, spec, plan, ws, out.data());
  ws.resized = std::move(out);
  return PixelView{ws.resized.data(), w, h, v.channels, size_t{w} * v.channels};
}

}  // namespace

Result<Image> ResizeImage(ImageWorkspace& ws, const Image& image, uint32_t width, uint32_t height,
                          ResizeFilter filter) {
  if ((image.channels != 1 && image.channels != 3) || image.width == 0 || image.height == 0 ||
      image.pixels.size() != size_t{image.width} * image.height * image.channels) {
    return Status::InvalidArgument("resize: image buffer does not match its dimensions");
  }
  if (width == 0 || height == 0 || width > 0x7fffffff || height > 0x7fffffff) {
    return Status::InvalidArgument("resize: bad size " + std::to_string(width) + "x" +
                                   std::to_string(height));
  }
  const PixelView in{image.pixels.data(), image.width, image.height, image.channels,
                     size_t{image.width} * image.channels};
  const PixelView out = Resize(ws.state(), in, width, height, filter);
  Image result{width, height, image.channels, {}};
  result.pixels.assign(out.data, out.data + size_t{width} * height * image.channels);
  return result;
}

Result<PreparedImage> PrepareImage(ImageWorkspace& workspace, std::span<const std::byte> data,
                                   const ImagePrepOptions& o, std::string_view sample_path,
                                   std::string_view field) {
  DLFS_RETURN_IF_ERROR(CheckImagePrepOptions(o));
  ImageWorkspace::State& ws = workspace.state();
  DecodeOptions d;
  d.max_pixels = o.max_pixels;
  d.pil_gray16 = true;  // PIL's convert() of 16-bit gray
  Result<ImageInfo> probed = decode_internal::Probe(ws, data, d);
  if (!probed.ok() && probed.status().message().starts_with("neither JPEG")) {
    return Status::InvalidArgument("not a JPEG or PNG image (dlfs prepares only those; " +
                                   probed.status().message() + ")");
  }
  DLFS_RETURN_IF_ERROR(probed.status());
  const ImageInfo info = *probed;
  if (info.format != ImageFormat::kJpeg && info.format != ImageFormat::kPng) {
    return Status::InvalidArgument("already raw pixels: dlfs prepares JPEG and PNG images only");
  }
  PreparedImage r;
  r.original = info;
  PreparedSize(info.width, info.height, o.max_side, &r.width, &r.height);
  r.resized = r.width != info.width || r.height != info.height;
  const uint32_t channels = ChannelsOf(o, info);
  StoredImage kind = StoredImage::kJpeg;
  switch (o.mode) {
    case ImageStoreMode::kKeep:
      kind = info.format == ImageFormat::kPng ? StoredImage::kPng : StoredImage::kJpeg;
      break;
    case ImageStoreMode::kJpeg:
      kind = StoredImage::kJpeg;
      break;
    case ImageStoreMode::kRaw:
      kind = StoredImage::kRaw;
      break;
    case ImageStoreMode::kSmart:
      kind = uint64_t{r.width} * r.height * channels <= o.smart_threshold ? StoredImage::kRaw
                                                                          : StoredImage::kJpeg;
      break;
    case ImageStoreMode::kProportion:
      kind = ChooseJpeg(o, sample_path, field) ? StoredImage::kJpeg : StoredImage::kRaw;
      break;
  }
  const bool same_format = (kind == StoredImage::kJpeg && info.format == ImageFormat::kJpeg) ||
                           (kind == StoredImage::kPng && info.format == ImageFormat::kPng);
  if (!r.resized && same_format && !o.always_reencode &&
      (kind == StoredImage::kPng || o.jpeg_quality == 0)) {
    return r;  // nothing asked for changes it
  }
  DLFS_ASSIGN_OR_RETURN(PixelView v, decode_internal::Decode(ws, data, info, d, 1, channels));
  if (r.resized) v = Resize(ws, v, r.width, r.height, o.filter);
  std::vector<std::byte> bytes;
  switch (kind) {
    case StoredImage::kRaw:
      bytes = decode_internal::RawImageBytes(v.data, v.width, v.height, v.channels, v.stride);
      break;
    case StoredImage::kJpeg: {
      const int q = static_cast<int>(o.jpeg_quality != 0 ? o.jpeg_quality : kDefaultJpegQuality);
      DLFS_ASSIGN_OR_RETURN(bytes, EncodeJpeg(ws, v, q));
      break;
    }
    case StoredImage::kPng: {
      Image img{v.width, v.height, v.channels, {}};
      img.pixels.resize(size_t{v.width} * v.height * v.channels);
      for (uint32_t y = 0; y < v.height; ++y) {
        std::memcpy(img.pixels.data() + size_t{y} * v.width * v.channels, v.data + y * v.stride,
                    size_t{v.width} * v.channels);
      }
      DLFS_ASSIGN_OR_RETURN(bytes, EncodePng(img));
      break;
    }
  }
  // A re-encoded JPEG (not resized) that does not shrink: the original.
  if (same_format && !r.resized && !o.always_reencode && bytes.size() >= data.size()) return r;
  r.changed = true;
  r.stored = kind;
  r.bytes = std::move(bytes);
  return r;
}

}  // namespace dlfs
