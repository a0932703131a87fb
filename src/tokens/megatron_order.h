// Megatron-LM-compatible sample order for token corpora (issue 48): from the
// token counts of a corpus's documents, a seed, a sequence length, a split
// string and blend weights, the windows Megatron-LM's GPTDataset and
// BlendedDataset give, in the same order (NVIDIA/Megatron-LM d98e8a6,
// megatron/core/datasets; the rules are summarised in docs/tokens.md). A
// token loader calls this; tests/unit/megatron_order_test.cc checks it
// against golden files made with Megatron's own code (tests/data/megatron).
//
// "Document" means a sequence of Megatron's .idx (preprocess_data.py writes
// one per document): what GPTDataset counts and shuffles.
//
// Megatron materialises its orders per sample, and so does this: its
// permutations are successive draws of one random generator, so no
// position can be computed alone. Every array holds uint32_t where all its
// values fit (the usual case), else uint64_t:
//   document index  4 B per document per epoch (8 B past 2^32 document ids),
//   sample index    8 B per window (12-16 B past 2^32 positions or tokens
//                   in a document),
//   shuffle index   4 B per window (8 B past 2^32 windows),
//   blend           6 B per blended sample (10 B past 2^32 samples of one
//                   source).
// Building a GPT order takes 8 B more per document per epoch for its
// duration (each document shuffled with its length). Megatron's arrays are
// the same size or larger (10 B per blended sample), and its document index
// is int32 (it wraps past 2^31 documents) where these widen. The time is
// O(epochs x documents + windows), most of it the shuffles' cache misses: a
// few seconds at 1e8 documents.
//
// Thread safety: the classes are values; const methods may be called from
// any number of threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "dlfs/status.h"

namespace dlfs::tokens_internal {

// A range of documents [begin, end) of a corpus.
struct MegatronSplit {
  uint64_t begin = 0;
  uint64_t end = 0;
  bool operator==(const MegatronSplit&) const = default;
};

// The train, valid and test ranges Megatron's --split string gives over
// `documents` documents; nullopt for a split Megatron builds no dataset for
// (weight 0). Megatron's rule: the numbers are normalised (divided by their
// sum), accumulated left to right in doubles, and each bound is
// round(fraction * documents), halves to even ("3,5" over 700 documents:
// train [0, 262), valid [262, 700)). A range can be empty.
// The string: at most three decimal numbers ("969,30,1", "99,1", "1", "0.9,
// 0.1"; missing ones are 0), separated by commas, slashes or white space.
// InvalidArgument names what is wrong: no number, more than three, a
// malformed number ("1.2.3"), all zero, or another character. (Megatron
// takes any other character for a separator, so "-1" would be 1 there: we
// refuse it.)
Result<std::array<std::optional<MegatronSplit>, 3>> MegatronSplits(std::string_view split,
                                                                   uint64_t documents);

struct MegatronGptOptions {
  uint64_t seq_len = 0;         // --seq-length; 2 .. 2^31 - 1 (Megatron asserts > 1)
  uint32_t seed = 1234;         // --seed (a fresh generator per split and source)
  bool add_extra_token = true;  // add_extra_token_to_sequence: windows of seq_len + 1
  // GPTDataset's num_samples: the order spans as many epochs as these need
  // (and size() is all the windows of those epochs, usually more). 0: one
  // epoch (Megatron's None and 0 give the same order).
  uint64_t num_samples = 0;
  // false keeps a last, partial window (shorter than window_tokens(): the
  // loader pads it). Megatron drops it, except in the valid split when
  // drop_last_partial_validation_sequence is False.
  bool drop_last_partial = true;
};

// A run of one document's tokens: [begin, begin + count).
struct TokenPiece {
  uint64_t document = 0;
  uint64_t begin = 0;
  uint64_t count = 0;
};

// An array of unsigned integers held as uint32_t when every value fits,
// else as uint64_t, in memory of its own with transparent huge pages asked
// for (AllocateLarge: first-touch faults and TLB misses are most of a
// shuffle's time at 1e8 elements). Copies share the array.
class PackedIndex {
 public:
  PackedIndex() = default;
  // n zeros, wide enough for values up to max_value. Unavailable when the
  // memory cannot be had.
  static Result<PackedIndex> Make(uint64_t n, uint64_t max_value);

  uint64_t operator[](uint64_t i) const {
    return wide_ ? reinterpret_cast<const uint64_t*>(data_.get())[i]
                 : reinterpret_cast<const uint32_t*>(data_.get())[i];
  }
  uint64_t size() const { return n_; }
  uint64_t bytes() const { return n_ * (wide_ ? 8 : 4); }
  // f(std::span<uint32_t or uint64_t>): the array itself, to fill it.
  template <typename F>
  decltype(auto) Visit(F&& f) {
    return wide_ ? f(std::span<uint64_t>(reinterpret_cast<uint64_t*>(data_.get()), n_))
                 : f(std::span<uint32_t>(reinterpret_cast<uint32_t*>(data_.get()), n_));
  }

 private:
  std::shared_ptr<std::byte> data_;
  uint64_t n_ = 0;
  bool wide_ = false;
};

// The windows of one GPTDataset: one split of one corpus.
class MegatronGptOrder {
 public:
  // `document_tokens`: the token count of every document of the corpus (all
  // splits: Megatron's sequence_lengths); it must outlive the order, and not
  // change. `split`: the documents of this dataset (a MegatronSplits range).
  // InvalidArgument: seq_len outside 2 .. 2^31 - 1, a split outside the
  // corpus, fewer than 2 tokens in it (Megatron fails on those: none or one
  // loops forever or asserts), a count that overflows 64 bits, or a case
  // where Megatron's own code fails an assertion (named in the message).
  // Unavailable when the arrays of the header comment cannot be allocated.
  static Result<MegatronGptOrder> Build(std::span<const uint64_t> document_tokens,
                                        MegatronSplit split, const MegatronGptOptions& options);

  // Windows in this dataset (len(GPTDataset)).
  uint64_t size() const { return shuffle_.size(); }
  // Tokens in a window: seq_len + 1 with add_extra_token, else seq_len.
  uint64_t window_tokens() const { return window_; }

  // Window k (k < size(), in dataset order: GPTDataset[k]) as the pieces
  // whose concatenation it is, in order, replacing *pieces. Pieces of no
  // tokens are kept, as Megatron keeps them (its cu_seqlens show them):
  // empty documents inside the window, and with add_extra_token false a
  // first piece at the end of its document. Their counts add up to
  // window_tokens(), except for a last partial window (drop_last_partial
  // false), which is shorter. Consecutive windows of the token stream
  // overlap by one token with add_extra_token (the last label of one is
  // the first input of the next).
  void Window(uint64_t k, std::vector<TokenPiece>* pieces) const;

  // What Megatron computes on the way (its GPTDataset's fields).
  uint64_t tokens_per_epoch() const { return tokens_per_epoch_; }
  uint64_t num_epochs() const { return epochs_; }
  bool separate_final_epoch() const { return separate_; }

  // Megatron's three arrays, value by value, for comparing with its .npy
  // cache files. document_index: documents of all epochs, shuffled
  // (num_epochs() x split documents). sample_index row j <= size(): the
  // position in document_index and the token offset where window j of the
  // stream starts (row size(): where the last ends; its offset is -1 when a
  // partial last window ends at an empty document with add_extra_token).
  // shuffle_index: dataset position -> window of the stream.
  uint64_t document_index_size() const { return documents_.size(); }
  uint64_t document_index(uint64_t i) const { return documents_[i]; }
  std::pair<uint64_t, int64_t> sample_index(uint64_t j) const;
  uint64_t shuffle_index(uint64_t k) const { return shuffle_[k]; }

  // Bytes of the arrays.
  uint64_t bytes() const {
    return documents_.bytes() + positions_.bytes() + offsets_.bytes() + shuffle_.bytes();
  }

 private:
  MegatronGptOrder() = default;

  std::span<const uint64_t> tokens_;
  uint64_t window_ = 0;
  uint64_t extra_ = 0;
  uint64_t tokens_per_epoch_ = 0;
  uint64_t epochs_ = 0;
  bool separate_ = false;
  PackedIndex documents_;  // document_index
  // sample_index rows 0 .. size() - 1 (where each window starts); the last
  // row (where the last window ends) is kept apart: its offset can be -1.
  PackedIndex positions_;
  PackedIndex offsets_;
  uint64_t end_position_ = 0;
  int64_t end_offset_ = 0;
  PackedIndex shuffle_;
};

// The samples a BlendedDataset takes from its sources, in order.
class MegatronBlend {
 public:
  uint64_t size() const { return dataset_.size(); }
  // Blended sample s (< size()) is window sample(s) (in dataset order) of
  // source dataset(s).
  uint16_t dataset(uint64_t s) const { return dataset_[s]; }
  uint64_t sample(uint64_t s) const { return sample_[s]; }
  // Samples taken from each source. Megatron fails ("oversamples") when one
  // exceeds the size() of that source's order: check before using it.
  const std::vector<uint64_t>& counts() const { return counts_; }
  // The weights the greedy rule used (BlendedDataset.weights, but for an
  // exhaustive blend, whose weights Megatron keeps as the lengths).
  const std::vector<double>& weights() const { return weights_; }
  uint64_t bytes() const { return dataset_.size() * 2 + sample_.bytes(); }

 private:
  friend Result<MegatronBlend> BuildMegatronBlend(std::span<const double>, uint64_t);
  friend Result<MegatronBlend> BuildMegatronLengthBlend(std::span<const uint64_t>,
                                                        std::optional<uint64_t>);
  // The greedy rule over `weights` for `size` samples; with `exhaustive`
  // (the sources' lengths), a source leaves the choice once all its
  // samples are taken (size: their sum).
  static Result<MegatronBlend> Greedy(std::vector<double> weights, uint64_t size,
                                      std::span<const uint64_t> exhaustive);

  std::vector<uint16_t> dataset_;
  PackedIndex sample_;
  std::vector<uint64_t> counts_;
  std::vector<double> weights_;
};

// The blend of --data-path with weights ("30 p1 70 p2"): `weights` as given
// (any positive scale), `requested` the split's sample count. Megatron's
// rule: w = weights / sum, each source is asked for ceil(requested x w_k)
// samples and the blend has their sum (>= requested, by up to one per
// source); the greedy rule picks, for each sample s, the source with the
// largest w'_k max(s, 1) - taken_k (ties to the lowest k), where w' is w
// normalised a second time, as BlendedDataset does (it changes bits, and
// decisions). InvalidArgument: no weight, more than 32766, or one not
// positive and finite.
Result<MegatronBlend> BuildMegatronBlend(std::span<const double> weights, uint64_t requested);

// The blend of --data-path without weights, over two or more sources:
// `lengths` the size() of each source's order (one epoch each). With
// `requested`, min(requested, sum) samples by the greedy rule, weights
// lengths / sum; without, the exhaustive blend: every window of every
// source exactly once. InvalidArgument as above, and for a length of 0.
Result<MegatronBlend> BuildMegatronLengthBlend(std::span<const uint64_t> lengths,
                                               std::optional<uint64_t> requested);

// num_samples for each source's MegatronGptOrder in a weighted blend:
// ceil(ceil(requested x w_k) x (1 + surplus)), w = weights / sum (surplus:
// --mid-level-dataset-surplus). The surplus changes how many epochs a
// source spans, and so its whole order. InvalidArgument as for
// BuildMegatronBlend, or a negative or non-finite surplus.
Result<std::vector<uint64_t>> MegatronComponentSizes(std::span<const double> weights,
                                                     uint64_t requested, double surplus = 0.005);

}  // namespace dlfs::tokens_internal
