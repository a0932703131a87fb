// Pack-time image preparation (dlfs/image_prep.h, docs/format.md §4.9): raw
// image bytes and their refusals, what one image becomes (geometry, the
// keep rules, the modes), the decode stage's reading of raw samples, and
// VolumeBuilder with images (thread counts, order, skipped images, fields,
// labels, compression). Pixels against PIL are checked from Python
// (tests/python/test_image_prep.py).
#include <turbojpeg.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>

#include "decode/codecs.h"
#include "dlfs/builder.h"
#include "dlfs/decode.h"
#include "dlfs/image_prep.h"
#include "dlfs/volume.h"
#include "format/format.h"
#include "image_fixtures.h"
#include "testutil.h"

namespace dlfs {
namespace image_prep_test {

using testing::Photo;
using testing::Png;
using testing::StatusIs;
using testing::TempDir;

// JPEG bytes by the accurate DCT, as a careful encoder makes them.
std::vector<std::byte> Jpeg(const Image& img, int quality) {
  return testing::Jpeg(img, quality, TJSAMP_420, TJFLAG_ACCURATEDCT);
}

std::vector<std::byte> Raw(const Image& img) {
  return decode_internal::RawImageBytes(img.pixels.data(), img.width, img.height, img.channels,
                                        size_t{img.width} * img.channels);
}

// ---- Raw image bytes (§4.9.3) -----------------------------------------------

TEST(RawImageTest, RoundTripsAndDecodesWithoutCopying) {
  const Image img = Photo(37, 23, 3, 1);
  const std::vector<std::byte> raw = Raw(img);
  ASSERT_EQ(raw.size(), 16u + 37 * 23 * 3);
  ASSERT_OK_AND_ASSIGN(const ImageInfo info, ProbeImage(raw, {}));
  EXPECT_EQ(info.format, ImageFormat::kRaw);
  EXPECT_EQ(info.width, 37u);
  EXPECT_EQ(info.height, 23u);
  EXPECT_EQ(info.channels, 3u);
  ImageWorkspace ws;
  ASSERT_OK_AND_ASSIGN(const Image back, DecodeImage(ws, raw, {}));
  EXPECT_EQ(back.pixels, img.pixels);
  // Gray output: PIL's luma of the same pixels, as from a PNG of them.
  ASSERT_OK_AND_ASSIGN(const Image gray, DecodeImage(ws, raw, {}, 1, 1));
  ASSERT_OK_AND_ASSIGN(const Image gray_png, DecodeImage(ws, Png(img), {}, 1, 1));
  EXPECT_EQ(gray.pixels, gray_png.pixels);
  // The pipeline's view of raw pixels is the sample's own bytes.
  ASSERT_OK_AND_ASSIGN(const decode_internal::PixelView v,
                       decode_internal::Decode(ws.state(), raw, info, {}, 1, 3));
  EXPECT_EQ(static_cast<const void*>(v.data), static_cast<const void*>(raw.data() + 16));
}

TEST(RawImageTest, MalformedHeadersAreRefusedBeforeAnyAllocation) {
  const std::vector<std::byte> good = Raw(Photo(8, 4, 1, 2));
  struct Case {
    const char* what;
    std::function<void(std::vector<std::byte>&)> damage;
    const char* message;
  };
  const auto set32 = [](std::vector<std::byte>& b, size_t at, uint32_t v) {
    std::memcpy(b.data() + at, &v, 4);
  };
  const std::vector<Case> cases = {
      {"short", [](auto& b) { b.resize(15); }, "shorter than its 16-byte header"},
      {"version", [](auto& b) { b[4] = std::byte{2}; }, "version 2 is not supported"},
      {"channels", [](auto& b) { b[5] = std::byte{2}; }, "2 channels (1 or 3)"},
      {"reserved", [](auto& b) { b[6] = std::byte{1}; }, "reserved bytes not zero"},
      {"no rows", [&](auto& b) { set32(b, 8, 0); }, "image of 8x0 pixels"},
      {"too long", [](auto& b) { b.push_back(std::byte{0}); },
       "33 bytes of pixels, expected 4x8x1"},
      {"too short", [](auto& b) { b.pop_back(); }, "31 bytes of pixels, expected 4x8x1"},
      {"huge", [&](auto& b) { set32(b, 8, 1u << 20), set32(b, 12, 1u << 20); },
       "more than the limit"},
  };
  ImageWorkspace ws;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::vector<std::byte> bad = good;
    c.damage(bad);
    EXPECT_THAT(ProbeImage(bad, {}), StatusIs(StatusCode::kInvalidArgument, c.message));
    EXPECT_THAT(DecodeImage(ws, bad, {}), StatusIs(StatusCode::kInvalidArgument, c.message));
  }
  // Another magic is not raw: no format at all.
  std::vector<std::byte> other = good;
  other[1] = std::byte{'X'};
  EXPECT_THAT(ProbeImage(other, {}), StatusIs(StatusCode::kInvalidArgument, "neither JPEG"));
  // An explicit shape reads headerless pixels, whatever they start with.
  DecodeOptions shaped;
  shaped.raw = {1, static_cast<uint32_t>(good.size()), 1};
  ASSERT_OK_AND_ASSIGN(const ImageInfo info, ProbeImage(good, shaped));
  EXPECT_EQ(info.width, good.size());
}

// The decode stage's promise: a sample stored as raw pixels gives exactly
// what the image it was made from gives at full scale — any crop, resize
// and flip (the pipeline resamples the same pixels).
TEST(RawImageTest, PipelineOutputEqualsTheEncodedImagesAtFullScale) {
  const Image img = Photo(173, 121, 3, 3);
  const std::vector<std::byte> png = Png(img);
  const std::vector<std::byte> jpeg = Jpeg(img, 85);
  ImageWorkspace ws;
  ASSERT_OK_AND_ASSIGN(const Image from_jpeg, DecodeImage(ws, jpeg, {}));
  for (const CropMode crop : {CropMode::kRandomResized, CropMode::kCenter}) {
    ImageOptions o;
    o.transform.size = 64;
    o.transform.crop = crop;
    o.transform.flip = true;
    o.decode.dct_scaling = false;
    o.output.dtype = DType::kFloat32;
    o.output.layout = OutputLayout::kNCHW;
    ASSERT_OK_AND_ASSIGN(const ImagePipeline p, ImagePipeline::Create(o));
    for (uint64_t i = 0; i < 12; ++i) {
      ASSERT_OK_AND_ASSIGN(const auto a, p.Run(ws, png, 1, i));
      ASSERT_OK_AND_ASSIGN(const auto b, p.Run(ws, Raw(img), 1, i));
      EXPECT_TRUE(testing::SameBytes(a, b)) << "png vs raw, sample " << i;
      ASSERT_OK_AND_ASSIGN(const auto c, p.Run(ws, jpeg, 1, i));
      ASSERT_OK_AND_ASSIGN(const auto d, p.Run(ws, Raw(from_jpeg), 1, i));
      EXPECT_TRUE(testing::SameBytes(c, d)) << "jpeg vs raw, sample " << i;
    }
  }
}

// ---- One image ----------------------------------------------------------------

TEST(PrepareImageTest, GeometryIsTorchvisionsMaxSizeAndNeverEnlarges) {
  struct Case {
    uint32_t w, h, n, want_w, want_h;
  };
  for (const Case& c : std::vector<Case>{{500, 375, 256, 256, 192},
                                         {375, 500, 256, 192, 256},
                                         {333, 500, 256, 170, 256},  // int(256*333/500) = 170
                                         {256, 100, 256, 256, 100},  // fits: unchanged
                                         {100, 80, 256, 100, 80},    // never enlarged
                                         {3000, 3000, 512, 512, 512},
                                         {10000, 1, 256, 256, 1},  // at least 1
                                         {640, 480, 0, 640, 480}}) {
    uint32_t w = 0, h = 0;
    PreparedSize(c.w, c.h, c.n, &w, &h);
    EXPECT_EQ(w, c.want_w) << c.w << "x" << c.h << " max " << c.n;
    EXPECT_EQ(h, c.want_h) << c.w << "x" << c.h << " max " << c.n;
  }
}

TEST(PrepareImageTest, KeepsOriginalsUnlessAChangeIsAskedForAndPays) {
  ImageWorkspace ws;
  const Image img = Photo(120, 90, 3, 4);
  const std::vector<std::byte> png = Png(img);
  const std::vector<std::byte> q95 = Jpeg(img, 95);
  const std::vector<std::byte> q60 = Jpeg(img, 60);
  ImagePrepOptions o;
  o.max_side = 256;  // every image fits
  for (const auto* data : {&png, &q95}) {
    ASSERT_OK_AND_ASSIGN(const PreparedImage r, PrepareImage(ws, *data, o, "a", ""));
    EXPECT_FALSE(r.changed);
    EXPECT_TRUE(r.bytes.empty());
    EXPECT_EQ(r.width, 120u);
    EXPECT_EQ(r.original.width, 120u);
  }
  // A quality that shrinks the file re-encodes it; one that would grow it
  // keeps the original — unless always re-encoding.
  o.jpeg_quality = 75;
  ASSERT_OK_AND_ASSIGN(const PreparedImage smaller, PrepareImage(ws, q95, o, "a", ""));
  EXPECT_TRUE(smaller.changed);
  EXPECT_EQ(smaller.stored, StoredImage::kJpeg);
  EXPECT_FALSE(smaller.resized);
  EXPECT_LT(smaller.bytes.size(), q95.size());
  ASSERT_OK_AND_ASSIGN(const PreparedImage larger, PrepareImage(ws, q60, o, "a", ""));
  EXPECT_FALSE(larger.changed);
  o.always_reencode = true;
  ASSERT_OK_AND_ASSIGN(const PreparedImage forced, PrepareImage(ws, q60, o, "a", ""));
  EXPECT_TRUE(forced.changed);
  EXPECT_GT(forced.bytes.size(), q60.size());
  // The PNG stays a PNG in mode keep, even with a quality.
  o.always_reencode = false;
  ASSERT_OK_AND_ASSIGN(const PreparedImage png_kept, PrepareImage(ws, png, o, "a", ""));
  EXPECT_FALSE(png_kept.changed);
  // A format change is always made.
  o.jpeg_quality = 0;
  o.mode = ImageStoreMode::kJpeg;
  ASSERT_OK_AND_ASSIGN(const PreparedImage png_jpeg, PrepareImage(ws, png, o, "a", ""));
  EXPECT_TRUE(png_jpeg.changed);
  ASSERT_OK_AND_ASSIGN(const ImageInfo info, ProbeImage(png_jpeg.bytes, {}));
  EXPECT_EQ(info.format, ImageFormat::kJpeg);
}

TEST(PrepareImageTest, ResizesToTheCapInEveryMode) {
  ImageWorkspace ws;
  const Image img = Photo(300, 200, 3, 5);
  const std::vector<std::byte> png = Png(img);
  ImagePrepOptions o;
  o.max_side = 150;
  for (const ImageStoreMode mode :
       {ImageStoreMode::kKeep, ImageStoreMode::kJpeg, ImageStoreMode::kRaw}) {
    o.mode = mode;
    ASSERT_OK_AND_ASSIGN(const PreparedImage r, PrepareImage(ws, png, o, "a", ""));
    EXPECT_TRUE(r.changed);
    EXPECT_TRUE(r.resized);
    ASSERT_OK_AND_ASSIGN(const ImageInfo info, ProbeImage(r.bytes, {}));
    EXPECT_EQ(info.width, 150u);
    EXPECT_EQ(info.height, 100u);
    EXPECT_EQ(info.format, mode == ImageStoreMode::kKeep  ? ImageFormat::kPng
                           : mode == ImageStoreMode::kRaw ? ImageFormat::kRaw
                                                          : ImageFormat::kJpeg);
  }
  // The raw pixels are ResizeImage's (PIL's Image.resize) of the decoded image.
  o.mode = ImageStoreMode::kRaw;
  for (const ResizeFilter f :
       {ResizeFilter::kBilinear, ResizeFilter::kBicubic, ResizeFilter::kLanczos, ResizeFilter::kBox,
        ResizeFilter::kHamming}) {
    o.filter = f;
    ASSERT_OK_AND_ASSIGN(const PreparedImage r, PrepareImage(ws, png, o, "a", ""));
    ASSERT_OK_AND_ASSIGN(const Image want, ResizeImage(ws, img, 150, 100, f));
    ASSERT_OK_AND_ASSIGN(const Image got, DecodeImage(ws, r.bytes, {}));
    EXPECT_EQ(got.pixels, want.pixels) << NameOf(kResizeFilterNames, f);
  }
}

TEST(PrepareImageTest, SmartAndProportionModes) {
  ImageWorkspace ws;
  const std::vector<std::byte> small = Png(Photo(40, 30, 3, 6));  // 3600 bytes of pixels
  const std::vector<std::byte> large = Png(Photo(80, 60, 3, 7));  // 14400
  ImagePrepOptions o;
  o.mode = ImageStoreMode::kSmart;
  o.smart_threshold = 3600;
  ASSERT_OK_AND_ASSIGN(const PreparedImage a, PrepareImage(ws, small, o, "a", ""));
  EXPECT_EQ(a.stored, StoredImage::kRaw);
  ASSERT_OK_AND_ASSIGN(const PreparedImage b, PrepareImage(ws, large, o, "b", ""));
  EXPECT_EQ(b.stored, StoredImage::kJpeg);
  // Proportion: a function of (seed, path, field), about p of the images.
  o.mode = ImageStoreMode::kProportion;
  o.jpeg_probability = 0.3;
  int jpeg = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string path = "img" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(const PreparedImage r, PrepareImage(ws, small, o, path, "jpg"));
    ASSERT_OK_AND_ASSIGN(const PreparedImage again, PrepareImage(ws, small, o, path, "jpg"));
    EXPECT_EQ(r.stored, again.stored);
    jpeg += r.stored == StoredImage::kJpeg;
  }
  EXPECT_GT(jpeg, 35);
  EXPECT_LT(jpeg, 85);
  o.jpeg_probability = 0;
  ASSERT_OK_AND_ASSIGN(const PreparedImage none, PrepareImage(ws, small, o, "x", ""));
  EXPECT_EQ(none.stored, StoredImage::kRaw);
  o.jpeg_probability = 1;
  ASSERT_OK_AND_ASSIGN(const PreparedImage all, PrepareImage(ws, small, o, "x", ""));
  EXPECT_EQ(all.stored, StoredImage::kJpeg);
}

TEST(PrepareImageTest, RefusesWhatItCannotPrepare) {
  ImageWorkspace ws;
  ImagePrepOptions o;
  o.mode = ImageStoreMode::kRaw;
  std::vector<std::byte> jpeg = Jpeg(Photo(64, 48, 3, 8), 90);
  EXPECT_THAT(PrepareImage(ws, testing::Bytes("BM not a bitmap"), o, "a", ""),
              StatusIs(StatusCode::kInvalidArgument, "not a JPEG or PNG image"));
  jpeg.resize(jpeg.size() / 2);
  EXPECT_THAT(PrepareImage(ws, jpeg, o, "a", ""), StatusIs(StatusCode::kInvalidArgument, "JPEG"));
  EXPECT_THAT(PrepareImage(ws, Raw(Photo(4, 4, 3, 1)), o, "a", ""),
              StatusIs(StatusCode::kInvalidArgument, "already raw pixels"));
  o.max_pixels = 100;
  EXPECT_THAT(PrepareImage(ws, Png(Photo(20, 20, 1, 1)), o, "a", ""),
              StatusIs(StatusCode::kInvalidArgument, "more than the limit of 100"));
  ImagePrepOptions bad;
  bad.jpeg_quality = 101;
  EXPECT_THAT(CheckImagePrepOptions(bad), StatusIs(StatusCode::kInvalidArgument, "jpeg_quality"));
  bad = {};
  bad.jpeg_probability = -0.1;
  EXPECT_THAT(CheckImagePrepOptions(bad),
              StatusIs(StatusCode::kInvalidArgument, "jpeg_probability"));
  bad = {};
  bad.smart_threshold = 0;
  EXPECT_THAT(CheckImagePrepOptions(bad),
              StatusIs(StatusCode::kInvalidArgument, "smart_threshold"));
  EXPECT_TRUE(IsImageField(""));
  EXPECT_TRUE(IsImageField("JPG"));
  EXPECT_TRUE(IsImageField("png"));
  EXPECT_FALSE(IsImageField("seg.png"));
  EXPECT_FALSE(IsImageField("cls"));
}

// ---- VolumeBuilder with images -------------------------------------------------

// `n` images of assorted sizes and formats, some larger than 64 px.
std::vector<std::pair<std::string, std::vector<std::byte>>> Images(int n) {
  std::vector<std::pair<std::string, std::vector<std::byte>>> out;
  for (int i = 0; i < n; ++i) {
    const Image img = Photo(30 + (i * 37) % 90, 20 + (i * 53) % 80, i % 4 == 3 ? 1 : 3, i);
    out.emplace_back("c" + std::to_string(i % 3) + "/" + std::to_string(i) + ".img",
                     i % 2 ? Png(img) : Jpeg(img, 92));
  }
  return out;
}

std::vector<char> FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

// The volume's bytes without what differs from run to run (the uuid and the
// creation time in both superblocks, and their CRCs).
std::vector<char> StableBytes(const std::string& path) {
  std::vector<char> b = FileBytes(path);
  for (const size_t sb : {size_t{0}, b.size() - format::kSuperblockSize}) {
    std::fill_n(b.begin() + sb + offsetof(format::Superblock, uuid), 16, 0);
    std::fill_n(b.begin() + sb + offsetof(format::Superblock, created_unix_ns), 8, 0);
    std::fill_n(b.begin() + sb + offsetof(format::Superblock, crc32c), 4, 0);
  }
  return b;
}

Status Write(const std::string& path, VolumeBuilder::Options o,
             const std::vector<std::pair<std::string, std::vector<std::byte>>>& images) {
  DLFS_ASSIGN_OR_RETURN(auto b, VolumeBuilder::Create(path, o));
  for (size_t i = 0; i < images.size(); ++i) {
    DLFS_RETURN_IF_ERROR(b->Add(images[i].first, images[i].second, uint32_t(i % 3)));
  }
  return b->Finish();
}

TEST(BuilderImagesTest, SameVolumeWhateverTheThreadsAndRecordsWhatChanged) {
  TempDir dir;
  const auto images = Images(40);
  VolumeBuilder::Options o;
  o.images.max_side = 64;
  o.images.mode = ImageStoreMode::kRaw;
  std::vector<char> first;
  for (const uint32_t threads : {1u, 3u}) {
    o.images.threads = threads;
    const std::string path = dir / ("v" + std::to_string(threads) + ".dlfs");
    ASSERT_OK(Write(path, o, images));
    if (first.empty()) {
      first = StableBytes(path);
    } else {
      EXPECT_TRUE(first == StableBytes(path)) << threads << " threads wrote another volume";
    }
  }
  ASSERT_OK_AND_ASSIGN(auto vol, Volume::Open(dir / "v1.dlfs"));
  EXPECT_EQ(vol->info().compat_flags, format::kCompatImages);
  const SampleDirectory& d = vol->directory();
  ASSERT_TRUE(d.images().has_value());
  EXPECT_EQ(d.images()->images, 40u);
  EXPECT_EQ(d.images()->changed, 40u);  // raw: every one
  EXPECT_EQ(d.images()->options.max_side, 64u);
  ImageWorkspace ws;
  for (size_t k = 0; k < images.size(); ++k) {
    const auto& [path, bytes] = images[k];
    ASSERT_OK_AND_ASSIGN(const uint64_t i, d.Lookup(path));
    ASSERT_OK_AND_ASSIGN(const ImageInfo src, ProbeImage(bytes, {}));
    const std::optional<ImageOrigin> origin = d.FindImageOrigin(i);
    ASSERT_TRUE(origin.has_value()) << path;
    EXPECT_EQ(origin->width, src.width);
    EXPECT_EQ(origin->height, src.height);
    EXPECT_EQ(origin->resized, std::max(src.width, src.height) > 64);
    EXPECT_EQ(origin->stored, StoredImage::kRaw);
    EXPECT_EQ(d.label(i), k % 3);
    // The sample is what PrepareImage makes of the source, byte for byte.
    ASSERT_OK_AND_ASSIGN(const auto stored, vol->Read(i));
    ASSERT_OK_AND_ASSIGN(const PreparedImage want, PrepareImage(ws, bytes, o.images, path, ""));
    EXPECT_TRUE(testing::SameBytes(stored, want.bytes)) << path;
  }
}

TEST(BuilderImagesTest, ImagesThatFailAreSkippedOrNamedAndTheBuilderGoesOn) {
  TempDir dir;
  auto images = Images(12);
  images[5].second = testing::Bytes("not an image at all");
  images[8].second.resize(images[8].second.size() / 3);  // a truncated file
  VolumeBuilder::Options o;
  o.images.max_side = 40;
  o.images.threads = 2;
  o.images.skip_unreadable = true;
  {
    ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(dir / "skip.dlfs", o));
    for (const auto& [path, bytes] : images) ASSERT_OK(b->Add(path, bytes));
    ASSERT_OK(b->Finish());
    EXPECT_EQ(b->sample_count(), 10u);
    EXPECT_EQ(b->image_stats().skipped, 2u);
    EXPECT_EQ(b->image_stats().images, 10u);
    ASSERT_EQ(b->image_stats().skipped_examples.size(), 2u);
    EXPECT_THAT(b->image_stats().skipped_examples[0], ::testing::HasSubstr(images[5].first));
  }
  ASSERT_OK_AND_ASSIGN(auto vol, Volume::Open(dir / "skip.dlfs"));
  EXPECT_EQ(vol->size(), 10u);
  EXPECT_EQ(vol->directory().Lookup(images[5].first).status().code(), StatusCode::kNotFound);

  // Without skipping: the error names the sample, from this call or a later
  // one; the builder stays usable and the volume lacks only that sample.
  o.images.skip_unreadable = false;
  ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(dir / "fail.dlfs", o));
  std::vector<std::string> errors;
  for (const auto& [path, bytes] : images) {
    const Status st = b->Add(path, bytes);
    if (!st.ok()) errors.push_back(st.message());
  }
  const Status finish = b->Finish();
  if (!finish.ok()) errors.push_back(finish.message());
  // Each left-out sample named once, in the order added (Finish names
  // together those no Add named).
  ASSERT_FALSE(errors.empty());
  EXPECT_THAT(errors[0], ::testing::HasSubstr("sample '" + images[5].first + "'"));
  EXPECT_THAT(errors[0], ::testing::HasSubstr("skip_unreadable"));
  std::string all;
  for (const std::string& e : errors) all += e + "\n";
  for (size_t i = 0; i < images.size(); ++i) {
    const std::string named = "sample '" + images[i].first + "'";
    size_t count = 0;
    for (size_t at = all.find(named); at != std::string::npos; at = all.find(named, at + 1)) {
      ++count;
    }
    EXPECT_EQ(count, i == 5 || i == 8 ? 1u : 0u) << named << " in:\n" << all;
  }
  EXPECT_LT(all.find(images[5].first), all.find(images[8].first));
  if (finish.ok()) {
    ASSERT_OK_AND_ASSIGN(auto failed, Volume::Open(dir / "fail.dlfs"));
    EXPECT_EQ(failed->size(), 10u);
  }
}

// Several images can come back from the preparing threads in one call; each
// one that failed is named by some call, none is left out silently (one
// error per call used to drop the others).
TEST(BuilderImagesTest, EveryImageThatFailsIsNamed) {
  TempDir dir;
  VolumeBuilder::Options o;
  o.images.max_side = 40;
  o.images.threads = 2;
  ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(dir / "v.dlfs", o));
  std::string all;
  constexpr int kImages = 40;
  for (int i = 0; i < kImages; ++i) {
    const Status st = b->Add("bad/" + std::to_string(i) + ".png", testing::Bytes("no image"));
    if (!st.ok()) all += st.message() + "\n";
  }
  const Status finish = b->Finish();
  if (!finish.ok()) all += finish.message() + "\n";
  for (int i = 0; i < kImages; ++i) {
    EXPECT_THAT(all, ::testing::HasSubstr("sample 'bad/" + std::to_string(i) + ".png'")) << i;
  }
}

TEST(BuilderImagesTest, FieldsLabelsAndCompression) {
  TempDir dir;
  const auto images = Images(9);
  VolumeBuilder::Options o;
  o.images.mode = ImageStoreMode::kRaw;
  o.images.color = ColorMode::kGray;
  o.compress.zstd = true;
  o.images.threads = 2;
  ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(dir / "f.dlfs", o));
  for (size_t i = 0; i < images.size(); ++i) {
    ASSERT_OK(b->BeginSample("k" + std::to_string(i)));
    ASSERT_OK(b->AddField("jpg", images[i].second));
    ASSERT_OK(b->AddField("cls", testing::Bytes(std::to_string(i))));
    ASSERT_OK(b->EndSample());
    // A label set while the sample may still be in preparation.
    ASSERT_OK(b->SetLabel(b->sample_count() - 1, uint32_t(i)));
  }
  ASSERT_OK(b->Finish());
  ASSERT_OK_AND_ASSIGN(auto vol, Volume::Open(dir / "f.dlfs"));
  const SampleDirectory& d = vol->directory();
  const uint32_t jpg = d.FindField("jpg").value();
  const uint32_t cls = d.FindField("cls").value();
  ImageWorkspace ws;
  for (size_t i = 0; i < images.size(); ++i) {
    ASSERT_OK_AND_ASSIGN(const uint64_t s, d.Lookup("k" + std::to_string(i)));
    EXPECT_EQ(d.label(s), i);
    ASSERT_TRUE(d.FindImageOrigin(s, jpg).has_value());
    EXPECT_FALSE(d.FindImageOrigin(s, cls).has_value());
    // Raw gray pixels, zstd-compressed on disk, decoded on reading.
    ASSERT_OK_AND_ASSIGN(const auto raw, vol->Read(s, "jpg"));
    ASSERT_OK_AND_ASSIGN(const Image got, DecodeImage(ws, raw, {}));
    ASSERT_OK_AND_ASSIGN(const Image want, DecodeImage(ws, images[i].second, {}, 1, 1));
    EXPECT_EQ(got.channels, 1u);
    EXPECT_EQ(got.pixels, want.pixels);
    ASSERT_OK_AND_ASSIGN(const auto c, vol->Read(s, "cls"));
    EXPECT_TRUE(testing::SameBytes(c, testing::Bytes(std::to_string(i))));
  }
  // zstd kept where it saves 3 %: on the larger images.
  uint64_t stored = 0, decoded = 0;
  for (uint64_t s = 0; s < d.size(); ++s) {
    stored += d.Field(s, jpg)->stored_length;
    decoded += d.Field(s, jpg)->decoded_length;
  }
  EXPECT_LT(stored, decoded);
}

TEST(BuilderImagesTest, WithATrainedDictionary) {
  TempDir dir;
  const auto images = Images(30);
  VolumeBuilder::Options o;
  o.images.mode = ImageStoreMode::kRaw;
  o.images.max_side = 48;
  o.compress.zstd = true;
  o.compress.train_dictionary = true;
  o.compress.training_fields = 10;  // trained mid-way: held samples, then streamed ones
  ASSERT_OK(Write(dir / "d.dlfs", o, images));
  ASSERT_OK_AND_ASSIGN(auto vol, Volume::Open(dir / "d.dlfs"));
  EXPECT_GT(vol->directory().dictionary().size(), 0u);
  ImageWorkspace ws;
  for (const auto& [path, bytes] : images) {
    ASSERT_OK_AND_ASSIGN(const uint64_t i, vol->directory().Lookup(path));
    ASSERT_OK_AND_ASSIGN(const auto stored, vol->Read(i));
    ASSERT_OK_AND_ASSIGN(const PreparedImage want, PrepareImage(ws, bytes, o.images, path, ""));
    EXPECT_TRUE(testing::SameBytes(stored, want.bytes)) << path;
  }
}

}  // namespace image_prep_test
}  // namespace dlfs
