// TokenLoader: batches of token windows from token volumes (dlfs pack of a
// Megatron .bin/.idx pair, .npy or flat token files, or dlfs.Writer
// documents; docs/tokens.md), for language-model pretraining.
//
//   TokenLoaderOptions o;
//   o.seq_len = 4096; o.batch_size = 8; o.seed = 1;
//   auto loader = TokenLoader::Open({{"web.dlfs", 0.7}, {"code.dlfs", 0.3}}, o);
//   std::vector<int64_t> tokens((*loader)->batch_tokens());
//   for (uint64_t b = 0; b < (*loader)->batches_per_epoch(); ++b)
//     (*loader)->ReadBatch(epoch, b, tokens, &info);
//
// The stream. Each source's windows are its documents back to back, cut
// every seq_len tokens into windows of seq_len + 1 (the last token of a
// window is the first of the next: inputs and shifted targets, as
// Megatron-LM's GPTDataset with add_extra_token), so a window may span
// several documents; the tail shorter than a window is not read. A
// source's windows are drawn in the order of a keyed bijection per pass
// over them (0 bytes per window; a new order each pass). Which source each
// position of the global stream draws from is TokenBlend's (src/tokens/
// blend.h): O(K) state, no per-window array, any position reached
// directly. Epoch e is positions [e·E, (e+1)·E) of that stream, E =
// windows_per_epoch(). The stream does not depend on the ranks, the batch
// size or the workers reading it: global batch j of the epoch is positions
// [j·G, (j+1)·G), G = batch_size × world_size, and rank r reads the r-th
// batch_size of them; a last partial global batch is filled from the
// epoch's first positions (or dropped with drop_last). So a job that
// resumes at position p on another world size reads each window once.
//
// Checks. With verify (the default) every byte read is checked against the
// volume's CRC32C of the 4 KiB chunks it lies in (docs/format.md §10), so
// a window spanning documents is checked without reading them whole; a
// mismatch is a Corruption status naming the volume and the chunk.
//
// Thread safety: one thread calls ReadBatch at a time (one I/O ring).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dlfs/io_engine.h"
#include "dlfs/status.h"

namespace dlfs {

// How a source's documents become windows.
enum class TokenWindowing : uint8_t {
  kAcross,    // documents back to back, windows across their boundaries (above)
  kDocument,  // one window per document: its first seq_len + 1 tokens, padded with pad_id
};

struct TokenSource {
  std::string path;   // a token volume
  double weight = 1;  // its share of the stream (normalised over the sources)
};

struct TokenLoaderOptions {
  uint64_t seq_len = 0;     // window = seq_len + 1 tokens; >= 1
  uint64_t batch_size = 1;  // windows per batch of one rank
  uint64_t seed = 0;
  bool shuffle = true;  // false: each source's windows in corpus order
  TokenWindowing windowing = TokenWindowing::kAcross;
  int64_t pad_id = 0;  // kDocument: what fills a window past its document's end
  // Windows per epoch; 0: every source's windows once (their sum).
  uint64_t epoch_windows = 0;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  bool drop_last = false;  // a last partial global batch: dropped, or filled from the epoch's start
  bool verify = true;
  // How windows are read: through the page cache, or around it with
  // O_DIRECT. kAuto: the page cache when the sources' tokens fit in half of
  // the memory this job may use (dlfs/memory.h: MemAvailable and the memory
  // cgroup), as a corpus that will be read again and again should (2.7x the
  // windows per second of O_DIRECT once it is in memory, bench/tokens);
  // O_DIRECT for a larger corpus, which the page cache would only churn.
  // description() says which and why. engine.direct_io is set from it.
  enum class Reads : uint8_t { kAuto, kPageCache, kDirect };
  Reads reads = Reads::kAuto;
  EngineOptions engine;
  // Megatron-LM's order instead of the one above (docs/tokens.md,
  // "Megatron-compatible order"): the windows GPTDataset and
  // BlendedDataset give for the same seed (< 2^32), seq_len (>= 2), split
  // and weights, in their order; shuffle, windowing and epoch_windows do
  // not apply. Builds Megatron's per-window arrays at Open (as Megatron
  // does: 12 bytes per window, 4 per document per epoch), reading every
  // document's length. An epoch is the whole order; later epochs repeat it.
  struct MegatronOrder {
    bool enabled = false;
    std::string split = "1";   // --split, e.g. "969,30,1"
    uint32_t split_index = 0;  // 0 train, 1 valid, 2 test
    // The samples Megatron's builder asks of the split (train: train_iters
    // x global batch size); 0: one epoch of a single source, or every
    // window of the sources of a blend weighted by their lengths.
    uint64_t num_samples = 0;
    // The sources' weights are --data-path weights (a BlendedDataset even
    // for one source); false: a single source is a plain GPTDataset, and
    // several are blended by their lengths.
    bool weighted = false;
    double surplus = 0.005;  // --mid-level-dataset-surplus
    // Megatron keeps a last partial window only in the valid split with
    // drop_last_partial_validation_sequence=False; it is padded with pad_id.
    bool drop_last_partial = true;
  } megatron;
};

// Where a stream stands, to resume it: a few numbers plus one per source.
struct TokenStreamState {
  uint64_t epoch = 0;
  uint64_t position = 0;  // windows of the epoch consumed (the global stream's, all ranks)
  // Where the current weights took effect (a global stream position) and a
  // hash of them: a resume with other weights starts a new segment there.
  uint64_t segment_start = 0;
  uint64_t weights_hash = 0;
  uint64_t sources_hash = 0;     // of the sources' uuids, in order
  std::vector<uint64_t> counts;  // windows drawn from each source before this point
};

// What ReadBatch tells about each window of the batch.
struct TokenBatchInfo {
  uint64_t windows = 0;                // rows filled (batch_size)
  std::vector<uint64_t> positions;     // each row's position in the global stream
  std::vector<uint32_t> sources;       // each row's source
  std::vector<uint64_t> first_tokens;  // each row's first token in its source's stream
  // Document starts inside each row: row r's are starts[row_starts[r] ..
  // row_starts[r + 1]), offsets in (0, seq_len] of tokens where a document
  // begins (a row's first token begins its first run, not listed).
  std::vector<uint32_t> starts;
  std::vector<uint64_t> row_starts;
  // kDocument: tokens of each row that are the document's (the rest is pad).
  std::vector<uint32_t> lengths;
};

class TokenLoader {
 public:
  // Opens the sources (token volumes; InvalidArgument naming one that is
  // not, or that has no window of seq_len + 1 tokens) and checks the
  // options (InvalidArgument naming the bad one).
  static Result<std::unique_ptr<TokenLoader>> Open(const std::vector<TokenSource>& sources,
                                                   const TokenLoaderOptions& options);
  ~TokenLoader();

  uint64_t window_tokens() const;                    // seq_len + 1
  uint64_t batch_tokens() const;                     // batch_size × window_tokens()
  uint64_t windows_per_epoch() const;                // E
  std::span<const uint64_t> source_windows() const;  // each source's windows
  uint32_t token_width(uint32_t source) const;       // 2 or 4
  // "page cache (1.2 GB of tokens, half of what the job may use is 10 GB);
  // io_uring ...": how windows are read, and why.
  const std::string& description() const;
  // This rank's batches in an epoch read from its start.
  uint64_t batches_per_epoch() const;
  // ... and in the rest of an epoch from global position `position` (what
  // a resumed job reads of the epoch it resumes in).
  uint64_t batches_after(uint64_t position) const;

  // Reads this rank's batch `batch` of `epoch`, counted from global
  // position `start` of the epoch (0, or a resumed position), into `out`
  // (batch_tokens() values, row-major windows). REQUIRES: batch <
  // batches_after(start). IOError / Corruption naming the volume.
  Status ReadBatch(uint64_t epoch, uint64_t batch, std::span<int64_t> out, TokenBatchInfo* info,
                   uint64_t start = 0);
  Status ReadBatch(uint64_t epoch, uint64_t batch, std::span<int32_t> out, TokenBatchInfo* info,
                   uint64_t start = 0);

  // The state after `consumed` windows of `epoch` (global: every rank's).
  TokenStreamState StateAt(uint64_t epoch, uint64_t consumed) const;
  // Continues from `state`: the same stream when the weights are those it
  // was saved with; with other weights a new segment begins at its
  // position, each source's windows continuing after the ones it had drawn
  // (none read twice in a pass, none skipped). Sources may be appended
  // (they start at their first window); others changed: InvalidArgument.
  // Returns the position in state.epoch to read from.
  Result<uint64_t> Resume(const TokenStreamState& state);

 private:
  class Impl;
  explicit TokenLoader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dlfs
