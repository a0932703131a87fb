// Token volumes (docs/format.md §10.11): documents of token ids back to
// back in one stream, checked per document and per chunk of the stream.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "common/crc32c.h"
#include "dlfs/builder.h"
#include "dlfs/verify.h"
#include "dlfs/volume.h"
#include "format/compact_codec.h"
#include "format/format.h"
#include "format/superblock.h"
#include "testutil.h"
#include "directory/token_checks.h"
// The fuzz harnesses' exercise of an opened volume, token queries included.
#include "../../fuzz/exercise.h"

namespace dlfs {
namespace tokens_test {

using testing::ReadFile;
using testing::StatusIs;
using testing::TempDir;
using testing::WriteFile;

// Token t of a corpus: a value that tells where it is (below 2^16 for
// uint16 volumes).
uint32_t TokenValue(uint64_t t, uint32_t width) {
  const uint64_t v = t * 2654435761u + 12345;
  return width == 2 ? static_cast<uint32_t>(v % 65536) : static_cast<uint32_t>(v);
}

struct Corpus {
  uint32_t width = 2;
  std::vector<uint64_t> lengths;  // tokens per document
  std::vector<std::byte> bytes;   // every token, little-endian
  uint64_t tokens() const { return bytes.size() / width; }
  uint64_t start(uint64_t d) const {
    return std::accumulate(lengths.begin(), lengths.begin() + d, uint64_t{0});
  }
};

// `n` documents of 0 to `max_len` tokens, some runs of empty ones.
Corpus MakeCorpus(uint32_t width, size_t n, uint32_t max_len, uint32_t seed) {
  std::mt19937 rng(seed);
  Corpus c;
  c.width = width;
  for (size_t d = 0; d < n; ++d) {
    const bool empty = rng() % 5 == 0 || (d >= 32 && d < 48);  // block 2 of 16: all empty
    c.lengths.push_back(empty ? 0 : 1 + rng() % max_len);
  }
  const uint64_t total = std::accumulate(c.lengths.begin(), c.lengths.end(), uint64_t{0});
  c.bytes.resize(total * width);
  for (uint64_t t = 0; t < total; ++t) {
    const uint32_t v = TokenValue(t, width);
    std::memcpy(c.bytes.data() + t * width, &v, width);
  }
  return c;
}

VolumeBuilder::Options TokenOptions(uint32_t width, uint32_t block_shift = 4) {
  VolumeBuilder::Options o;
  o.token_width = width;
  o.block_shift = block_shift;  // 16 documents per block: many blocks
  return o;
}

// Writes the corpus: in batches of `batch` documents through AddBatch, or
// (batch 0) document by document, streamed in pieces.
Status Write(const std::string& path, const Corpus& c, size_t batch,
             VolumeBuilder::Options o = {}) {
  if (o.token_width == 0) o = TokenOptions(c.width);
  DLFS_ASSIGN_OR_RETURN(auto b, VolumeBuilder::Create(path, o));
  uint64_t at = 0;
  if (batch == 0) {
    for (const uint64_t len : c.lengths) {
      const uint64_t bytes = len * c.width;
      DLFS_RETURN_IF_ERROR(b->BeginSample(""));
      for (uint64_t p = 0; p < bytes; p += 7 * c.width) {
        const uint64_t n = std::min<uint64_t>(7 * c.width, bytes - p);
        DLFS_RETURN_IF_ERROR(b->Append({c.bytes.data() + at + p, n}));
      }
      DLFS_RETURN_IF_ERROR(b->EndSample());
      at += bytes;
    }
  } else {
    for (size_t d = 0; d < c.lengths.size(); d += batch) {
      const size_t n = std::min(batch, c.lengths.size() - d);
      std::vector<uint64_t> lengths;
      uint64_t bytes = 0;
      for (size_t k = 0; k < n; ++k) {
        lengths.push_back(c.lengths[d + k] * c.width);
        bytes += lengths.back();
      }
      DLFS_RETURN_IF_ERROR(b->AddBatch({c.bytes.data() + at, bytes}, lengths, {}));
      at += bytes;
    }
  }
  return b->Finish();
}

void ExpectCorpus(const Volume& v, const Corpus& c) {
  const SampleDirectory& d = v.directory();
  ASSERT_EQ(d.token_width(), c.width);
  ASSERT_EQ(d.size(), c.lengths.size());
  ASSERT_EQ(d.token_count(), c.tokens());
  EXPECT_EQ(d.token_stream_offset(), format::kSuperblockSize);
  EXPECT_EQ(d.token_check_shift(), format::kDefaultCheckShift);
  EXPECT_EQ(v.info().data_bytes, c.bytes.size());
  // Each document: its first token, its bytes, and DocumentAt of each of
  // its tokens.
  uint64_t start = 0;
  for (uint64_t doc = 0; doc < c.lengths.size(); ++doc) {
    ASSERT_OK_AND_ASSIGN(const uint64_t s, d.DocumentStart(doc));
    ASSERT_EQ(s, start) << "document " << doc;
    ASSERT_OK_AND_ASSIGN(const std::vector<std::byte> bytes, v.Read(doc));
    ASSERT_TRUE(std::equal(bytes.begin(), bytes.end(), c.bytes.begin() + start * c.width,
                           c.bytes.begin() + (start + c.lengths[doc]) * c.width));
    for (uint64_t t = start; t < start + c.lengths[doc]; ++t) {
      ASSERT_OK_AND_ASSIGN(const uint64_t at, d.DocumentAt(t));
      ASSERT_EQ(at, doc) << "token " << t;
    }
    start += c.lengths[doc];
  }
  EXPECT_EQ(*d.DocumentStart(c.lengths.size()), c.tokens());
  EXPECT_THAT(d.DocumentStart(c.lengths.size() + 1), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(d.DocumentAt(c.tokens()), StatusIs(StatusCode::kInvalidArgument, "no token"));
  // The chunk checks are the CRCs of the stream's chunks.
  const uint64_t chunk = uint64_t{1} << d.token_check_shift();
  ASSERT_EQ(d.token_chunk_count(), (c.bytes.size() + chunk - 1) / chunk);
  for (uint64_t k = 0; k < d.token_chunk_count(); ++k) {
    const uint64_t n = std::min<uint64_t>(chunk, c.bytes.size() - k * chunk);
    EXPECT_EQ(*d.TokenCheck(k), crc32c::Value(c.bytes.data() + k * chunk, n)) << k;
  }
  EXPECT_THAT(d.TokenCheck(d.token_chunk_count()), StatusIs(StatusCode::kInvalidArgument));
  // Windows of tokens across documents, chunks and blocks.
  std::mt19937 rng(1);
  for (int k = 0; k < 200 && c.tokens() > 0; ++k) {
    const uint64_t first = rng() % c.tokens();
    const uint64_t count = std::min<uint64_t>(rng() % 5000, c.tokens() - first);
    std::vector<std::byte> out(count * c.width);
    ASSERT_OK(v.ReadTokens(first, count, out));
    ASSERT_TRUE(std::equal(out.begin(), out.end(), c.bytes.begin() + first * c.width));
  }
  std::vector<std::byte> all(c.bytes.size());
  ASSERT_OK(v.ReadTokens(0, c.tokens(), all));
  EXPECT_EQ(all, c.bytes);
  std::vector<std::byte> one(c.width);
  EXPECT_THAT(v.ReadTokens(c.tokens(), 1, one), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(v.ReadTokens(0, 2, one), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_OK(d.CheckAll());
  VerifyReport report;
  ASSERT_OK(VerifyVolume(v, {}, &report));
  EXPECT_EQ(report.bad_samples, 0u);
  EXPECT_EQ(report.token_chunks_checked, d.token_chunk_count());
  EXPECT_OK(report.tokens);
}

TEST(TokensTest, DocumentsRoundTripAcrossBlocksAndChunks) {
  for (const uint32_t width : {2u, 4u}) {
    for (const size_t batch : {size_t{0}, size_t{1}, size_t{13}, size_t{1000}}) {
      SCOPED_TRACE(::testing::Message() << "width " << width << " batch " << batch);
      TempDir tmp;
      const std::string vol = tmp / "t.dlfs";
      // 150 documents of up to 700 tokens: ~10 blocks of 16, ~30 chunks.
      const Corpus c = MakeCorpus(width, 150, 700, width * 100 + batch);
      ASSERT_OK(Write(vol, c, batch));
      ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol));
      ExpectCorpus(*v, c);
      EXPECT_EQ(v->directory().label(3), kNoLabel);
      EXPECT_FALSE(v->directory().has_names());
    }
  }
}

TEST(TokensTest, EmptyDocumentsAreKeptAndHoldNoToken) {
  TempDir tmp;
  const std::string vol = tmp / "t.dlfs";
  Corpus c;
  c.width = 2;
  // Empty first and last documents, runs of them inside a block and a
  // whole block of them (documents 16..31).
  for (int d = 0; d < 40; ++d)
    c.lengths.push_back(d == 0 || d == 39 || (d >= 16 && d < 32) || d % 3 == 0 ? 0 : 3);
  for (uint64_t t = 0; t < std::accumulate(c.lengths.begin(), c.lengths.end(), 0ull); ++t) {
    const uint16_t v = static_cast<uint16_t>(t);
    c.bytes.push_back(std::byte(v & 0xff));
    c.bytes.push_back(std::byte(v >> 8));
  }
  ASSERT_OK(Write(vol, c, 7));
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol));
  ExpectCorpus(*v, c);
  const SampleDirectory& d = v->directory();
  // Documents 15..31 are empty (a whole block of them, 16..31): document
  // 32 starts where document 14 ends, and holds the next token.
  ASSERT_OK_AND_ASSIGN(const uint64_t s32, d.DocumentStart(32));
  ASSERT_OK_AND_ASSIGN(const uint64_t s15, d.DocumentStart(15));
  ASSERT_OK_AND_ASSIGN(const uint64_t s16, d.DocumentStart(16));
  EXPECT_EQ(s15, s32);
  EXPECT_EQ(s16, s32);
  EXPECT_EQ(*d.DocumentAt(s32), 32u);
  EXPECT_EQ(*d.DocumentAt(s32 - 1), 14u);
  EXPECT_EQ(*d.DocumentAt(0), 1u);  // document 0 is empty
  EXPECT_EQ(*d.DocumentStart(39), d.token_count());
}

TEST(TokensTest, AnEmptyCorpusOpens) {
  for (const int docs : {0, 3}) {
    TempDir tmp;
    const std::string vol = tmp / "t.dlfs";
    Corpus c;
    c.lengths.assign(docs, 0);
    ASSERT_OK(Write(vol, c, 0));
    ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol));
    ExpectCorpus(*v, c);
    EXPECT_EQ(v->directory().token_chunk_count(), 0u);
  }
}

TEST(TokensTest, LargerBlocksAndLabels) {
  TempDir tmp;
  const std::string vol = tmp / "t.dlfs";
  const Corpus c = MakeCorpus(4, 3000, 40, 9);
  VolumeBuilder::Options o = TokenOptions(4, 10);
  ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(vol, o));
  std::vector<uint64_t> lengths;
  std::vector<uint32_t> labels;
  for (size_t d = 0; d < c.lengths.size(); ++d) {
    lengths.push_back(c.lengths[d] * 4);
    labels.push_back(d % 3 == 0 ? kNoLabel : static_cast<uint32_t>(d % 2));
  }
  ASSERT_OK(b->AddBatch(c.bytes, lengths, labels));
  ASSERT_OK(b->Finish());
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol));
  ExpectCorpus(*v, c);
  EXPECT_EQ(v->directory().class_count(), 2u);
  for (size_t d = 0; d < labels.size(); ++d) ASSERT_EQ(v->directory().label(d), labels[d]);
}

TEST(TokensTest, AnAbandonedDocumentLeavesNoTrace) {
  TempDir tmp;
  const std::string vol = tmp / "t.dlfs";
  const Corpus c = MakeCorpus(2, 60, 3000, 4);
  ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(vol, TokenOptions(2)));
  uint64_t at = 0;
  const std::vector<std::byte> junk = testing::RandomBytes(9000, 5);
  for (size_t d = 0; d < c.lengths.size(); ++d) {
    if (d % 7 == 3) {  // begun, written in part, abandoned
      ASSERT_OK(b->BeginSample(""));
      ASSERT_OK(b->Append({junk.data(), 2 * (d * 311 % 4500)}));
      b->AbortSample();
    }
    if (d % 11 == 5) {  // refused at its end: half a token
      ASSERT_OK(b->BeginSample(""));
      ASSERT_OK(b->Append({junk.data(), 4097}));
      EXPECT_THAT(b->EndSample(), StatusIs(StatusCode::kInvalidArgument, "not whole tokens"));
    }
    const uint64_t n = c.lengths[d] * 2;
    ASSERT_OK(b->Add("", {c.bytes.data() + at, n}));
    at += n;
  }
  ASSERT_OK(b->Finish());
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol));
  ExpectCorpus(*v, c);
}

TEST(TokensTest, TheWriterRefusesWhatATokenVolumeCannotHold) {
  TempDir tmp;
  const std::string vol = tmp / "t.dlfs";
  auto refused = [&](VolumeBuilder::Options o, const std::string& what) {
    EXPECT_THAT(VolumeBuilder::Create(vol, o), StatusIs(StatusCode::kInvalidArgument, what));
  };
  VolumeBuilder::Options o = TokenOptions(2);
  o.token_width = 3;
  refused(o, "token_width must be 2 (uint16) or 4 (uint32)");
  o = TokenOptions(2);
  o.layout = DirectoryLayout::kTree;
  refused(o, "needs the compact directory layout");
  o = TokenOptions(2);
  o.compress.zstd = true;
  refused(o, "no compression");
  o = TokenOptions(2);
  o.images.max_side = 64;
  refused(o, "no image preparation");
  o = TokenOptions(2);
  o.targets = 2;
  refused(o, "has one target");
  o = TokenOptions(2);
  o.align = 4096;
  refused(o, "align must be 1");

  ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(vol, TokenOptions(4)));
  const std::vector<std::byte> bytes = testing::RandomBytes(64, 1);
  EXPECT_THAT(b->Add("doc", {bytes.data(), 8}), StatusIs(StatusCode::kInvalidArgument, "no names"));
  EXPECT_THAT(b->Add("", {bytes.data(), 6}),
              StatusIs(StatusCode::kInvalidArgument, "not whole tokens of 4 bytes"));
  EXPECT_THAT(b->BeginField("json"), StatusIs(StatusCode::kInvalidArgument));
  // A batch is refused whole: a bad length, label or path adds nothing.
  const std::vector<uint64_t> lengths = {8, 8, 6, 42};
  EXPECT_THAT(b->AddBatch(bytes, lengths, {}),
              StatusIs(StatusCode::kInvalidArgument, "document #2 of 6 bytes"));
  const std::vector<uint64_t> good = {8, 8, 8, 40};
  const std::vector<uint32_t> labels = {0, 1u << 24, 0, 0};
  EXPECT_THAT(b->AddBatch(bytes, good, labels), StatusIs(StatusCode::kInvalidArgument, "label"));
  const std::vector<std::string_view> paths = {"", "a", "", ""};
  EXPECT_THAT(b->AddBatch(bytes, good, {}, paths),
              StatusIs(StatusCode::kInvalidArgument, "no names"));
  EXPECT_EQ(b->sample_count(), 0u);
  ASSERT_OK(b->AddBatch(bytes, good, {}));
  ASSERT_OK(b->Finish());
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol));
  EXPECT_EQ(v->directory().token_count(), 16u);
  EXPECT_EQ(v->directory().size(), 4u);
}

TEST(TokensTest, OtherVolumesHaveNoTokens) {
  TempDir tmp;
  const std::string vol = tmp / "v.dlfs";
  {
    ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(vol));
    ASSERT_OK(b->Add("a", testing::Bytes("abcd")));
    ASSERT_OK(b->Finish());
  }
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol));
  const SampleDirectory& d = v->directory();
  EXPECT_EQ(d.token_width(), 0u);
  EXPECT_EQ(d.token_count(), 0u);
  EXPECT_THAT(d.DocumentAt(0), StatusIs(StatusCode::kNotSupported, "not a token volume"));
  EXPECT_THAT(d.DocumentStart(0), StatusIs(StatusCode::kNotSupported));
  EXPECT_THAT(d.TokenCheck(0), StatusIs(StatusCode::kNotSupported));
  std::vector<std::byte> out(2);
  EXPECT_THAT(v->ReadTokens(0, 1, out), StatusIs(StatusCode::kNotSupported));
}

// Damage to a token volume on disk, the region's checksums recomputed
// where the damage is meant to pass them (a forged or buggy writer's
// volume).
class TokensDamageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    vol_ = tmp_ / ("t" + std::to_string(volumes_++) + ".dlfs");
    corpus_ = MakeCorpus(2, 150, 700, 3);
    ASSERT_OK(Write(vol_, corpus_, 10));
    ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol_));
    dir_offset_ = v->info().directory_offset;
    bytes_ = ReadFile(vol_);
    std::memcpy(&header_, bytes_.data() + dir_offset_, sizeof header_);
  }

  std::byte* Dir() { return bytes_.data() + dir_offset_; }
  format::BlockEntry Block(uint64_t b) {
    format::BlockEntry e;
    std::memcpy(&e, Dir() + header_.sections[format::kSectionBlocks].offset + b * sizeof e,
                sizeof e);
    return e;
  }
  // Writes block b's entry back with its CRC recomputed over its records.
  void PutBlock(uint64_t b, format::BlockEntry e) {
    const uint64_t count = std::min<uint64_t>(16, corpus_.lengths.size() - 16 * b);
    const std::byte* records =
        Dir() + header_.sections[format::kSectionRecords].offset + e.records_offset;
    e.crc32c = format::SampleBlockCrc(
        e, {records, format::BlockRecordBytes(count, e.end_width, e.label_width)});
    std::memcpy(Dir() + header_.sections[format::kSectionBlocks].offset + b * sizeof e, &e,
                sizeof e);
  }
  // Writes the header back, its CRC and the superblocks' copy of it
  // recomputed.
  void PutHeader() {
    header_.crc32c = crc32c::Value(&header_, offsetof(format::CompactHeader, crc32c));
    std::memcpy(Dir(), &header_, sizeof header_);
    format::Superblock sb;
    std::memcpy(&sb, bytes_.data(), sizeof sb);
    for (uint32_t r = 0; r < sb.region_count; ++r) {
      if (sb.regions[r].kind == static_cast<uint32_t>(format::RegionKind::kDirectory)) {
        sb.regions[r].crc32c = header_.crc32c;
      }
    }
    format::SealSuperblock(&sb);
    std::memcpy(bytes_.data(), &sb, sizeof sb);
    std::memcpy(bytes_.data() + bytes_.size() - sizeof sb, &sb, sizeof sb);
  }
  void Save() { WriteFile(vol_, bytes_); }

  TempDir tmp_;
  int volumes_ = 0;
  std::string vol_;
  Corpus corpus_;
  uint64_t dir_offset_ = 0;
  std::vector<std::byte> bytes_;
  format::CompactHeader header_{};
};

TEST_F(TokensDamageTest, AFlippedTokenFailsItsChunkAndItsDocument) {
  // A byte of chunk 5 (stream bytes [20480, 24576)).
  const uint64_t at = 5 * 4096 + 100;
  bytes_[format::kSuperblockSize + at] ^= std::byte{0x04};
  Save();
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol_));
  const SampleDirectory& d = v->directory();
  std::vector<std::byte> out(2 * 10);
  // A window inside chunk 5, and one across chunks 4..6.
  EXPECT_THAT(v->ReadTokens(at / 2 - 3, 10, out),
              StatusIs(StatusCode::kCorruption, "token chunk 5 (stream bytes [20480, 24576)"));
  std::vector<std::byte> wide(2 * 5000);
  EXPECT_THAT(v->ReadTokens(8000, 5000, wide), StatusIs(StatusCode::kCorruption, "token chunk 5"));
  EXPECT_THAT(v->ReadTokens(8000, 5000, wide), StatusIs(StatusCode::kCorruption, vol_));
  // Windows of other chunks read as written.
  ASSERT_OK(v->ReadTokens(0, 10, out));
  ASSERT_OK(v->ReadTokens(6 * 2048, 10, out));
  ASSERT_OK(v->ReadTokens(at / 2 - 3, 10, out, /*verify=*/false));
  // The document holding it fails its own CRC too.
  ASSERT_OK_AND_ASSIGN(const uint64_t doc, d.DocumentAt(at / 2));
  EXPECT_THAT(v->Read(doc), StatusIs(StatusCode::kCorruption));
  // The loader's helper: the covering range, checked.
  ASSERT_OK_AND_ASSIGN(const tokens::ChunkRange r, tokens::CoveringChunks(d, at / 2, 1));
  EXPECT_EQ(r.first_chunk, 5u);
  EXPECT_EQ(r.end_chunk, 6u);
  EXPECT_THAT(
      tokens::CheckTokenRange(
          d, r.begin, {bytes_.data() + format::kSuperblockSize + r.begin, r.end - r.begin}, vol_),
      StatusIs(StatusCode::kCorruption, "token chunk 5"));
  EXPECT_THAT(tokens::CheckTokenRange(d, r.begin + 2, {bytes_.data(), 10}),
              StatusIs(StatusCode::kInvalidArgument, "not whole chunks"));
  VerifyReport report;
  ASSERT_OK(VerifyVolume(*v, {}, &report));
  EXPECT_EQ(report.bad_samples, 1u);
  EXPECT_EQ(report.bad_token_chunks, 1u);
  EXPECT_THAT(report.tokens, StatusIs(StatusCode::kCorruption, "1 of "));
  EXPECT_THAT(report.tokens, StatusIs(StatusCode::kCorruption, "token chunk 5"));
}

TEST_F(TokensDamageTest, ADamagedTokenCheckIsAMismatch) {
  const uint64_t section = header_.token_checks.offset;
  Dir()[section + 4 * 2] ^= std::byte{1};  // chunk 2's CRC
  Save();
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol_));
  std::vector<std::byte> out(2);
  EXPECT_THAT(v->ReadTokens(2 * 2048 + 1, 1, out),
              StatusIs(StatusCode::kCorruption, "token chunk 2"));
  ASSERT_OK(v->ReadTokens(3 * 2048 + 1, 1, out));
}

TEST_F(TokensDamageTest, BlocksThatAreNotContiguousAreRefusedWhenUsed) {
  // Block 3 placed two bytes later than block 2 ends, its CRC recomputed:
  // it passes its own check, not its link to block 2.
  format::BlockEntry e = Block(3);
  e.data_offset += 2;
  PutBlock(3, e);
  Save();
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol_));
  const SampleDirectory& d = v->directory();
  EXPECT_THAT(d.Locate(50), StatusIs(StatusCode::kCorruption,
                                     "directory block 3 (samples 48..63): starts at byte"));
  EXPECT_THAT(d.Locate(50), StatusIs(StatusCode::kCorruption, "but block 2 ends at"));
  EXPECT_THAT(d.Locate(50), StatusIs(StatusCode::kCorruption, vol_));
  EXPECT_THAT(d.DocumentStart(49), StatusIs(StatusCode::kCorruption, "directory block 3"));
  // Block 4 does not follow it either; the others read as written.
  EXPECT_THAT(d.Locate(64), StatusIs(StatusCode::kCorruption, "but block 3 ends at"));
  EXPECT_OK(d.Locate(47));
  EXPECT_OK(d.Locate(80));
  EXPECT_THAT(d.CheckAll(), StatusIs(StatusCode::kCorruption, "directory block 3"));
  // A token of block 3's documents: the search lands there, which fails.
  const uint64_t t = (corpus_.start(48) + corpus_.start(64)) / 2;
  ASSERT_LT(corpus_.start(48), corpus_.start(64));
  EXPECT_THAT(d.DocumentAt(t), StatusIs(StatusCode::kCorruption, "directory block 3"));
}

TEST_F(TokensDamageTest, TheFirstBlockStartsTheStreamAndTheLastEndsIt) {
  {
    format::BlockEntry e = Block(0);
    e.data_offset += 2;
    PutBlock(0, e);
    Save();
    ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol_));
    EXPECT_THAT(v->directory().Locate(0),
                StatusIs(StatusCode::kCorruption, "but the token stream starts at 4096"));
    EXPECT_THAT(v->directory().Locate(16), StatusIs(StatusCode::kCorruption, "but block 0 ends"));
  }
  SetUp();
  const uint64_t last = header_.block_count - 1;
  format::BlockEntry e = Block(last);
  e.data_offset -= 2;  // then it ends 2 bytes early (and before block last-1's end)
  PutBlock(last, e);
  Save();
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol_));
  EXPECT_THAT(v->directory().Locate(corpus_.lengths.size() - 1),
              StatusIs(StatusCode::kCorruption, "directory block " + std::to_string(last)));
}

TEST_F(TokensDamageTest, AnEndWithinATokenIsRefused) {
  // Document 20's end (block 1, record 4) made odd, the block's CRC recomputed.
  format::BlockEntry e = Block(1);
  std::byte* records = Dir() + header_.sections[format::kSectionRecords].offset + e.records_offset;
  std::byte* rec = records + 4 * format::RecordBytes(e.end_width, e.label_width);
  uint64_t end = format::LoadUint(rec, e.end_width);
  format::StoreUint(rec, end + 1, e.end_width);
  PutBlock(1, e);
  Save();
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol_));
  EXPECT_THAT(v->directory().Locate(20),
              StatusIs(StatusCode::kCorruption, "within a token of 2 bytes"));
}

TEST_F(TokensDamageTest, TheHeaderIsCheckedAtOpen) {
  const format::CompactHeader original = header_;
  auto refused = [&](StatusCode code, const std::string& what) {
    PutHeader();
    Save();
    EXPECT_THAT(Volume::Open(vol_), StatusIs(code, what));
    header_ = original;
  };
  header_.token_width = 3;
  refused(StatusCode::kCorruption, "token width 3 (2 or 4 bytes)");
  header_.token_width = 0;
  refused(StatusCode::kCorruption, "token width 0");
  header_.check_shift = 8;
  refused(StatusCode::kCorruption, "token check shift 8 outside 9..24");
  header_.check_shift = 25;
  refused(StatusCode::kCorruption, "token check shift 25");
  header_.token_checks.length -= 4;
  refused(StatusCode::kCorruption, "token checks section of");
  header_.token_checks.offset += 4;
  refused(StatusCode::kCorruption, "misaligned");
  header_.token_checks.offset = 1u << 30;
  refused(StatusCode::kCorruption, "lies outside the region");
  header_.flags &= ~format::kCompactTokens;
  refused(StatusCode::kCorruption, "without the TOKENS flag");
  header_.flags |= 0x8;
  refused(StatusCode::kNotSupported, "unknown flags 0x00000008");
  // Chunks of another size make the section the wrong length.
  header_.check_shift = 13;
  refused(StatusCode::kCorruption, "token checks section of");
  // As written it opens.
  PutHeader();
  Save();
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol_));
  ExpectCorpus(*v, corpus_);
}

TEST(TokensTest, LargeWindowsAreReadInPlaceAndCheckedAtBothEnds) {
  TempDir tmp;
  const std::string vol = tmp / "t.dlfs";
  const Corpus c = MakeCorpus(2, 2000, 2000, 11);  // ~3 MB of tokens
  ASSERT_OK(Write(vol, c, 500, TokenOptions(2, 10)));
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol));
  ASSERT_GT(c.bytes.size(), 2u << 20);
  // A window of more than 1 MiB from inside chunk 3 to inside chunk 400.
  const uint64_t first = 3 * 2048 + 5, count = 397 * 2048;
  std::vector<std::byte> out(count * 2);
  ASSERT_OK(v->ReadTokens(first, count, out));
  ASSERT_TRUE(std::equal(out.begin(), out.end(), c.bytes.begin() + first * 2));
  // Damage before the window in its first chunk, inside it, after it in
  // its last chunk: each is found.
  for (const uint64_t at :
       {uint64_t{3 * 4096 + 2}, uint64_t{200 * 4096 + 7}, (first + count) * 2 + 3}) {
    std::vector<std::byte> bytes = ReadFile(vol);
    bytes[format::kSuperblockSize + at] ^= std::byte{0x10};
    WriteFile(vol, bytes);
    ASSERT_OK_AND_ASSIGN(auto damaged, Volume::Open(vol));
    EXPECT_THAT(damaged->ReadTokens(first, count, out),
                StatusIs(StatusCode::kCorruption, "token chunk " + std::to_string(at / 4096)));
    bytes[format::kSuperblockSize + at] ^= std::byte{0x10};
    WriteFile(vol, bytes);
  }
  ExpectCorpus(*v, c);
}

// Every 5th byte of the directory region flipped in turn, checksums left as
// they are: the volume is refused, or every query (the fuzz harnesses'
// exercise, which aborts on a broken promise) stays in bounds and
// consistent, and only the unprotected token checks section goes unnoticed
// until a chunk is checked against it.
TEST_F(TokensDamageTest, DamageToTheDirectoryIsCaughtOrHarmless) {
  ASSERT_OK_AND_ASSIGN(auto v, Volume::Open(vol_));
  const uint64_t length = v->info().directory_bytes;
  v.reset();
  const std::vector<std::byte> original = bytes_;
  uint64_t refused = 0, opened = 0;
  for (uint64_t at = 0; at < length; at += 5) {
    bytes_ = original;
    Dir()[at] ^= std::byte{0x11};
    Save();
    auto damaged = Volume::Open(vol_);
    if (!damaged.ok()) {
      ++refused;
      continue;
    }
    ++opened;
    (void)fuzz::ExerciseVolume(**damaged);
  }
  EXPECT_GT(refused, 0u);
  EXPECT_GT(opened, 0u);
  bytes_ = original;
  Save();
  ASSERT_OK_AND_ASSIGN(auto intact, Volume::Open(vol_));
  EXPECT_EQ(fuzz::ExerciseVolume(*intact), 0u);
}

}  // namespace tokens_test
}  // namespace dlfs
