// Format v2: multi-field samples, per-field zstd (with and without a
// dictionary), the v1 fixture, and damaged v2 metadata and fields.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <map>

#include "common/crc32c.h"
#include "dlfs/builder.h"
#include "dlfs/loader.h"
#include "dlfs/verify.h"
#include "dlfs/volume.h"
#include "format/format.h"
#include "format/superblock.h"
#include "format/zstd_field.h"
#include "testutil.h"

namespace dlfs {
namespace {

using testing::Bytes;
using testing::TempDir;

std::string Str(const std::vector<std::byte>& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// Text that compresses well: a JSON-like record.
std::string Json(int i) {
  std::string s = "{\"id\": " + std::to_string(i) + ", \"caption\": \"";
  for (int k = 0; k < 20; ++k) s += "a photo of a cat sitting on a mat, ";
  return s + "\"}";
}

using Fields = std::map<std::string, std::vector<std::byte>>;

// key -> fields; "s/k3" lacks json, "s/k4" lacks jpg.
std::map<std::string, Fields> Dataset() {
  std::map<std::string, Fields> d;
  for (int i = 0; i < 6; ++i) {
    Fields f;
    if (i != 4) f["jpg"] = testing::RandomBytes(200 + i * 13, i);
    f["cls"] = Bytes(std::to_string(i % 2));
    if (i != 3) f["json"] = Bytes(Json(i));
    d["s/k" + std::to_string(i)] = f;
  }
  return d;
}

Status Build(const std::string& path, const std::map<std::string, Fields>& data,
             VolumeBuilder::Options opt = {}) {
  DLFS_ASSIGN_OR_RETURN(auto b, VolumeBuilder::Create(path, opt));
  // Fields in an order other than by name: storage order is the caller's.
  for (const auto& [key, fields] : data) {
    DLFS_RETURN_IF_ERROR(b->BeginSample(key));
    for (const char* name : {"json", "jpg", "cls"}) {
      if (fields.contains(name)) DLFS_RETURN_IF_ERROR(b->AddField(name, fields.at(name)));
    }
    DLFS_RETURN_IF_ERROR(b->EndSample());
  }
  return b->Finish();
}

void ExpectRoundTrip(const Volume& v, const std::map<std::string, Fields>& data) {
  const SampleDirectory& d = v.directory();
  ASSERT_EQ(d.size(), data.size());
  for (const auto& [key, fields] : data) {
    ASSERT_OK_AND_ASSIGN(const uint64_t i, d.Lookup(key));
    for (const char* name : {"jpg", "cls", "json"}) {
      auto got = v.Read(i, name);
      if (!fields.contains(name)) {
        EXPECT_EQ(got.status().code(), StatusCode::kNotFound) << key << "." << name;
        EXPECT_NE(got.status().message().find("has no field 'jpg'") == std::string::npos &&
                      got.status().message().find("has no field") == std::string::npos,
                  true);
        continue;
      }
      ASSERT_OK(got);
      EXPECT_EQ(*got, fields.at(name)) << key << "." << name;
    }
    ASSERT_OK_AND_ASSIGN(auto all, v.ReadFields(i));
    std::vector<std::string> order;
    for (const auto& [name, bytes] : all) {
      order.push_back(name);
      EXPECT_EQ(bytes, fields.at(name)) << key << "." << name;
    }
    EXPECT_EQ(order.size(), fields.size());
    EXPECT_EQ(order.front(), fields.contains("json") ? "json" : "jpg") << "storage order";
  }
}

TEST(FieldsTest, MultiFieldRoundTrip) {
  TempDir tmp;
  const std::string path = tmp / "v.dlfs";
  const auto data = Dataset();
  ASSERT_OK(Build(path, data));
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(path));
  EXPECT_EQ(v->info().incompat_flags, format::kIncompatFields);
  const SampleDirectory& d = v->directory();
  ASSERT_TRUE(d.has_fields());
  ASSERT_EQ(d.field_count(), 3u);
  EXPECT_EQ(d.field_name(0), "cls");  // sorted by name
  EXPECT_EQ(d.field_name(1), "jpg");
  EXPECT_EQ(d.field_name(2), "json");
  ExpectRoundTrip(*v, data);
  VerifyReport report;
  ASSERT_OK(VerifyVolume(*v, {}, &report));
  EXPECT_EQ(report.bad_samples, 0u);
}

TEST(FieldsTest, PlainSamplesStayFormatV1AndOneFieldCostsNothingPerSample) {
  TempDir tmp;
  auto build = [&](const std::string& path, bool named) {
    auto b = VolumeBuilder::Create(path);
    if (!b.ok()) return b.status();
    for (int i = 0; i < 100; ++i) {
      const std::string key = "k" + std::to_string(1000 + i);
      const auto bytes = testing::RandomBytes(50, i);
      Status st = named ? (*b)->BeginSample(key) : (*b)->Add(key, bytes);
      if (st.ok() && named) st = (*b)->AddField("jpg", bytes);
      if (st.ok() && named) st = (*b)->EndSample();
      if (!st.ok()) return st;
    }
    return (*b)->Finish();
  };
  ASSERT_OK(build(tmp / "plain.dlfs", false));
  ASSERT_OK(build(tmp / "jpg.dlfs", true));
  ASSERT_OK_AND_ASSIGN(auto plain, Volume::Open(tmp / "plain.dlfs"));
  ASSERT_OK_AND_ASSIGN(auto jpg, Volume::Open(tmp / "jpg.dlfs"));
  EXPECT_EQ(plain->info().incompat_flags, 0u);
  EXPECT_FALSE(plain->directory().has_fields());
  EXPECT_EQ(jpg->info().incompat_flags, format::kIncompatFields);
  // The single layout: the fields header, one field entry and its name.
  EXPECT_EQ(jpg->info().directory_bytes,
            plain->info().directory_bytes + 128 + sizeof(format::FieldEntry) + 3);
  ASSERT_OK_AND_ASSIGN(auto b, jpg->Read(7, "jpg"));
  EXPECT_EQ(b, testing::RandomBytes(50, 7));
  ASSERT_OK_AND_ASSIGN(auto p, plain->Read(7, ""));  // the unnamed field of a v1 volume
  EXPECT_EQ(p, b);
}

TEST(FieldsTest, ZstdCompressesWhatPaysAndKeepsTheRestRaw) {
  TempDir tmp;
  const std::string path = tmp / "z.dlfs";
  const auto data = Dataset();
  VolumeBuilder::Options opt;
  opt.compress.zstd = true;
  ASSERT_OK(Build(path, data, opt));
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(path));
  EXPECT_EQ(v->info().incompat_flags, format::kIncompatFields | format::kIncompatZstd);
  const SampleDirectory& d = v->directory();
  const uint32_t json = *d.FindField("json"), jpg = *d.FindField("jpg");
  const auto j = d.Field(0, json);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->codec, FieldCodec::kZstd);
  EXPECT_LT(j->stored_length * 3, j->decoded_length);
  EXPECT_EQ(d.Field(0, jpg)->codec, FieldCodec::kNone) << "random bytes do not compress";
  EXPECT_EQ(d.Field(0, *d.FindField("cls"))->codec, FieldCodec::kNone) << "1 byte saves nothing";
  ExpectRoundTrip(*v, data);
  VerifyReport report;
  ASSERT_OK(VerifyVolume(*v, {}, &report));
  EXPECT_EQ(report.bad_samples, 0u);
}

TEST(FieldsTest, ZstdDictionary) {
  std::vector<std::vector<std::byte>> train;
  for (int i = 0; i < 400; ++i) train.push_back(Bytes(Json(i).substr(0, 120 + i % 50)));
  ASSERT_OK_AND_ASSIGN(auto dict, VolumeBuilder::TrainDictionary(train, 4096));
  ASSERT_FALSE(dict.empty());
  TempDir tmp;
  VolumeBuilder::Options opt;
  opt.compress.zstd = true;
  opt.compress.dictionary = dict;
  auto data = Dataset();
  ASSERT_OK(Build(tmp / "d.dlfs", data, opt));
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(tmp / "d.dlfs"));
  const SampleDirectory& d = v->directory();
  EXPECT_EQ(d.dictionary().size(), dict.size());
  EXPECT_EQ(d.Field(0, *d.FindField("json"))->codec, FieldCodec::kZstdDict);
  ExpectRoundTrip(*v, data);
}

// A compressed field whose stored bytes are damaged: refused, naming the
// sample and the field — never garbage.
TEST(FieldsTest, CorruptCompressedFieldNamesSampleAndField) {
  TempDir tmp;
  const std::string path = tmp / "z.dlfs";
  VolumeBuilder::Options opt;
  opt.compress.zstd = true;
  ASSERT_OK(Build(path, Dataset(), opt));
  uint64_t where = 0;
  {
    ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(path));
    const SampleDirectory& d = v->directory();
    const FieldInfo f = *d.Field(2, *d.FindField("json"));
    ASSERT_EQ(f.codec, FieldCodec::kZstd);
    where = d.sample(2).offset + f.offset_in_sample + f.stored_length / 2;
  }
  auto bytes = testing::ReadFile(path);
  bytes[where] ^= std::byte{0x20};
  testing::WriteFile(path, bytes);
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(path));
  auto got = v->Read(2, "json");
  ASSERT_EQ(got.status().code(), StatusCode::kCorruption);
  EXPECT_NE(got.status().message().find("sample 2 's/k2' field 'json'"), std::string::npos)
      << got.status().message();
  EXPECT_OK(v->Read(2, "jpg"));  // the other fields of the sample still read
  EXPECT_FALSE(v->ReadFields(2).ok());
  VerifyReport report;
  std::vector<std::string> problems;
  VerifyOptions vo;
  vo.on_bad_sample = [&](uint64_t, const Status& st) { problems.push_back(st.message()); };
  ASSERT_OK(VerifyVolume(*v, vo, &report));
  EXPECT_EQ(report.bad_samples, 1u);
}

// A zstd frame whose header declares another size than the directory is
// refused from its header, before any memory is sized by it.
TEST(FieldsTest, FrameWithLyingSizeIsRefusedBeforeAllocating) {
  // A frame header declaring 2^40 bytes (single segment, 8-byte content
  // size), then one empty raw last block.
  std::vector<std::byte> frame = {std::byte{0x28}, std::byte{0xb5}, std::byte{0x2f},
                                  std::byte{0xfd}, std::byte{0xe0}};
  const uint64_t huge = uint64_t{1} << 40;
  for (int k = 0; k < 8; ++k) frame.push_back(static_cast<std::byte>(huge >> (8 * k)));
  for (uint8_t b : {0x01, 0x00, 0x00}) frame.push_back(std::byte{b});
  std::vector<std::byte> out(10);
  Status st = format::ZstdDecode(frame, out, nullptr, "v.dlfs: sample 0 'a' field 'json'");
  ASSERT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("declares 1099511627776 bytes, the directory says 10"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(st.message().rfind("v.dlfs: sample 0 'a' field 'json'", 0), 0u);
  // A real frame against a directory that says otherwise, and trailing bytes.
  const auto src = Bytes(Json(1));
  ASSERT_OK_AND_ASSIGN(auto z, format::ZstdCompress(src, 3, nullptr));
  std::vector<std::byte> small(src.size() - 1), exact(src.size());
  EXPECT_EQ(format::ZstdDecode(z, small, nullptr, "x").code(), StatusCode::kCorruption);
  ASSERT_OK(format::ZstdDecode(z, exact, nullptr, "x"));
  EXPECT_EQ(exact, src);
  z.push_back(std::byte{0});
  EXPECT_EQ(format::ZstdDecode(z, exact, nullptr, "x").code(), StatusCode::kCorruption);
}

// What a reader without the features (a v1 reader) does with a v2 volume.
TEST(FieldsTest, ReaderWithoutTheFeatureRefuses) {
  TempDir tmp;
  VolumeBuilder::Options opt;
  opt.compress.zstd = true;
  ASSERT_OK(Build(tmp / "z.dlfs", Dataset(), opt));
  const auto bytes = testing::ReadFile(tmp / "z.dlfs");
  format::Superblock sb;
  std::memcpy(&sb, bytes.data(), sizeof sb);
  ASSERT_OK(format::CheckSuperblock(sb, bytes.size(), "z.dlfs"));
  const Status v1 = format::CheckSuperblock(sb, bytes.size(), "z.dlfs", 0);
  EXPECT_EQ(v1.code(), StatusCode::kNotSupported);
  EXPECT_NE(v1.message().find("fields,zstd"), std::string::npos) << v1.message();
  const Status no_zstd =
      format::CheckSuperblock(sb, bytes.size(), "z.dlfs", format::kIncompatFields);
  EXPECT_EQ(no_zstd.code(), StatusCode::kNotSupported);
  EXPECT_NE(no_zstd.message().find("(zstd"), std::string::npos) << no_zstd.message();
  sb.incompat_flags = format::kIncompatZstd;  // zstd without fields
  format::SealSuperblock(&sb);
  EXPECT_EQ(format::CheckSuperblock(sb, bytes.size(), "z.dlfs").code(), StatusCode::kCorruption);
}

// Without LoaderOptions::fields the loader refuses a volume whose stored
// extents are not one field's bytes rather than hand them out as samples
// (tests/unit/loader_fields_test.cc reads fields).
TEST(FieldsTest, LoaderRefusesMultiFieldVolumesWithoutFields) {
  TempDir tmp;
  ASSERT_OK(Build(tmp / "v.dlfs", Dataset()));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Volume> v, Volume::Open(tmp / "v.dlfs"));
  auto loader = Loader::Create(v, LoaderOptions{});
  ASSERT_EQ(loader.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(loader.status().message().find("pass the fields"), std::string::npos);
}

// The volume written by the v1 code (before fields existed), committed as
// tests/data/v1/example.dlfs: docs/format.md §7's example.
TEST(FieldsTest, V1FixtureOpensReadsAndVerifies) {
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(std::string(DLFS_TEST_DATA) + "/v1/example.dlfs"));
  EXPECT_EQ(v->info().format_version, 1u);
  EXPECT_EQ(v->info().incompat_flags, 0u);
  EXPECT_EQ(v->info().data_alignment, 8u);
  const SampleDirectory& d = v->directory();
  EXPECT_FALSE(d.has_fields());
  const std::map<std::string, std::string> want = {{"README", "hello\n"},
                                                   {"cat/1.jpg", "abc"},
                                                   {"cat/2.jpg", "meow!"},
                                                   {"cat/kittens/3.jpg", "mew"},
                                                   {"dog/1.jpg", "woof"}};
  ASSERT_EQ(d.size(), want.size());
  for (const auto& [path, content] : want) {
    ASSERT_OK_AND_ASSIGN(const uint64_t i, d.Lookup(path));
    ASSERT_OK_AND_ASSIGN(auto bytes, v->Read(i));
    EXPECT_EQ(Str(bytes), content);
    ASSERT_OK_AND_ASSIGN(auto fields, v->ReadFields(i));
    ASSERT_EQ(fields.size(), 1u);
    EXPECT_EQ(fields[0].first, "");
    EXPECT_EQ(Str(fields[0].second), content);
  }
  EXPECT_EQ(d.class_name(d.label(*d.Lookup("dog/1.jpg"))), "dog");
  VerifyReport report;
  ASSERT_OK(VerifyVolume(*v, {}, &report));
  EXPECT_EQ(report.samples_checked, 5u);
  EXPECT_EQ(report.bad_samples, 0u);
  EXPECT_OK(report.backup_superblock);
}

// Every byte flip in a v2 directory (fields header, field table, index,
// records, dictionary) is refused; with the checksums recomputed, the
// structural checks either refuse or leave every field read in range.
class FieldsCorruptionTest : public ::testing::Test {
 protected:
  // With a dictionary, most of the region is dictionary bytes, which only
  // the region's checksum guards; the resealed test leaves it out.
  void Make(bool with_dictionary) {
    VolumeBuilder::Options opt;
    opt.compress.zstd = true;
    if (with_dictionary) {
      std::vector<std::vector<std::byte>> train;
      for (int i = 0; i < 300; ++i) train.push_back(Bytes(Json(i).substr(0, 100 + i % 40)));
      auto dict = VolumeBuilder::TrainDictionary(train, 1024);
      ASSERT_OK(dict);
      opt.compress.dictionary = *dict;
    }
    ASSERT_OK(Build(path_, Dataset(), opt));
    original_ = testing::ReadFile(path_);
    ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(path_));
    info_ = v->info();
  }
  TempDir tmp_;
  std::string path_ = tmp_ / "v.dlfs";
  std::vector<std::byte> original_;
  VolumeInfo info_;
};

TEST_F(FieldsCorruptionTest, EveryFlippedDirectoryByteIsRefused) {
  Make(true);
  for (uint64_t i = 0; i < info_.directory_bytes; ++i) {
    auto bytes = original_;
    bytes[info_.directory_offset + i] ^= std::byte{0x01};
    testing::WriteFile(path_, bytes);
    auto v = Volume::Open(path_);
    ASSERT_FALSE(v.ok()) << "directory byte " << i << " accepted";
    EXPECT_EQ(v.status().code(), StatusCode::kCorruption) << v.status().ToString();
  }
}

TEST_F(FieldsCorruptionTest, ResealedDamageNeverReadsOutOfRange) {
  Make(false);
  const uint64_t dir_off = info_.directory_offset;
  uint64_t refused = 0;
  for (uint64_t i = 0; i < info_.directory_bytes; ++i) {
    // One flip per byte, alternating low and high bits, keeps it fast.
    for (std::byte flip : {i % 2 ? std::byte{0x80} : std::byte{0x01}}) {
      std::vector<std::byte> bytes = original_;
      bytes[dir_off + i] ^= flip;
      format::Superblock sb;
      std::memcpy(&sb, bytes.data(), sizeof sb);
      sb.regions[1].crc32c = crc32c::Value(bytes.data() + dir_off, info_.directory_bytes);
      format::SealSuperblock(&sb);
      std::memcpy(bytes.data(), &sb, sizeof sb);
      testing::WriteFile(path_, bytes);
      auto v = Volume::Open(path_);
      if (!v.ok()) {
        EXPECT_EQ(v.status().code(), StatusCode::kCorruption) << v.status().ToString();
        ++refused;
        continue;
      }
      const SampleDirectory& d = (*v)->directory();
      for (uint64_t s = 0; s < d.size(); ++s) {
        for (const FieldInfo& f : d.Fields(s)) {
          EXPECT_LE(uint64_t{f.offset_in_sample} + f.stored_length, d.sample(s).length);
          (void)(*v)->Read(s, d.field_name(f.field));  // may fail, must stay in range
        }
      }
    }
  }
  EXPECT_GT(refused, info_.directory_bytes / 2);  // most damage is structural
}

}  // namespace
}  // namespace dlfs
