// The Megatron-compatible order (src/tokens/megatron_order.h) against golden
// files made with Megatron-LM's own GPTDataset / BlendedDataset
// (tests/data/megatron, README.md there): for each configuration the test
// regenerates the corpora's document lengths and tokens by their rule,
// builds every split as Megatron's builder does, and compares the epochs,
// the three index arrays, the blend's two arrays (as sha256 of their
// values), every window's tokens (sha256) and the pieces of the first and
// last windows. Then the errors, and sizes past int32.
#include "tokens/megatron_order.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "testutil.h"

namespace dlfs {
namespace megatron_order_test {

using json = nlohmann::json;
using testing::StatusIs;
using tokens_internal::BuildMegatronBlend;
using tokens_internal::BuildMegatronLengthBlend;
using tokens_internal::MegatronBlend;
using tokens_internal::MegatronComponentSizes;
using tokens_internal::MegatronGptOptions;
using tokens_internal::MegatronGptOrder;
using tokens_internal::MegatronSplit;
using tokens_internal::MegatronSplits;
using tokens_internal::TokenPiece;

// ----- SHA-256 (FIPS 180-4), for the golden files' hashes ------------------

class Sha256 {
 public:
  void Update(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    bits_ += uint64_t{n} * 8;
    while (n > 0) {
      const size_t take = std::min(n, sizeof buf_ - used_);
      std::memcpy(buf_ + used_, p, take);
      used_ += take;
      p += take;
      n -= take;
      if (used_ == sizeof buf_) {
        Block(buf_);
        used_ = 0;
      }
    }
  }
  // Little-endian, as the golden files hash numpy "<i8" arrays.
  void UpdateI64(int64_t v) {
    uint8_t le[8];
    for (int k = 0; k < 8; ++k) le[k] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * k));
    Update(le, 8);
  }
  std::string Hex() {
    const uint64_t bits = bits_;
    const uint8_t one = 0x80, zero = 0;
    Update(&one, 1);
    while (used_ != 56) Update(&zero, 1);
    uint8_t be[8];
    for (int k = 0; k < 8; ++k) be[k] = static_cast<uint8_t>(bits >> (56 - 8 * k));
    Update(be, 8);
    std::string out;
    char hex[9];
    for (uint32_t h : h_) {
      std::snprintf(hex, sizeof hex, "%08x", h);
      out += hex;
    }
    return out;
  }

 private:
  static uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
  void Block(const uint8_t* p) {
    static constexpr uint32_t kK[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2};
    uint32_t w[64];
    for (int t = 0; t < 16; ++t) {
      w[t] = uint32_t{p[4 * t]} << 24 | uint32_t{p[4 * t + 1]} << 16 | uint32_t{p[4 * t + 2]} << 8 |
             uint32_t{p[4 * t + 3]};
    }
    for (int t = 16; t < 64; ++t) {
      const uint32_t s0 = Rotr(w[t - 15], 7) ^ Rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      const uint32_t s1 = Rotr(w[t - 2], 17) ^ Rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int t = 0; t < 64; ++t) {
      const uint32_t t1 =
          h + (Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[t] + w[t];
      const uint32_t t2 = (Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h_[0] += a, h_[1] += b, h_[2] += c, h_[3] += d, h_[4] += e, h_[5] += f, h_[6] += g, h_[7] += h;
  }

  uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t bits_ = 0;
};

TEST(MegatronOrderTest, Sha256KnownAnswers) {
  Sha256 empty;
  EXPECT_EQ(empty.Hex(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 abc;
  abc.Update("abc", 3);
  EXPECT_EQ(abc.Hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 two_blocks;  // 56 bytes: the padding takes a second block
  const std::string m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  two_blocks.Update(m.data(), m.size());
  EXPECT_EQ(two_blocks.Hex(), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

// ----- The golden corpora (tests/data/megatron/README.md) -------------------

struct Corpus {
  std::string name;
  bool uint16 = false;  // else int32 tokens
  std::vector<uint64_t> lengths;

  // Token p of document d; the last of a document is EOD (0).
  int64_t Token(uint64_t d, uint64_t p) const {
    if (p + 1 == lengths[d]) return 0;
    if (uint16) return static_cast<int64_t>(1 + (d * 251 + p) % 65535);
    return static_cast<int64_t>(d * 65536 + p + 1);
  }
};

// Document lengths from the 64-bit LCG of the corpus rule.
std::vector<uint64_t> LcgLengths(uint64_t n, uint64_t seed) {
  std::vector<uint64_t> out(n);
  uint64_t x = seed;
  for (uint64_t k = 0; k < n; ++k) {
    x = 6364136223846793005ull * x + 1442695040888963407ull;
    const uint64_t u = x >> 33, r = u % 100, v = u / 100;
    out[k] = r < 3 ? 0 : r < 5 ? 300 + v % 1700 : 1 + v % 80;
  }
  return out;
}

std::string GoldenDir() { return std::string(DLFS_TEST_DATA) + "/megatron"; }

// ----- Megatron's builder, on top of the API --------------------------------

// A GPTDataset: one split of one corpus.
struct Gpt {
  const Corpus* corpus = nullptr;
  MegatronSplit range;
  std::optional<uint64_t> num_samples;  // nullopt: Megatron's None
  std::unique_ptr<MegatronGptOrder> order;
};

// What one split of a configuration builds: nothing, a GPTDataset or a blend.
struct Top {
  std::vector<Gpt> sources;  // one unless blended
  std::optional<MegatronBlend> blend;
};

std::optional<uint64_t> OptionalU64(const json& j) {
  if (j.is_null()) return std::nullopt;
  return j.get<uint64_t>();
}

class Builder {
 public:
  Builder(const json& cfg, const std::map<std::string, Corpus>& corpora)
      : cfg_(cfg), corpora_(corpora) {}

  // BlendedMegatronDatasetBuilder.build(): the three splits' datasets.
  std::array<std::optional<Top>, 3> Build() {
    std::array<std::optional<Top>, 3> out;
    for (int i = 0; i < 3; ++i) sizes_[i] = OptionalU64(cfg_["sizes"][i]);
    if (cfg_.contains("blend_per_split")) {
      for (int i = 0; i < 3; ++i) {
        const json& b = cfg_["blend_per_split"][i];
        if (b.is_null()) continue;
        const auto prefixes = b[0].get<std::vector<std::string>>();
        std::vector<std::optional<MegatronSplit>> ranges;
        for (const auto& p : prefixes) {
          ranges.push_back(MegatronSplit{0, corpora_.at(p).lengths.size()});  // (0.0, 1.0)
        }
        if (prefixes.size() == 1) {
          out[i] = Single(prefixes[0], *ranges[0], i, sizes_[i]);
        } else {
          out[i] = Blend(prefixes, b[1], ranges, i);
        }
        if (::testing::Test::HasFatalFailure()) return out;
      }
      return out;
    }
    const auto prefixes = cfg_["blend"][0].get<std::vector<std::string>>();
    const json& weights = cfg_["blend"][1];
    // The split matrix is the same for every corpus; the ranges are not.
    std::vector<std::array<std::optional<MegatronSplit>, 3>> per;
    for (const auto& p : prefixes) {
      auto r = MegatronSplits(cfg_["split"].get<std::string>(), corpora_.at(p).lengths.size());
      EXPECT_OK(r);
      if (!r.ok()) return out;
      per.push_back(*r);
    }
    for (int i = 0; i < 3; ++i) {
      if (!per[0][i]) continue;
      if (prefixes.size() == 1 && weights.is_null()) {
        out[i] = Single(prefixes[0], *per[0][i], i, sizes_[i]);
      } else {
        std::vector<std::optional<MegatronSplit>> ranges;
        for (const auto& r : per) ranges.push_back(r[i]);
        out[i] = Blend(prefixes, weights, ranges, i);
      }
      if (::testing::Test::HasFatalFailure()) return out;
    }
    return out;
  }

 private:
  Gpt MakeGpt(const std::string& prefix, MegatronSplit range, int split,
              std::optional<uint64_t> num_samples) {
    Gpt g;
    g.corpus = &corpora_.at(prefix);
    g.range = range;
    g.num_samples = num_samples;
    MegatronGptOptions o;
    o.seq_len = cfg_["seq_len"].get<uint64_t>();
    o.seed = cfg_["seed"].get<uint32_t>();
    o.add_extra_token = cfg_["add_extra_token"].get<bool>();
    o.num_samples = num_samples.value_or(0);
    o.drop_last_partial = split != 1 || cfg_["drop_last_partial_validation"].get<bool>();
    auto r = MegatronGptOrder::Build(g.corpus->lengths, range, o);
    EXPECT_OK(r);
    if (r.ok()) g.order = std::make_unique<MegatronGptOrder>(std::move(r).value());
    return g;
  }

  Top Single(const std::string& prefix, MegatronSplit range, int split,
             std::optional<uint64_t> num_samples) {
    Top t;
    t.sources.push_back(MakeGpt(prefix, range, split, num_samples));
    return t;
  }

  Top Blend(const std::vector<std::string>& prefixes, const json& weights,
            const std::vector<std::optional<MegatronSplit>>& ranges, int split) {
    Top t;
    if (!weights.is_null()) {
      // Weights: each source is asked for its share plus the surplus; the
      // blend is sized by the shares.
      const auto w = weights.get<std::vector<double>>();
      const uint64_t requested = sizes_[split].value();  // Megatron: weights need sizes
      auto asked = MegatronComponentSizes(w, requested, cfg_["surplus"].get<double>());
      EXPECT_OK(asked);
      if (!asked.ok()) return t;
      for (size_t k = 0; k < prefixes.size(); ++k) {
        t.sources.push_back(MakeGpt(prefixes[k], *ranges[k], split, (*asked)[k]));
      }
      auto b = BuildMegatronBlend(w, requested);
      EXPECT_OK(b);
      if (b.ok()) t.blend = std::move(b).value();
      return t;
    }
    // No weights: one epoch of each source, weighted by their lengths.
    std::vector<uint64_t> lengths;
    for (size_t k = 0; k < prefixes.size(); ++k) {
      t.sources.push_back(MakeGpt(prefixes[k], *ranges[k], split, std::nullopt));
      if (!t.sources.back().order) return t;
      lengths.push_back(t.sources.back().order->size());
    }
    auto b = BuildMegatronLengthBlend(lengths, sizes_[split]);
    EXPECT_OK(b);
    if (b.ok()) t.blend = std::move(b).value();
    return t;
  }

  const json& cfg_;
  const std::map<std::string, Corpus>& corpora_;
  std::array<std::optional<uint64_t>, 3> sizes_;
};

// ----- Comparing with a golden split ----------------------------------------

// The window's tokens, padded to window_tokens() with -1 (Megatron's pad id
// without a tokenizer pad).
void HashWindow(const Gpt& g, uint64_t k, Sha256* h) {
  std::vector<TokenPiece> pieces;
  g.order->Window(k, &pieces);
  uint64_t n = 0;
  for (const TokenPiece& p : pieces) {
    for (uint64_t t = 0; t < p.count; ++t) h->UpdateI64(g.corpus->Token(p.document, p.begin + t));
    n += p.count;
  }
  for (; n < g.order->window_tokens(); ++n) h->UpdateI64(-1);
}

json Runs(const Gpt& g, uint64_t k) {
  std::vector<TokenPiece> pieces;
  g.order->Window(k, &pieces);
  json runs = json::array();
  for (const TokenPiece& p : pieces) runs.push_back({p.document, p.begin, p.count});
  return runs;
}

// The golden record of a GPTDataset (README.md "Golden format").
void ExpectGpt(const json& gold, const Gpt& g) {
  ASSERT_TRUE(g.order);
  const MegatronGptOrder& o = *g.order;
  EXPECT_EQ(gold["corpus"].get<std::string>(), g.corpus->name);
  EXPECT_EQ(gold["doc_range"][0].get<uint64_t>(), g.range.begin);
  EXPECT_EQ(gold["doc_range"][1].get<uint64_t>(), g.range.end);
  EXPECT_EQ(OptionalU64(gold["num_samples"]), g.num_samples);
  EXPECT_EQ(gold["tokens_per_epoch"].get<uint64_t>(), o.tokens_per_epoch());
  EXPECT_EQ(gold["num_epochs"].get<uint64_t>(), o.num_epochs());
  EXPECT_EQ(gold["separate_final_epoch"].get<bool>(), o.separate_final_epoch());
  ASSERT_EQ(gold["len"].get<uint64_t>(), o.size());

  Sha256 doc, sample, shuffle, windows;
  for (uint64_t i = 0; i < o.document_index_size(); ++i) {
    doc.UpdateI64(static_cast<int64_t>(o.document_index(i)));
  }
  for (uint64_t j = 0; j <= o.size(); ++j) {
    const auto [position, offset] = o.sample_index(j);
    sample.UpdateI64(static_cast<int64_t>(position));
    sample.UpdateI64(offset);
  }
  for (uint64_t k = 0; k < o.size(); ++k) {
    shuffle.UpdateI64(static_cast<int64_t>(o.shuffle_index(k)));
    HashWindow(g, k, &windows);
  }
  const json& sha = gold["sha256"];
  EXPECT_EQ(sha["document_index"].get<std::string>(), doc.Hex());
  EXPECT_EQ(sha["sample_index"].get<std::string>(), sample.Hex());
  EXPECT_EQ(sha["shuffle_index"].get<std::string>(), shuffle.Hex());
  EXPECT_EQ(sha["windows"].get<std::string>(), windows.Hex());

  if (gold.contains("first")) {  // a top-level dataset: its first and last windows
    const uint64_t first = gold["first"].size(), last = gold["last"].size();
    ASSERT_EQ(first, std::min<uint64_t>(o.size(), 40));
    for (uint64_t k = 0; k < first; ++k) EXPECT_EQ(gold["first"][k], Runs(g, k)) << "window " << k;
    for (uint64_t i = 0; i < last; ++i) {
      const uint64_t k = o.size() - last + i;
      EXPECT_EQ(gold["last"][i], Runs(g, k)) << "window " << k;
    }
  }
}

void ExpectBlend(const json& gold, const Top& t) {
  ASSERT_TRUE(t.blend);
  const MegatronBlend& b = *t.blend;
  ASSERT_EQ(gold["datasets"].size(), t.sources.size());
  for (size_t k = 0; k < t.sources.size(); ++k) {
    SCOPED_TRACE("source " + std::to_string(k));
    ExpectGpt(gold["datasets"][k], t.sources[k]);
  }
  if (::testing::Test::HasFatalFailure()) return;
  const bool exhaustive = gold["size"].is_null();
  if (exhaustive) {  // Megatron keeps the lengths as the weights
    std::vector<uint64_t> lengths;
    for (const Gpt& g : t.sources) lengths.push_back(g.order->size());
    EXPECT_EQ(gold["weights"].get<std::vector<uint64_t>>(), lengths);
  } else {
    EXPECT_EQ(gold["weights"].get<std::vector<double>>(), b.weights());  // bit for bit
    EXPECT_EQ(gold["size"].get<uint64_t>(), b.size());
  }
  ASSERT_EQ(gold["len"].get<uint64_t>(), b.size());
  for (size_t k = 0; k < t.sources.size(); ++k) {  // Megatron's "oversamples" check
    EXPECT_LE(b.counts()[k], t.sources[k].order->size()) << "source " << k;
  }

  Sha256 dataset, sample, windows;
  for (uint64_t s = 0; s < b.size(); ++s) {
    dataset.UpdateI64(b.dataset(s));
    sample.UpdateI64(static_cast<int64_t>(b.sample(s)));
    HashWindow(t.sources[b.dataset(s)], b.sample(s), &windows);
  }
  EXPECT_EQ(gold["sha256"]["dataset_index"].get<std::string>(), dataset.Hex());
  EXPECT_EQ(gold["sha256"]["dataset_sample_index"].get<std::string>(), sample.Hex());
  EXPECT_EQ(gold["sha256"]["windows"].get<std::string>(), windows.Hex());

  auto runs = [&](uint64_t s) {
    return json::array({b.dataset(s), Runs(t.sources[b.dataset(s)], b.sample(s))});
  };
  const uint64_t first = gold["first"].size(), last = gold["last"].size();
  ASSERT_EQ(first, std::min<uint64_t>(b.size(), 40));
  for (uint64_t s = 0; s < first; ++s) EXPECT_EQ(gold["first"][s], runs(s)) << "sample " << s;
  for (uint64_t i = 0; i < last; ++i) {
    const uint64_t s = b.size() - last + i;
    EXPECT_EQ(gold["last"][i], runs(s)) << "sample " << s;
  }
}

void CheckGoldenFile(const std::string& path) {
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  const json gold = json::parse(in);
  ASSERT_EQ(gold["format"].get<std::string>(), "dlfs-megatron-golden/1");
  std::map<std::string, Corpus> corpora;
  for (const auto& [name, rec] : gold["corpora"].items()) {
    Corpus c;
    c.name = name;
    c.uint16 = rec["variant"].get<std::string>() == "uint16";
    c.lengths = LcgLengths(rec["n_docs"].get<uint64_t>(), rec["lcg_seed"].get<uint64_t>());
    ASSERT_EQ(std::accumulate(c.lengths.begin(), c.lengths.end(), uint64_t{0}),
              rec["tokens"].get<uint64_t>())
        << "corpus " << name;
    corpora[name] = std::move(c);
  }
  Builder builder(gold["config"], corpora);
  const auto tops = builder.Build();
  if (::testing::Test::HasFatalFailure()) return;
  const char* names[3] = {"train", "valid", "test"};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(names[i]);
    const json& split = gold["splits"][names[i]];
    ASSERT_EQ(split.is_null(), !tops[i].has_value());
    if (split.is_null()) continue;
    if (split["type"].get<std::string>() == "BlendedDataset") {
      ExpectBlend(split, *tops[i]);
    } else {
      ASSERT_FALSE(tops[i]->blend);
      ExpectGpt(split, tops[i]->sources[0]);
    }
  }
}

std::vector<std::string> GoldenFiles() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(GoldenDir())) {
    if (e.path().extension() == ".json") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(MegatronOrderTest, MatchesEveryGoldenFile) {
  const auto files = GoldenFiles();
  ASSERT_EQ(files.size(), 16u) << GoldenDir();
  for (const auto& f : files) {
    SCOPED_TRACE(std::filesystem::path(f).filename().string());
    CheckGoldenFile(f);
  }
}

// ----- The split string -----------------------------------------------------

MegatronSplit Range(uint64_t b, uint64_t e) { return {b, e}; }

TEST(MegatronOrderTest, SplitsRoundAsMegatron) {
  using R = std::array<std::optional<MegatronSplit>, 3>;
  auto splits = [](std::string_view s, uint64_t n) {
    auto r = MegatronSplits(s, n);
    EXPECT_OK(r) << s;
    return r.ok() ? *r : R{};
  };
  EXPECT_EQ(splits("969,30,1", 2000), (R{Range(0, 1938), Range(1938, 1998), Range(1998, 2000)}));
  EXPECT_EQ(splits("969/30/1", 2000), splits("969, 30, 1", 2000));
  // 0.375 x 700 = 262.5: halves round to even.
  EXPECT_EQ(splits("3,5", 700), (R{Range(0, 262), Range(262, 700), std::nullopt}));
  EXPECT_EQ(splits("1", 10), (R{Range(0, 10), std::nullopt, std::nullopt}));
  EXPECT_EQ(splits("0,1,0", 10), (R{std::nullopt, Range(0, 10), std::nullopt}));
  EXPECT_EQ(splits("98,2,0", 1500), (R{Range(0, 1470), Range(1470, 1500), std::nullopt}));
  EXPECT_EQ(splits("0.9,.1", 100), (R{Range(0, 90), Range(90, 100), std::nullopt}));
  EXPECT_EQ(splits("1.,1.", 3), (R{Range(0, 2), Range(2, 3), std::nullopt}));  // 1.5 -> 2
  EXPECT_EQ(splits("99,1", 0), (R{Range(0, 0), Range(0, 0), std::nullopt}));
}

TEST(MegatronOrderTest, BadSplitStrings) {
  for (const char* s :
       {"", " , ", "1,2,3,4", "1.2.3", ".", "..", "-1,2", "90,+10", "1e2", "a", "0,0,0", "0"}) {
    EXPECT_THAT(MegatronSplits(s, 100), StatusIs(StatusCode::kInvalidArgument, "split")) << s;
  }
  EXPECT_THAT(MegatronSplits("1,2,3,4", 100), StatusIs(StatusCode::kInvalidArgument, "at most"));
  EXPECT_THAT(MegatronSplits("1.2.3", 100),
              StatusIs(StatusCode::kInvalidArgument, "\"1.2.3\" is not a number"));
  EXPECT_THAT(MegatronSplits("-1,2", 100), StatusIs(StatusCode::kInvalidArgument, "'-'"));
  EXPECT_THAT(MegatronSplits("0,0", 100), StatusIs(StatusCode::kInvalidArgument, "zero"));
}

// ----- Errors of the GPT order and the blends -------------------------------

TEST(MegatronOrderTest, BadGptOptions) {
  const std::vector<uint64_t> lengths = {5, 0, 7};
  for (uint64_t seq : {uint64_t{0}, uint64_t{1}, uint64_t{1} << 31}) {
    EXPECT_THAT(MegatronGptOrder::Build(lengths, {0, 3}, {.seq_len = seq}),
                StatusIs(StatusCode::kInvalidArgument, "seq_len"))
        << seq;
  }
  EXPECT_THAT(MegatronGptOrder::Build(lengths, {1, 4}, {.seq_len = 4}),
              StatusIs(StatusCode::kInvalidArgument, "not in a corpus of 3"));
  EXPECT_THAT(MegatronGptOrder::Build(lengths, {2, 1}, {.seq_len = 4}),
              StatusIs(StatusCode::kInvalidArgument, "not in a corpus"));
  // Documents all empty (Megatron loops forever), or one token (it asserts).
  const std::vector<uint64_t> empty = {0, 0, 0};
  EXPECT_THAT(MegatronGptOrder::Build(empty, {0, 3}, {.seq_len = 4}),
              StatusIs(StatusCode::kInvalidArgument, "hold 0 tokens"));
  EXPECT_THAT(MegatronGptOrder::Build(empty, {0, 3}, {.seq_len = 4, .num_samples = 10}),
              StatusIs(StatusCode::kInvalidArgument, "hold 0 tokens"));
  EXPECT_THAT(MegatronGptOrder::Build(lengths, {1, 2}, {.seq_len = 4}),
              StatusIs(StatusCode::kInvalidArgument, "hold 0 tokens"));
  const std::vector<uint64_t> one = {0, 1};
  EXPECT_THAT(MegatronGptOrder::Build(one, {0, 2}, {.seq_len = 4}),
              StatusIs(StatusCode::kInvalidArgument, "hold 1 tokens"));
  // Fewer tokens than a window: no window, not an error (as Megatron).
  ASSERT_OK_AND_ASSIGN(auto small, MegatronGptOrder::Build(lengths, {0, 3}, {.seq_len = 100}));
  EXPECT_EQ(small.size(), 0u);
  EXPECT_EQ(small.sample_index(0), (std::pair<uint64_t, int64_t>{0, 0}));
}

TEST(MegatronOrderTest, BadBlendWeights) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const std::vector<double>& w : std::vector<std::vector<double>>{
           {}, {0.0}, {1.0, 0.0}, {0.5, -0.5, 1.0}, {1.0, nan}, {inf, 1.0}}) {
    EXPECT_THAT(BuildMegatronBlend(w, 100), StatusIs(StatusCode::kInvalidArgument, "weight"));
    EXPECT_THAT(MegatronComponentSizes(w, 100), StatusIs(StatusCode::kInvalidArgument, "weight"));
  }
  EXPECT_THAT(BuildMegatronBlend(std::vector<double>{1.0, 0.0}, 100),
              StatusIs(StatusCode::kInvalidArgument, "the weight of source 1 is 0"));
  EXPECT_THAT(BuildMegatronBlend(std::vector<double>(32767, 1.0), 10),
              StatusIs(StatusCode::kInvalidArgument, "at most 32766"));
  EXPECT_THAT(MegatronComponentSizes(std::vector<double>{1.0}, 10, -0.1),
              StatusIs(StatusCode::kInvalidArgument, "surplus"));
  EXPECT_THAT(BuildMegatronLengthBlend(std::vector<uint64_t>{5, 0}, 3),
              StatusIs(StatusCode::kInvalidArgument, "source 1"));
  EXPECT_THAT(BuildMegatronLengthBlend(std::vector<uint64_t>{}, std::nullopt),
              StatusIs(StatusCode::kInvalidArgument, "no source"));
}

TEST(MegatronOrderTest, BlendSizes) {
  // 150 samples at 3:1: 113 + 38 = 151 blended (Megatron's valid split of
  // blend2_seq128_multiepoch), sources asked for ceil(x 1.005).
  ASSERT_OK_AND_ASSIGN(auto asked, MegatronComponentSizes(std::vector<double>{3.0, 1.0}, 150));
  EXPECT_EQ(asked, (std::vector<uint64_t>{114, 39}));
  ASSERT_OK_AND_ASSIGN(auto blend, BuildMegatronBlend(std::vector<double>{3.0, 1.0}, 150));
  EXPECT_EQ(blend.size(), 151u);
  EXPECT_EQ(blend.counts(), (std::vector<uint64_t>{113, 38}));
  ASSERT_OK_AND_ASSIGN(auto none, BuildMegatronBlend(std::vector<double>{3.0, 1.0}, 0));
  EXPECT_EQ(none.size(), 0u);
  // Every sample of every source exactly once, in order within a source.
  ASSERT_OK_AND_ASSIGN(auto all, BuildMegatronLengthBlend(std::vector<uint64_t>{7, 3, 1}, {}));
  ASSERT_EQ(all.size(), 11u);
  std::vector<uint64_t> next(3, 0);
  for (uint64_t s = 0; s < all.size(); ++s) EXPECT_EQ(all.sample(s), next[all.dataset(s)]++);
  EXPECT_EQ(next, (std::vector<uint64_t>{7, 3, 1}));
  ASSERT_OK_AND_ASSIGN(auto capped, BuildMegatronLengthBlend(std::vector<uint64_t>{7, 3}, 100));
  EXPECT_EQ(capped.size(), 10u);
}

// ----- Windows: partial last windows, sizes past int32 ----------------------

// Checks the order's windows against the token stream (the documents in
// document-index order): stream window j is tokens [j seq, j seq + window),
// the dataset's windows are those in shuffle order, each once.
void ExpectStreamWindows(const MegatronGptOrder& o, std::span<const uint64_t> lengths, uint64_t seq,
                         bool partial_last) {
  std::vector<uint64_t> start(o.document_index_size() + 1, 0);  // stream offsets, 64-bit
  for (uint64_t p = 0; p < o.document_index_size(); ++p) {
    start[p + 1] = start[p] + lengths[o.document_index(p)];
  }
  const uint64_t stream = start.back();
  std::vector<bool> seen(o.size(), false);
  std::vector<TokenPiece> pieces;
  for (uint64_t k = 0; k < o.size(); ++k) {
    const uint64_t j = o.shuffle_index(k);
    ASSERT_LT(j, o.size());
    ASSERT_FALSE(seen[j]) << "window " << j << " twice";
    seen[j] = true;
    const auto [p, offset] = o.sample_index(j);
    ASSERT_EQ(start[p] + static_cast<uint64_t>(offset), j * seq) << "window " << j;
    o.Window(k, &pieces);
    ASSERT_FALSE(pieces.empty());
    uint64_t at = start[p] + pieces[0].begin, total = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const TokenPiece& piece = pieces[i];
      ASSERT_EQ(piece.document, o.document_index(p + i));
      ASSERT_LE(piece.begin + piece.count, lengths[piece.document]);
      if (i > 0) {
        ASSERT_EQ(piece.begin, 0u);
      }
      ASSERT_EQ(start[p + i] + piece.begin, at);
      at += piece.count;
      total += piece.count;
    }
    const bool last = j + 1 == o.size();
    if (last && partial_last) {
      ASSERT_EQ(at, stream);
      ASSERT_LT(total, o.window_tokens());
    } else {
      ASSERT_EQ(total, o.window_tokens()) << "window " << j;
    }
  }
}

// The final epoch is shuffled apart when it supplies fewer windows than
// int(0.8 x) an epoch's: 101 tokens in windows of 10 (+1) make 10 per epoch,
// the first epoch 10; 17 samples take 7 from the second (apart), 18 take 8.
TEST(MegatronOrderTest, SeparateFinalEpochBelowEightyPercent) {
  const std::vector<uint64_t> lengths = {60, 0, 41};
  for (const auto& [samples, separate] : {std::pair<uint64_t, bool>{17, true}, {18, false}}) {
    ASSERT_OK_AND_ASSIGN(
        auto o, MegatronGptOrder::Build(lengths, {0, 3}, {.seq_len = 10, .num_samples = samples}));
    EXPECT_EQ(o.num_epochs(), 2u);
    EXPECT_EQ(o.separate_final_epoch(), separate) << samples;
    EXPECT_EQ(o.size(), 20u);
    if (separate) {  // the last epoch's documents last, and windows 0-9 first
      for (uint64_t k = 0; k < 10; ++k) EXPECT_LT(o.shuffle_index(k), 10u);
      std::vector<uint64_t> last = {o.document_index(3), o.document_index(4), o.document_index(5)};
      std::sort(last.begin(), last.end());
      EXPECT_EQ(last, (std::vector<uint64_t>{0, 1, 2}));
    }
    ExpectStreamWindows(o, lengths, 10, false);
  }
}

TEST(MegatronOrderTest, PartialLastWindow) {
  // 99 tokens, windows of 16 + 1 tokens stepping by 16: six full windows;
  // a seventh, kept, is the 3 tokens left, [96, 99).
  const std::vector<uint64_t> lengths = {99};
  ASSERT_OK_AND_ASSIGN(auto dropped, MegatronGptOrder::Build(lengths, {0, 1}, {.seq_len = 16}));
  EXPECT_EQ(dropped.size(), 6u);
  ExpectStreamWindows(dropped, lengths, 16, false);
  ASSERT_OK_AND_ASSIGN(
      auto kept,
      MegatronGptOrder::Build(lengths, {0, 1}, {.seq_len = 16, .drop_last_partial = false}));
  EXPECT_EQ(kept.size(), 7u);
  ExpectStreamWindows(kept, lengths, 16, true);
  EXPECT_EQ(kept.sample_index(7), (std::pair<uint64_t, int64_t>{0, 98}));

  // The stream ends with an empty document: Megatron's last row is
  // (last position, -1), and the partial window ends with an empty piece.
  const std::vector<uint64_t> two = {99, 0};
  bool found = false;
  for (uint32_t seed = 0; seed < 20 && !found; ++seed) {
    ASSERT_OK_AND_ASSIGN(
        auto o, MegatronGptOrder::Build(two, {0, 2},
                                        {.seq_len = 16, .seed = seed, .drop_last_partial = false}));
    if (o.document_index(1) != 1) continue;
    found = true;
    EXPECT_EQ(o.sample_index(7), (std::pair<uint64_t, int64_t>{1, -1}));
    ExpectStreamWindows(o, two, 16, true);
    std::vector<TokenPiece> pieces;
    for (uint64_t k = 0; k < o.size(); ++k) {
      if (o.shuffle_index(k) != 6) continue;
      o.Window(k, &pieces);
      ASSERT_EQ(pieces.size(), 2u);
      EXPECT_EQ(pieces[0].begin, 96u);
      EXPECT_EQ(pieces[0].count, 3u);
      EXPECT_EQ(pieces[1].document, 1u);
      EXPECT_EQ(pieces[1].count, 0u);
    }
  }
  EXPECT_TRUE(found);
}

// Megatron counts the windows of a kept partial window in float32: past 2^24
// tokens the count rounds, and here the partial window goes.
TEST(MegatronOrderTest, PartialWindowCountInFloat32) {
  const std::vector<uint64_t> lengths = {(uint64_t{1} << 24) + 2};  // stream 2^24 + 1
  ASSERT_OK_AND_ASSIGN(auto o, MegatronGptOrder::Build(
                                   lengths, {0, 1}, {.seq_len = 16, .drop_last_partial = false}));
  EXPECT_EQ(o.size(), uint64_t{1} << 20);  // exactly: 2^20 full windows and one token
}

// Token counts past 2^32, and documents longer than int32 (Megatron keeps
// lengths as int32 and picks int32 sample indices below 2^31 positions and
// tokens per document): positions in the stream, offsets and counts here
// are 64-bit.
TEST(MegatronOrderTest, SizesBeyondInt32) {
  const uint64_t i32 = (uint64_t{1} << 31) - 1;
  const std::vector<uint64_t> lengths = {6'000'000'000, i32, 7, 0, i32 + 6, 1, 3'000'000'000};
  const uint64_t seq = uint64_t{1} << 20;
  const MegatronGptOptions options{.seq_len = seq, .seed = 3, .num_samples = 25'000};
  ASSERT_OK_AND_ASSIGN(auto o, MegatronGptOrder::Build(lengths, {0, 7}, options));
  const uint64_t tokens = std::accumulate(lengths.begin(), lengths.end(), uint64_t{0});
  EXPECT_EQ(o.tokens_per_epoch(), tokens);
  EXPECT_GT(tokens, uint64_t{1} << 33);
  EXPECT_EQ(o.num_epochs(), 2u);
  EXPECT_EQ(o.size(), (2 * tokens - 1) / seq);
  ExpectStreamWindows(o, lengths, seq, false);
  uint64_t widest = 0;
  for (uint64_t j = 0; j < o.size(); ++j) {
    widest = std::max(widest, static_cast<uint64_t>(o.sample_index(j).second));
  }
  EXPECT_GT(widest, uint64_t{1} << 32);  // an offset int32 (and uint32) cannot hold
  // A window of one piece deep inside the 6e9-token document.
  std::vector<TokenPiece> pieces;
  bool deep = false;
  for (uint64_t k = 0; k < o.size() && !deep; ++k) {
    o.Window(k, &pieces);
    deep = pieces.size() == 1 && pieces[0].document == 0 && pieces[0].begin > (uint64_t{1} << 32);
  }
  EXPECT_TRUE(deep);

  // Documents of 2^43 tokens with ids past 2^20: id and length do not fit
  // one word together, and the order reads the lengths where they are.
  std::vector<uint64_t> far((uint64_t{1} << 20) + 2, 3);
  far[far.size() - 2] = uint64_t{1} << 43;
  far[far.size() - 1] = (uint64_t{1} << 43) + 5;
  const MegatronSplit last_two{far.size() - 2, far.size()};
  ASSERT_OK_AND_ASSIGN(auto wide, MegatronGptOrder::Build(far, last_two, {.seq_len = 1u << 30}));
  EXPECT_EQ(wide.size(), ((uint64_t{1} << 44) + 4) / (1u << 30));
  ExpectStreamWindows(wide, far, 1u << 30, false);
}

}  // namespace megatron_order_test
}  // namespace dlfs
