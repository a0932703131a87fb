// The loader's fields (LoaderOptions::fields, format v2): per sample, the
// requested fields in the requested order, byte-identical to
// Volume::Read(i, field), raw ones zero-copy and zstd ones decoded; missing
// and corrupt fields named; from the device and with the node cache.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>

#include "dlfs/builder.h"
#include "dlfs/decode_stage.h"
#include "dlfs/loader.h"
#include "dlfs/volume.h"
#include "testutil.h"

namespace dlfs {
namespace loader_fields_test {

using testing::Bytes;
using testing::StatusIs;
using testing::TempDir;

constexpr int kSamples = 40;

std::string Key(int i) { return "s/k" + std::string(i < 10 ? "0" : "") + std::to_string(i); }

// A caption that compresses well (stored zstd), and bytes that do not (raw).
std::string Json(int i) {
  std::string s = "{\"id\": " + std::to_string(i) + ", \"caption\": \"";
  for (int k = 0; k < 30; ++k) s += "a photo of a cat sitting on a mat, ";
  return s + "\"}";
}

bool LacksJson(int i) { return i % 7 == 3; }
bool LacksJpg(int i) { return i % 11 == 5; }

// Fields json (zstd), jpg (raw) and cls (raw), some samples missing one.
Status Build(const std::string& path) {
  VolumeBuilder::Options opt;
  opt.compress.zstd = true;
  DLFS_ASSIGN_OR_RETURN(auto b, VolumeBuilder::Create(path, opt));
  for (int i = 0; i < kSamples; ++i) {
    DLFS_RETURN_IF_ERROR(b->BeginSample(Key(i)));
    if (!LacksJson(i)) DLFS_RETURN_IF_ERROR(b->AddField("json", Bytes(Json(i))));
    if (!LacksJpg(i)) {
      DLFS_RETURN_IF_ERROR(b->AddField("jpg", testing::RandomBytes(300 + 17 * i, i)));
    }
    DLFS_RETURN_IF_ERROR(b->AddField("cls", Bytes(std::to_string(i % 3))));
    DLFS_RETURN_IF_ERROR(b->EndSample());
  }
  return b->Finish();
}

std::vector<std::byte> Copy(std::span<const std::byte> s) { return {s.begin(), s.end()}; }

// Each test runs from the device (cache_budget 0) and with the node cache.
class LoaderFieldsTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ASSERT_OK(Build(path_));
    ASSERT_OK_AND_ASSIGN(vol_, Volume::Open(path_));
    const SampleDirectory& d = vol_->directory();
    const uint32_t json = *d.FindField("json");
    ASSERT_EQ(d.Field(0, json)->codec, FieldCodec::kZstd);
    ASSERT_EQ(d.Field(0, *d.FindField("jpg"))->codec, FieldCodec::kNone);
  }

  LoaderOptions Options(std::vector<std::string> fields) const {
    LoaderOptions o;
    o.sampler.batch_size = 6;
    o.sampler.seed = 11;
    o.fields = std::move(fields);
    o.cache_budget = GetParam() ? (uint64_t{64} << 20) : 0;
    return o;
  }

  std::unique_ptr<Loader> Make(const LoaderOptions& o) {
    auto l = Loader::Create(vol_, o);
    EXPECT_OK(l);
    if (!l.ok()) return nullptr;
    const bool has_tier = (*l)->description().find("node cache") != std::string::npos;
    EXPECT_EQ(has_tier, GetParam()) << (*l)->description();
    return std::move(l).value();
  }

  TempDir tmp_;
  const std::string path_ = tmp_ / "f.dlfs";
  std::shared_ptr<Volume> vol_;
};

TEST_P(LoaderFieldsTest, FieldsInRequestedOrderEqualVolumeRead) {
  // The samples that have every field.
  LoaderOptions o = Options({"json", "cls", "jpg"});
  std::vector<uint64_t> subset;
  for (int i = 0; i < kSamples; ++i) {
    if (!LacksJson(i) && !LacksJpg(i)) subset.push_back(static_cast<uint64_t>(i));
  }
  o.subset = subset;
  auto loader = Make(o);
  ASSERT_NE(loader, nullptr);
  for (uint64_t epoch : {0, 1}) {
    loader->SetEpoch(epoch);
    const std::vector<uint64_t> order = loader->RankIndices(epoch);
    std::vector<uint64_t> seen;
    Batch b;
    while (true) {
      ASSERT_OK_AND_ASSIGN(bool more, loader->Next(&b));
      if (!more) break;
      ASSERT_EQ(b.field_count(), 3u);
      uint64_t payload = 0;
      for (size_t i = 0; i < b.size(); ++i) {
        const uint64_t index = b.index(i);
        seen.push_back(index);
        for (size_t f = 0; f < 3; ++f) {
          ASSERT_OK_AND_ASSIGN(auto want, vol_->Read(index, o.fields[f]));
          EXPECT_EQ(Copy(b.field(i, f)), want) << Key(index) << "." << o.fields[f];
          payload += b.field(i, f).size();
        }
        EXPECT_EQ(b.sample(i).data(), b.field(i, 0).data()) << "sample(i) is field 0";
        EXPECT_EQ(b.label(i), vol_->directory().label(index));
      }
      EXPECT_EQ(b.payload_bytes(), payload);
    }
    EXPECT_EQ(seen, order) << "sampler order";
  }
}

// Raw fields are views into the read buffer, next to each other as stored
// (cls follows jpg in every sample's extent); zstd fields are decoded.
TEST_P(LoaderFieldsTest, RawFieldsAreZeroCopy) {
  LoaderOptions o = Options({"jpg", "cls"});
  o.subset = {0, 1, 2};
  auto loader = Make(o);
  ASSERT_NE(loader, nullptr);
  Batch b;
  ASSERT_OK_AND_ASSIGN(bool more, loader->Next(&b));
  ASSERT_TRUE(more);
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(b.field(i, 0).data() + b.field(i, 0).size(), b.field(i, 1).data());
  }
}

TEST_P(LoaderFieldsTest, MissingFieldNamesTheSampleAndTheFieldAndLoadingGoesOn) {
  auto loader = Make(Options({"cls", "jpg"}));
  ASSERT_NE(loader, nullptr);
  loader->SetEpoch(0);
  const std::vector<uint64_t> order = loader->RankIndices(0);
  const uint64_t batches = loader->batches_per_epoch();
  uint64_t good = 0, bad = 0;
  for (uint64_t k = 0; k < batches; ++k) {
    // The first sample of this batch that lacks jpg, if any.
    int lacking = -1;
    for (uint64_t p = k * 6; p < std::min<uint64_t>(order.size(), k * 6 + 6); ++p) {
      if (LacksJpg(static_cast<int>(order[p]))) {
        lacking = static_cast<int>(order[p]);
        break;
      }
    }
    Batch b;
    auto more = loader->Next(&b);
    if (lacking < 0) {
      ASSERT_OK(more);
      ASSERT_TRUE(*more);
      EXPECT_EQ(b.field_count(), 2u);
      ++good;
      continue;
    }
    ASSERT_THAT(more, StatusIs(StatusCode::kNotFound, "has no field 'jpg'"))
        << "batch " << k << " holds " << Key(lacking);
    const std::string m = more.status().message();
    EXPECT_NE(m.find(path_), std::string::npos) << m;
    EXPECT_NE(m.find("sample " + std::to_string(lacking) + " '" + Key(lacking) + "'"),
              std::string::npos)
        << m;
    ++bad;
  }
  EXPECT_GT(bad, 0u);
  EXPECT_GT(good, 0u);
  Batch b;
  ASSERT_OK_AND_ASSIGN(bool more, loader->Next(&b));
  EXPECT_FALSE(more);
}

TEST_P(LoaderFieldsTest, CorruptZstdFieldIsNamedAndOtherFieldsStillRead) {
  const SampleDirectory& d = vol_->directory();
  const FieldInfo f = *d.Field(2, *d.FindField("json"));
  ASSERT_EQ(f.codec, FieldCodec::kZstd);
  auto bytes = testing::ReadFile(path_);
  bytes[d.sample(2).offset + f.offset_in_sample + f.stored_length / 2] ^= std::byte{0x20};
  testing::WriteFile(path_, bytes);
  ASSERT_OK_AND_ASSIGN(vol_, Volume::Open(path_));

  LoaderOptions o = Options({"json"});
  o.subset = {1, 2, 4};
  o.sampler.shuffle = false;
  auto loader = Make(o);
  ASSERT_NE(loader, nullptr);
  Batch b;
  auto more = loader->Next(&b);
  ASSERT_EQ(more.status().code(), StatusCode::kCorruption);
  EXPECT_NE(more.status().message().find(path_ + ": sample 2 's/k02' field 'json'"),
            std::string::npos)
      << more.status().message();

  // The fields not asked for are not looked at.
  o = Options({"cls", "jpg"});
  o.subset = {1, 2, 4};
  auto others = Make(o);
  ASSERT_NE(others, nullptr);
  ASSERT_OK_AND_ASSIGN(bool got, others->Next(&b));
  ASSERT_TRUE(got);
  EXPECT_EQ(b.size(), 3u);
}

// SaveState/LoadState with fields: the next batch, its fields intact.
TEST_P(LoaderFieldsTest, ResumeContinuesWithTheNextBatch) {
  LoaderOptions o = Options({"cls"});
  auto first = Make(o);
  ASSERT_NE(first, nullptr);
  first->SetEpoch(1);
  Batch b;
  for (int k = 0; k < 2; ++k) ASSERT_OK(first->Next(&b));
  ASSERT_OK_AND_ASSIGN(SourceState state, first->SaveState());
  ASSERT_OK(first->Next(&b));
  const std::vector<uint64_t> want(b.indices().begin(), b.indices().end());

  auto resumed = Make(o);
  ASSERT_NE(resumed, nullptr);
  ASSERT_OK(resumed->LoadState(state));
  resumed->SetEpoch(1);
  ASSERT_OK_AND_ASSIGN(bool more, resumed->Next(&b));
  ASSERT_TRUE(more);
  EXPECT_EQ(std::vector<uint64_t>(b.indices().begin(), b.indices().end()), want);
  for (size_t i = 0; i < b.size(); ++i) {
    ASSERT_OK_AND_ASSIGN(auto cls, vol_->Read(b.index(i), "cls"));
    EXPECT_EQ(Copy(b.field(i, 0)), cls);
  }
}

// Decoded fields live in buffers the loader recycles; a batch kept after the
// loader is gone keeps its own, and the next batches never write into it.
TEST_P(LoaderFieldsTest, DecodedFieldsOutliveTheLoaderAndLaterBatches) {
  LoaderOptions o = Options({"json"});
  std::vector<uint64_t> subset;
  for (int i = 0; i < kSamples; ++i) {
    if (!LacksJson(i)) subset.push_back(static_cast<uint64_t>(i));
  }
  o.subset = subset;
  auto loader = Make(o);
  ASSERT_NE(loader, nullptr);
  std::vector<Batch> kept;  // every other batch: the others' buffers are reused
  for (uint64_t epoch : {0, 1}) {
    loader->SetEpoch(epoch);
    Batch b;
    for (size_t n = 0;; ++n) {
      ASSERT_OK_AND_ASSIGN(bool more, loader->Next(&b));
      if (!more) break;
      if (n % 2 == 0) kept.push_back(b);
    }
  }
  loader.reset();
  ASSERT_GT(kept.size(), 4u);
  for (const Batch& k : kept) {
    for (size_t i = 0; i < k.size(); ++i) {
      ASSERT_OK_AND_ASSIGN(auto want, vol_->Read(k.index(i), "json"));
      EXPECT_EQ(Copy(k.field(i, 0)), want) << Key(k.index(i));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tier, LoaderFieldsTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "tier" : "device"; });

// The node cache of a loader reading fields holds compressed ones decoded
// (decompressed once per node, when admitted) when every sample fits so:
// a region of its own, whose bytes each process checks on first use
// against the checksum written beside them, so a damaged region is read
// from the device instead; a budget that holds the samples only as stored
// keeps stored bytes. Every field handed out equals Volume::Read's.
class LoaderFieldsCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(shm_.path() + "/shm");
    ::setenv("DLFS_CACHE_DIR", (shm_ / "shm").c_str(), 1);
    ASSERT_OK(Build(path_));
    ASSERT_OK_AND_ASSIGN(vol_, Volume::Open(path_));
    const SampleDirectory& d = vol_->directory();
    for (int i = 0; i < kSamples; ++i) {
      if (LacksJson(i)) continue;
      subset_.push_back(static_cast<uint64_t>(i));
    }
    for (uint64_t i = 0; i < d.size(); ++i) {
      uint64_t decoded = 8;  // the region's prefix
      for (const FieldInfo& f : d.Fields(i)) decoded += f.decoded_length;
      stored_bytes_ += (d.sample(i).length + 63) / 64 * 64;
      decoded_bytes_ += (decoded + 63) / 64 * 64;
    }
    ASSERT_LT(stored_bytes_ + 8192, decoded_bytes_);  // json compresses well
  }
  void TearDown() override { ::unsetenv("DLFS_CACHE_DIR"); }

  // planned_epochs 0: read ahead without end.
  std::unique_ptr<Loader> Make(uint64_t budget, uint32_t planned_epochs = 0) {
    LoaderOptions o;
    o.planned_epochs = planned_epochs;
    o.sampler.batch_size = 6;
    o.fields = {"cls", "json"};
    o.subset = subset_;
    o.cache_budget = budget;
    auto l = Loader::Create(vol_, o);
    EXPECT_OK(l);
    return l.ok() ? std::move(l).value() : nullptr;
  }
  // One epoch, every field checked against Volume::Read; its stats.
  SourceStats Epoch(Loader& l, uint64_t epoch) {
    const SourceStats before = l.source_stats();
    l.SetEpoch(epoch);
    Batch b;
    size_t n = 0;
    while (true) {
      auto more = l.Next(&b);
      EXPECT_OK(more);
      if (!more.ok() || !*more) break;
      for (size_t i = 0; i < b.size(); ++i, ++n) {
        for (size_t f = 0; f < 2; ++f) {
          auto want = vol_->Read(b.index(i), f == 0 ? "cls" : "json");
          EXPECT_OK(want);
          if (want.ok()) EXPECT_EQ(Copy(b.field(i, f)), *want) << Key(b.index(i)) << " " << f;
        }
      }
    }
    EXPECT_EQ(n, subset_.size());
    return l.source_stats() - before;
  }
  std::vector<std::string> Regions() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(shm_ / "shm")) {
      out.push_back(e.path().filename());
    }
    return out;
  }

  TempDir tmp_, shm_;
  const std::string path_ = tmp_ / "f.dlfs";
  std::shared_ptr<Volume> vol_;
  std::vector<uint64_t> subset_;
  uint64_t stored_bytes_ = 0, decoded_bytes_ = 0;
};

TEST_F(LoaderFieldsCacheTest, CompressedFieldsAreHeldDecodedAndADamagedRegionIsNotTrusted) {
  auto a = Make(uint64_t{64} << 20);
  ASSERT_NE(a, nullptr);
  Epoch(*a, 0);  // a requested cache is full by the first epoch's end
  // Decoded bytes held: more than the samples take stored.
  EXPECT_GT(a->source_stats().cache_used_bytes, 0u);
  EXPECT_LE(a->source_stats().cache_used_bytes, decoded_bytes_);
  // Counted by a loader of its own that reads one epoch and nothing past
  // it: `a`'s counters also take the batches it reads ahead of the next
  // epoch, whenever its thread gets to them (58 hits for 34 samples once).
  auto warm_loader = Make(uint64_t{64} << 20, /*planned_epochs=*/1);
  ASSERT_NE(warm_loader, nullptr);
  const SourceStats warm = Epoch(*warm_loader, 0);
  EXPECT_EQ(warm.cache_hits, subset_.size());
  EXPECT_EQ(warm.io.requests, 0u);
  const std::vector<std::string> regions = Regions();
  ASSERT_EQ(regions.size(), 1u);
  EXPECT_TRUE(regions[0].ends_with("-decoded")) << regions[0];

  // Noise over the second half of the region: a new loader (this process
  // attaches again, checking each sample on first use) reads those from the
  // device and still hands out the right fields.
  ASSERT_NO_FATAL_FAILURE(testing::NoiseOverSecondHalf(shm_ / ("shm/" + regions[0])));
  auto b = Make(uint64_t{64} << 20);
  ASSERT_NE(b, nullptr);
  const SourceStats s = Epoch(*b, 2);
  EXPECT_GT(s.cache_misses, 0u);
  EXPECT_GT(s.io.requests, 0u);
}

TEST_F(LoaderFieldsCacheTest, ABudgetTooSmallForDecodedSamplesHoldsStoredOnes) {
  auto a = Make(stored_bytes_ + 8192);
  ASSERT_NE(a, nullptr);
  Epoch(*a, 0);
  const SourceStats warm = Epoch(*a, 1);
  EXPECT_GT(warm.cache_hits, 0u);
  const std::vector<std::string> regions = Regions();
  ASSERT_EQ(regions.size(), 1u);
  EXPECT_FALSE(regions[0].ends_with("-decoded")) << regions[0];
  EXPECT_LE(a->source_stats().cache_used_bytes, stored_bytes_);
}

TEST(LoaderFieldsOptionsTest, UnknownTwiceOrNoFieldsAreRefused) {
  TempDir tmp;
  ASSERT_OK(Build(tmp / "f.dlfs"));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Volume> v, Volume::Open(tmp / "f.dlfs"));
  LoaderOptions o;
  o.fields = {"jpg", "txt"};
  auto unknown = Loader::Create(v, o);
  ASSERT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("has no field 'txt'; its fields: 'cls', 'jpg', 'json'"),
            std::string::npos)
      << unknown.status().message();
  o.fields = {"jpg", "jpg"};
  EXPECT_EQ(Loader::Create(v, o).status().code(), StatusCode::kInvalidArgument);
  // Without fields the stored extents (several fields, some compressed) are
  // not samples: refused, saying what to do.
  auto none = Loader::Create(v, LoaderOptions{});
  ASSERT_EQ(none.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(none.status().message().find("its samples have several fields ('cls', 'jpg', 'json'): "
                                         "name the fields to read (the fields option)"),
            std::string::npos)
      << none.status().message();
}

// A volume without fields has one unnamed field: fields = {""} is the sample.
TEST(LoaderFieldsOptionsTest, PlainVolumeHasTheUnnamedField) {
  TempDir tmp;
  {
    ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(tmp / "p.dlfs"));
    for (int i = 0; i < 10; ++i) ASSERT_OK(b->Add(Key(i), testing::RandomBytes(100 + i, i)));
    ASSERT_OK(b->Finish());
  }
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Volume> v, Volume::Open(tmp / "p.dlfs"));
  LoaderOptions o;
  o.sampler.batch_size = 10;
  o.fields = {""};
  ASSERT_OK_AND_ASSIGN(auto loader, Loader::Create(v, o));
  Batch b;
  ASSERT_OK_AND_ASSIGN(bool more, loader->Next(&b));
  ASSERT_TRUE(more);
  ASSERT_EQ(b.field_count(), 1u);
  for (size_t i = 0; i < b.size(); ++i) {
    ASSERT_OK_AND_ASSIGN(auto want, v->Read(b.index(i)));
    EXPECT_EQ(Copy(b.field(i, 0)), want);
  }
  o.fields = {"jpg"};
  EXPECT_EQ(Loader::Create(v, o).status().code(), StatusCode::kInvalidArgument);
}

// The decode stage decodes one image per sample: batches of several fields
// are refused rather than losing the others silently.
TEST(LoaderFieldsOptionsTest, DecodeStageRefusesSeveralFields) {
  TempDir tmp;
  ASSERT_OK(Build(tmp / "f.dlfs"));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Volume> v, Volume::Open(tmp / "f.dlfs"));
  LoaderOptions o;
  o.fields = {"jpg", "cls"};
  o.subset = {0, 1};
  ASSERT_OK_AND_ASSIGN(auto loader, Loader::Create(v, o));
  DecodeStageOptions d;
  d.image.transform.size = 8;
  d.decode_threads = 1;
  ASSERT_OK_AND_ASSIGN(auto stage, DecodeStage::Create(std::move(loader), v, d));
  Batch b;
  auto more = stage->Next(&b);
  ASSERT_EQ(more.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(more.status().message().find("2 fields per sample"), std::string::npos)
      << more.status().message();
}

}  // namespace loader_fields_test
}  // namespace dlfs
