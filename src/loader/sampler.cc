#include "dlfs/sampler.h"

#include <algorithm>
#include <bit>
#include <mutex>
#include <string>

#include "common/crc32c.h"
#include "common/xoshiro.h"
#include "dlfs/directory.h"

namespace dlfs {

namespace {

using u128 = unsigned __int128;

// The Feistel round function of docs/format.md's "Epoch order": a 64-bit
// multiply-xorshift mix of the half and the round key. Six rounds of it
// showed no structure in the tests that find four rounds' (the block
// statistic of tests/unit/sampler_test.cc, which catches 4-round Feistel
// networks on any round function) and keep 50 M positions/s per core.
inline uint64_t RoundFunction(uint64_t key, uint64_t half) {
  uint64_t z = (half ^ key) * 0xbf58476d1ce4e5b9ull;
  z ^= z >> 32;
  z *= 0x94d049bb133111ebull;
  return z ^ (z >> 32);
}

inline uint64_t MulHi(uint64_t a, uint64_t b) {
  return static_cast<uint64_t>((static_cast<u128>(a) * b) >> 64);
}

// Position k * w + r of a sequence of m positions padded by wrapping around.
inline uint64_t Padded(uint64_t k, uint64_t w, uint64_t r, uint64_t m) {
  const u128 v = static_cast<u128>(k) * w + r;
  if (v < m) return static_cast<uint64_t>(v);
  if (v < static_cast<u128>(m) * 2) return static_cast<uint64_t>(v - m);
  return static_cast<uint64_t>(v % m);  // more shards than positions
}

// CRC32C of the little-endian uint64 words first, first + 1, ..., first +
// count - 1, in O(log^2): the words of an aligned block [a 2^j, (a+1) 2^j)
// are (a << j) XOR i for i < 2^j, and a CRC is affine in its message, so a
// block's CRC is that of the words 0 .. 2^j - 1, of the constant word
// a << j repeated, and of zeros; each of those doubles in length by
// Combine.
class CountingCrc {
 public:
  uint32_t Of(uint64_t first, uint64_t count) {
    uint32_t crc = 0;  // of nothing
    while (count > 0) {
      int j = first == 0 ? 63 : std::countr_zero(first);
      while (j > 0 && (uint64_t{1} << j) > count) --j;
      const uint64_t block = uint64_t{1} << j;
      const uint32_t b = Counting(j) ^ Repeated(first, j) ^ Zeros(j);
      crc = crc32c::Combine(crc, b, block * 8);
      first += block;
      count -= block;
    }
    return crc;
  }

 private:
  static uint32_t Word(uint64_t w) {
    unsigned char le[8];
    for (int k = 0; k < 8; ++k) le[k] = static_cast<unsigned char>(w >> (8 * k));
    return crc32c::Value(le, sizeof le);
  }
  // The word w repeated 2^j times.
  static uint32_t Repeated(uint64_t w, int j) {
    uint32_t c = Word(w);
    for (int i = 0; i < j; ++i) c = crc32c::Combine(c, c, (uint64_t{8} << i));
    return c;
  }
  // 8 * 2^j zero bytes.
  uint32_t Zeros(int j) {
    while (static_cast<int>(zeros_.size()) <= j) {
      if (zeros_.empty()) {
        zeros_.push_back(Word(0));
      } else {
        const int i = static_cast<int>(zeros_.size()) - 1;
        zeros_.push_back(crc32c::Combine(zeros_.back(), zeros_.back(), uint64_t{8} << i));
      }
    }
    return zeros_[j];
  }
  // The words 0 .. 2^j - 1: the first half, then the first half XOR the
  // word 2^(j-1) repeated.
  uint32_t Counting(int j) {
    while (static_cast<int>(counting_.size()) <= j) {
      if (counting_.empty()) {
        counting_.push_back(Word(0));
      } else {
        const int i = static_cast<int>(counting_.size()) - 1;
        const uint32_t half = counting_.back();
        const uint32_t upper = half ^ Repeated(uint64_t{1} << i, i) ^ Zeros(i);
        counting_.push_back(crc32c::Combine(half, upper, uint64_t{8} << i));
      }
    }
    return counting_[j];
  }
  std::vector<uint32_t> zeros_, counting_;
};

// Positions x with x mod w >= e below x (the unread columns of a segment's
// partial rows), and the t-th such position.
inline uint64_t CountHigh(uint64_t x, uint64_t w, uint64_t e) {
  const uint64_t r = x % w;
  return x / w * (w - e) + (r > e ? r - e : 0);
}
inline uint64_t SelectHigh(uint64_t t, uint64_t w, uint64_t e) {
  return t / (w - e) * w + e + t % (w - e);
}

// The residues r < w with r >= e and (r + m) mod w >= e: [e, w - m') and
// [w - m' + e, w), m' = m mod w. Below the wrap of a segment with no full
// row, positions with such residues are the unread ones.
struct WrapResidues {
  uint64_t w, e, start2, l1, l2;
  WrapResidues(uint64_t w_, uint64_t e_, uint64_t m) : w(w_), e(e_) {
    const uint64_t mm = m % w;
    l1 = w - mm > e ? w - mm - e : 0;
    start2 = w - mm + e;
    l2 = mm > e ? mm - e : 0;
  }
  uint64_t Count(uint64_t x) const {
    const uint64_t r = x % w;
    const uint64_t in1 = std::min(l1, r > e ? r - e : 0);
    const uint64_t in2 = std::min(l2, r > start2 ? r - start2 : 0);
    return x / w * (l1 + l2) + in1 + in2;
  }
  uint64_t Select(uint64_t t) const {
    const uint64_t g = l1 + l2, rr = t % g;
    return t / g * w + (rr < l1 ? e + rr : start2 + (rr - l1));
  }
};

}  // namespace

// ---- EpochPermutation --------------------------------------------------

EpochPermutation::EpochPermutation(uint64_t n, uint64_t seed, uint64_t epoch, bool shuffle)
    : n_(n) {
  if (!shuffle || n < 2) return;
  const uint32_t k = static_cast<uint32_t>(std::bit_width(n - 1));  // 1 .. 64
  low_bits_ = (k + 1) / 2;
  low_mask_ = (uint64_t{1} << low_bits_) - 1;
  high_count_ = (n >> low_bits_) + ((n & low_mask_) != 0 ? 1 : 0);
  // Small domains take more rounds: a half of a few bits has few round
  // functions to draw from (the chi-square tests of sampler_test.cc).
  rounds_ = std::max<uint32_t>(6, (48 + k - 1) / k);
  uint64_t state = seed ^ SplitMixOutput(epoch + kSplitMixGamma);
  for (uint32_t i = 0; i < rounds_; ++i) keys_[i] = SplitMixOutput(state += kSplitMixGamma);
}

uint64_t EpochPermutation::Forward(uint64_t x) const {
  uint64_t low = x & low_mask_, high = x >> low_bits_;
  for (uint32_t i = 0; i < rounds_; i += 2) {
    low = (low ^ RoundFunction(keys_[i], high)) & low_mask_;
    if (i + 1 == rounds_) break;
    high += MulHi(RoundFunction(keys_[i + 1], low), high_count_);
    if (high >= high_count_) high -= high_count_;
  }
  return (high << low_bits_) | low;
}

uint64_t EpochPermutation::Backward(uint64_t x) const {
  uint64_t low = x & low_mask_, high = x >> low_bits_;
  for (uint32_t i = rounds_; i-- > 0;) {
    if (i % 2 == 1) {
      const uint64_t f = MulHi(RoundFunction(keys_[i], low), high_count_);
      high = high >= f ? high - f : high + high_count_ - f;
    } else {
      low = (low ^ RoundFunction(keys_[i], high)) & low_mask_;
    }
  }
  return (high << low_bits_) | low;
}

uint64_t EpochPermutation::operator()(uint64_t position) const {
  if (rounds_ == 0) return position;
  // Cycle walking: positions of the domain past n are walked through; the
  // permutation's cycles through [0, n) then make one of [0, n).
  uint64_t x = Forward(position);
  while (x >= n_) x = Forward(x);
  return x;
}

uint64_t EpochPermutation::PositionOf(uint64_t sample) const {
  if (rounds_ == 0) return sample;
  uint64_t x = Backward(sample);
  while (x >= n_) x = Backward(x);
  return x;
}

void EpochPermutation::Map(uint64_t first, uint64_t count, uint64_t* out) const {
  if (rounds_ == 0) {
    for (uint64_t i = 0; i < count; ++i) out[i] = first + i;
    return;
  }
  for (uint64_t i = 0; i < count; ++i) out[i] = (*this)(first + i);
}

// ---- SampleSubset --------------------------------------------------------

struct SampleSubset::Inverse {
  std::once_flag once;
  std::vector<std::pair<uint64_t, uint64_t>> sorted;  // (index, position)
};

SampleSubset::SampleSubset(std::vector<uint64_t> indices) {
  if (indices.empty()) return;
  kind_ = Kind::kList;
  sorted_ = std::is_sorted(indices.begin(), indices.end());
  list_ = std::make_shared<const std::vector<uint64_t>>(std::move(indices));
  if (!sorted_) inverse_ = std::make_shared<Inverse>();
}

SampleSubset SampleSubset::Range(uint64_t first, uint64_t count) {
  SampleSubset s;
  s.kind_ = Kind::kRange;
  s.first_ = first;
  s.count_ = count;
  return s;
}

uint64_t SampleSubset::Count(uint64_t volume_samples) const {
  switch (kind_) {
    case Kind::kAll:
      return volume_samples;
    case Kind::kRange:
      return count_;
    case Kind::kList:
      return list_->size();
  }
  return 0;
}

std::optional<uint64_t> SampleSubset::PositionOf(uint64_t i) const {
  switch (kind_) {
    case Kind::kAll:
      return i;
    case Kind::kRange:
      if (i >= first_ && i - first_ < count_) return i - first_;
      return std::nullopt;
    case Kind::kList:
      break;
  }
  if (sorted_) {
    auto it = std::lower_bound(list_->begin(), list_->end(), i);
    if (it == list_->end() || *it != i) return std::nullopt;
    return static_cast<uint64_t>(it - list_->begin());
  }
  std::call_once(inverse_->once, [this] {
    auto& s = inverse_->sorted;
    s.reserve(list_->size());
    for (uint64_t p = 0; p < list_->size(); ++p) s.emplace_back((*list_)[p], p);
    std::sort(s.begin(), s.end());
  });
  const auto& s = inverse_->sorted;
  auto it = std::lower_bound(s.begin(), s.end(), std::make_pair(i, uint64_t{0}));
  if (it == s.end() || it->first != i) return std::nullopt;
  return it->second;
}

Status SampleSubset::Check(uint64_t volume_samples, const std::string& volume) const {
  auto out_of_range = [&](const std::string& what) {
    return Status::InvalidArgument(what + " is out of range (" + volume + " has " +
                                   std::to_string(volume_samples) + " samples)");
  };
  switch (kind_) {
    case Kind::kAll:
      return Status::Ok();
    case Kind::kRange:
      if (count_ > volume_samples || first_ > volume_samples - count_) {
        return out_of_range("subset range [" + std::to_string(first_) + ", " +
                            std::to_string(first_) + " + " + std::to_string(count_) + ")");
      }
      return Status::Ok();
    case Kind::kList:
      for (uint64_t i : *list_) {
        if (i >= volume_samples) return out_of_range("subset index " + std::to_string(i));
      }
      return Status::Ok();
  }
  return Status::Ok();
}

uint32_t SampleSubset::Crc() const {
  uint32_t crc = 0;
  switch (kind_) {
    case Kind::kAll:
      return 0;
    case Kind::kRange:
      crc = CountingCrc().Of(first_, count_);
      break;
    case Kind::kList:
      for (uint64_t i : *list_) {
        unsigned char le[8];
        for (int k = 0; k < 8; ++k) le[k] = static_cast<unsigned char>(i >> (8 * k));
        crc = crc32c::Extend(crc, le, sizeof le);
      }
      break;
  }
  return crc == 0 ? 1 : crc;  // 0 means "no subset"
}

SampleSubset SubsetUnder(const SampleDirectory& dir, uint64_t d) {
  // One run of indices (the root; a compact volume's directory whose names
  // were added in order; a tree volume's subtree whose directories' runs
  // meet): no list of size n.
  if (const std::optional<SampleDirectory::IndexRange> r = dir.SubtreeIndexRange(d)) {
    return SampleSubset::Range(r->first, r->count);
  }
  return SampleSubset(dir.SamplesUnder(d));  // not one run: the list
}

// ---- Sampler -------------------------------------------------------------

uint64_t SamplesPerShard(uint64_t m, uint64_t shards, uint64_t batch, bool drop_last) {
  return drop_last ? m / shards / batch * batch : m / shards + (m % shards != 0 ? 1 : 0);
}

Status CheckEpochSegments(std::span<const EpochSegment> done) {
  constexpr uint64_t kMaxShards = uint64_t{1} << 24;
  if (done.size() > kMaxEpochSegments) {
    return Status::InvalidArgument("an epoch resumed more than " +
                                   std::to_string(kMaxEpochSegments) + " times");
  }
  for (const EpochSegment& s : done) {
    if (s.world_size == 0 || s.workers == 0 || s.batch_size == 0) {
      return Status::InvalidArgument("an epoch segment with no ranks, workers or batch size");
    }
    if (uint64_t{s.world_size} * s.workers > kMaxShards) {
      return Status::InvalidArgument("an epoch segment of more than " + std::to_string(kMaxShards) +
                                     " ranks x workers");
    }
  }
  return Status::Ok();
}

Result<Sampler> Sampler::Create(uint64_t sample_count, const SamplerOptions& options) {
  if (options.world_size == 0) return Status::InvalidArgument("world_size must be at least 1");
  if (options.rank >= options.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(options.rank) +
                                   " is not below world_size " +
                                   std::to_string(options.world_size));
  }
  if (options.batch_size == 0) return Status::InvalidArgument("batch_size must be at least 1");
  Sampler s;
  s.n_ = sample_count;
  s.options_ = options;
  const uint64_t b = options.batch_size;
  s.per_rank_ = SamplesPerShard(sample_count, options.world_size, b, options.drop_last);
  s.batches_ = s.per_rank_ / b + (s.per_rank_ % b != 0 ? 1 : 0);
  return s;
}

EpochPermutation Sampler::Order(uint64_t epoch) const {
  return EpochPermutation(n_, options_.seed, epoch, options_.shuffle);
}

RankOrder Sampler::Ranked(uint64_t epoch, const SampleSubset& subset) const {
  RankOrder o;
  o.perm_ = Order(epoch);
  o.subset_ = subset;
  o.positions_ = n_;
  o.world_ = options_.world_size;
  o.rank_ = options_.rank;
  o.size_ = n_ == 0 ? 0 : per_rank_;
  return o;
}

Result<RankOrder> Sampler::Ranked(uint64_t epoch, std::span<const EpochSegment> done,
                                  const SampleSubset& subset) const {
  DLFS_RETURN_IF_ERROR(CheckEpochSegments(done));
  RankOrder o = Ranked(epoch, subset);
  if (done.empty()) return o;
  uint64_t m = n_;
  for (size_t i = 0; i < done.size() && m > 0; ++i) {
    const EpochSegment& seg = done[i];
    // Shard s of the segment read positions (j * shards + s) mod m of what
    // was left, j < its count; worker w = s % workers had handed out q or
    // q + 1 batches of them: full rows j < q * b, and where w < extra the
    // row(s) up to (q + 1) * b.
    const uint64_t shards = uint64_t{seg.world_size} * seg.workers;
    const uint64_t w = seg.workers;
    const uint64_t b = seg.batch_size;
    const uint64_t per = SamplesPerShard(m, shards, b, options_.drop_last);
    const uint64_t batches = per / b + (per % b != 0 ? 1 : 0);
    if (seg.batches > batches * w) {
      return Status::InvalidArgument(
          "part " + std::to_string(i + 1) + " of epoch " + std::to_string(epoch) + " says " +
          std::to_string(seg.batches) + " batches were handed out of its " +
          std::to_string(batches * w));
    }
    const uint64_t q = seg.batches / w, extra = seg.batches % w;
    const uint64_t lo = std::min(per, q * b);
    const uint64_t hi = extra > 0 ? std::min(per, (q + 1) * b) : lo;
    if (seg.batches == batches * w || static_cast<u128>(lo) * shards >= m) {
      m = 0;  // it finished the epoch, or its full rows (and padding) cover it
      break;
    }
    RankOrder::Rest rest;
    rest.before = m;
    if (shards > m) {
      // More shards than positions (no full row): list what is left; fewer
      // than `shards` positions, at most 2^24.
      std::vector<bool> read(m, false);
      for (uint64_t s = 0; s < shards; ++s) {
        if (s % w >= extra) continue;
        for (uint64_t j = 0; j < hi; ++j) read[(j * shards + s) % m] = true;
      }
      rest.explicit_list = true;
      for (uint64_t x = 0; x < m; ++x) {
        if (!read[x]) rest.list.push_back(x);
      }
      rest.after = rest.list.size();
    } else {
      // Rows lo .. hi - 1 end below m + shards <= 2m: padding wraps once.
      rest.workers = w;
      rest.extra = extra;
      rest.base = lo * shards;
      const uint64_t partial = hi * shards;
      rest.partial_end = extra > 0 ? std::min(partial, m) : rest.base;
      if (extra > 0 && lo == 0 && partial > m) {
        // No full row: what wrapped around lands on positions no full row
        // read (with full rows it lands within the first).
        rest.wrap = partial - m;
        const WrapResidues r(w, extra, m);
        rest.after = r.Count(rest.wrap) + CountHigh(m, w, extra) - CountHigh(rest.wrap, w, extra);
      } else {
        rest.after =
            (extra > 0 ? CountHigh(rest.partial_end, w, extra) - CountHigh(rest.base, w, extra)
                       : 0) +
            (m - rest.partial_end);
      }
    }
    m = rest.after;
    o.rests_.push_back(std::move(rest));
  }
  o.positions_ = m;
  o.size_ =
      m == 0 ? 0 : SamplesPerShard(m, options_.world_size, options_.batch_size, options_.drop_last);
  if (m == 0) o.rests_.clear();
  return o;
}

std::vector<uint64_t> Sampler::Permutation(uint64_t epoch) const {
  std::vector<uint64_t> p(n_);
  Order(epoch).Map(0, n_, p.data());
  return p;
}

std::vector<uint64_t> Sampler::RankIndices(uint64_t epoch, const SampleSubset& subset) const {
  return Ranked(epoch, subset).ToVector();
}

Result<std::vector<uint64_t>> Sampler::RankIndices(uint64_t epoch,
                                                   std::span<const EpochSegment> done,
                                                   const SampleSubset& subset) const {
  DLFS_ASSIGN_OR_RETURN(RankOrder o, Ranked(epoch, done, subset));
  return o.ToVector();
}

// ---- RankOrder -----------------------------------------------------------

uint64_t RankOrder::Rest::Select(uint64_t j) const {
  if (explicit_list) return list[j];
  if (wrap == 0) {
    if (extra == 0) return base + j;
    const uint64_t below = CountHigh(base, workers, extra);
    const uint64_t partial = CountHigh(partial_end, workers, extra) - below;
    if (j < partial) return SelectHigh(below + j, workers, extra);
    return partial_end + (j - partial);
  }
  const WrapResidues r(workers, extra, before);
  const uint64_t in_wrap = r.Count(wrap);
  if (j < in_wrap) return r.Select(j);
  return SelectHigh(CountHigh(wrap, workers, extra) + (j - in_wrap), workers, extra);
}

uint64_t RankOrder::PositionAt(uint64_t k) const {
  uint64_t p = Padded(k, world_, rank_, positions_);
  for (size_t i = rests_.size(); i-- > 0;) p = rests_[i].Select(p);
  return p;
}

uint64_t RankOrder::At(uint64_t k) const { return subset_.At(perm_(PositionAt(k))); }

void RankOrder::Fill(uint64_t first, uint64_t count, uint64_t* out) const {
  for (uint64_t i = 0; i < count; ++i) out[i] = At(first + i);
}

std::vector<uint64_t> RankOrder::ToVector() const {
  std::vector<uint64_t> v(size_);
  Fill(0, size_, v.data());
  return v;
}

}  // namespace dlfs
