// Fuzzes pack-time image preparation (dlfs/image_prep.h): PrepareImage on
// any bytes, then the decoder on what it made (raw image headers included:
// the bytes the decode stage parses from a volume). The first kHeaderBytes
// bytes choose the options; the rest is the image (JPEG, PNG or anything).
//   byte 0: max_side 0 (none) or 1 + b % 96
//   byte 1: bits 0-2 mode (keep, jpeg, raw, smart, proportion; 5-7 keep),
//           bits 3-5 filter (bilinear, bicubic, lanczos, box, hamming;
//           5-7 bilinear), bit 6 always re-encode, bit 7 gray (else RGB)
//   byte 2: jpeg_quality 0 (none) or b % 100 + 1 when b >= 128
//   byte 3: bits 0-3 max_pixels = 16 << min(b & 15, 14); bits 4-7 the
//           smart threshold 1 << (b >> 4) and the proportion 1/16 steps
//
// Invariants (a failure aborts: the input is kept as a crash):
// - errors are InvalidArgument with a message, never exceptions or aborts;
// - a prepared image is never larger than the source in either side, its
//   longer side is at most max_side, and it is what PreparedSize says;
// - changed bytes decode (ProbeImage, DecodeImage) to exactly the reported
//   width and height and the channels asked for, and raw ones have the
//   exact raw length; unchanged results carry no bytes;
// - raw image bytes cut, grown or with a damaged header are refused
//   (InvalidArgument), never read past;
// - whatever the input did, the workspace still decodes a valid JPEG to
//   the same pixels as a fresh one (a damaged header once left TurboJPEG's
//   decompressor mid-header: fuzz/regressions/prepare/).
#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "dlfs/decode.h"
#include "dlfs/image_prep.h"
#include "fuzz_util.h"

using namespace dlfs;

namespace {

constexpr size_t kHeaderBytes = 4;

void ExpectRefused(const Status& st, const char* what) {
  if (st.ok()) dlfs::fuzz::Broken(what);
  if (st.code() != StatusCode::kInvalidArgument || st.message().empty()) {
    dlfs::fuzz::Broken("refusal not InvalidArgument with a message");
  }
}

// One workspace for every input, as a decode thread keeps one.
ImageWorkspace& Workspace() {
  static ImageWorkspace ws;
  return ws;
}

// A small valid JPEG (made by the encoder under test) and its pixels as a
// fresh workspace decodes them.
struct Reference {
  std::vector<std::byte> jpeg;
  Image pixels;
};
const Reference& TheReference() {
  static const Reference r = [] {
    Image img{16, 12, 3, std::vector<uint8_t>(16 * 12 * 3)};
    for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(i * 7);
    ImageWorkspace fresh;
    const Result<std::vector<std::byte>> png = EncodePng(img);
    ImagePrepOptions o;
    o.mode = ImageStoreMode::kJpeg;
    const Result<PreparedImage> p =
        png.ok() ? PrepareImage(fresh, *png, o, "", "") : Result<PreparedImage>(png.status());
    if (!p.ok() || !p->changed) dlfs::fuzz::Broken("cannot make the reference JPEG");
    ImageWorkspace other;
    const Result<Image> decoded = DecodeImage(other, p->bytes, {});
    if (!decoded.ok()) dlfs::fuzz::Broken("cannot decode the reference JPEG");
    return Reference{p->bytes, *decoded};
  }();
  return r;
}

void Run(const uint8_t* data, size_t size) {
  if (size < kHeaderBytes) return;
  ImagePrepOptions o;
  o.max_side = data[0] == 0 ? 0 : 1 + data[0] % 96;
  const uint8_t modes = data[1] & 7;
  o.mode = modes <= 4 ? static_cast<ImageStoreMode>(modes) : ImageStoreMode::kKeep;
  const uint8_t filters = (data[1] >> 3) & 7;
  o.filter = filters < 5 ? static_cast<ResizeFilter>(filters + 1) : ResizeFilter::kBilinear;
  o.always_reencode = (data[1] & 0x40) != 0;
  o.color = (data[1] & 0x80) != 0 ? ColorMode::kGray : ColorMode::kRgb;
  o.jpeg_quality = data[2] >= 128 ? data[2] % 100 + 1 : 0;
  o.max_pixels = uint64_t{16} << std::min(data[3] & 15, 14);
  o.smart_threshold = uint64_t{1} << (data[3] >> 4);
  o.jpeg_probability = (data[3] >> 4) / 16.0;
  const std::span<const std::byte> image(reinterpret_cast<const std::byte*>(data) + kHeaderBytes,
                                         size - kHeaderBytes);
  ImageWorkspace& ws = Workspace();
  const Result<PreparedImage> r = PrepareImage(ws, image, o, "sample", "");
  if (!r.ok()) {
    ExpectRefused(r.status(), "PrepareImage refused nothing");
    return;
  }
  const PreparedImage& p = *r;
  uint32_t w = 0, h = 0;
  PreparedSize(p.original.width, p.original.height, o.max_side, &w, &h);
  if (p.width != w || p.height != h || p.width > p.original.width || p.height > p.original.height ||
      p.resized != (w != p.original.width || h != p.original.height)) {
    dlfs::fuzz::Broken("prepared size is not PreparedSize's");
  }
  if (o.max_side != 0 && std::max(p.width, p.height) > o.max_side) {
    dlfs::fuzz::Broken("prepared image above max_side");
  }
  if (!p.changed) {
    if (!p.bytes.empty() || p.resized) dlfs::fuzz::Broken("unchanged image with bytes or resized");
    return;
  }
  DecodeOptions d;
  d.max_pixels = o.max_pixels;
  const Result<ImageInfo> info = ProbeImage(p.bytes, d);
  if (!info.ok() || info->width != p.width || info->height != p.height) {
    dlfs::fuzz::Broken("prepared bytes do not probe to the reported size");
  }
  const uint32_t channels = o.color == ColorMode::kGray ? 1 : 3;
  const Result<Image> img = DecodeImage(ws, p.bytes, d);
  if (!img.ok() || img->width != p.width || img->height != p.height || img->channels != channels) {
    dlfs::fuzz::Broken("prepared bytes do not decode to the reported image");
  }
  if (p.stored != StoredImage::kRaw) return;
  if (p.bytes.size() != 16 + uint64_t{p.width} * p.height * channels) {
    dlfs::fuzz::Broken("raw bytes of the wrong length");
  }
  // Damaged raw bytes: refused, never read past.
  std::vector<std::byte> cut(p.bytes.begin(), p.bytes.end() - 1);
  ExpectRefused(ProbeImage(cut, d).status(), "cut raw image accepted");
  std::vector<std::byte> grown = p.bytes;
  grown.push_back(std::byte{0});
  ExpectRefused(DecodeImage(ws, grown, d).status(), "grown raw image accepted");
  std::vector<std::byte> bad = p.bytes;
  bad[5] = std::byte{2};
  ExpectRefused(ProbeImage(bad, d).status(), "raw image of 2 channels accepted");
}

}  // namespace

// The workspace after the input still decodes the reference as a fresh one.
void CheckWorkspace() {
  const Reference& ref = TheReference();
  const Result<Image> again = DecodeImage(Workspace(), ref.jpeg, {});
  if (!again.ok() || again->pixels != ref.pixels.pixels) {
    dlfs::fuzz::Broken("the workspace no longer decodes a valid JPEG as a fresh one does");
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    Run(data, size);
    CheckWorkspace();
  } catch (const std::exception& e) {
    dlfs::fuzz::Broken(e.what());
  }
  return 0;
}
