// Sampler: which samples each rank reads in an epoch, and in what order.
//
// The epoch order (order version 2, kOrderVersion) is a keyed bijection of
// [0, sample count): EpochPermutation, a Feistel network over a domain of
// 2^a x B positions (a = ceil(k / 2) low bits, B the rest, k the bits of
// n - 1) with cycle walking, keyed by (seed, epoch) through SplitMix64. It
// is computed per position in O(1) and stores nothing, and it is a pure
// function of (n, seed, epoch): integer arithmetic only (no std::
// distribution, whose output is implementation-defined), so every rank,
// compiler and platform derives the same order without talking to the
// others. docs/format.md, "Epoch order", specifies it bit for bit.
// (Order version 1, before it, was a Fisher-Yates shuffle materialised
// per process; states saved with it mid-epoch are refused, see
// dlfs/batch_source.h.)
//
// Sharding follows torch.utils.data.DistributedSampler: the permutation is
// padded by wrapping around to a multiple of world_size (drop_last=false) or
// cut down to one (drop_last=true), and rank r takes positions r, r + world,
// r + 2 world, ... So every rank gets the same number of samples; with
// padding, a few samples appear twice in an epoch. The rank's list is then
// cut into batches; with drop_last the last incomplete batch is dropped too,
// otherwise it is kept (and equally short on every rank).
//
// Elastic resume: a job interrupted mid-epoch may resume with another
// number of ranks, DataLoader workers or batch size. The part of the epoch
// it read is an EpochSegment; the rest of the epoch — the permutation's
// positions no segment read (as a sample or as padding), in permutation
// order — is sharded among the new ranks exactly as a whole epoch is
// (padding and drop_last applying to the rest), so every remaining sample
// is read once. Later epochs are whole. What a segment read has a
// structure (whole rows of its shards' positions, then a row its workers
// with an extra batch read), so the k-th remaining position is computed
// arithmetically, in O(segments) per position.
//
// A rank's order (RankOrder) is computed per position: nothing of the
// sample count's size is ever stored, so a loader's first batch costs the
// same for a thousand samples and for a billion. The list forms
// (Permutation, RankIndices) are for callers that ask for a list (a CLI
// printing one, tests); they cost O(n).
//
// Thread safety: immutable; safe to share.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dlfs/status.h"

namespace dlfs {

class SampleDirectory;

// The epoch order's version: what resume states record (dlfs/batch_source.h).
// 1: Fisher-Yates (dlfs before this order); 2: EpochPermutation.
inline constexpr uint32_t kOrderVersion = 2;

// A keyed bijection of [0, n): the sample at each position of an epoch.
// O(1) per position (6 Feistel rounds, more below 256 samples; cycle
// walking takes another pass for fewer than 2^(2 - k/2) of the positions),
// at least 50 million positions per second on one core (bench/order).
class EpochPermutation {
 public:
  // The permutation of [0, n) for (seed, epoch); the identity when !shuffle.
  EpochPermutation(uint64_t n, uint64_t seed, uint64_t epoch, bool shuffle = true);
  EpochPermutation() : EpochPermutation(0, 0, 0, false) {}

  uint64_t size() const { return n_; }
  // The sample at `position`. REQUIRES: position < size().
  uint64_t operator()(uint64_t position) const;
  // The position of `sample`: the inverse. REQUIRES: sample < size().
  uint64_t PositionOf(uint64_t sample) const;
  // The samples at positions [first, first + count), into out[0, count).
  // REQUIRES: first + count <= size().
  void Map(uint64_t first, uint64_t count, uint64_t* out) const;

  uint32_t rounds() const { return rounds_; }  // 0: the identity

 private:
  static constexpr uint32_t kMaxRounds = 48;
  uint64_t Forward(uint64_t x) const;
  uint64_t Backward(uint64_t x) const;

  uint64_t n_ = 0;
  uint32_t rounds_ = 0;
  uint32_t low_bits_ = 0;  // a: x = high * 2^a + low
  uint64_t low_mask_ = 0;
  uint64_t high_count_ = 0;  // B
  std::array<uint64_t, kMaxRounds> keys_{};
};

// The samples a loader reads of a volume: all of them, a contiguous range,
// or an explicit list, mapped from the positions the sampler orders (0 ..
// size() - 1) to volume indices by At(). A value; copies share a list.
class SampleSubset {
 public:
  enum class Kind : uint8_t { kAll, kRange, kList };

  SampleSubset() = default;  // every sample of the volume
  // An explicit list (any order, as given). Implicit, as LoaderOptions::subset
  // was a vector: an empty list means every sample, as it always did.
  SampleSubset(std::vector<uint64_t> indices);  // NOLINT(google-explicit-constructor)
  SampleSubset(std::initializer_list<uint64_t> indices)
      : SampleSubset(std::vector<uint64_t>(indices)) {}
  // Samples [first, first + count); count 0 is an empty subset.
  static SampleSubset Range(uint64_t first, uint64_t count);

  Kind kind() const { return kind_; }
  bool all() const { return kind_ == Kind::kAll; }
  // Positions it holds; `volume_samples` for every sample (kAll).
  uint64_t Count(uint64_t volume_samples) const;
  // The volume index at position p. REQUIRES: p < Count(volume samples).
  uint64_t At(uint64_t p) const {
    switch (kind_) {
      case Kind::kAll:
        return p;
      case Kind::kRange:
        return first_ + p;
      case Kind::kList:
        return (*list_)[p];
    }
    return p;
  }
  // The position of volume index i, or nullopt when the subset lacks it:
  // O(1) for all and a range, O(log n) for a sorted list; an unsorted list
  // builds a sorted copy on first use (O(n): the caller's list is that big).
  std::optional<uint64_t> PositionOf(uint64_t i) const;
  // InvalidArgument naming `volume` when an index is not below
  // volume_samples (a list's is checked index by index).
  Status Check(uint64_t volume_samples, const std::string& volume) const;
  // CRC32C of its indices as little-endian uint64 (a list's: O(n); a
  // range's: O(log^2 n), equal to the list of the same indices'), 1 when
  // that is 0, and 0 for every sample: how a resume state names the subset.
  uint32_t Crc() const;

  uint64_t first() const { return first_; }  // kRange
  // kList: the indices as given (empty otherwise).
  std::span<const uint64_t> list() const {
    return list_ ? std::span<const uint64_t>(*list_) : std::span<const uint64_t>();
  }

 private:
  struct Inverse;
  Kind kind_ = Kind::kAll;
  uint64_t first_ = 0, count_ = 0;
  bool sorted_ = true;  // kList: ascending
  std::shared_ptr<const std::vector<uint64_t>> list_;
  std::shared_ptr<Inverse> inverse_;  // kList, unsorted: built by PositionOf
};

// The samples under directory `d` of `dir` (recursively) as a subset: a
// range when they are one contiguous run (each directory's own samples are
// one run; a subtree whose runs abut, as when its samples' paths sort
// together, is one range: found in O(directories under d), no per-sample
// work), else the list of their indices, ascending (SamplesUnder's).
// REQUIRES: d < dir.dir_count().
SampleSubset SubsetUnder(const SampleDirectory& dir, uint64_t d);

struct SamplerOptions {
  bool shuffle = true;  // false: volume (index) order
  uint64_t seed = 0;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint32_t batch_size = 256;
  bool drop_last = false;
};

// A part of an epoch read by one job before it stopped: its ranks (each
// split among `workers` DataLoader workers that hand out batches in turn,
// rank r's worker w reading shard r * workers + w of world_size * workers),
// its batch size, and the batches each rank had handed out. A segment that
// handed out all its batches ends the epoch.
struct EpochSegment {
  uint32_t world_size = 1;
  uint32_t workers = 1;
  uint32_t batch_size = 1;
  uint64_t batches = 0;

  bool operator==(const EpochSegment&) const = default;
};

// InvalidArgument unless every field is at least 1 (batches: 0), world_size
// * workers is at most 2^24, and there are at most kMaxEpochSegments.
inline constexpr size_t kMaxEpochSegments = 64;
Status CheckEpochSegments(std::span<const EpochSegment> done);

// One rank's samples of one epoch (or of its rest after an elastic resume),
// in reading order, computed per position: At(k) is O(1) (O(segments) after
// an elastic resume). Holds no more than the segments' description.
class RankOrder {
 public:
  RankOrder() = default;  // empty

  uint64_t size() const { return size_; }
  // The volume index this rank reads k-th. REQUIRES: k < size().
  uint64_t At(uint64_t k) const;
  // Entries [first, first + count) into out[0, count). REQUIRES: first +
  // count <= size().
  void Fill(uint64_t first, uint64_t count, uint64_t* out) const;
  // All of them (O(size()): for callers that ask for a list).
  std::vector<uint64_t> ToVector() const;

  // The position in the epoch's permutation (before the permutation and the
  // subset) this rank reads k-th. REQUIRES: k < size().
  uint64_t PositionAt(uint64_t k) const;

  // What a segment left of the positions before it: the j-th unread one.
  struct Rest {
    uint64_t before = 0;  // positions before the segment
    uint64_t after = 0;   // positions it left
    // Unread: [base, partial_end) where position mod workers >= extra; and
    // [partial_end, before), all of it — less, when `wrap` > 0, the
    // positions below wrap whose (position + before) mod workers < extra.
    uint64_t base = 0, partial_end = 0, workers = 1, extra = 0, wrap = 0;
    std::vector<uint64_t> list;  // when `explicit_list`: the unread positions
    bool explicit_list = false;
    uint64_t Select(uint64_t j) const;
  };

 private:
  friend class Sampler;
  EpochPermutation perm_;
  SampleSubset subset_;
  std::vector<Rest> rests_;  // oldest first
  uint64_t positions_ = 0;   // left after the segments: what this epoch's ranks share
  uint64_t world_ = 1, rank_ = 0;
  uint64_t size_ = 0;
};

class Sampler {
 public:
  // InvalidArgument for rank >= world_size, world_size or batch_size 0.
  static Result<Sampler> Create(uint64_t sample_count, const SamplerOptions& options);

  // The epoch's permutation (the identity when !shuffle), before padding
  // and sharding. Identical on every rank.
  EpochPermutation Order(uint64_t epoch) const;

  // This rank's order of `epoch`, mapped through `subset` (positions p
  // becoming subset.At(p)). REQUIRES: subset holds the sample_count the
  // sampler was created with, or is all().
  RankOrder Ranked(uint64_t epoch, const SampleSubset& subset = {}) const;
  // The same for the rest of `epoch` after the segments `done` (in the
  // order they were read). With `done` empty: Ranked(epoch, subset).
  // InvalidArgument for segments CheckEpochSegments refuses, or one that
  // counts more batches than its part of the epoch had.
  Result<RankOrder> Ranked(uint64_t epoch, std::span<const EpochSegment> done,
                           const SampleSubset& subset) const;

  // Lists (O(n), for callers that ask for one):
  // The full permutation of [0, sample_count) for `epoch`.
  std::vector<uint64_t> Permutation(uint64_t epoch) const;
  // This rank's sample indices for `epoch` (mapped through `subset`), in
  // reading order; samples_per_rank() of them.
  std::vector<uint64_t> RankIndices(uint64_t epoch, const SampleSubset& subset = {}) const;
  // The rest after `done`, as Ranked.
  Result<std::vector<uint64_t>> RankIndices(uint64_t epoch, std::span<const EpochSegment> done,
                                            const SampleSubset& subset) const;

  uint64_t sample_count() const { return n_; }
  uint64_t samples_per_rank() const { return per_rank_; }
  uint64_t batches_per_epoch() const { return batches_; }
  const SamplerOptions& options() const { return options_; }

 private:
  Sampler() = default;
  uint64_t n_ = 0;
  SamplerOptions options_;
  uint64_t per_rank_ = 0;
  uint64_t batches_ = 0;
};

// Samples per shard when `m` positions are split among `shards` in batches
// of `batch` (DistributedSampler's rule, above): ceil(m / shards), or with
// drop_last floor(m / shards) rounded down to whole batches.
uint64_t SamplesPerShard(uint64_t m, uint64_t shards, uint64_t batch, bool drop_last);

}  // namespace dlfs
