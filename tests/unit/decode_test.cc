// The decode module: option checks, the specified random choices, geometry
// invariants, DecodeStage batches (order, labels, determinism across thread
// counts, errors, skipping), and malformed and hostile images. Equality with
// PIL and torchvision is checked from Python (tests/python/test_decode.py).
#include <turbojpeg.h>
#include <zlib.h>

// jpeglib.h needs size_t and FILE first.
#include <cstdio>
// clang-format off
#include <jpeglib.h>
// clang-format on

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "decode/codecs.h"
#include "decode/store.h"
#include "dlfs/builder.h"
#include "dlfs/decode.h"
#include "dlfs/decode_stage.h"
#include "dlfs/loader.h"
#include "image_fixtures.h"
#include "testutil.h"

namespace dlfs {
namespace decode_test {

using testing::Gradient;
using testing::Jpeg;
using testing::Png;
using testing::StatusIs;
using testing::TempDir;

ImageOptions Options(uint32_t size, CropMode crop = CropMode::kCenter) {
  ImageOptions o;
  o.transform.size = size;
  o.transform.crop = crop;
  return o;
}

ImagePipeline MakePipeline(const ImageOptions& o) {
  auto p = ImagePipeline::Create(o);
  EXPECT_OK(p);
  return std::move(p).value();
}

TEST(ImagePipelineTest, RejectsBadOptions) {
  // ImagePipeline::Create(Options(32) changed by `edit`) as a Status.
  auto bad = [](auto edit) -> Status {
    ImageOptions o = Options(32);
    edit(o);
    return ImagePipeline::Create(o).status();
  };
  EXPECT_THAT(bad([](ImageOptions& o) { o.transform.size = 0; }),
              StatusIs(StatusCode::kInvalidArgument, "image size must be at least 1"));
  EXPECT_THAT(bad([](ImageOptions& o) { o.transform.resize = 16; }),
              StatusIs(StatusCode::kInvalidArgument, "resize 16 is smaller than the crop size 32"));
  EXPECT_THAT(bad([](ImageOptions& o) { o.transform.random_resized.scale_min = 0; }),
              StatusIs(StatusCode::kInvalidArgument,
                       "RandomResizedCrop scale must satisfy 0 < min <= max <= 1"));
  EXPECT_THAT(bad([](ImageOptions& o) { o.transform.random_resized.ratio_max = 0.5; }),
              StatusIs(StatusCode::kInvalidArgument,
                       "RandomResizedCrop ratio must satisfy 0 < min <= max"));
  EXPECT_THAT(bad([](ImageOptions& o) { o.output.mean = {0.5f}; }),
              StatusIs(StatusCode::kInvalidArgument, "mean and std need float32 output"));
  EXPECT_THAT(bad([](ImageOptions& o) {
                o.output.dtype = DType::kFloat32;
                o.output.mean = {0.1f, 0.2f};
              }),
              StatusIs(StatusCode::kInvalidArgument,
                       "mean and std take 1 value or one per channel (3), not 2"));
  EXPECT_THAT(bad([](ImageOptions& o) {
                o.output.dtype = DType::kFloat32;
                o.output.std = {0.f};
              }),
              StatusIs(StatusCode::kInvalidArgument, "std must be finite and non-zero"));
  // Raw without a shape reads raw pixels with their own header (image_prep_test.cc).
  ImageOptions raw = Options(32);
  raw.decode.format = ImageFormat::kRaw;
  EXPECT_OK(ImagePipeline::Create(raw));
  EXPECT_THAT(bad([](ImageOptions& o) {
                o.decode.raw = {4, 4, 2};
              }),
              StatusIs(StatusCode::kInvalidArgument, "raw samples have 1 or 3 channels, not 2"));
  EXPECT_OK(ImagePipeline::Create(Options(32)));
}

TEST(RandomChoicesTest, PureFunctionOfSeedEpochIndex) {
  const RandomResizedCropOptions o;
  std::set<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>> boxes;
  int flips = 0;
  for (uint64_t i = 0; i < 2000; ++i) {
    const RandomChoices a = DrawRandomChoices(7, 3, i, 500, 375, o);
    const RandomChoices b = DrawRandomChoices(7, 3, i, 500, 375, o);
    EXPECT_EQ(a.flip, b.flip);
    EXPECT_EQ(a.box.top, b.box.top);
    EXPECT_EQ(a.box.width, b.box.width);
    ASSERT_GT(a.box.width, 0u);
    ASSERT_GT(a.box.height, 0u);
    ASSERT_LE(a.box.left + a.box.width, 500u);
    ASSERT_LE(a.box.top + a.box.height, 375u);
    const double area = double(a.box.width) * a.box.height / (500.0 * 375.0);
    // Rounding to whole pixels moves the area a little past the bounds.
    EXPECT_GE(area, 0.07);
    EXPECT_LE(area, 1.0);
    boxes.insert({a.box.top, a.box.left, a.box.height, a.box.width});
    flips += a.flip;
  }
  EXPECT_GT(boxes.size(), 1900u);  // varied
  EXPECT_NEAR(flips, 1000, 150);   // p = 0.5
  // Another seed, epoch or index gives other choices.
  const RandomChoices base = DrawRandomChoices(7, 3, 5, 500, 375, o);
  for (auto [s, e, i] : {std::tuple{8, 3, 5}, {7, 4, 5}, {7, 3, 6}}) {
    const RandomChoices other = DrawRandomChoices(s, e, i, 500, 375, o);
    EXPECT_FALSE(other.box.top == base.box.top && other.box.left == base.box.left &&
                 other.box.width == base.box.width)
        << s << " " << e << " " << i;
  }
}

TEST(RandomChoicesTest, CentralFallbackForExtremeAspect) {
  // A 1000 x 10 strip: no attempt fits (h would exceed 10 for most draws
  // at ratio <= 4/3 ... and the fallback is the central 4/3 crop).
  RandomResizedCropOptions o;
  o.attempts = 0;  // straight to the fallback
  const RandomChoices wide = DrawRandomChoices(0, 0, 0, 1000, 10, o);
  EXPECT_EQ(wide.box.height, 10u);
  EXPECT_EQ(wide.box.width, 13u);  // round(10 * 4/3)
  EXPECT_EQ(wide.box.left, (1000u - 13u) / 2);
  const RandomChoices tall = DrawRandomChoices(0, 0, 0, 10, 1000, o);
  EXPECT_EQ(tall.box.width, 10u);
  EXPECT_EQ(tall.box.height, 13u);  // round(10 / (3/4))
  const RandomChoices square = DrawRandomChoices(0, 0, 0, 50, 50, o);
  EXPECT_EQ(square.box.width, 50u);
  EXPECT_EQ(square.box.height, 50u);
}

TEST(ImagePipelineTest, CenterPlanFollowsTorchvisionResize) {
  ImageOptions o = Options(224);
  o.transform.resize = 256;
  const ImagePipeline p = MakePipeline(o);
  // 500 x 375 -> shorter side 256: int(256 * 500 / 375) = 341 wide.
  const SamplePlan plan = p.Plan({ImageFormat::kPng, 500, 375, 3}, 0, 0);
  EXPECT_EQ(plan.resized_width, 341u);
  EXPECT_EQ(plan.resized_height, 256u);
  EXPECT_EQ(plan.window_left, 58u);  // round(117 / 2) = 58 (half to even)
  EXPECT_EQ(plan.window_top, 16u);
  EXPECT_EQ(plan.box.width, 500u);
  EXPECT_FALSE(plan.flip);
  // JPEGs much larger than the output are decoded at a reduced scale, as
  // PIL's draft() would choose it.
  const SamplePlan big = p.Plan({ImageFormat::kJpeg, 2100, 1600, 3}, 0, 0);
  EXPECT_EQ(big.scale_denom, 4u);  // min(2100 // 336, 1600 // 256) = 6 -> 4
  const SamplePlan small = p.Plan({ImageFormat::kJpeg, 500, 375, 3}, 0, 0);
  EXPECT_EQ(small.scale_denom, 1u);
  o.decode.dct_scaling = false;
  EXPECT_EQ(MakePipeline(o).Plan({ImageFormat::kJpeg, 2100, 1600, 3}, 0, 0).scale_denom, 1u);
}

TEST(ImagePipelineTest, SameSizeCenterIsTheImageAndFlipMirrorsIt) {
  const Image img = Gradient(40, 40, 3, 1);
  const std::vector<std::byte> png = Png(img);
  ImageWorkspace ws;
  ImageOptions o = Options(40);
  auto out = MakePipeline(o).Run(ws, png, 0, 0);
  ASSERT_OK(out);
  ASSERT_EQ(out->size(), img.pixels.size());
  EXPECT_EQ(std::memcmp(out->data(), img.pixels.data(), out->size()), 0);

  // Flip: exactly the mirror image, for whichever samples flip.
  o.transform.flip = true;
  const ImagePipeline flipping = MakePipeline(o);
  int flipped = 0;
  for (uint64_t index = 0; index < 8; ++index) {
    auto f = flipping.Run(ws, png, 0, index);
    ASSERT_OK(f);
    const bool flip = flipping.Plan({ImageFormat::kPng, 40, 40, 3}, 0, index).flip;
    flipped += flip;
    for (uint32_t y = 0; y < 40; ++y) {
      for (uint32_t x = 0; x < 40; ++x) {
        const uint32_t sx = flip ? 39 - x : x;
        for (uint32_t c = 0; c < 3; ++c) {
          ASSERT_EQ(static_cast<uint8_t>((*f)[(y * 40 + x) * 3 + c]),
                    img.pixels[(y * 40 + sx) * 3 + c]);
        }
      }
    }
  }
  EXPECT_GT(flipped, 0);
  EXPECT_LT(flipped, 8);
}

TEST(ImagePipelineTest, LayoutsAndNormalisationAgree) {
  const std::vector<std::byte> jpeg = Jpeg(Gradient(90, 70, 3, 2));
  ImageWorkspace ws;
  ImageOptions o = Options(32, CropMode::kRandomResized);
  o.transform.flip = true;
  auto hwc = MakePipeline(o).Run(ws, jpeg, 1, 9);
  ASSERT_OK(hwc);
  o.output = {DType::kFloat32, OutputLayout::kNCHW, {0.5f, 0.4f, 0.3f}, {0.2f, 0.25f, 0.3f}};
  std::vector<int64_t> shape;
  auto chw = MakePipeline(o).Run(ws, jpeg, 1, 9, &shape);
  ASSERT_OK(chw);
  EXPECT_EQ(shape, (std::vector<int64_t>{3, 32, 32}));
  ASSERT_EQ(chw->size(), hwc->size() * 4);
  const float mean[3] = {0.5f, 0.4f, 0.3f}, std[3] = {0.2f, 0.25f, 0.3f};
  for (size_t y = 0; y < 32; ++y) {
    for (size_t x = 0; x < 32; ++x) {
      for (size_t c = 0; c < 3; ++c) {
        float v;
        std::memcpy(&v, chw->data() + 4 * (c * 1024 + y * 32 + x), 4);
        const auto byte = static_cast<uint8_t>((*hwc)[(y * 32 + x) * 3 + c]);
        ASSERT_EQ(v, (static_cast<float>(byte) / 255.0f - mean[c]) / std[c]);
      }
    }
  }
}

TEST(ImagePipelineTest, RawSamplesAndChannelConversion) {
  ImageOptions o = Options(28);
  o.decode.raw = {28, 28, 1};
  std::vector<std::byte> raw(784);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = std::byte(i * 7);
  ImageWorkspace ws;
  auto gray = MakePipeline(o).Run(ws, raw, 0, 0);
  ASSERT_OK(gray);
  EXPECT_EQ(*gray, raw);
  o.decode.color = ColorMode::kRgb;
  auto rgb = MakePipeline(o).Run(ws, raw, 0, 0);
  ASSERT_OK(rgb);
  ASSERT_EQ(rgb->size(), 3 * raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    ASSERT_EQ((*rgb)[3 * i], raw[i]);
    ASSERT_EQ((*rgb)[3 * i + 2], raw[i]);
  }
  // A colour image to gray uses PIL's luma.
  const Image color = Gradient(20, 10, 3, 4);
  DecodeOptions d;
  d.color = ColorMode::kGray;
  auto g = DecodeImage(ws, Png(color), d);
  ASSERT_OK(g);
  ASSERT_EQ(g->channels, 1u);
  for (size_t i = 0; i < 200; ++i) {
    const uint8_t* p = &color.pixels[3 * i];
    ASSERT_EQ(g->pixels[i], (p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
  }
}

// The vector paths (the pair-wise horizontal pass, the planar float32
// store) against the scalar code they replace, on random images, crops,
// flips and outputs. Tolerance: none — both compute the same integer sums
// and the same correctly rounded float32 operations, so every byte must
// match (and the scalar code is PIL's and torchvision's, test_decode.py).
TEST(ImagePipelineTest, VectorPathsEqualTheScalarReference) {
  if (!decode_internal::SimdEnabled()) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(7);
  auto uniform = [&](uint32_t lo, uint32_t hi) {
    return std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
  };
  ImageWorkspace ws;
  for (int iter = 0; iter < 300; ++iter) {
    const uint32_t w = uniform(1, 300), h = uniform(1, 300), c = uniform(0, 1) ? 3 : 1;
    std::vector<uint8_t> pixels(size_t{w} * h * c);
    for (uint8_t& v : pixels) v = static_cast<uint8_t>(uniform(0, 255));
    const std::vector<std::byte> raw =
        decode_internal::RawImageBytes(pixels.data(), w, h, c, size_t{w} * c);
    ImageOptions o = Options(uniform(1, 60) + (iter % 4 == 0 ? 200 : 0),
                             iter % 3 == 0 ? CropMode::kCenter : CropMode::kRandomResized);
    o.transform.flip = true;
    o.transform.seed = iter;
    if (iter % 2 == 0) {
      o.output.dtype = DType::kFloat32;
      if (c == 3 && iter % 4 != 2) {
        o.output.mean = {0.485f, 0.456f, 0.406f};
        o.output.std = {0.229f, 0.224f, 0.225f};
      } else if (iter % 4 == 2) {
        o.output.mean = {0.5f};
        o.output.std = {0.25f};
      }
    }
    o.output.layout = iter % 5 == 0 ? OutputLayout::kNHWC : OutputLayout::kNCHW;
    const ImagePipeline p = MakePipeline(o);
    for (uint64_t index = 0; index < 4; ++index) {
      decode_internal::SetSimdForTesting(true);
      auto fast = p.Run(ws, raw, 0, index);
      decode_internal::SetSimdForTesting(false);
      auto reference = p.Run(ws, raw, 0, index);
      decode_internal::SetSimdForTesting(true);
      ASSERT_OK(fast);
      ASSERT_OK(reference);
      ASSERT_TRUE(*fast == *reference)
          << w << "x" << h << "x" << c << " size " << o.transform.size << " iteration " << iter;
    }
  }
}

// StoreWindow against StoreWindowReference alone, every size up to 40 (the
// vector loop's 16-pixel blocks and every tail length) and 224.
TEST(ImagePipelineTest, FastStoreEqualsTheReference) {
  std::mt19937 rng(3);
  std::vector<float> lut(3 * 256);
  OutputOptions out;
  out.mean = {0.485f, 0.456f, 0.406f};
  out.std = {0.229f, 0.224f, 0.225f};
  for (int k = 0; k < 3; ++k) {
    for (int v = 0; v < 256; ++v) lut[k * 256 + v] = (v / 255.0f - out.mean[k]) / out.std[k];
  }
  std::vector<uint32_t> sizes = {224};
  for (uint32_t s = 1; s <= 40; ++s) sizes.push_back(s);
  for (const uint32_t size : sizes) {
    for (const uint32_t c : {1u, 3u}) {
      OutputOptions o = out;
      if (c == 1) o.mean = {0.5f}, o.std = {0.3f};
      std::vector<float> glut(256);
      for (int v = 0; v < 256; ++v) glut[v] = (v / 255.0f - 0.5f) / 0.3f;
      std::vector<uint8_t> win(size_t{size} * size * c);
      for (uint8_t& v : win) v = static_cast<uint8_t>(rng());
      for (const DType dt : {DType::kUint8, DType::kFloat32}) {
        for (const OutputLayout layout : {OutputLayout::kNCHW, OutputLayout::kNHWC}) {
          for (const bool flip : {false, true}) {
            o.dtype = dt;
            o.layout = layout;
            const size_t bytes = win.size() * DTypeSize(dt);
            std::vector<std::byte> a(bytes), b(bytes);
            const float* l = c == 1 ? glut.data() : lut.data();
            decode_internal::StoreWindow(win.data(), size, c, flip, o, l, a.data());
            decode_internal::StoreWindowReference(win.data(), size, c, flip, o, l, b.data());
            ASSERT_TRUE(a == b) << "size " << size << " c " << c << " flip " << flip;
          }
        }
      }
    }
  }
}

TEST(DecodeTest, PngRoundTripAndJpegReducedScale) {
  ImageWorkspace ws;
  for (uint32_t c : {1u, 3u}) {
    const Image img = Gradient(33, 17, c, c);
    auto back = DecodeImage(ws, Png(img), {});
    ASSERT_OK(back);
    EXPECT_EQ(back->channels, c);
    EXPECT_EQ(back->pixels, img.pixels);
  }
  const std::vector<std::byte> jpeg = Jpeg(Gradient(301, 203, 3, 5));
  for (uint32_t d : {1u, 2u, 4u, 8u}) {
    auto img = DecodeImage(ws, jpeg, {}, d);
    ASSERT_OK(img);
    EXPECT_EQ(img->width, (301 + d - 1) / d);
    EXPECT_EQ(img->height, (203 + d - 1) / d);
  }
  EXPECT_EQ(DecodeImage(ws, jpeg, {}, 3).status().code(), StatusCode::kInvalidArgument);
}

TEST(DecodeTest, JpegCropsDecodeOnlyTheRegionWithTheSamePixels) {
  // Crops are decoded with libjpeg's partial decoding; the same image made
  // lossless (PNG of the full decode) through the same plans must give the
  // same bytes.
  ImageWorkspace ws;
  struct Case {
    uint32_t channels;
    int subsamp, flags;
  };
  for (const Case& k : {Case{3, TJSAMP_420, 0}, Case{3, TJSAMP_422, 0}, Case{3, TJSAMP_444, 0},
                        Case{3, TJSAMP_420, TJFLAG_PROGRESSIVE}, Case{1, TJSAMP_GRAY, 0}}) {
    const std::vector<std::byte> jpeg =
        Jpeg(Gradient(317, 229, k.channels, 12), 90, k.subsamp, k.flags);
    auto full = DecodeImage(ws, jpeg, {});
    ASSERT_OK(full);
    const std::vector<std::byte> png = Png(*full);
    for (CropMode crop : {CropMode::kRandomResized, CropMode::kCenter}) {
      ImageOptions o = Options(40, crop);
      o.transform.resize = 57;
      o.transform.flip = true;
      o.decode.dct_scaling = false;
      const ImagePipeline p = MakePipeline(o);
      for (uint64_t index = 0; index < 20; ++index) {
        auto a = p.Run(ws, jpeg, 0, index);
        auto b = p.Run(ws, png, 0, index);
        ASSERT_OK(a);
        ASSERT_OK(b);
        ASSERT_EQ(*a, *b) << "subsamp " << k.subsamp << " flags " << k.flags << " index " << index;
      }
    }
  }
}

// ---- malformed and hostile images --------------------------------------------

// Sets a JPEG's SOF dimensions (the first SOFn marker).
std::vector<std::byte> WithJpegSize(std::vector<std::byte> j, uint16_t w, uint16_t h) {
  for (size_t i = 2; i + 9 < j.size(); ++i) {
    const auto m = static_cast<uint8_t>(j[i + 1]);
    if (j[i] == std::byte{0xff} && m >= 0xc0 && m <= 0xc2) {
      j[i + 5] = std::byte(h >> 8), j[i + 6] = std::byte(h & 0xff);
      j[i + 7] = std::byte(w >> 8), j[i + 8] = std::byte(w & 0xff);
      return j;
    }
  }
  ADD_FAILURE() << "no SOF marker";
  return j;
}

// Sets a PNG's IHDR dimensions and fixes the chunk's CRC, so only the size
// is hostile.
std::vector<std::byte> WithPngSize(std::vector<std::byte> p, uint32_t w, uint32_t h) {
  auto put32 = [&](size_t at, uint32_t v) {
    for (int k = 0; k < 4; ++k) p[at + k] = std::byte((v >> (24 - 8 * k)) & 0xff);
  };
  put32(16, w);
  put32(20, h);
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(p.data() + 12), 17);
  put32(29, static_cast<uint32_t>(crc));
  return p;
}

// A JPEG whose header fails (tables, frame, no scan) must not spoil the
// workspace: TurboJPEG 2.1 left its decompressor in the failed header, and
// the next valid JPEG decoded on that thread failed ("Bogus Huffman table
// definition"). Found by the prepare fuzzer.
TEST(DecodeTest, AFailedHeaderDoesNotSpoilTheNextImage) {
  const std::vector<std::byte> good = Jpeg(Gradient(48, 32, 3, 2));
  std::vector<std::byte> no_scan;
  for (size_t i = 0; i + 1 < good.size(); ++i) {
    if (good[i] == std::byte{0xff} && good[i + 1] == std::byte{0xda}) {
      no_scan.assign(good.begin(), good.begin() + static_cast<ptrdiff_t>(i));
      break;
    }
  }
  ASSERT_FALSE(no_scan.empty());
  no_scan.push_back(std::byte{0xff});  // an end marker, so only the header fails
  no_scan.push_back(std::byte{0xd9});
  ImageWorkspace ws, fresh;
  ASSERT_OK_AND_ASSIGN(const Image want, DecodeImage(fresh, good, {}));
  const ImagePipeline p = MakePipeline(Options(16, CropMode::kRandomResized));
  for (int round = 0; round < 3; ++round) {
    EXPECT_THAT(DecodeImage(ws, no_scan, {}), StatusIs(StatusCode::kInvalidArgument, "JPEG"));
    ASSERT_OK_AND_ASSIGN(const Image got, DecodeImage(ws, good, {}));
    EXPECT_EQ(got.pixels, want.pixels);
    EXPECT_THAT(p.Run(ws, no_scan, 0, 0), StatusIs(StatusCode::kInvalidArgument, "JPEG"));
    EXPECT_OK(p.Run(ws, good, 0, 0));
  }
}

// `jpeg` without its marker segments of type `marker` (DB: quantization
// tables, C4: Huffman tables).
std::vector<std::byte> WithoutSegments(const std::vector<std::byte>& jpeg, uint8_t marker) {
  std::vector<std::byte> out(jpeg.begin(), jpeg.begin() + 2);  // SOI
  size_t i = 2;
  while (i + 4 <= jpeg.size() && jpeg[i] == std::byte{0xff} && jpeg[i + 1] != std::byte{0xda}) {
    const size_t length =
        std::to_integer<size_t>(jpeg[i + 2]) << 8 | std::to_integer<size_t>(jpeg[i + 3]);
    if (jpeg[i + 1] != std::byte{marker}) {
      out.insert(out.end(), jpeg.begin() + static_cast<ptrdiff_t>(i),
                 jpeg.begin() + static_cast<ptrdiff_t>(i + 2 + length));
    }
    i += 2 + length;
  }
  out.insert(out.end(), jpeg.begin() + static_cast<ptrdiff_t>(i), jpeg.end());
  return out;
}

// JPEGs that define the tables they use are decoded by the workspace's
// decompressor, reused from image to image (a fresh one per image would
// cost a setup each).
TEST(DecodeTest, JpegsWithTheirOwnTablesBorrowNone) {
  const Image color = Gradient(48, 32, 3, 2), gray = Gradient(48, 32, 1, 3);
  for (const auto& [what, jpeg] : std::vector<std::pair<std::string, std::vector<std::byte>>>{
           {"4:2:0", Jpeg(color)},
           {"4:4:4", Jpeg(color, 90, TJSAMP_444)},
           {"gray", Jpeg(gray)},
           {"progressive", Jpeg(color, 90, TJSAMP_420, TJFLAG_PROGRESSIVE)},
           {"gray progressive", Jpeg(gray, 75, TJSAMP_GRAY, TJFLAG_PROGRESSIVE)}}) {
    EXPECT_FALSE(decode_internal::JpegBorrowsTables(jpeg)) << what;
  }
}

// libjpeg keeps the tables a decompressor has read: a JPEG that lacks one
// was decoded, on a thread that had decoded another image before, with that
// image's tables — a wrong image, and a different one per thread (found by
// the decode fuzzer: "decodes in one layout and not in another"). Decoded
// after another image, it now gives what a fresh decoder gives: an error
// for a missing quantization table, libjpeg's standard Huffman tables for
// missing Huffman ones.
TEST(DecodeTest, AJpegWithoutItsTablesNeverBorrowsThePreviousImages) {
  const Image gray = Gradient(48, 32, 1, 3);
  // Quality 30 and optimized Huffman tables (progressive): unlike the
  // baseline image's quality 95 and standard tables.
  const std::vector<std::byte> before =
      Jpeg(Gradient(40, 24, 1, 5), 30, TJSAMP_GRAY, TJFLAG_PROGRESSIVE);
  const std::vector<std::byte> baseline = Jpeg(gray, 95, TJSAMP_GRAY);
  const ImagePipeline p = MakePipeline(Options(16));
  for (const uint8_t marker : {0xdb, 0xc4}) {
    SCOPED_TRACE(marker == 0xdb ? "no quantization tables" : "no Huffman tables");
    const std::vector<std::byte> lacking = WithoutSegments(baseline, marker);
    ASSERT_LT(lacking.size(), baseline.size());
    EXPECT_TRUE(decode_internal::JpegBorrowsTables(lacking));
    ImageWorkspace fresh;
    const Result<Image> want = DecodeImage(fresh, lacking, {});
    if (marker == 0xdb) EXPECT_THAT(want, StatusIs(StatusCode::kInvalidArgument, "JPEG"));
    ImageWorkspace ws;
    ASSERT_OK(DecodeImage(ws, before, {}));
    const Result<Image> got = DecodeImage(ws, lacking, {});
    ASSERT_EQ(got.ok(), want.ok()) << (got.ok() ? want.status() : got.status()).ToString();
    if (got.ok()) EXPECT_EQ(got->pixels, want->pixels);
    ASSERT_OK(p.Run(ws, before, 0, 0));
    EXPECT_EQ(p.Run(ws, lacking, 0, 0).ok(), want.ok());
    // And the workspace decodes the next complete image as before.
    ASSERT_OK_AND_ASSIGN(const Image again, DecodeImage(ws, baseline, {}));
    ASSERT_OK_AND_ASSIGN(const Image reference, DecodeImage(fresh, baseline, {}));
    EXPECT_EQ(again.pixels, reference.pixels);
  }
}

TEST(DecodeTest, HostileAndMalformedImagesAreErrorsNotCrashes) {
  ImageWorkspace ws;
  const ImagePipeline p = MakePipeline(Options(32, CropMode::kRandomResized));
  auto expect_error = [&](const std::vector<std::byte>& data, const std::string& words) {
    auto r = p.Run(ws, data, 0, 0);
    ASSERT_THAT(r, StatusIs(StatusCode::kInvalidArgument, words));
  };
  const std::vector<std::byte> jpeg = Jpeg(Gradient(64, 48, 3, 6));
  const std::vector<std::byte> png = Png(Gradient(64, 48, 3, 6));
  // 60000 x 60000 headers: refused from the header, nothing allocated.
  expect_error(WithJpegSize(jpeg, 60000, 60000), "60000x60000 image has 3600000000 pixels");
  expect_error(WithPngSize(png, 60000, 60000), "60000x60000 image has 3600000000 pixels");
  // Truncated files.
  expect_error({jpeg.begin(), jpeg.begin() + jpeg.size() / 2}, "JPEG: truncated");
  expect_error({png.begin(), png.begin() + png.size() / 2}, "PNG:");
  expect_error({jpeg.begin(), jpeg.begin() + 20}, "JPEG");
  // Damaged image data: PNG's CRC catches it.
  std::vector<std::byte> bad_png = png;
  bad_png[bad_png.size() / 2] ^= std::byte{0x5a};
  expect_error(bad_png, "PNG:");
  // Not an image at all; empty; raw of the wrong size.
  expect_error(testing::Bytes("hello, world"), "neither JPEG nor PNG");
  expect_error({}, "neither JPEG nor PNG");
  ImageOptions raw = Options(8);
  raw.decode.raw = {28, 28, 1};
  auto r = MakePipeline(raw).Run(ws, testing::Bytes("short"), 0, 0);
  ASSERT_THAT(
      r, StatusIs(StatusCode::kInvalidArgument, "raw sample of 5 bytes, expected 28x28x1 = 784"));
  // The wrong kind forced: a PNG read as JPEG.
  ImageOptions forced = Options(8);
  forced.decode.format = ImageFormat::kJpeg;
  EXPECT_THAT(MakePipeline(forced).Run(ws, png, 0, 0),
              StatusIs(StatusCode::kInvalidArgument, "not a JPEG (no SOI marker)"));
}

TEST(DecodeTest, RandomCorruptionNeverCrashes) {
  // A small fuzz pass (run under ASan/UBSan in CI): flipped, cut and
  // stretched JPEGs and PNGs give an image or an error, never a crash.
  ImageWorkspace ws;
  ImageOptions o = Options(24, CropMode::kRandomResized);
  o.decode.max_pixels = 1 << 20;
  const ImagePipeline p = MakePipeline(o);
  const std::vector<std::vector<std::byte>> seeds = {
      Jpeg(Gradient(40, 30, 3, 7)), Jpeg(Gradient(40, 30, 1, 8)), Png(Gradient(40, 30, 3, 9))};
  std::mt19937 rng(11);
  int errors = 0;
  for (int round = 0; round < 600; ++round) {
    std::vector<std::byte> d = seeds[round % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % d.size();
      switch (rng() % 3) {
        case 0:
          d[at] = std::byte(rng() & 0xff);
          break;
        case 1:
          d.resize(std::max<size_t>(at, 1));
          break;
        default:
          d.insert(d.begin() + static_cast<ptrdiff_t>(at), std::byte(rng() & 0xff));
          break;
      }
    }
    errors += !p.Run(ws, d, 0, round).ok();
  }
  EXPECT_GT(errors, 100);  // the corruption is noticed, mostly
}

TEST(DecodeTest, ResizeOfAnExtremeAspectRatioIsRefusedNotWrapped) {
  // Resize(224) of a 20,000,000 x 1 image is 4,480,000,000 x 224: more than
  // a uint32 (the plan's cast overflowed, undefined behaviour) and than the
  // C ints PIL and the resampler index with. Refused, before decoding.
  ImageWorkspace ws;
  Image wide{20'000'000, 1, 1, std::vector<uint8_t>(20'000'000)};
  for (size_t x = 0; x < wide.pixels.size(); ++x) wide.pixels[x] = static_cast<uint8_t>(x * 7);
  const std::vector<std::byte> png = Png(wide);
  ASSERT_OK(ProbeImage(png, {}));       // within the default pixel limit
  for (uint32_t size : {224u, 120u}) {  // 4.48e9 > 2^32; 2.4e9 > 2^31 - 1
    const ImagePipeline p = MakePipeline(Options(size));
    const SamplePlan plan = p.Plan({ImageFormat::kPng, 20'000'000, 1, 1}, 0, 0);
    EXPECT_EQ(plan.resized_width, 0u) << size;
    EXPECT_EQ(plan.resized_height, size);
    auto r = p.Run(ws, png, 0, 0);
    ASSERT_THAT(r, StatusIs(StatusCode::kInvalidArgument,
                            "20000000x1 image cannot be resized to 0x" + std::to_string(size)))
        << size;
  }
  // Just under the limit (int(100 * 20e6) = 2e9) it is resampled as usual.
  const ImagePipeline p = MakePipeline(Options(100));
  EXPECT_EQ(p.Plan({ImageFormat::kPng, 20'000'000, 1, 1}, 0, 0).resized_width, 2'000'000'000u);
  auto r = p.Run(ws, png, 0, 0);
  ASSERT_OK(r);
  EXPECT_EQ(r->size(), 100u * 100u);
}

TEST(DecodeTest, ExecuteRefusesPlansThatDoNotFitTheData) {
  // Plans can be written by hand (the Python binding's execute() takes an
  // edited dict): one for another image size, a box or window that wraps
  // around 2^32, or an unknown scale is refused rather than read past the
  // decoded pixels.
  ImageWorkspace ws;
  const ImagePipeline p = MakePipeline(Options(16));
  std::vector<uint8_t> out(p.OutputElements(3));
  const Image img = Gradient(40, 30, 3, 2);
  ImageOptions raw_options = Options(16);
  raw_options.decode.raw = {30, 40, 3};
  const ImagePipeline raw_pipeline = MakePipeline(raw_options);
  struct Case {
    ImageFormat format;
    std::vector<std::byte> data;
    const ImagePipeline* pipeline;
  };
  const Case cases[] = {{ImageFormat::kPng, Png(img), &p},
                        {ImageFormat::kJpeg, Jpeg(img), &p},
                        {ImageFormat::kRaw, {}, &raw_pipeline}};
  for (const Case& c : cases) {
    std::vector<std::byte> data = c.data;
    if (c.format == ImageFormat::kRaw) {
      data.resize(img.pixels.size());
      std::memcpy(data.data(), img.pixels.data(), data.size());
    }
    const ImagePipeline& pl = *c.pipeline;
    const SamplePlan good = pl.Plan({c.format, 40, 30, 3}, 0, 0);
    ASSERT_OK(pl.Execute(ws, data, good, 3, out.data()));
    // A plan for a 400 x 300 image (also at 1/8 scale, for the JPEG).
    for (uint32_t d : {1u, 8u}) {
      SamplePlan bigger = pl.Plan({c.format, 400, 300, 3}, 0, 0);
      bigger.scale_denom = d;
      const Status s = pl.Execute(ws, data, bigger, 3, out.data());
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
      EXPECT_NE(s.message().find("image is 40x30, not 400x300 as planned"), std::string::npos)
          << s.ToString();
    }
    SamplePlan wraps = good;
    wraps.box = {0, 0xfffffff0u, 30, 0x20};  // left + width wraps to 16
    EXPECT_NE(pl.Execute(ws, data, wraps, 3, out.data()).message().find("crop box outside"),
              std::string::npos);
    wraps = good;
    wraps.window_left = 0xfffffff8u;  // + 16 wraps to 8
    EXPECT_NE(pl.Execute(ws, data, wraps, 3, out.data()).message().find("window outside"),
              std::string::npos);
  }
  for (uint32_t d : {0u, 3u, 16u}) {
    SamplePlan scale = p.Plan({ImageFormat::kJpeg, 40, 30, 3}, 0, 0);
    scale.scale_denom = d;
    const Status s = p.Execute(ws, cases[1].data, scale, 3, out.data());
    EXPECT_NE(s.message().find("scale denominator must be 1, 2, 4 or 8"), std::string::npos)
        << d << ": " << s.ToString();
  }
}

// ---- progressive JPEGs of many scans (a CPU bomb) ------------------------------

// The longest scan script libjpeg's encoder accepts for one component:
// the DC coefficient in 11 scans (Al 10, then one refinement per bit), then
// each AC coefficient alone, 11 scans each: 11 + 63 * 11 = 704 scans, a
// valid progressive JPEG. Any prefix is valid too.
std::vector<jpeg_scan_info> LongestScript(int scans) {
  std::vector<jpeg_scan_info> s;
  for (int k = 0; k < 64; ++k) {
    for (int ah = 0; ah <= 10; ++ah) {
      jpeg_scan_info i{};
      i.comps_in_scan = 1;
      i.component_index[0] = 0;
      i.Ss = i.Se = k;
      i.Ah = ah == 0 ? 0 : 11 - ah;
      i.Al = 10 - ah;
      s.push_back(i);
    }
  }
  s.resize(static_cast<size_t>(scans));
  return s;
}

// A gray progressive JPEG of `img` written by libjpeg with `script`.
std::vector<std::byte> JpegWithScans(const Image& img, const std::vector<jpeg_scan_info>& script) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);  // an invalid script exits the test program with a message
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = img.width;
  c.image_height = img.height;
  c.input_components = 1;
  c.in_color_space = JCS_GRAYSCALE;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 90, TRUE);
  c.scan_info = script.data();
  c.num_scans = static_cast<int>(script.size());
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    auto* row = const_cast<JSAMPROW>(img.pixels.data() + size_t{c.next_scanline} * img.width);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::vector<std::byte> v(size);
  std::memcpy(v.data(), buf, size);
  std::free(buf);
  jpeg_destroy_compress(&c);
  return v;
}

int CountMarkers(const std::vector<std::byte>& j, uint8_t marker) {
  int n = 0;
  for (size_t i = 0; i + 1 < j.size(); ++i) {
    n += j[i] == std::byte{0xff} && j[i + 1] == std::byte{marker};
  }
  return n;
}

TEST(DecodeTest, JpegOfMoreThan500ScansIsRefusedBeforeDecoding) {
  ImageWorkspace ws;
  const Image img = Gradient(96, 64, 1, 3);
  const std::vector<std::byte> at_limit = JpegWithScans(img, LongestScript(500));
  const std::vector<std::byte> over = JpegWithScans(img, LongestScript(704));
  ASSERT_EQ(CountMarkers(at_limit, 0xda), 500);
  ASSERT_EQ(CountMarkers(over, 0xda), 704);
  // Both are valid JPEGs: TurboJPEG without its scan limit decodes them.
  tjhandle tj = tjInitDecompress();
  std::vector<uint8_t> plain[2];
  for (int k = 0; k < 2; ++k) {
    const std::vector<std::byte>& j = k == 0 ? at_limit : over;
    plain[k].resize(size_t{img.width} * img.height);
    EXPECT_EQ(tjDecompress2(tj, reinterpret_cast<const unsigned char*>(j.data()), j.size(),
                            plain[k].data(), 96, 0, 64, TJPF_GRAY, 0),
              0)
        << tjGetErrorStr2(tj);
  }
  tjDestroy(tj);
  // 500 scans decode, as libjpeg decodes them.
  auto ok = DecodeImage(ws, at_limit, {});
  ASSERT_OK(ok);
  EXPECT_EQ(ok->pixels, plain[0]);
  // 704 are refused by every entry point, with a message saying why, by
  // the count of markers before decoding (TurboJPEG's own limit words its
  // error "Progressive JPEG image has more than 500 scans").
  const std::string want = "JPEG: more than 500 scans (refused before decoding";
  auto probe = ProbeImage(over, {});
  ASSERT_THAT(probe, StatusIs(StatusCode::kInvalidArgument, want));
  auto decoded = DecodeImage(ws, over, {});
  ASSERT_THAT(decoded, StatusIs(StatusCode::kInvalidArgument, want));
  for (CropMode crop : {CropMode::kCenter, CropMode::kRandomResized}) {
    const ImagePipeline p = MakePipeline(Options(16, crop));
    auto run = p.Run(ws, over, 0, 0);
    ASSERT_THAT(run, StatusIs(StatusCode::kInvalidArgument, want));
    // Execute without a probe (the plan of the 500-scan file: same header).
    auto info = ProbeImage(at_limit, {});
    ASSERT_OK(info);
    std::vector<uint8_t> out(p.OutputElements(1));
    const Status s = p.Execute(ws, over, p.Plan(*info, 0, 0), 1, out.data());
    EXPECT_NE(s.message().find(want), std::string::npos) << s.ToString();
  }
  // A scan repeated 100,000 times (1.3 MB; libjpeg would call the repeats
  // a bogus progression, but only while decoding them).
  const size_t sos = [&] {
    size_t i = over.size() - 2;
    while (!(over[i] == std::byte{0xff} && over[i + 1] == std::byte{0xda})) --i;
    return i;
  }();
  std::vector<std::byte> repeated(over.begin(), over.end() - 2);
  for (int k = 0; k < 100000; ++k) {
    repeated.insert(repeated.end(), over.begin() + static_cast<ptrdiff_t>(sos), over.end() - 2);
  }
  repeated.push_back(std::byte{0xff});
  repeated.push_back(std::byte{0xd9});
  auto r = DecodeImage(ws, repeated, {});
  ASSERT_THAT(r, StatusIs(StatusCode::kInvalidArgument, want));
}

// The fastest of `reps` runs of f, in seconds.
template <typename F>
double FastestOf(int reps, F f) {
  double best = 1e9;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

TEST(DecodeTest, ManyScansCostLessThanDecodingANormalImage) {
  // 1024 x 1024 gray, Resize + CenterCrop(224): a normal progressive JPEG
  // (libjpeg's 6 scans) against the 704-scan one of the same pixels.
  // Refusing the hostile file must cost less than decoding the normal one.
  // (TurboJPEG's own limit, counted while decoding, refused it only after
  // 500 scans: 102 ms against 5.3 ms when measured.) The fastest of a few
  // runs each, so a busy machine slows both alike.
  ImageWorkspace ws;
  const Image img = Gradient(1024, 1024, 1, 4);
  const std::vector<std::byte> normal = Jpeg(img, 90, TJSAMP_GRAY, TJFLAG_PROGRESSIVE);
  const std::vector<std::byte> hostile = JpegWithScans(img, LongestScript(704));
  ASSERT_EQ(CountMarkers(normal, 0xda), 6);
  const ImagePipeline p = MakePipeline(Options(224));
  ASSERT_OK(p.Run(ws, normal, 0, 0));
  const double t_normal = FastestOf(5, [&] { ASSERT_OK(p.Run(ws, normal, 0, 0)); });
  const double t_hostile = FastestOf(5, [&] {
    ASSERT_THAT(p.Run(ws, hostile, 0, 0),
                StatusIs(StatusCode::kInvalidArgument, "JPEG: more than 500 scans"));
  });
  // For the record (not checked): the costliest file accepted, 500 scans.
  const std::vector<std::byte> at_limit = JpegWithScans(img, LongestScript(500));
  const double t_limit = FastestOf(3, [&] { ASSERT_OK(p.Run(ws, at_limit, 0, 0)); });
  std::printf("normal %.2f ms; 704 scans refused in %.3f ms; 500 scans decoded in %.2f ms\n",
              t_normal * 1e3, t_hostile * 1e3, t_limit * 1e3);
  EXPECT_LT(t_hostile, t_normal);
}

// ---- DecodeStage ---------------------------------------------------------------

// A volume of `n` PNG images, 20 x 16 (width x height), whose top-left pixel
// encodes the sample: (index & 255, index >> 8, label); labels i % 5.
std::shared_ptr<Volume> MakeImageVolume(const std::string& path, uint64_t n,
                                        const std::set<uint64_t>& broken = {}) {
  auto b = VolumeBuilder::Create(path, {});
  EXPECT_OK(b);
  for (uint64_t i = 0; i < n; ++i) {
    Image img = Gradient(20, 16, 3, static_cast<uint32_t>(i));
    img.pixels[0] = static_cast<uint8_t>(i & 255);
    img.pixels[1] = static_cast<uint8_t>(i >> 8);
    img.pixels[2] = static_cast<uint8_t>(i % 5);
    std::vector<std::byte> data = broken.count(i) ? testing::Bytes("not an image") : Png(img);
    // Names sort as they are added, so volume index == i.
    char name[32];
    std::snprintf(name, sizeof name, "img/%05llu.png", static_cast<unsigned long long>(i));
    EXPECT_OK((*b)->Add(name, data, static_cast<uint32_t>(i % 5)));
  }
  EXPECT_OK((*b)->Finish());
  auto v = Volume::Open(path);
  EXPECT_OK(v);
  return *v;
}

std::unique_ptr<DecodeStage> MakeStage(std::shared_ptr<Volume> vol, DecodeStageOptions o,
                                       uint32_t batch = 16, uint64_t seed = 3,
                                       FaultInjection faults = {}) {
  LoaderOptions lo;
  lo.engine.faults = faults;
  lo.sampler.batch_size = batch;
  lo.sampler.seed = seed;
  lo.engine.kind = EngineKind::kPread;  // runs everywhere; the engine is not under test
  lo.cache_budget = 0;  // every epoch through the engine, so injected faults reach the stage
  auto loader = Loader::Create(vol, lo);
  EXPECT_OK(loader);
  auto stage = DecodeStage::Create(std::move(*loader), vol, o);
  EXPECT_OK(stage);
  return std::move(stage).value();
}

struct Epoch {
  std::vector<uint64_t> indices;
  std::vector<uint32_t> labels;
  std::vector<uint8_t> pixels;  // every image, in order
  Status error;                 // the first failed batch's
  int failed_batches = 0;
};

Epoch ReadEpoch(BatchSource& s, uint64_t epoch) {
  Epoch out;
  s.SetEpoch(epoch);
  Batch b;
  while (true) {
    Result<bool> more = s.Next(&b);
    if (!more.ok()) {
      if (out.error.ok()) out.error = more.status();
      ++out.failed_batches;
      continue;
    }
    if (!*more) break;
    const TensorView& t = b.tensor();
    EXPECT_EQ(t.shape.empty() ? 0 : t.shape[0], static_cast<int64_t>(b.size()));
    const auto* px = static_cast<const uint8_t*>(t.data);
    out.pixels.insert(out.pixels.end(), px, px + t.bytes());
    for (size_t i = 0; i < b.size(); ++i) {
      out.indices.push_back(b.index(i));
      out.labels.push_back(b.label(i));
      EXPECT_EQ(b.sample(i).size(), t.bytes() / b.size());
    }
  }
  return out;
}

TEST(DecodeStageTest, EverySampleOnceLabelsAlignedSameImagesForAnyThreadCount) {
  TempDir tmp;
  auto vol = MakeImageVolume(tmp / "v.dlfs", 203);
  DecodeStageOptions o;
  o.image = Options(20, CropMode::kRandomResized);
  o.image.transform.flip = true;
  std::vector<uint8_t> reference;
  for (uint32_t threads : {1u, 2u, 5u}) {
    o.decode_threads = threads;
    o.prefetch_batches = threads;
    auto stage = MakeStage(vol, o);
    EXPECT_EQ(stage->channels(), 0u);  // kAuto: decided by the first sample
    const Epoch e = ReadEpoch(*stage, 2);
    ASSERT_OK(e.error);
    EXPECT_EQ(stage->channels(), 3u);
    EXPECT_EQ(stage->batches_per_epoch(), 13u);
    std::vector<uint64_t> sorted = e.indices;
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t i = 0; i < 203; ++i) ASSERT_EQ(sorted[i], i);
    for (size_t k = 0; k < e.indices.size(); ++k) EXPECT_EQ(e.labels[k], e.indices[k] % 5);
    if (reference.empty()) {
      reference = e.pixels;
    } else {
      EXPECT_EQ(e.pixels, reference) << threads << " threads";
    }
    EXPECT_EQ(stage->stats().images, 203u);
  }
  // The same images as one-sample runs of the pipeline.
  o.decode_threads = 2;
  auto stage = MakeStage(vol, o);
  const Epoch e = ReadEpoch(*stage, 2);
  ImageWorkspace ws;
  const size_t image_bytes = 20 * 20 * 3;
  for (size_t k = 0; k < e.indices.size(); k += 17) {
    auto bytes = vol->Read(e.indices[k]);
    ASSERT_OK(bytes);
    auto one = stage->pipeline().Run(ws, *bytes, 2, e.indices[k]);
    ASSERT_OK(one);
    EXPECT_EQ(std::memcmp(one->data(), e.pixels.data() + k * image_bytes, image_bytes), 0);
  }
}

TEST(DecodeStageTest, PixelsCarryTheirSample) {
  // Same-size center crop: the image as stored, so the top-left pixel
  // names the sample it came from.
  TempDir tmp;
  auto vol = MakeImageVolume(tmp / "v.dlfs", 77);
  DecodeStageOptions o;
  o.image = Options(16);
  o.image.transform.resize = 16;  // 20 x 16 -> 20 x 16, centre 16 x 16 from x = 2
  auto stage = MakeStage(vol, o, 10);
  stage->SetEpoch(1);
  Batch b;
  size_t seen = 0;
  while (true) {
    auto more = stage->Next(&b);
    ASSERT_OK(more);
    if (!*more) break;
    const auto* px = static_cast<const uint8_t*>(b.tensor().data);
    for (size_t i = 0; i < b.size(); ++i) {
      auto want = vol->Read(b.index(i));
      ASSERT_OK(want);
      ImageWorkspace ws;
      auto img = DecodeImage(ws, *want, {});
      ASSERT_OK(img);
      // Row 0 from x = 2 of the stored image.
      EXPECT_EQ(std::memcmp(px + i * 16 * 16 * 3, img->pixels.data() + 2 * 3, 16 * 3), 0);
      ++seen;
    }
  }
  EXPECT_EQ(seen, 77u);
}

TEST(DecodeStageTest, BadSampleNamesPathAndIndexOrIsSkipped) {
  TempDir tmp;
  auto vol = MakeImageVolume(tmp / "v.dlfs", 60, {17, 42});
  DecodeStageOptions o;
  o.image = Options(8);
  {
    auto stage = MakeStage(vol, o, 8);
    const Epoch e = ReadEpoch(*stage, 0);
    ASSERT_THAT(e.error, StatusIs(StatusCode::kInvalidArgument, "neither JPEG nor PNG"));
    const std::string& m = e.error.message();
    EXPECT_NE(m.find("v.dlfs"), std::string::npos) << m;
    EXPECT_TRUE(m.find("sample 17 (img/00017.png)") != std::string::npos ||
                m.find("sample 42 (img/00042.png)") != std::string::npos)
        << m;
    // Only the batches holding 17 or 42 failed; the others were delivered.
    EXPECT_GE(e.failed_batches, 1);
    EXPECT_LE(e.failed_batches, 2);
    EXPECT_EQ(stage->batches_per_epoch(), 8u);
    EXPECT_GE(e.indices.size(), 60u - 16u);
    EXPECT_EQ(std::count(e.indices.begin(), e.indices.end(), 17u), 0);
    EXPECT_EQ(std::count(e.indices.begin(), e.indices.end(), 42u), 0);
  }
  o.skip_bad_samples = true;
  auto stage = MakeStage(vol, o, 8);
  const Epoch e = ReadEpoch(*stage, 0);
  ASSERT_OK(e.error);
  EXPECT_EQ(e.indices.size(), 58u);
  EXPECT_EQ(std::count(e.indices.begin(), e.indices.end(), 17u), 0);
  EXPECT_EQ(e.pixels.size(), 58u * 8 * 8 * 3);
  for (size_t k = 0; k < e.indices.size(); ++k) EXPECT_EQ(e.labels[k], e.indices[k] % 5);
  const DecodeStats s = stage->stats();
  EXPECT_EQ(s.skipped, 2u);
  EXPECT_EQ(s.images, 58u);
  ASSERT_EQ(s.skipped_examples.size(), 2u);
  EXPECT_NE(s.skipped_examples[0].find("v.dlfs"), std::string::npos);
}

TEST(DecodeStageTest, InputErrorsPassThroughAndTheEpochGoesOn) {
  TempDir tmp;
  auto vol = MakeImageVolume(tmp / "v.dlfs", 64);
  DecodeStageOptions o;
  o.image = Options(8);
  auto stage = MakeStage(vol, o, 8, /*seed=*/3, {.eio_every = 3});
  stage->SetEpoch(0);
  Batch b;
  int ok = 0, failed = 0;
  while (true) {
    auto more = stage->Next(&b);
    if (!more.ok()) {
      ++failed;
      EXPECT_EQ(more.status().code(), StatusCode::kIOError) << more.status().ToString();
      continue;
    }
    if (!*more) break;
    ++ok;
  }
  EXPECT_GT(failed, 0);
  EXPECT_EQ(ok + failed, 8);
}

TEST(DecodeStageTest, BatchesOutliveTheStageAndBuffersAreReused) {
  TempDir tmp;
  auto vol = MakeImageVolume(tmp / "v.dlfs", 96);
  DecodeStageOptions o;
  o.image = Options(12);
  o.image.output.dtype = DType::kFloat32;
  o.image.output.layout = OutputLayout::kNCHW;
  o.prefetch_batches = 2;
  Batch kept;
  std::set<const void*> buffers;
  {
    auto stage = MakeStage(vol, o, 8);
    for (uint64_t epoch = 0; epoch < 3; ++epoch) {
      stage->SetEpoch(epoch);
      Batch b;
      while (true) {
        auto more = stage->Next(&b);
        ASSERT_OK(more);
        if (!*more) break;
        buffers.insert(b.tensor().data);
        EXPECT_EQ(b.tensor().dtype, DType::kFloat32);
        EXPECT_EQ(b.tensor().shape, (std::vector<int64_t>{8, 3, 12, 12}));
      }
    }
    // Mid-epoch restart: SetEpoch drops what was queued.
    stage->SetEpoch(5);
    ASSERT_OK(stage->Next(&kept));
    stage->SetEpoch(5);
    Batch again;
    ASSERT_OK(stage->Next(&again));
    EXPECT_EQ(std::vector<uint64_t>(again.indices().begin(), again.indices().end()),
              std::vector<uint64_t>(kept.indices().begin(), kept.indices().end()));
  }
  // 36 batches went through a handful of buffers.
  EXPECT_LE(buffers.size(), 6u);
  // The stage is gone; the batch and its tensor are not. Writable, too.
  auto* f = static_cast<float*>(kept.tensor().data);
  f[0] = 42.f;
  EXPECT_EQ(f[0], 42.f);
  EXPECT_EQ(kept.size(), 8u);
}

}  // namespace decode_test
}  // namespace dlfs
