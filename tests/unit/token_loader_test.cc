// TokenLoader: windows across documents, every token once per epoch, the
// stream split by ranks, resume (same and changed weights), checks, both
// engines.
#include "dlfs/tokens.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "dlfs/builder.h"
#include "testutil.h"

namespace dlfs {
namespace {

using testing::TempDir;

constexpr uint32_t kShift = 12;  // token = document << 12 | position

// A token volume of uint32 tokens telling their document and position.
std::vector<uint64_t> WriteCorpus(const std::string& path, const std::vector<uint32_t>& lengths) {
  VolumeBuilder::Options o;
  o.token_width = 4;
  auto b = VolumeBuilder::Create(path, o);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  std::vector<uint64_t> starts;
  uint64_t at = 0;
  for (uint32_t d = 0; d < lengths.size(); ++d) {
    std::vector<uint32_t> doc(lengths[d]);
    for (uint32_t p = 0; p < lengths[d]; ++p) doc[p] = d << kShift | p;
    starts.push_back(at);
    at += lengths[d];
    EXPECT_OK((*b)->Add("", std::as_bytes(std::span<const uint32_t>(doc))));
  }
  EXPECT_OK((*b)->Finish());
  return starts;
}

std::vector<uint32_t> Lengths(uint32_t n, uint32_t seed) {
  std::vector<uint32_t> v(n);
  uint64_t x = seed;
  for (auto& l : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    l = (x >> 33) % 7 == 0 ? 0 : 1 + (x >> 40) % 400;
  }
  return v;
}

class TokenLoaderTest : public ::testing::TestWithParam<EngineKind> {
 protected:
  TokenLoaderOptions Options(uint64_t seq, uint64_t batch) {
    TokenLoaderOptions o;
    o.seq_len = seq;
    o.batch_size = batch;
    o.seed = 11;
    o.engine.kind = GetParam();
    return o;
  }
  TempDir dir_;
};

// Every epoch's windows, as rows of tokens, read by `world` ranks (global
// batch order: batch j of rank 0, of rank 1, ...).
std::vector<std::vector<int64_t>> ReadEpoch(const std::vector<TokenSource>& sources,
                                            TokenLoaderOptions o, uint32_t world,
                                            uint64_t epoch = 0) {
  std::vector<std::unique_ptr<TokenLoader>> ranks;
  for (uint32_t r = 0; r < world; ++r) {
    o.rank = r;
    o.world_size = world;
    auto l = TokenLoader::Open(sources, o);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    ranks.push_back(std::move(*l));
  }
  std::vector<std::vector<int64_t>> rows;
  std::vector<int64_t> out(ranks[0]->batch_tokens());
  for (uint64_t b = 0; b < ranks[0]->batches_per_epoch(); ++b) {
    for (auto& l : ranks) {
      TokenBatchInfo info;
      EXPECT_OK(l->ReadBatch(epoch, b, out, &info));
      for (uint64_t r = 0; r < info.windows; ++r) {
        rows.emplace_back(out.begin() + r * l->window_tokens(),
                          out.begin() + (r + 1) * l->window_tokens());
      }
    }
  }
  return rows;
}

TEST_P(TokenLoaderTest, WindowsCoverEveryTokenOnceAndFollowDocuments) {
  const std::string path = dir_.path() + "/c.dlfs";
  const auto lengths = Lengths(300, 1);
  WriteCorpus(path, lengths);
  uint64_t tokens = 0;
  for (uint32_t l : lengths) tokens += l;
  const uint64_t seq = 50;
  const auto rows = ReadEpoch({{path}}, Options(seq, 8), 1);
  const uint64_t windows = (tokens - 1) / seq;
  ASSERT_GE(rows.size(), windows);
  std::multiset<int64_t> firsts;
  for (uint64_t w = 0; w < windows; ++w) {
    const auto& row = rows[w];
    ASSERT_EQ(row.size(), seq + 1);
    for (size_t i = 0; i + 1 < row.size(); ++i) {
      const int64_t d = row[i] >> kShift, p = row[i] & 4095;
      const int64_t nd = row[i + 1] >> kShift, np = row[i + 1] & 4095;
      if (nd == d) {
        ASSERT_EQ(np, p + 1);
      } else {
        ASSERT_EQ(p + 1, lengths[d]);  // a document's end ...
        ASSERT_EQ(np, 0);              // ... then the next non-empty one's start
        for (int64_t e = d + 1; e < nd; ++e) ASSERT_EQ(lengths[e], 0u);
      }
    }
    firsts.insert(row.begin(), row.end() - 1);
  }
  EXPECT_EQ(firsts.size(), windows * seq);
  EXPECT_EQ(std::set<int64_t>(firsts.begin(), firsts.end()).size(), windows * seq);
}

TEST_P(TokenLoaderTest, RanksSplitTheSameStream) {
  const std::string path = dir_.path() + "/c.dlfs";
  WriteCorpus(path, Lengths(200, 2));
  const auto one = ReadEpoch({{path}}, Options(32, 6), 1);
  for (uint32_t world : {2u, 3u, 8u}) {
    const auto many = ReadEpoch({{path}}, Options(32, 6), world);
    auto o = Options(32, 6);
    const uint64_t windows = (*TokenLoader::Open({{path}}, o))->windows_per_epoch();
    ASSERT_GE(many.size(), windows);
    EXPECT_TRUE(std::equal(many.begin(), many.begin() + windows, one.begin())) << world;
  }
}

TEST_P(TokenLoaderTest, ResumeKeepsTheStreamOrStartsASegment) {
  const std::string a = dir_.path() + "/a.dlfs", b = dir_.path() + "/b.dlfs";
  WriteCorpus(a, Lengths(100, 3));
  WriteCorpus(b, Lengths(100, 4));
  auto o = Options(16, 4);
  auto full = TokenLoader::Open({{a, 2}, {b, 1}}, o);
  ASSERT_TRUE(full.ok());
  std::vector<int64_t> out((*full)->batch_tokens()), again(out.size());
  TokenBatchInfo info, info2;
  // The state after 5 batches, resumed by a fresh loader: the same batches.
  const TokenStreamState s = (*full)->StateAt(0, 5 * 4);
  auto resumed = TokenLoader::Open({{a, 2}, {b, 1}}, o);
  auto pos = (*resumed)->Resume(s);
  ASSERT_TRUE(pos.ok());
  ASSERT_EQ(*pos, 20u);
  for (uint64_t k = 0; k < 3; ++k) {
    ASSERT_OK((*full)->ReadBatch(0, 5 + k, out, &info));
    ASSERT_OK((*resumed)->ReadBatch(0, k, again, &info2, *pos));
    EXPECT_EQ(out, again);
    EXPECT_EQ(info.sources, info2.sources);
  }
  // Other weights: each source continues after the windows it gave.
  auto changed = TokenLoader::Open({{a, 1}, {b, 1}}, o);
  pos = (*changed)->Resume(s);
  ASSERT_TRUE(pos.ok());
  // Every source's draws, before the state and after it, in order.
  std::map<uint32_t, std::vector<uint64_t>> drawn;
  for (uint64_t k = 0; k < 5; ++k) {
    ASSERT_OK((*full)->ReadBatch(0, k, out, &info));
    for (size_t r = 0; r < info.windows; ++r)
      drawn[info.sources[r]].push_back(info.first_tokens[r]);
  }
  EXPECT_EQ((*changed)->StateAt(0, 20).counts, s.counts);
  for (uint64_t k = 0; k < (*changed)->batches_after(*pos); ++k) {
    ASSERT_OK((*changed)->ReadBatch(0, k, out, &info, *pos));
    for (size_t r = 0; r < info.windows; ++r)
      drawn[info.sources[r]].push_back(info.first_tokens[r]);
  }
  for (auto& [src, draws] : drawn) {
    // The first pass over a source: each of its windows at most once.
    const uint64_t pass = (*changed)->source_windows()[src];
    draws.resize(std::min<uint64_t>(draws.size(), pass));
    EXPECT_EQ(std::set<uint64_t>(draws.begin(), draws.end()).size(), draws.size()) << src;
  }
  // Sources may be appended; not replaced.
  auto appended = TokenLoader::Open({{a, 2}, {b, 1}, {a, 1}}, o);
  EXPECT_TRUE((*appended)->Resume(s).ok());
  auto swapped = TokenLoader::Open({{b, 1}, {a, 2}}, o);
  EXPECT_FALSE((*swapped)->Resume(s).ok());
}

TEST_P(TokenLoaderTest, ADamagedChunkIsAnErrorNamingIt) {
  const std::string path = dir_.path() + "/c.dlfs";
  WriteCorpus(path, Lengths(50, 5));
  auto o = Options(16, 64);
  auto l = TokenLoader::Open({{path}}, o);
  ASSERT_TRUE(l.ok());
  // Find token 100 (document 0 or later) in the file and flip a bit of it.
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  const auto& lengths = Lengths(50, 5);
  uint32_t d = 0, p = 100;
  while (p >= lengths[d]) p -= lengths[d++];
  const uint32_t token = d << kShift | p;
  const size_t at = bytes.find(std::string(reinterpret_cast<const char*>(&token), 4));
  ASSERT_NE(at, std::string::npos);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(bytes[at] ^ 1));
  f.close();
  o.shuffle = false;
  auto damaged = TokenLoader::Open({{path}}, o);
  ASSERT_TRUE(damaged.ok());
  std::vector<int64_t> out((*damaged)->batch_tokens());
  Status st = (*damaged)->ReadBatch(0, 0, out, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  EXPECT_NE(st.message().find("chunk"), std::string::npos) << st.ToString();
  o.verify = false;  // unchecked, the flipped token comes through
  auto unchecked = TokenLoader::Open({{path}}, o);
  EXPECT_OK((*unchecked)->ReadBatch(0, 0, out, nullptr));
}

TEST_P(TokenLoaderTest, RefusesWhatCannotWork) {
  const std::string path = dir_.path() + "/c.dlfs";
  WriteCorpus(path, {3, 4});
  auto o = Options(16, 1);
  EXPECT_FALSE(TokenLoader::Open({{path}}, o).ok());  // 7 tokens: no window of 17
  o.seq_len = 0;
  EXPECT_FALSE(TokenLoader::Open({{path}}, o).ok());
  o.seq_len = 2;
  o.rank = 2;
  o.world_size = 2;
  EXPECT_FALSE(TokenLoader::Open({{path}}, o).ok());
  EXPECT_FALSE(TokenLoader::Open({}, Options(2, 1)).ok());
}

INSTANTIATE_TEST_SUITE_P(Engines, TokenLoaderTest,
                         ::testing::Values(EngineKind::kPread, EngineKind::kAuto),
                         [](const auto& info) {
                           return info.param == EngineKind::kPread ? "pread" : "auto";
                         });

}  // namespace
}  // namespace dlfs
