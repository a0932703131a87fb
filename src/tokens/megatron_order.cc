#include "tokens/megatron_order.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <type_traits>

#include "common/file_util.h"

// This file is compiled with -ffp-contract=off (CMakeLists.txt): Megatron's
// helpers.cpp is built for x86-64 without FMA, so its blending rule
// `w * x - taken` rounds the product, then the difference. Fused into one
// FMA (what GCC does by default wherever FMA is available, e.g. with
// -march=native) the error loses that rounding and ties break otherwise: a
// port built so disagreed with Megatron on 149 of 300 random weight vectors.
// No other arithmetic here adds a product, but the flag keeps it so.

namespace dlfs::tokens_internal {

namespace {

constexpr uint64_t kU32Max = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr uint64_t kI64Max = std::numeric_limits<int64_t>::max();

// ----- numpy's legacy RandomState(seed).shuffle -----------------------------
//
// RandomState(int) seeds MT19937 by init_genrand, which is what
// std::mt19937(seed) does, and draws with its standard output function.

// numpy's random_interval(max): uniform on [0, max] by masked rejection;
// above 2^32 - 1 a draw is two outputs, the first the high word.
inline uint64_t RandomInterval(std::mt19937& g, uint64_t max) {
  if (max == 0) return 0;  // draws nothing
  const uint64_t mask = ~uint64_t{0} >> std::countl_zero(max);
  uint64_t v;
  if (max <= kU32Max) {
    do {
      v = static_cast<uint32_t>(g()) & mask;
    } while (v > max);
  } else {
    do {
      const uint64_t hi = static_cast<uint32_t>(g());
      const uint64_t lo = static_cast<uint32_t>(g());
      v = ((hi << 32) | lo) & mask;
    } while (v > max);
  }
  return v;
}

// numpy's legacy shuffle of a 1-D array: Fisher-Yates from the last element
// down, swapping a[i] with a[random_interval(i)]. The draws do not depend on
// the array, so a batch of them is drawn first and their elements prefetched:
// at 1e8 elements each swap is a cache miss, and the batch overlaps them.
template <typename T>
void LegacyShuffle(std::mt19937& g, T* a, uint64_t n) {
  if (n < 2) return;
  constexpr uint64_t kAhead = 64;
  uint64_t j[kAhead];
  uint64_t i = n - 1;
  while (i >= 1) {
    const uint64_t m = std::min(kAhead, i);
    for (uint64_t t = 0; t < m; ++t) {
      j[t] = RandomInterval(g, i - t);
      __builtin_prefetch(a + j[t], 1);
    }
    for (uint64_t t = 0; t < m; ++t) std::swap(a[i - t], a[j[t]]);
    i -= m;
  }
}

// ----- helpers.cpp build_sample_idx ------------------------------------------

constexpr uint64_t kPrefetch = 16;  // positions ahead, where lengths are read at random

// Where windows 1 .. n of the token stream start: Megatron's walk over the
// document index (`positions` of them; `length(p)`: the token count of the
// document at position p), taking the rest of each document until a
// window's seq + extra tokens are in, the next window starting `extra`
// tokens before this one ends. Rows 1 .. n - 1 go to *pos / *off (row 0 is
// (0, 0)); row n, where the last window ends, to *end_position /
// *end_offset: there, when the tokens run out (a partial last window), the
// last position and its length - extra, as Megatron has it. false when the
// tokens run out before window n (the caller's count excludes it).
template <typename Length>
bool WalkSamples(Length length, uint64_t positions, uint64_t seq, uint64_t extra, uint64_t n,
                 PackedIndex* pos_index, PackedIndex* off_index, uint64_t* end_position,
                 int64_t* end_offset) {
  bool ok = true;
  pos_index->Visit([&](auto pos) {
    off_index->Visit([&](auto off) {
      using P = typename decltype(pos)::value_type;
      using F = typename decltype(off)::value_type;
      const uint64_t last = positions - 1;
      uint64_t di = 0, offset = 0;
      for (uint64_t k = 1; k <= n; ++k) {
        uint64_t rem = seq + extra;
        bool partial = false;
        for (;;) {
          const uint64_t left = length(di) - offset;
          if (left >= rem) {
            offset += rem - extra;
            break;
          }
          rem -= left;
          if (di == last) {  // out of tokens: a partial last window
            partial = true;
            break;
          }
          ++di;
          offset = 0;
        }
        if (k < n) {
          if (partial) {
            ok = false;
            return;
          }
          pos[k] = static_cast<P>(di);
          off[k] = static_cast<F>(offset);
        } else {
          *end_position = di;
          *end_offset = partial ? static_cast<int64_t>(length(di)) - static_cast<int64_t>(extra)
                                : static_cast<int64_t>(offset);
        }
      }
    });
  });
  return ok;
}

// ----- numpy's float64 sum and Megatron's normalize ----------------------

// numpy.sum of a contiguous float64 array (1.24): pairwise summation with
// eight accumulators in blocks of up to 128. (numpy adds the result to 0.0,
// which changes nothing for the non-negative sums here.)
double PairwiseSum(const double* a, uint64_t n) {
  if (n < 8) {
    double r = 0.0;
    for (uint64_t i = 0; i < n; ++i) r += a[i];
    return r;
  }
  if (n <= 128) {
    double r[8];
    for (int k = 0; k < 8; ++k) r[k] = a[k];
    uint64_t i = 8;
    for (; i < n - n % 8; i += 8) {
      for (int k = 0; k < 8; ++k) r[k] += a[i + k];
    }
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  uint64_t n2 = n / 2;
  n2 -= n2 % 8;
  return PairwiseSum(a, n2) + PairwiseSum(a + n2, n - n2);
}

// megatron.core.datasets.utils.normalize: w / numpy.sum(w).
std::vector<double> Normalize(std::span<const double> w) {
  const double sum = PairwiseSum(w.data(), w.size());
  std::vector<double> out(w.size());
  for (size_t k = 0; k < w.size(); ++k) out[k] = w[k] / sum;
  return out;
}

// Python's round() of a non-negative double: to nearest, halves to even
// (independent of the floating-point environment, unlike nearbyint).
double RoundHalfEven(double x) {
  const double f = std::floor(x);
  const double d = x - f;  // exact for non-negative x
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return std::fmod(f, 2.0) == 0.0 ? f : f + 1;
}

// BlendedDataset's checks of its weights (all positive; fewer than 32767
// sources, its dataset index being int16), plus finiteness (a NaN or an
// infinity would make every error NaN).
Status CheckWeights(std::span<const double> w, std::string_view what) {
  if (w.empty()) return Status::InvalidArgument(std::string(what) + ": no source");
  if (w.size() >= 32767) {
    return Status::InvalidArgument(std::string(what) + ": " + std::to_string(w.size()) +
                                   " sources; Megatron takes at most 32766");
  }
  for (size_t k = 0; k < w.size(); ++k) {
    if (!(w[k] > 0) || !std::isfinite(w[k])) {
      return Status::InvalidArgument(std::string(what) + ": the weight of source " +
                                     std::to_string(k) + " is " + std::to_string(w[k]) +
                                     "; every weight must be positive and finite");
    }
  }
  return Status::Ok();
}

// Overflow-checked arithmetic of the counts Megatron keeps in int64.
bool MulOver(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }
bool AddOver(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_add_overflow(a, b, out); }

}  // namespace

Result<PackedIndex> PackedIndex::Make(uint64_t n, uint64_t max_value) {
  PackedIndex a;
  a.n_ = n;
  a.wide_ = max_value > kU32Max;
  const uint64_t width = a.wide_ ? 8 : 4;
  if (n > std::numeric_limits<size_t>::max() / width || !(a.data_ = AllocateLarge(n * width))) {
    return Status::Unavailable("cannot allocate " + std::to_string(n) + " x " +
                               std::to_string(width) + " bytes for a Megatron index");
  }
  return a;
}

// ----- split -----------------------------------------------------------------

Result<std::array<std::optional<MegatronSplit>, 3>> MegatronSplits(std::string_view split,
                                                                   uint64_t documents) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("split \"" + std::string(split) + "\": " + why);
  };
  // Megatron: re.findall(r"[.0-9]+", split), each through float().
  std::vector<double> v;
  size_t i = 0;
  while (i < split.size()) {
    const char c = split[i];
    if (c == ',' || c == '/' || c == ' ' || c == '\t' || c == '\n') {
      ++i;
      continue;
    }
    if (!(c == '.' || (c >= '0' && c <= '9'))) {
      return bad(std::string("unexpected '") + c +
                 "'; give up to three non-negative numbers separated by commas, e.g. 969,30,1");
    }
    size_t j = i;
    int dots = 0, digits = 0;
    while (j < split.size() && (split[j] == '.' || (split[j] >= '0' && split[j] <= '9'))) {
      dots += split[j] == '.';
      digits += split[j] != '.';
      ++j;
    }
    const std::string_view number = split.substr(i, j - i);
    double x = 0;
    const auto [end, ec] =
        std::from_chars(number.data(), number.data() + number.size(), x, std::chars_format::fixed);
    if (dots > 1 || digits == 0 || ec != std::errc() || end != number.data() + number.size()) {
      return bad("\"" + std::string(number) + "\" is not a number");
    }
    if (!std::isfinite(x)) return bad("\"" + std::string(number) + "\" is too large");
    v.push_back(x);
    i = j;
  }
  if (v.empty()) return bad("no number; give e.g. 969,30,1 (train, valid, test)");
  if (v.size() > 3) {
    return bad(std::to_string(v.size()) + " numbers; at most three (train, valid, test)");
  }
  v.resize(3, 0.0);
  if (!(v[0] + v[1] + v[2] > 0)) return bad("all weights are zero");
  const std::vector<double> w = Normalize(v);
  // Bookends: cumulative sums from 0, left to right; a split is absent
  // when its end is not above its start.
  const double c[4] = {0.0, w[0], w[0] + w[1], (w[0] + w[1]) + w[2]};
  std::array<std::optional<MegatronSplit>, 3> out;
  const double n = static_cast<double>(documents);
  for (int k = 0; k < 3; ++k) {
    if (c[k + 1] <= c[k]) continue;
    const double begin = RoundHalfEven(c[k] * n);
    const double end = RoundHalfEven(c[k + 1] * n);
    if (end > n) return bad("a split ends past the corpus (rounding)");  // cannot happen below 2^51
    out[k] = MegatronSplit{static_cast<uint64_t>(begin), static_cast<uint64_t>(end)};
  }
  return out;
}

// ----- GPTDataset --------------------------------------------------------------

Result<MegatronGptOrder> MegatronGptOrder::Build(std::span<const uint64_t> document_tokens,
                                                 MegatronSplit split,
                                                 const MegatronGptOptions& options) {
  const uint64_t seq = options.seq_len;
  if (seq < 2 || seq > kI32Max) {
    return Status::InvalidArgument("seq_len " + std::to_string(seq) +
                                   ": Megatron takes 2 .. 2^31 - 1 tokens");
  }
  if (split.begin > split.end || split.end > document_tokens.size()) {
    return Status::InvalidArgument("documents [" + std::to_string(split.begin) + ", " +
                                   std::to_string(split.end) + ") are not in a corpus of " +
                                   std::to_string(document_tokens.size()));
  }
  const uint64_t extra = options.add_extra_token ? 1 : 0;
  const uint64_t docs = split.end - split.begin;
  const std::string where =
      "documents [" + std::to_string(split.begin) + ", " + std::to_string(split.end) + ")";

  MegatronGptOrder o;
  o.tokens_ = document_tokens;
  o.window_ = seq + extra;
  o.extra_ = extra;

  // Tokens per epoch (Megatron: int64), and the longest document.
  uint64_t tpe = 0, longest = 0;
  for (uint64_t d = split.begin; d < split.end; ++d) {
    if (AddOver(tpe, document_tokens[d], &tpe)) {
      return Status::InvalidArgument(where + ": more than 2^64 tokens");
    }
    longest = std::max(longest, document_tokens[d]);
  }
  if (tpe < 2) {
    // None: Megatron's epoch count loops forever, or its sample index
    // asserts (tokens_per_epoch > 1), as it does for one.
    return Status::InvalidArgument(where + " hold " + std::to_string(tpe) +
                                   " tokens: Megatron needs at least 2 (" + std::to_string(docs) +
                                   " documents, all empty or nearly)");
  }
  o.tokens_per_epoch_ = tpe;

  // Epochs: the fewest whose tokens cover num_samples windows.
  uint64_t epochs = 1;
  if (options.num_samples > 0) {
    uint64_t need = 0;
    if (MulOver(options.num_samples, seq, &need) || AddOver(need, extra, &need)) {
      return Status::InvalidArgument("num_samples " + std::to_string(options.num_samples) +
                                     ": more than 2^64 tokens");
    }
    epochs = std::max<uint64_t>(1, need / tpe + (need % tpe != 0));
  }
  uint64_t total_tokens = 0, positions = 0;
  if (epochs > kI32Max || MulOver(epochs, tpe, &total_tokens) || total_tokens > kI64Max ||
      MulOver(epochs, docs, &positions)) {
    return Status::InvalidArgument(where + ": " + std::to_string(epochs) + " epochs of " +
                                   std::to_string(tpe) +
                                   " tokens: more than Megatron's int32 epochs or int64 tokens");
  }
  o.epochs_ = epochs;

  // Whether the last epoch is shuffled apart: when it supplies fewer than
  // int(0.8 x) the windows of an epoch (a double product, truncated).
  uint64_t sans_final = 0;  // windows before the final epoch (by tokens)
  if (epochs > 1) {
    sans_final = ((epochs - 1) * tpe - extra) / seq;
    const uint64_t per_epoch = (tpe - extra) / seq;
    if (options.num_samples < sans_final || options.num_samples - sans_final > per_epoch + 1) {
      return Status::InvalidArgument(where +
                                     ": Megatron's GPTDataset asserts 0 <= "
                                     "num_samples_from_final_epoch <= per epoch + 1 here");
    }
    const uint64_t from_final = options.num_samples - sans_final;
    o.separate_ = from_final < static_cast<uint64_t>(0.80 * static_cast<double>(per_epoch));
  }

  // One generator for the dataset: the document index draws first, then
  // the shuffle index.
  std::mt19937 g(options.seed);

  // Sample index (helpers.cpp build_sample_idx). Windows of the token
  // stream (the documents in document-index order): window k is tokens
  // [k seq, k seq + window). How many: floor((tokens - extra) / seq), or,
  // keeping a partial last one, ceil of that quotient taken in float32 as
  // Megatron does (exact only below 2^24 tokens).
  const uint64_t stream = total_tokens - extra;
  const uint64_t full = stream / seq;
  uint64_t n = full;
  if (!options.drop_last_partial) {
    const float q = static_cast<float>(static_cast<int64_t>(stream)) / static_cast<float>(seq);
    n = static_cast<uint64_t>(std::ceil(q));
    if (n > full + (stream % seq != 0)) {
      return Status::InvalidArgument(
          where + ": Megatron's float32 window count " + std::to_string(n) + " exceeds the " +
          std::to_string(full + 1) + " windows there are, and its build_sample_idx asserts");
    }
  }
  if (o.separate_ && sans_final > n) {
    return Status::InvalidArgument(where + ": fewer windows than before the final epoch");
  }
  DLFS_ASSIGN_OR_RETURN(o.documents_, PackedIndex::Make(positions, split.end - 1));
  DLFS_ASSIGN_OR_RETURN(o.positions_, PackedIndex::Make(n, positions - 1));
  DLFS_ASSIGN_OR_RETURN(o.offsets_, PackedIndex::Make(n, longest));
  DLFS_ASSIGN_OR_RETURN(o.shuffle_, PackedIndex::Make(n, n == 0 ? 0 : n - 1));

  // Document index: the split's documents once per epoch, shuffled as one
  // array (epochs interleave), or the final epoch shuffled apart and put last.
  // `value(k)` is what the array holds for document split.begin + k.
  auto shuffle_documents = [&](auto a, auto value) {
    using T = typename decltype(a)::value_type;
    for (uint64_t e = 0; e < epochs; ++e) {
      T* p = a.data() + e * docs;
      for (uint64_t k = 0; k < docs; ++k) p[k] = static_cast<T>(value(k));
    }
    if (o.separate_) {
      LegacyShuffle(g, a.data(), (epochs - 1) * docs);
      LegacyShuffle(g, a.data() + (epochs - 1) * docs, docs);
    } else {
      LegacyShuffle(g, a.data(), positions);
    }
  };
  bool walked = false;
  const int length_bits = std::bit_width(longest);
  if (length_bits < 64 && length_bits + std::bit_width(split.end - 1) <= 64) {
    // The usual case: each document shuffled together with its length in
    // one word (the draws do not depend on what is shuffled), so that the
    // walk below reads lengths in order, not document_tokens at random:
    // that gather was 40 % of the time at 1e8 documents.
    auto memory = AllocateLarge(positions * 8);
    if (!memory) return Status::Unavailable(where + ": cannot allocate the document index");
    const std::span<uint64_t> pairs(reinterpret_cast<uint64_t*>(memory.get()), positions);
    shuffle_documents(pairs, [&](uint64_t k) {
      return (split.begin + k) << length_bits | document_tokens[split.begin + k];
    });
    const uint64_t mask = (uint64_t{1} << length_bits) - 1;  // length_bits < 64 here
    walked = WalkSamples([&](uint64_t p) { return pairs[p] & mask; }, positions, seq, extra, n,
                         &o.positions_, &o.offsets_, &o.end_position_, &o.end_offset_);
    o.documents_.Visit([&](auto a) {
      using T = typename decltype(a)::value_type;
      for (uint64_t p = 0; p < positions; ++p) a[p] = static_cast<T>(pairs[p] >> length_bits);
    });
  } else {
    o.documents_.Visit([&](auto a) {
      shuffle_documents(a, [&](uint64_t k) { return split.begin + k; });
      walked = WalkSamples(
          [&](uint64_t p) {
            if (p + kPrefetch < positions) __builtin_prefetch(&document_tokens[a[p + kPrefetch]]);
            return document_tokens[a[p]];
          },
          positions, seq, extra, n, &o.positions_, &o.offsets_, &o.end_position_, &o.end_offset_);
    });
  }
  if (!walked) return Status::InvalidArgument(where + ": ran out of tokens before the last window");

  // Shuffle index: the windows shuffled; with a separate final epoch, the
  // windows before it (by the token count above, so a window across the
  // boundary counts as before) and the rest apart.
  o.shuffle_.Visit([&](auto a) {
    using T = typename decltype(a)::value_type;
    for (uint64_t k = 0; k < n; ++k) a[k] = static_cast<T>(k);
    if (o.separate_) {
      LegacyShuffle(g, a.data(), sans_final);
      LegacyShuffle(g, a.data() + sans_final, n - sans_final);
    } else {
      LegacyShuffle(g, a.data(), n);
    }
  });
  return o;
}

std::pair<uint64_t, int64_t> MegatronGptOrder::sample_index(uint64_t j) const {
  if (j < positions_.size()) return {positions_[j], static_cast<int64_t>(offsets_[j])};
  return {end_position_, end_offset_};
}

void MegatronGptOrder::Window(uint64_t k, std::vector<TokenPiece>* pieces) const {
  pieces->clear();
  const uint64_t j = shuffle_[k];
  const auto [b, bo] = sample_index(j);
  const auto [e, eo] = sample_index(j + 1);
  // The end row is where the next window starts; this one takes `extra`
  // tokens more (-1 + 1 for a partial window ending at an empty document).
  const uint64_t end = static_cast<uint64_t>(eo + static_cast<int64_t>(extra_));
  const uint64_t begin = static_cast<uint64_t>(bo);
  if (b == e) {
    pieces->push_back({documents_[b], begin, end - begin});
    return;
  }
  const uint64_t first = documents_[b];
  pieces->push_back({first, begin, tokens_[first] - begin});
  for (uint64_t p = b + 1; p < e; ++p) {
    const uint64_t d = documents_[p];
    pieces->push_back({d, 0, tokens_[d]});
  }
  pieces->push_back({documents_[e], 0, end});
}

// ----- BlendedDataset ----------------------------------------------------------

Result<MegatronBlend> MegatronBlend::Greedy(std::vector<double> weights, uint64_t size,
                                            std::span<const uint64_t> exhaustive) {
  MegatronBlend b;
  const size_t sources = weights.size();
  b.dataset_.resize(size);
  b.counts_.assign(sources, 0);
  std::vector<uint64_t>& taken = b.counts_;
  if (exhaustive.empty()) {
    // helpers.cpp build_blending_indices: the source furthest behind its
    // share w_k max(s, 1) (s = 0 and 1 alike), ties to the lowest index.
    for (uint64_t s = 0; s < size; ++s) {
      const double x = std::max(static_cast<double>(s), 1.0);
      size_t best = 0;
      double best_error = weights[0] * x - static_cast<double>(taken[0]);
      for (size_t k = 1; k < sources; ++k) {
        const double error = weights[k] * x - static_cast<double>(taken[k]);
        if (error > best_error) {
          best_error = error;
          best = k;
        }
      }
      b.dataset_[s] = static_cast<uint16_t>(best);
      ++taken[best];
    }
  } else {
    // build_exhaustive_blending_indices: the same rule over the sources
    // not yet used up, in ascending order, from the lowest double.
    std::vector<size_t> unspent;
    for (size_t k = 0; k < sources; ++k) unspent.push_back(k);
    for (uint64_t s = 0; !unspent.empty(); ++s) {
      const double x = std::max(static_cast<double>(s), 1.0);
      size_t best_at = 0;
      double best_error = std::numeric_limits<double>::lowest();
      for (size_t u = 0; u < unspent.size(); ++u) {
        const size_t k = unspent[u];
        const double error = weights[k] * x - static_cast<double>(taken[k]);
        if (error > best_error) {
          best_error = error;
          best_at = u;
        }
      }
      const size_t best = unspent[best_at];
      b.dataset_[s] = static_cast<uint16_t>(best);
      if (++taken[best] == exhaustive[best]) unspent.erase(unspent.begin() + best_at);
    }
  }
  // Each sample's index in its source: how many of that source came before.
  const uint64_t most = sources == 0 ? 0 : *std::max_element(taken.begin(), taken.end());
  DLFS_ASSIGN_OR_RETURN(b.sample_, PackedIndex::Make(size, most == 0 ? 0 : most - 1));
  b.sample_.Visit([&](auto a) {
    using T = typename std::remove_reference_t<decltype(a)>::value_type;
    std::vector<uint64_t> next(sources, 0);
    for (uint64_t s = 0; s < size; ++s) a[s] = static_cast<T>(next[b.dataset_[s]]++);
  });
  b.weights_ = std::move(weights);
  return b;
}

Result<std::vector<uint64_t>> MegatronComponentSizes(std::span<const double> weights,
                                                     uint64_t requested, double surplus) {
  DLFS_RETURN_IF_ERROR(CheckWeights(weights, "blend weights"));
  if (!(surplus >= 0) || !std::isfinite(surplus)) {
    return Status::InvalidArgument("surplus " + std::to_string(surplus) +
                                   ": must be non-negative and finite");
  }
  const std::vector<double> w = Normalize(weights);
  std::vector<uint64_t> out;
  for (double wk : w) {
    // int(math.ceil(math.ceil(requested * w) * (1 + surplus)))
    const double target = std::ceil(static_cast<double>(requested) * wk);
    out.push_back(static_cast<uint64_t>(std::ceil(target * (1.0 + surplus))));
  }
  return out;
}

Result<MegatronBlend> BuildMegatronBlend(std::span<const double> weights, uint64_t requested) {
  DLFS_RETURN_IF_ERROR(CheckWeights(weights, "blend weights"));
  // The builder normalises the weights and asks each source for
  // ceil(requested x w); the blend has their sum; BlendedDataset normalises
  // the weights again for its greedy rule.
  const std::vector<double> once = Normalize(weights);
  uint64_t size = 0;
  for (double w : once) {
    if (AddOver(size, static_cast<uint64_t>(std::ceil(static_cast<double>(requested) * w)),
                &size)) {
      return Status::InvalidArgument("blend of " + std::to_string(requested) +
                                     " samples: more than 2^64");
    }
  }
  std::vector<double> twice = Normalize(once);
  DLFS_RETURN_IF_ERROR(CheckWeights(twice, "blend weights (normalised)"));
  return MegatronBlend::Greedy(std::move(twice), size, {});
}

Result<MegatronBlend> BuildMegatronLengthBlend(std::span<const uint64_t> lengths,
                                               std::optional<uint64_t> requested) {
  std::vector<double> raw(lengths.begin(), lengths.end());
  DLFS_RETURN_IF_ERROR(CheckWeights(raw, "blend by source lengths"));
  uint64_t total = 0;
  for (uint64_t l : lengths) {
    if (AddOver(total, l, &total) || total > kI64Max) {
      return Status::InvalidArgument("blend by source lengths: more than 2^63 samples");
    }
  }
  if (requested) {
    // BlendedDataset normalises the lengths once (the builder does not).
    return MegatronBlend::Greedy(Normalize(raw), std::min(*requested, total), {});
  }
  // The exhaustive rule's weights: length / (double)total, in C++.
  std::vector<double> w;
  for (uint64_t l : lengths) w.push_back(static_cast<double>(l) / static_cast<double>(total));
  return MegatronBlend::Greedy(std::move(w), total, lengths);
}

}  // namespace dlfs::tokens_internal
