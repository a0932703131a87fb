#include "decode/codecs.h"

#include "format/format.h"

// jpeglib.h needs size_t and FILE first.
#include <cstdio>
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on
#include <spng.h>
#include <turbojpeg.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

namespace dlfs {

ImageWorkspace::ImageWorkspace() : state_(std::make_unique<State>()) {}
ImageWorkspace::~ImageWorkspace() {
  if (state_->tj != nullptr) tjDestroy(state_->tj);
  if (state_->tj_compress != nullptr) tjDestroy(state_->tj_compress);
}

namespace decode_internal {

namespace {

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

bool IsJpeg(std::span<const std::byte> d) {
  return d.size() >= 3 && d[0] == std::byte{0xff} && d[1] == std::byte{0xd8} &&
         d[2] == std::byte{0xff};
}
bool IsPng(std::span<const std::byte> d) {
  return d.size() >= 8 && std::memcmp(d.data(), kPngSignature, 8) == 0;
}
bool IsRawImage(std::span<const std::byte> d) {
  return d.size() >= 4 && std::memcmp(d.data(), format::kRawImageMagic, 4) == 0;
}

Status TooLarge(uint64_t w, uint64_t h, const DecodeOptions& o) {
  return Status::InvalidArgument(std::to_string(w) + "x" + std::to_string(h) + " image has " +
                                 std::to_string(w * h) + " pixels, more than the limit of " +
                                 std::to_string(o.max_pixels) + " (DecodeOptions::max_pixels)");
}

Status CheckSize(uint64_t w, uint64_t h, const DecodeOptions& o) {
  if (w == 0 || h == 0) {
    return Status::InvalidArgument("image of " + std::to_string(w) + "x" + std::to_string(h) +
                                   " pixels");
  }
  if (w * h > o.max_pixels) return TooLarge(w, h, o);
  return Status::Ok();
}

// The decoders take the image's size from the caller (ImagePipeline::Execute
// from a SamplePlan, which the Python binding lets users write); pixels are
// read by that size, so a header that disagrees is an error, not a read
// past the decoded image.
Status SameSize(uint64_t w, uint64_t h, const ImageInfo& info) {
  if (w == info.width && h == info.height) return Status::Ok();
  return Status::InvalidArgument("image is " + std::to_string(w) + "x" + std::to_string(h) +
                                 ", not " + std::to_string(info.width) + "x" +
                                 std::to_string(info.height) + " as planned");
}

// Grows `v` to at least `n` elements (never shrinks: the workspace keeps its
// high-water mark so later images reuse the memory).
template <typename T>
T* Reserve(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// ---- JPEG (TurboJPEG) ----------------------------------------------------

Result<tjhandle> Tj(ImageWorkspace::State& ws) {
  if (ws.tj == nullptr) {
    ws.tj = tjInitDecompress();
    if (ws.tj == nullptr) return Status::Unavailable("TurboJPEG: tjInitDecompress failed");
  }
  return static_cast<tjhandle>(ws.tj);
}

// A failed TurboJPEG call, as an error; the workspace's decompressor is
// destroyed (a new one is made by the next Tj()). TurboJPEG 2.1's
// tjDecompressHeader3 returns from an error without aborting libjpeg's
// decompressor, which stays in the middle of the failed header: the next
// image's markers were then read as its continuation ("Bogus Huffman table
// definition"), so one damaged sample made the next valid JPEGs on that
// thread fail.
Status JpegError(ImageWorkspace::State& ws, tjhandle tj, std::string_view what) {
  Status st = Status::InvalidArgument("JPEG: " + std::string(what) + ": " + tjGetErrorStr2(tj));
  tjDestroy(tj);
  ws.tj = nullptr;
  return st;
}

bool IsCmyk(int colorspace) { return colorspace == TJCS_CMYK || colorspace == TJCS_YCCK; }

// A JPEG ends with an EOI marker (FF D9), which cannot occur inside
// entropy-coded data. Checking for it makes a truncated file an error
// whatever region of it a crop decodes (a partial decode may stop above the
// missing part); trailing bytes after the marker (some writers pad) are
// allowed up to 4 KiB.
bool HasEndMarker(std::span<const std::byte> d) {
  const size_t from = d.size() > 4096 ? d.size() - 4096 : 0;
  for (size_t i = d.size(); i-- > from + 1;) {
    if (d[i] == std::byte{0xd9} && d[i - 1] == std::byte{0xff}) return true;
  }
  return false;
}

// Scans a JPEG may have. Each scan of a progressive JPEG is a pass over
// (one component of) the whole image, and a scan can take a dozen bytes, so
// a small file of thousands of scans costs thousands of full passes: a CPU
// bomb. Real encoders write about 10 (libjpeg's progression: 10 for colour,
// 6 for gray); libjpeg-turbo's TJFLAG_LIMITSCANS (TurboJPEG 3:
// TJPARAM_SCANLIMIT) refuses more than 500, the limit kept here.
constexpr int kMaxJpegScans = 500;

// What a walk over a JPEG's markers finds, before any pixel work.
struct JpegWalk {
  int scans = 0;  // start-of-scan markers, counted up to kMaxJpegScans + 1
  // A scan uses a quantization or Huffman table the file has not defined
  // by then (or the markers are too damaged to tell).
  bool borrows_tables = false;
};

// Walks the markers up to the end-of-image marker, as libjpeg reads them:
// marker segments are skipped by their length; between them (entropy-coded
// data, stray bytes) an FF byte followed by 00 (stuffing), D0-D7 (restart)
// or FF (fill) is not a marker, any other is. One pass over the bytes.
//
// Scans: each scan of a progressive JPEG is a pass over (one component of)
// the whole image, and a scan can take a dozen bytes, so a small file of
// thousands of scans costs thousands of full passes: a CPU bomb. Real
// encoders write about 10 (libjpeg's progression: 10 for colour, 6 for
// gray); libjpeg-turbo's TJFLAG_LIMITSCANS (TurboJPEG 3: TJPARAM_SCANLIMIT)
// refuses more than 500, the limit kept here. Why not rely on it (Debian
// 12's TurboJPEG 2.1.5 has it) or libjpeg's progress monitor, both kept
// below as a second line: they count the scans as libjpeg decodes them, so
// a file is refused only after 500 entropy-decoding passes over the image.
// Counting markers first refuses it in microseconds.
//
// Tables: libjpeg keeps the quantization and Huffman tables a decompressor
// has read until it is destroyed (for "abbreviated" streams that rely on
// tables sent before). A workspace's decompressor, reused from image to
// image, would decode a file that lacks a table with the previous file's:
// a wrong image, and a different one on each thread (found by the decode
// fuzzer). A file that borrows is decoded by a fresh decompressor instead,
// which refuses a missing quantization table and takes libjpeg's standard
// Huffman tables, as any decoder does.
JpegWalk WalkJpeg(std::span<const std::byte> data) {
  const auto* d = reinterpret_cast<const uint8_t*>(data.data());
  const size_t n = data.size();
  JpegWalk walk;
  bool quant[4] = {}, huff[2][4] = {};
  bool arithmetic = false;
  uint8_t component_ids[4] = {}, component_quant[4] = {};
  size_t components = 0;
  auto borrows = [&] { walk.borrows_tables = true; };
  size_t i = 2;  // after SOI
  while (i + 1 < n) {
    const void* ff = std::memchr(d + i, 0xff, n - i - 1);
    if (ff == nullptr) break;
    i = static_cast<size_t>(static_cast<const uint8_t*>(ff) - d);
    const uint8_t m = d[i + 1];
    if (m == 0xff) {  // fill byte: the marker follows
      ++i;
      continue;
    }
    if (m == 0xd9) break;                                      // EOI
    if (m == 0x00 || m == 0x01 || (m >= 0xd0 && m <= 0xd8)) {  // no length
      i += 2;
      continue;
    }
    if (m == 0xda && ++walk.scans > kMaxJpegScans) break;
    if (i + 3 >= n) break;
    const size_t length = size_t{d[i + 2]} << 8 | d[i + 3];
    const size_t begin = i + 4, end = std::min(n, i + 2 + length);
    if (length < 2 || i + 2 + length > n) borrows();  // libjpeg will fail: let a fresh one
    if (m == 0xdb) {  // DQT: (precision << 4 | id, 64 or 128 bytes)...
      for (size_t at = begin; at < end;) {
        const uint8_t id = d[at] & 0x0f;
        if (id < 4) quant[id] = true;
        at += 1 + ((d[at] >> 4) ? 128 : 64);
      }
    } else if (m == 0xc4) {  // DHT: (class << 4 | id, 16 counts, the symbols)...
      for (size_t at = begin; at + 17 <= end;) {
        const uint8_t cls = d[at] >> 4, id = d[at] & 0x0f;
        if (cls < 2 && id < 4) huff[cls][id] = true;
        size_t symbols = 0;
        for (size_t k = 1; k <= 16; ++k) symbols += d[at + k];
        at += 17 + symbols;
      }
    } else if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) {  // SOFn
      arithmetic = m >= 0xc9;
      components = 0;
      // (precision, height, width, count), then (id, sampling, table) each.
      for (size_t at = begin + 6; at + 3 <= end && components < 4; at += 3) {
        component_ids[components] = d[at];
        component_quant[components++] = d[at + 2];
      }
    } else if (m == 0xda) {
      // SOS: count, (component id, DC table << 4 | AC table) each, then the
      // spectral selection Ss, Se and the approximation Ah << 4 | Al. A DC
      // table is used by the first pass over the DC coefficients (Ss 0,
      // Ah 0), an AC table by any pass over AC ones (Se > 0).
      const size_t count = begin < end ? d[begin] : 0;
      const size_t spectral = begin + 1 + 2 * count;
      if (spectral + 3 > end) {
        borrows();
      } else {
        const bool dc = d[spectral] == 0 && (d[spectral + 2] >> 4) == 0;
        const bool ac = d[spectral + 1] > 0;
        for (size_t k = 0, at = begin + 1; k < count; ++k, at += 2) {
          bool found = false;
          for (size_t c = 0; c < components; ++c) {
            if (component_ids[c] != d[at]) continue;
            found = true;
            if (component_quant[c] >= 4 || !quant[component_quant[c]]) borrows();
          }
          const uint8_t dc_table = d[at + 1] >> 4, ac_table = d[at + 1] & 0x0f;
          if (!found || (!arithmetic && dc && (dc_table >= 4 || !huff[0][dc_table])) ||
              (!arithmetic && ac && (ac_table >= 4 || !huff[1][ac_table]))) {
            borrows();
          }
        }
      }
    }
    i += 2 + length;
  }
  return walk;
}

// Refuses a file of too many scans (WalkJpeg), and gives one that borrows
// tables a fresh decompressor (made by the next Tj()).
Status CheckJpeg(ImageWorkspace::State& ws, std::span<const std::byte> data) {
  const JpegWalk walk = WalkJpeg(data);
  if (walk.scans > kMaxJpegScans) {
    return Status::InvalidArgument("JPEG: more than " + std::to_string(kMaxJpegScans) +
                                   " scans (refused before decoding: each scan of a progressive "
                                   "JPEG is a pass over the image)");
  }
  if (walk.borrows_tables && ws.tj != nullptr) {
    tjDestroy(ws.tj);
    ws.tj = nullptr;
  }
  return Status::Ok();
}

Result<ImageInfo> ProbeJpeg(ImageWorkspace::State& ws, std::span<const std::byte> data,
                            const DecodeOptions& o) {
  if (!HasEndMarker(data)) {
    return Status::InvalidArgument(
        "JPEG: truncated (no end-of-image marker in the last 4096 bytes)");
  }
  DLFS_RETURN_IF_ERROR(CheckJpeg(ws, data));
  DLFS_ASSIGN_OR_RETURN(tjhandle tj, Tj(ws));
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj, reinterpret_cast<const unsigned char*>(data.data()), data.size(), &w,
                          &h, &subsamp, &colorspace) != 0) {
    return JpegError(ws, tj, "bad header");
  }
  DLFS_RETURN_IF_ERROR(
      CheckSize(static_cast<uint32_t>(w), static_cast<uint32_t>(h), o).WithContext("JPEG"));
  ImageInfo info;
  info.format = ImageFormat::kJpeg;
  info.width = static_cast<uint32_t>(w);
  info.height = static_cast<uint32_t>(h);
  info.channels = colorspace == TJCS_GRAY ? 1 : 3;
  return info;
}

// libjpeg reports damaged data as warnings and goes on, filling what is
// missing with gray: a silently wrong image. Only a warning known to leave
// the pixels intact is accepted (stray bytes between markers, common in
// real collections: PIL ignores it too).
bool HarmlessWarning(tjhandle tj) {
  return std::strstr(tjGetErrorStr2(tj), "extraneous bytes before marker") != nullptr;
}

// PIL's CMYK -> RGB (Convert.c cmyk2rgb) after reading Adobe's inverted
// CMYK ("CMYK;I", which PIL assumes for every CMYK JPEG).
void CmykToRgb(const uint8_t* in, uint8_t* out, size_t pixels) {
  for (size_t i = 0; i < pixels; ++i, in += 4, out += 3) {
    const int nk = in[3];  // 255 - k, with k = 255 - stored
    for (int c = 0; c < 3; ++c) {
      const int v = 255 - in[c];   // un-invert
      const int m = v * nk + 128;  // MULDIV255(v, nk)
      const int muldiv = ((m >> 8) + m) >> 8;
      const int r = nk - muldiv;
      out[c] = static_cast<uint8_t>(r < 0 ? 0 : r > 255 ? 255 : r);
    }
  }
}

Result<PixelView> DecodeJpeg(ImageWorkspace::State& ws, std::span<const std::byte> data,
                             const ImageInfo& info, uint32_t scale_denom, uint32_t channels) {
  // Again here: ImagePipeline::Execute decodes without a probe.
  DLFS_RETURN_IF_ERROR(CheckJpeg(ws, data));
  DLFS_ASSIGN_OR_RETURN(tjhandle tj, Tj(ws));
  const auto* buf = reinterpret_cast<const unsigned char*>(data.data());
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj, buf, data.size(), &w, &h, &subsamp, &colorspace) != 0) {
    return JpegError(ws, tj, "bad header");
  }
  DLFS_RETURN_IF_ERROR(SameSize(w, h, info).WithContext("JPEG"));
  const uint32_t sw = ScaledDim(info.width, scale_denom);
  const uint32_t sh = ScaledDim(info.height, scale_denom);
  const bool cmyk = IsCmyk(colorspace);
  const int pf = cmyk ? TJPF_CMYK : channels == 1 ? TJPF_GRAY : TJPF_RGB;
  const uint32_t pixel_bytes = cmyk ? 4 : channels;
  uint8_t* out = Reserve(cmyk ? ws.convert : ws.pixels, size_t{sw} * sh * pixel_bytes);
  // Accurate integer IDCT and fancy upsampling: TurboJPEG's defaults, and
  // what PIL asks libjpeg for. LIMITSCANS: the scan limit again, as libjpeg
  // counts (CheckJpeg has refused such files already).
  if (tjDecompress2(tj, buf, data.size(), out, static_cast<int>(sw), 0, static_cast<int>(sh), pf,
                    TJFLAG_LIMITSCANS) != 0) {
    if (tjGetErrorCode(tj) != TJERR_WARNING || !HarmlessWarning(tj)) {
      return JpegError(ws, tj, "cannot decode");
    }
  }
  if (cmyk) {
    uint8_t* rgb = Reserve(ws.pixels, size_t{sw} * sh * 3);
    CmykToRgb(out, rgb, size_t{sw} * sh);
    if (channels == 1) {
      for (size_t i = 0; i < size_t{sw} * sh; ++i) {
        rgb[i] = Luma(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]);
      }
    }
    out = rgb;
  }
  return PixelView{out, sw, sh, channels, size_t{sw} * channels};
}

// ---- JPEG regions (libjpeg-turbo's libjpeg API) ----------------------------
//
// TurboJPEG 2.1 decodes whole images only; for a crop, libjpeg's partial
// decompression skips the IDCT, upsampling and colour conversion of the
// columns outside it and all work below it. Errors leave through longjmp
// (libjpeg's way), so DecodeJpegRegion keeps no C++ objects with
// destructors alive across the calls that may jump.

struct JpegErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

struct JpegScanLimit {
  jpeg_progress_mgr pub;
  JpegErrorMgr* error;
};

[[noreturn]] void JpegErrorExit(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegErrorMgr*>(cinfo->err);
  cinfo->err->format_message(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings mean damaged data (see HarmlessWarning): fail, except for stray
// bytes between markers.
void JpegEmitMessage(j_common_ptr cinfo, int level) {
  if (level >= 0 || cinfo->err->msg_code == JWRN_EXTRANEOUS_DATA) return;
  JpegErrorExit(cinfo);
}

// TurboJPEG's TJFLAG_LIMITSCANS for the libjpeg API: the scan limit again,
// as libjpeg counts (CheckJpeg has refused such files already).
void JpegProgress(j_common_ptr cinfo) {
  auto* p = reinterpret_cast<JpegScanLimit*>(cinfo->progress);
  if (cinfo->is_decompressor &&
      reinterpret_cast<j_decompress_ptr>(cinfo)->input_scan_number > kMaxJpegScans) {
    std::snprintf(p->error->message, sizeof p->error->message,
                  "progressive JPEG with more than %d scans", kMaxJpegScans);
    std::longjmp(p->error->jump, 1);
  }
}

// Decodes rows [y0, y1) and at least columns [x0, x1) of the image scaled
// by 1/scale_denom into `out` (grown as needed); *rx and *width receive the
// decoded columns (rx <= x0: libjpeg starts at an iMCU boundary). Returns
// nullptr on success, else the error text in `error`.
const char* DecodeJpegRegion(const unsigned char* data, size_t size, uint32_t scale_denom,
                             int color_space, uint32_t pixel_bytes, uint32_t x0, uint32_t y0,
                             uint32_t x1, uint32_t y1, std::vector<uint8_t>& out, uint32_t* rx,
                             uint32_t* width, JpegErrorMgr& error) {
  jpeg_decompress_struct cinfo;
  JpegScanLimit limit;
  cinfo.err = jpeg_std_error(&error.pub);
  error.pub.error_exit = JpegErrorExit;
  error.pub.emit_message = JpegEmitMessage;
  limit.pub.progress_monitor = JpegProgress;
  limit.error = &error;
  jpeg_create_decompress(&cinfo);
  if (setjmp(error.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return error.message;
  }
  cinfo.progress = &limit.pub;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  // As TurboJPEG (and PIL) decode: accurate integer IDCT, fancy upsampling.
  cinfo.out_color_space = static_cast<J_COLOR_SPACE>(color_space);
  cinfo.scale_num = 1;
  cinfo.scale_denom = scale_denom;
  cinfo.dct_method = JDCT_ISLOW;
  cinfo.do_fancy_upsampling = TRUE;
  jpeg_start_decompress(&cinfo);
  // Partial-width decoding may compute the region's edge columns as image
  // edges (fancy upsampling): ask for a column more on each side than is
  // used, so the used ones are exactly a full decode's.
  JDIMENSION xoff = x0 > 0 ? x0 - 1 : 0;
  JDIMENSION w = std::min<JDIMENSION>(cinfo.output_width, x1 + 2) - xoff;
  if (w < cinfo.output_width) jpeg_crop_scanline(&cinfo, &xoff, &w);
  const size_t row = size_t{cinfo.output_width} * pixel_bytes;
  if (out.size() < row * (y1 - y0)) out.resize(row * (y1 - y0));
  if (y0 > 0) jpeg_skip_scanlines(&cinfo, y0);
  while (cinfo.output_scanline < y1) {
    JSAMPROW dst = out.data() + row * (cinfo.output_scanline - y0);
    jpeg_read_scanlines(&cinfo, &dst, 1);
  }
  *rx = xoff;
  *width = cinfo.output_width;
  jpeg_abort_decompress(&cinfo);  // the rows below are not needed
  jpeg_destroy_decompress(&cinfo);
  return nullptr;
}

// ---- PNG (libspng) -------------------------------------------------------

struct SpngDeleter {
  void operator()(spng_ctx* c) const { spng_ctx_free(c); }
};
using SpngCtx = std::unique_ptr<spng_ctx, SpngDeleter>;

Status PngError(int err, std::string_view what) {
  return Status::InvalidArgument("PNG: " + std::string(what) + ": " + spng_strerror(err));
}

// A decoder context for `data` whose header has been read and checked.
Result<SpngCtx> OpenPng(std::span<const std::byte> data, const DecodeOptions& o, spng_ihdr* ihdr) {
  SpngCtx ctx(spng_ctx_new(0));
  if (!ctx) return Status::Unavailable("PNG: spng_ctx_new failed");
  // Ancillary chunks (text, ICC profiles) are not needed: cap what a file
  // may make the decoder hold, so hostile chunks cost little memory.
  spng_set_chunk_limits(ctx.get(), size_t{1} << 24, size_t{1} << 26);
  int err = spng_set_png_buffer(ctx.get(), data.data(), data.size());
  if (err == 0) err = spng_get_ihdr(ctx.get(), ihdr);
  if (err != 0) return PngError(err, "bad header");
  DLFS_RETURN_IF_ERROR(CheckSize(ihdr->width, ihdr->height, o).WithContext("PNG"));
  return ctx;
}

Result<ImageInfo> ProbePng(std::span<const std::byte> data, const DecodeOptions& o) {
  spng_ihdr ihdr{};
  DLFS_ASSIGN_OR_RETURN(SpngCtx ctx, OpenPng(data, o, &ihdr));
  ImageInfo info;
  info.format = ImageFormat::kPng;
  info.width = ihdr.width;
  info.height = ihdr.height;
  info.channels = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE ||
                          ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA
                      ? 1
                      : 3;
  return info;
}

// Writes `pixels` samples of `in_channels` channels (gray, gray+alpha, RGB
// or RGBA, `sample_bytes` 1 or 2 host-endian) as `channels` 8-bit channels:
// 16-bit samples keep their high byte (PIL's "RGB;16B" unpacking) — except
// 16-bit gray with `clip16`, which is clipped to 255 as PIL converts its
// mode "I" — alpha is dropped, gray is replicated, colour becomes PIL's luma.
void Convert(const uint8_t* in, uint32_t in_channels, uint32_t sample_bytes, uint8_t* out,
             uint32_t channels, size_t pixels, bool clip16 = false) {
  const bool color_in = in_channels >= 3;
  const bool clip = clip16 && in_channels == 1;
  auto at = [&](size_t i, uint32_t c) -> uint8_t {
    if (sample_bytes == 1) return in[i * in_channels + c];
    uint16_t v;
    std::memcpy(&v, in + 2 * (i * in_channels + c), 2);
    if (clip) return static_cast<uint8_t>(v > 255 ? 255 : v);
    return static_cast<uint8_t>(v >> 8);
  };
  for (size_t i = 0; i < pixels; ++i) {
    if (color_in && channels == 3) {
      out[3 * i] = at(i, 0);
      out[3 * i + 1] = at(i, 1);
      out[3 * i + 2] = at(i, 2);
    } else if (color_in) {
      out[i] = Luma(at(i, 0), at(i, 1), at(i, 2));
    } else if (channels == 3) {
      out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = at(i, 0);
    } else {
      out[i] = at(i, 0);
    }
  }
}

Result<PixelView> DecodePng(ImageWorkspace::State& ws, std::span<const std::byte> data,
                            const ImageInfo& info, const DecodeOptions& o, uint32_t channels) {
  spng_ihdr ihdr{};
  DLFS_ASSIGN_OR_RETURN(SpngCtx ctx, OpenPng(data, o, &ihdr));
  DLFS_RETURN_IF_ERROR(SameSize(ihdr.width, ihdr.height, info).WithContext("PNG"));
  const size_t pixels = size_t{ihdr.width} * ihdr.height;
  // Palette images and gray below 8 bits are expanded by spng (RGB8, G8:
  // palette lookup, bit-depth scaling as PIL's "L;2"/"L;4"/"1" unpacking);
  // everything else is decoded in its own layout and converted here.
  int fmt = SPNG_FMT_PNG;
  uint32_t in_channels = 0, sample_bytes = ihdr.bit_depth == 16 ? 2 : 1;
  switch (ihdr.color_type) {
    case SPNG_COLOR_TYPE_INDEXED:
      fmt = SPNG_FMT_RGB8, in_channels = 3, sample_bytes = 1;
      break;
    case SPNG_COLOR_TYPE_GRAYSCALE:
      in_channels = 1;
      if (ihdr.bit_depth < 8) fmt = SPNG_FMT_G8, sample_bytes = 1;
      break;
    case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA:
      in_channels = 2;
      break;
    case SPNG_COLOR_TYPE_TRUECOLOR:
      in_channels = 3;
      break;
    case SPNG_COLOR_TYPE_TRUECOLOR_ALPHA:
      in_channels = 4;
      break;
    default:
      return Status::InvalidArgument("PNG: unknown color type " + std::to_string(ihdr.color_type));
  }
  size_t len = 0;
  int err = spng_decoded_image_size(ctx.get(), fmt, &len);
  if (err != 0) return PngError(err, "cannot decode");
  if (len != pixels * in_channels * sample_bytes) {
    return Status::InvalidArgument("PNG: unexpected decoded size");
  }
  // Straight into the result when no conversion is needed.
  const bool direct = sample_bytes == 1 && in_channels == channels;
  uint8_t* dst = Reserve(direct ? ws.pixels : ws.convert, len);
  err = spng_decode_image(ctx.get(), dst, len, fmt, 0);
  if (err != 0) return PngError(err, "cannot decode");
  if (!direct) {
    Convert(dst, in_channels, sample_bytes, Reserve(ws.pixels, pixels * channels), channels, pixels,
            o.pil_gray16);
  }
  return PixelView{ws.pixels.data(), ihdr.width, ihdr.height, channels,
                   size_t{ihdr.width} * channels};
}

// ---- raw -------------------------------------------------------------------

// Headerless raw pixels of the options' shape.
Status CheckRaw(std::span<const std::byte> data, const DecodeOptions& o) {
  const RawShape& r = o.raw;
  if (r.empty()) {
    return Status::InvalidArgument("raw sample but no raw shape given (DecodeOptions::raw)");
  }
  const uint64_t want = uint64_t{r.height} * r.width * r.channels;
  if (data.size() != want) {
    return Status::InvalidArgument("raw sample of " + std::to_string(data.size()) +
                                   " bytes, expected " + std::to_string(r.height) + "x" +
                                   std::to_string(r.width) + "x" + std::to_string(r.channels) +
                                   " = " + std::to_string(want));
  }
  return CheckSize(r.width, r.height, o).WithContext("raw");
}

// Raw pixels of `data`: with a header (no shape given), or of the options'
// shape.
Result<RawPixels> RawOf(std::span<const std::byte> data, const DecodeOptions& o) {
  if (o.raw.empty()) return ParseRawImage(data, o.max_pixels);
  DLFS_RETURN_IF_ERROR(CheckRaw(data, o));
  return RawPixels{reinterpret_cast<const uint8_t*>(data.data()), o.raw.width, o.raw.height,
                   o.raw.channels};
}

}  // namespace

bool JpegBorrowsTables(std::span<const std::byte> data) { return WalkJpeg(data).borrows_tables; }

Result<RawPixels> ParseRawImage(std::span<const std::byte> data, uint64_t max_pixels) {
  format::RawImageHeader h;
  if (data.size() < sizeof h) {
    return Status::InvalidArgument("raw image: " + std::to_string(data.size()) +
                                   " bytes, shorter than its 16-byte header");
  }
  std::memcpy(&h, data.data(), sizeof h);
  if (std::memcmp(h.magic, format::kRawImageMagic, 4) != 0) {
    return Status::InvalidArgument("raw image: bad magic (no raw image header)");
  }
  if (h.version != format::kRawImageVersion) {
    return Status::InvalidArgument("raw image: version " + std::to_string(h.version) +
                                   " is not supported (1 is)");
  }
  if (h.channels != 1 && h.channels != 3) {
    return Status::InvalidArgument("raw image: " + std::to_string(h.channels) +
                                   " channels (1 or 3)");
  }
  if (h.reserved != 0) return Status::InvalidArgument("raw image: reserved bytes not zero");
  DecodeOptions limit;
  limit.max_pixels = max_pixels;
  DLFS_RETURN_IF_ERROR(CheckSize(h.width, h.height, limit).WithContext("raw image"));
  // At most max_pixels * 3 (< 2^64 for any limit below 2^62), then compared.
  const uint64_t want = uint64_t{h.width} * h.height * h.channels;
  if (data.size() - sizeof h != want) {
    return Status::InvalidArgument("raw image: " + std::to_string(data.size() - sizeof h) +
                                   " bytes of pixels, expected " + std::to_string(h.height) + "x" +
                                   std::to_string(h.width) + "x" + std::to_string(h.channels) +
                                   " = " + std::to_string(want));
  }
  return RawPixels{reinterpret_cast<const uint8_t*>(data.data()) + sizeof h, h.width, h.height,
                   h.channels};
}

std::vector<std::byte> RawImageBytes(const uint8_t* pixels, uint32_t width, uint32_t height,
                                     uint32_t channels, size_t stride) {
  format::RawImageHeader h{};
  std::memcpy(h.magic, format::kRawImageMagic, 4);
  h.version = format::kRawImageVersion;
  h.channels = static_cast<uint8_t>(channels);
  h.height = height;
  h.width = width;
  const size_t row = size_t{width} * channels;
  std::vector<std::byte> out(sizeof h + row * height);
  std::memcpy(out.data(), &h, sizeof h);
  for (uint32_t y = 0; y < height; ++y) {
    std::memcpy(out.data() + sizeof h + y * row, pixels + y * stride, row);
  }
  return out;
}

Result<ImageFormat> DetectFormat(std::span<const std::byte> data, const DecodeOptions& o) {
  if (o.format != ImageFormat::kAuto) return o.format;
  if (IsJpeg(data)) return ImageFormat::kJpeg;
  if (IsPng(data)) return ImageFormat::kPng;
  // An explicit shape first: headerless pixels may start with anything.
  if (!o.raw.empty() || IsRawImage(data)) return ImageFormat::kRaw;
  char head[40] = "";
  for (size_t i = 0; i < data.size() && i < 8; ++i) {
    std::snprintf(head + 3 * i, 4, "%s%02x", i ? " " : "", static_cast<unsigned>(data[i]));
  }
  return Status::InvalidArgument("neither JPEG nor PNG (" + std::to_string(data.size()) +
                                 " bytes, starting " + (data.empty() ? "empty" : head) +
                                 "), nor raw pixels with a header, and no raw shape given");
}

Result<ImageInfo> Probe(ImageWorkspace::State& ws, std::span<const std::byte> data,
                        const DecodeOptions& o) {
  DLFS_ASSIGN_OR_RETURN(ImageFormat format, DetectFormat(data, o));
  switch (format) {
    case ImageFormat::kJpeg:
      if (!IsJpeg(data)) return Status::InvalidArgument("not a JPEG (no SOI marker)");
      return ProbeJpeg(ws, data, o);
    case ImageFormat::kPng:
      if (!IsPng(data)) return Status::InvalidArgument("not a PNG (no PNG signature)");
      return ProbePng(data, o);
    case ImageFormat::kRaw: {
      DLFS_ASSIGN_OR_RETURN(const RawPixels raw, RawOf(data, o));
      return ImageInfo{ImageFormat::kRaw, raw.width, raw.height, raw.channels};
    }
    case ImageFormat::kAuto:
      break;
  }
  return Status::InvalidArgument("unknown image format");
}

Result<PixelView> Decode(ImageWorkspace::State& ws, std::span<const std::byte> data,
                         const ImageInfo& info, const DecodeOptions& o, uint32_t scale_denom,
                         uint32_t channels) {
  switch (info.format) {
    case ImageFormat::kJpeg:
      return DecodeJpeg(ws, data, info, scale_denom, channels);
    case ImageFormat::kPng:
      return DecodePng(ws, data, info, o, channels);
    case ImageFormat::kRaw: {
      // Not decoded: the pixels are used where they lie (converted only to
      // other channels).
      DLFS_ASSIGN_OR_RETURN(const RawPixels raw, RawOf(data, o));
      DLFS_RETURN_IF_ERROR(SameSize(raw.width, raw.height, info).WithContext("raw"));
      if (raw.channels == channels) {
        return PixelView{raw.pixels, info.width, info.height, channels,
                         size_t{info.width} * channels};
      }
      const size_t pixels = size_t{info.width} * info.height;
      Convert(raw.pixels, raw.channels, 1, Reserve(ws.pixels, pixels * channels), channels, pixels);
      return PixelView{ws.pixels.data(), info.width, info.height, channels,
                       size_t{info.width} * channels};
    }
    case ImageFormat::kAuto:
      break;
  }
  return Status::InvalidArgument("unknown image format");
}

Result<DecodedRegion> DecodeRegion(ImageWorkspace::State& ws, std::span<const std::byte> data,
                                   const ImageInfo& info, const DecodeOptions& o,
                                   uint32_t scale_denom, uint32_t channels, uint32_t x0,
                                   uint32_t y0, uint32_t x1, uint32_t y1) {
  const uint32_t sw = ScaledDim(info.width, scale_denom);
  const uint32_t sh = ScaledDim(info.height, scale_denom);
  // A region of most of the image is decoded whole, through TurboJPEG.
  const bool partial = info.format == ImageFormat::kJpeg &&
                       uint64_t{x1 - x0} * (y1 - y0) * 10 < uint64_t{sw} * sh * 9;
  if (!partial) {
    DLFS_ASSIGN_OR_RETURN(PixelView v, Decode(ws, data, info, o, scale_denom, channels));
    return DecodedRegion{v, 0, 0};
  }
  DLFS_RETURN_IF_ERROR(CheckJpeg(ws, data));
  DLFS_ASSIGN_OR_RETURN(tjhandle tj, Tj(ws));
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  const auto* buf = reinterpret_cast<const unsigned char*>(data.data());
  if (tjDecompressHeader3(tj, buf, data.size(), &w, &h, &subsamp, &colorspace) != 0) {
    return JpegError(ws, tj, "bad header");
  }
  DLFS_RETURN_IF_ERROR(SameSize(w, h, info).WithContext("JPEG"));
  const bool cmyk = IsCmyk(colorspace);
  const int space = cmyk ? JCS_CMYK : channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  const uint32_t pixel_bytes = cmyk ? 4 : channels;
  JpegErrorMgr error;
  uint32_t rx = 0, width = 0;
  if (const char* e = DecodeJpegRegion(buf, data.size(), scale_denom, space, pixel_bytes, x0, y0,
                                       x1, y1, cmyk ? ws.convert : ws.pixels, &rx, &width, error)) {
    return Status::InvalidArgument(std::string("JPEG: cannot decode: ") + e);
  }
  const size_t pixels = size_t{width} * (y1 - y0);
  if (cmyk) {
    uint8_t* rgb = Reserve(ws.pixels, pixels * 3);
    CmykToRgb(ws.convert.data(), rgb, pixels);
    if (channels == 1) {
      for (size_t i = 0; i < pixels; ++i) rgb[i] = Luma(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]);
    }
  }
  return DecodedRegion{
      PixelView{ws.pixels.data(), width, y1 - y0, channels, size_t{width} * channels}, rx, y0};
}

}  // namespace decode_internal
}  // namespace dlfs
