#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "common/file_util.h"
#include "common/xoshiro.h"
#include "directory/token_checks.h"
#include "dlfs/directory.h"
#include "dlfs/memory.h"
#include "dlfs/sampler.h"
#include "dlfs/tokens.h"
#include "dlfs/volume.h"
#include "io/read_driver.h"
#include "tokens/blend.h"
#include "tokens/megatron_order.h"

namespace dlfs {

using tokens_internal::TokenBlend;

namespace {

uint64_t Mix(uint64_t h, uint64_t v) { return SplitMixOutput(h ^ (v + kSplitMixGamma)); }

uint64_t HashWeights(const std::vector<TokenSource>& sources) {
  uint64_t h = 0x746F6B656E73ull;  // "tokens"
  for (const TokenSource& s : sources) {
    uint64_t bits;
    std::memcpy(&bits, &s.weight, sizeof bits);
    h = Mix(h, bits);
  }
  return h;
}

uint64_t HashUuid(uint64_t h, const std::string& uuid) {
  for (char c : uuid) h = Mix(h, static_cast<unsigned char>(c));
  return h;
}

}  // namespace

class TokenLoader::Impl {
 public:
  struct Source {
    std::shared_ptr<Volume> volume;
    const SampleDirectory* dir = nullptr;
    uint32_t width = 0;
    uint64_t tokens = 0;
    uint64_t windows = 0;
    uint64_t stream_offset = 0;  // byte offset of token 0 in target 0
    uint64_t data_bytes = 0;
    uint64_t key = 0;  // of its window orders
    // The order of the latest pass drawn from (one bijection per pass).
    uint64_t pass = ~uint64_t{0};
    EpochPermutation order;
  };

  // One row's read: `bytes` of source `source` from stream byte `begin`,
  // landing at `offset` in the batch buffer, whose first `skip` bytes
  // precede the row's first token (alignment, chunk cover).
  struct Piece {
    uint32_t source;
    uint32_t row;         // of the batch
    uint64_t row_offset;  // where its tokens go in the row
    uint64_t first_token, tokens;
    uint64_t cover_begin, cover_end;  // stream bytes read (checked chunks)
    uint64_t file_begin, file_end;    // aligned, what the engine reads
    uint64_t buffer_offset;
    int64_t request = -1;  // its read, or -1 for an empty window (nothing to read)
  };

  TokenLoaderOptions options;
  std::vector<TokenSource> specs;
  std::vector<Source> sources;
  std::vector<uint64_t> source_windows;
  uint64_t epoch_windows = 0;
  TokenBlend blend;
  std::unique_ptr<IoEngine> engine;
  std::unique_ptr<io_internal::ReadDriver> driver;  // over `engine`
  uint32_t alignment = 1;
  // The segment: where the current weights took effect, and the windows
  // each source had given before it.
  uint64_t segment_start = 0;
  std::vector<uint64_t> segment_base;
  uint64_t weights_hash = 0, sources_hash = 0;

  // The batch's reads land here: page-aligned (what O_DIRECT needs), grown
  // to the largest batch seen.
  std::shared_ptr<std::byte> buffer;
  size_t buffer_size = 0;
  std::vector<Piece> pieces;
  std::vector<ReadRequest> requests;
  std::vector<Status> results;
  std::map<uint32_t, uint64_t> run_counts;

  uint64_t global_batch() const { return options.batch_size * options.world_size; }

  uint64_t BatchesAfter(uint64_t position) const {
    const uint64_t rest = position >= epoch_windows ? 0 : epoch_windows - position;
    const uint64_t g = global_batch();
    return options.drop_last ? rest / g : (rest + g - 1) / g;
  }

  // The window drawn `draw`-th from source s: its index among s's windows.
  uint64_t WindowOf(Source& s, uint64_t draw) {
    const uint64_t pass = draw / s.windows, k = draw % s.windows;
    if (!options.shuffle) return k;
    if (pass != s.pass) {
      s.order = EpochPermutation(s.windows, s.key, pass);
      s.pass = pass;
    }
    return s.order(k);
  }

  // Tokens [first, first + count) of source s that window `w` covers.
  Status WindowRange(const Source& s, uint64_t w, uint64_t* first, uint64_t* count) const {
    const uint64_t span = options.seq_len + 1;
    if (options.windowing == TokenWindowing::kAcross) {
      *first = w * options.seq_len;
      *count = span;
      return Status::Ok();
    }
    Result<uint64_t> begin = s.dir->DocumentStart(w);
    if (!begin.ok()) return begin.status();
    Result<uint64_t> end = s.dir->DocumentStart(w + 1);
    if (!end.ok()) return end.status();
    *first = *begin;
    *count = std::min(span, *end - *begin);
    return Status::Ok();
  }

  // The global stream positions of this rank's batch, as (position) list.
  void BatchPositions(uint64_t epoch, uint64_t batch, uint64_t start,
                      std::vector<uint64_t>* out) const {
    out->clear();
    const uint64_t base = epoch * epoch_windows;
    const uint64_t first = start + batch * global_batch() + options.rank * options.batch_size;
    for (uint64_t i = 0; i < options.batch_size; ++i) {
      uint64_t p = first + i;
      // A last partial global batch is filled from the epoch's start.
      if (p >= epoch_windows) p %= epoch_windows;
      out->push_back(base + p);
    }
  }

  // Draw index (windows of s drawn before) of stream position g, for the
  // positions of one batch in order: counts at each run's start, then
  // incremented along it.
  void Draws(const std::vector<uint64_t>& positions, std::vector<uint32_t>* src,
             std::vector<uint64_t>* draws) {
    src->resize(positions.size());
    draws->resize(positions.size());
    size_t i = 0;
    while (i < positions.size()) {
      size_t j = i + 1;
      while (j < positions.size() && positions[j] == positions[j - 1] + 1) ++j;
      // Run [i, j): consecutive positions from positions[i].
      run_counts.clear();
      const uint64_t g0 = positions[i] - segment_start;
      for (size_t k = i; k < j; ++k) {
        const uint32_t s = blend.SourceOf(g0 + (k - i));
        (*src)[k] = s;
        auto [it, fresh] = run_counts.try_emplace(s, 0);
        if (fresh) it->second = segment_base[s] + blend.CountOf(s, g0);
        (*draws)[k] = it->second++;
      }
      i = j;
    }
  }

  // Appends the read of tokens [first, first + count) of source `src` for
  // row `row` at `row_offset`, widened to the checked chunks around it.
  Status AddPiece(uint32_t src, uint32_t row, uint64_t row_offset, uint64_t first, uint64_t count,
                  uint64_t* buffer_bytes) {
    const Source& s = sources[src];
    Piece p{};
    p.source = src;
    p.row = row;
    p.row_offset = row_offset;
    p.first_token = first;
    p.tokens = count;
    const uint64_t b = first * s.width, e = (first + count) * s.width;
    if (count == 0) {
      p.cover_begin = p.cover_end = b;
    } else if (options.verify) {
      Result<tokens::ChunkRange> cover = tokens::CoveringChunks(*s.dir, first, count);
      if (!cover.ok()) return cover.status();
      p.cover_begin = cover->begin;
      p.cover_end = cover->end;
    } else {
      p.cover_begin = b;
      p.cover_end = e;
    }
    p.file_begin = (s.stream_offset + p.cover_begin) / alignment * alignment;
    p.file_end = (s.stream_offset + p.cover_end + alignment - 1) / alignment * alignment;
    if (count == 0) p.file_begin = p.file_end = 0;
    p.buffer_offset = *buffer_bytes;
    *buffer_bytes += p.file_end - p.file_begin;
    pieces.push_back(p);
    return Status::Ok();
  }

  // The pieces of row r: the window at stream position in.positions[r].
  Status PlanRow(uint32_t r, TokenBatchInfo& in, uint64_t* buffer_bytes) {
    const uint64_t span = options.seq_len + 1;
    if (megatron) {
      const uint64_t k = in.positions[r] % epoch_windows;
      uint32_t src = 0;
      uint64_t sample = k;
      if (megatron->blend) {
        src = megatron->blend->dataset(k);
        sample = megatron->blend->sample(k);
      }
      in.sources[r] = src;
      megatron->orders[src]->Window(sample, &scratch_pieces_);
      uint64_t at = 0;
      for (const tokens_internal::TokenPiece& tp : scratch_pieces_) {
        Result<uint64_t> start = sources[src].dir->DocumentStart(tp.document);
        if (!start.ok()) return start.status();
        const uint64_t count = std::min(tp.count, span - at);
        if (at == 0) in.first_tokens[r] = *start + tp.begin;
        if (Status st = AddPiece(src, r, at, *start + tp.begin, count, buffer_bytes); !st.ok()) {
          return st;
        }
        at += count;
      }
      in.lengths[r] = static_cast<uint32_t>(at);
      return Status::Ok();
    }
    Source& s = sources[in.sources[r]];
    uint64_t first = 0, count = 0;
    if (Status st = WindowRange(s, WindowOf(s, scratch_draws_[r]), &first, &count); !st.ok()) {
      return st;
    }
    in.first_tokens[r] = first;
    in.lengths[r] = static_cast<uint32_t>(count);
    return AddPiece(in.sources[r], r, 0, first, count, buffer_bytes);
  }

  template <typename T>
  Status Read(uint64_t epoch, uint64_t batch, std::span<T> out, TokenBatchInfo* info,
              uint64_t start) {
    const uint64_t span = options.seq_len + 1;
    if (out.size() < options.batch_size * span) {
      return Status::InvalidArgument("ReadBatch: the output holds " + std::to_string(out.size()) +
                                     " tokens, a batch " +
                                     std::to_string(options.batch_size * span));
    }
    if (batch >= BatchesAfter(start)) {
      return Status::InvalidArgument("ReadBatch: batch " + std::to_string(batch) +
                                     " of an epoch of " + std::to_string(BatchesAfter(start)));
    }
    TokenBatchInfo local;
    TokenBatchInfo& in = info ? *info : local;
    BatchPositions(epoch, batch, start, &in.positions);
    const size_t rows = in.positions.size();
    if (megatron) {
      in.sources.assign(rows, 0);
    } else {
      Draws(in.positions, &in.sources, &scratch_draws_);
    }
    in.windows = rows;
    in.first_tokens.assign(rows, 0);
    in.lengths.assign(rows, 0);
    pieces.clear();
    uint64_t buffer_bytes = 0;
    for (uint32_t r = 0; r < rows; ++r) {
      if (Status st = PlanRow(r, in, &buffer_bytes); !st.ok()) return st;
    }
    if (buffer_bytes > buffer_size) {
      buffer = AllocateLarge(buffer_bytes);
      buffer_size = buffer ? buffer_bytes : 0;
    }
    if (buffer == nullptr && buffer_bytes > 0) {
      return Status::IOError(
          "cannot allocate " + std::to_string(buffer_bytes) + " bytes for a batch of windows",
          ENOMEM);
    }
    requests.clear();
    for (Piece& p : pieces) {
      if (p.file_end == p.file_begin) continue;
      p.request = static_cast<int64_t>(requests.size());
      requests.push_back(ReadRequest{p.source, p.file_begin, p.file_end - p.file_begin,
                                     buffer.get() + p.buffer_offset, ReadRequest::kNoSlot});
    }
    results.assign(requests.size(), Status::Ok());
    if (!requests.empty()) {
      if (Status st = driver->Read(requests, &results); !st.ok()) return st;
    }
    for (const Piece& p : pieces) {
      const Source& s = sources[p.source];
      if (p.request >= 0 && !results[p.request].ok()) return results[p.request];
      const std::byte* at = buffer.get() + p.buffer_offset;
      const uint64_t lead = s.stream_offset + p.cover_begin - p.file_begin;
      if (options.verify && p.tokens > 0) {
        const std::span<const std::byte> cover(at + lead, p.cover_end - p.cover_begin);
        if (Status st = tokens::CheckTokenRange(*s.dir, p.cover_begin, cover, s.volume->path());
            !st.ok()) {
          return st;
        }
      }
      const std::byte* tokens = at + lead + (p.first_token * s.width - p.cover_begin);
      T* dst = out.data() + p.row * span + p.row_offset;
      if (s.width == 2) {
        const auto* v = reinterpret_cast<const uint16_t*>(tokens);
        for (uint64_t t = 0; t < p.tokens; ++t) dst[t] = static_cast<T>(v[t]);
      } else {
        for (uint64_t t = 0; t < p.tokens; ++t) {
          uint32_t v;
          std::memcpy(&v, tokens + 4 * t, 4);
          dst[t] = static_cast<T>(v);
        }
      }
    }
    in.starts.clear();
    in.row_starts.assign(1, 0);
    size_t next = 0;
    for (uint32_t r = 0; r < rows; ++r) {
      T* row = out.data() + r * span;
      for (uint64_t t = in.lengths[r]; t < span; ++t) row[t] = static_cast<T>(options.pad_id);
      // The row's pieces are pieces[next, end).
      size_t end = next;
      while (end < pieces.size() && pieces[end].row == r) ++end;
      if (megatron) {
        // Each piece is (part of) one document: documents begin where pieces do.
        for (size_t k = next + 1; k < end; ++k) {
          const uint64_t o = pieces[k].row_offset;
          if (o > 0 && o < in.lengths[r] &&
              (in.starts.size() == in.row_starts.back() || in.starts.back() < o)) {
            in.starts.push_back(static_cast<uint32_t>(o));
          }
        }
      } else if (options.windowing == TokenWindowing::kAcross) {
        if (Status st = DocumentStarts(sources[pieces[next].source], pieces[next], &in.starts);
            !st.ok()) {
          return st;
        }
      }
      next = end;
      in.row_starts.push_back(in.starts.size());
    }
    return Status::Ok();
  }

  // Where documents begin inside a window, as offsets in (0, window).
  Status DocumentStarts(const Source& s, const Piece& p, std::vector<uint32_t>* out) const {
    const uint64_t end = p.first_token + p.tokens;
    Result<uint64_t> d = s.dir->DocumentAt(p.first_token);
    if (!d.ok()) return d.status();
    uint64_t doc = *d + 1;
    uint64_t last = p.first_token;
    while (doc < s.dir->size()) {
      Result<uint64_t> begin = s.dir->DocumentStart(doc);
      if (!begin.ok()) return begin.status();
      if (*begin >= end) break;
      if (*begin > last) {
        out->push_back(static_cast<uint32_t>(*begin - p.first_token));
        last = *begin;
      }
      ++doc;
    }
    return Status::Ok();
  }

  // Megatron's datasets over the sources, composed as its
  // BlendedMegatronDatasetBuilder composes them for one split.
  Status BuildMegatron(const std::vector<double>& weights) {
    using namespace tokens_internal;
    const TokenLoaderOptions::MegatronOrder& mo = options.megatron;
    if (options.seed > 0xFFFFFFFFull) {
      return Status::InvalidArgument("Megatron's seed is < 2^32, not " +
                                     std::to_string(options.seed));
    }
    if (mo.split_index > 2) {
      return Status::InvalidArgument("split_index is 0 (train), 1 (valid) or 2 (test)");
    }
    auto m = std::make_unique<Megatron>();
    m->lengths.resize(sources.size());
    std::vector<MegatronSplit> ranges;
    for (size_t k = 0; k < sources.size(); ++k) {
      const SampleDirectory& dir = *sources[k].dir;
      std::vector<uint64_t>& lengths = m->lengths[k];
      lengths.resize(dir.size());
      Result<uint64_t> prev = dir.DocumentStart(0);
      if (!prev.ok()) return prev.status();
      for (uint64_t d = 0; d < dir.size(); ++d) {
        Result<uint64_t> next = dir.DocumentStart(d + 1);
        if (!next.ok()) return next.status();
        lengths[d] = *next - *prev;
        prev = next;
      }
      auto splits = MegatronSplits(mo.split, dir.size());
      if (!splits.ok()) return splits.status();
      if (!(*splits)[mo.split_index]) {
        return Status::InvalidArgument("split \"" + mo.split + "\" gives split " +
                                       std::to_string(mo.split_index) + " no documents of " +
                                       specs[k].path);
      }
      ranges.push_back(*(*splits)[mo.split_index]);
    }
    MegatronGptOptions g;
    g.seq_len = options.seq_len;
    g.seed = static_cast<uint32_t>(options.seed);
    g.add_extra_token = true;
    g.drop_last_partial = mo.drop_last_partial;
    auto build = [&](size_t k, uint64_t samples) -> Status {
      g.num_samples = samples;
      auto order = MegatronGptOrder::Build(m->lengths[k], ranges[k], g);
      if (!order.ok()) {
        return Status(order.status().code(), specs[k].path + ": " + order.status().message());
      }
      m->orders.push_back(std::make_unique<MegatronGptOrder>(std::move(*order)));
      return Status::Ok();
    };
    if (mo.weighted) {
      if (mo.num_samples == 0) {
        return Status::InvalidArgument(
            "a weighted Megatron blend needs num_samples (Megatron's weights need sizes)");
      }
      auto asked = MegatronComponentSizes(weights, mo.num_samples, mo.surplus);
      if (!asked.ok()) return asked.status();
      for (size_t k = 0; k < sources.size(); ++k) {
        if (Status st = build(k, (*asked)[k]); !st.ok()) return st;
      }
      auto b = BuildMegatronBlend(weights, mo.num_samples);
      if (!b.ok()) return b.status();
      m->blend = std::move(*b);
    } else if (sources.size() == 1) {
      if (Status st = build(0, mo.num_samples); !st.ok()) return st;
    } else {
      std::vector<uint64_t> sizes;
      for (size_t k = 0; k < sources.size(); ++k) {
        if (Status st = build(k, 0); !st.ok()) return st;
        sizes.push_back(m->orders.back()->size());
      }
      auto b = BuildMegatronLengthBlend(
          sizes, mo.num_samples ? std::optional<uint64_t>(mo.num_samples) : std::nullopt);
      if (!b.ok()) return b.status();
      m->blend = std::move(*b);
    }
    for (size_t k = 0; k < sources.size(); ++k) {
      const uint64_t have = m->orders[k]->size();
      if (m->blend && m->blend->counts()[k] > have) {
        return Status::InvalidArgument(specs[k].path + ": the blend takes " +
                                       std::to_string(m->blend->counts()[k]) +
                                       " windows of it, its order has " + std::to_string(have) +
                                       " (Megatron: \"oversamples\")");
      }
      sources[k].windows = have;
      source_windows[k] = have;
    }
    megatron = std::move(m);
    return Status::Ok();
  }

  std::string description;
  std::vector<uint64_t> scratch_draws_;
  std::vector<tokens_internal::TokenPiece> scratch_pieces_;

  // The Megatron-compatible order (TokenLoaderOptions::megatron): each
  // source's GPTDataset order, and the blend over them if there is one.
  struct Megatron {
    std::vector<std::vector<uint64_t>> lengths;  // each source's document token counts
    std::vector<std::unique_ptr<tokens_internal::MegatronGptOrder>> orders;
    std::optional<tokens_internal::MegatronBlend> blend;
  };
  std::unique_ptr<Megatron> megatron;
};

Result<std::unique_ptr<TokenLoader>> TokenLoader::Open(const std::vector<TokenSource>& sources,
                                                       const TokenLoaderOptions& options) {
  if (sources.empty()) return Status::InvalidArgument("a token loader needs at least one volume");
  if (options.seq_len == 0) return Status::InvalidArgument("seq_len must be >= 1");
  if (options.seq_len >= (uint64_t{1} << 31)) {
    return Status::InvalidArgument("seq_len " + std::to_string(options.seq_len) +
                                   " is past 2^31 - 1 tokens");
  }
  if (options.batch_size == 0) return Status::InvalidArgument("batch_size must be >= 1");
  if (options.world_size == 0 || options.rank >= options.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(options.rank) + " of world size " +
                                   std::to_string(options.world_size));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->specs = sources;
  std::vector<double> weights;
  std::vector<std::string> paths;
  impl->sources_hash = 0x736F7572636573ull;  // "sources"
  for (size_t k = 0; k < sources.size(); ++k) {
    const TokenSource& spec = sources[k];
    Result<std::shared_ptr<Volume>> volume = Volume::Open(spec.path);
    if (!volume.ok()) return volume.status();
    Impl::Source s;
    s.volume = *volume;
    s.dir = &s.volume->directory();
    s.width = s.dir->token_width();
    if (s.width == 0) {
      return Status::InvalidArgument(
          spec.path +
          " is not a token volume (pack a Megatron .bin/.idx, a .npy or flat token file, "
          "or write documents with dlfs.Writer(tokens=...); docs/tokens.md)");
    }
    s.tokens = s.dir->token_count();
    s.stream_offset = s.dir->token_stream_offset();
    s.data_bytes = s.tokens * s.width;
    s.windows = options.windowing == TokenWindowing::kAcross
                    ? (s.tokens > options.seq_len ? (s.tokens - 1) / options.seq_len : 0)
                    : s.dir->size();
    if (s.windows == 0 && !options.megatron.enabled) {
      return Status::InvalidArgument(
          spec.path + " has " + std::to_string(s.tokens) +
          " tokens: not one window of seq_len + 1 = " + std::to_string(options.seq_len + 1));
    }
    s.key = Mix(options.seed, k + 1);
    impl->source_windows.push_back(s.windows);
    weights.push_back(spec.weight);
    paths.push_back(s.volume->path());
    impl->sources_hash = HashUuid(impl->sources_hash, s.volume->info().uuid);
    impl->sources.push_back(std::move(s));
  }
  if (options.megatron.enabled) {
    if (Status st = impl->BuildMegatron(weights); !st.ok()) return st;
  }
  Result<TokenBlend> blend = TokenBlend::Create(weights, Mix(options.seed, 0));
  if (!blend.ok()) return blend.status();
  impl->blend = std::move(*blend);
  impl->weights_hash = HashWeights(sources);
  impl->segment_base.assign(sources.size(), 0);
  impl->epoch_windows = options.epoch_windows;
  if (impl->megatron) {
    impl->epoch_windows =
        impl->megatron->blend ? impl->megatron->blend->size() : impl->megatron->orders[0]->size();
  } else if (impl->epoch_windows == 0) {
    for (uint64_t w : impl->source_windows) impl->epoch_windows += w;
  }
  if (impl->BatchesAfter(0) == 0) {
    return Status::InvalidArgument("an epoch of " + std::to_string(impl->epoch_windows) +
                                   " windows has no global batch of " +
                                   std::to_string(impl->global_batch()) + " with drop_last");
  }
  EngineOptions engine_options = options.engine;
  uint64_t token_bytes = 0;
  for (const Impl::Source& s : impl->sources) token_bytes += s.data_bytes;
  std::string why;
  switch (options.reads) {
    case TokenLoaderOptions::Reads::kPageCache:
      engine_options.direct_io = false;
      why = "page cache (asked)";
      break;
    case TokenLoaderOptions::Reads::kDirect:
      engine_options.direct_io = true;
      why = "O_DIRECT (asked)";
      break;
    case TokenLoaderOptions::Reads::kAuto: {
      const uint64_t usable = ReadMemoryLimit().usable();
      engine_options.direct_io = token_bytes > usable / 2;
      why = std::string(engine_options.direct_io ? "O_DIRECT" : "page cache") + " (" +
            HumanBytes(static_cast<double>(token_bytes)) + " of tokens, " +
            (engine_options.direct_io ? "more" : "not more") + " than half of the " +
            HumanBytes(static_cast<double>(usable)) + " this job may use)";
      break;
    }
  }
  Result<std::unique_ptr<IoEngine>> engine = CreateEngine(paths, engine_options);
  if (!engine.ok()) return engine.status();
  impl->engine = std::move(*engine);
  impl->driver = std::make_unique<io_internal::ReadDriver>(*impl->engine);
  impl->description = why + "; " + impl->engine->description();
  impl->alignment = std::max<uint32_t>(1, impl->engine->alignment());
  return std::unique_ptr<TokenLoader>(new TokenLoader(std::move(impl)));
}

TokenLoader::TokenLoader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TokenLoader::~TokenLoader() = default;

uint64_t TokenLoader::window_tokens() const { return impl_->options.seq_len + 1; }
uint64_t TokenLoader::batch_tokens() const { return impl_->options.batch_size * window_tokens(); }
uint64_t TokenLoader::windows_per_epoch() const { return impl_->epoch_windows; }
std::span<const uint64_t> TokenLoader::source_windows() const { return impl_->source_windows; }
uint32_t TokenLoader::token_width(uint32_t source) const { return impl_->sources[source].width; }
const std::string& TokenLoader::description() const { return impl_->description; }
uint64_t TokenLoader::batches_per_epoch() const { return impl_->BatchesAfter(0); }
uint64_t TokenLoader::batches_after(uint64_t position) const {
  return impl_->BatchesAfter(position);
}

Status TokenLoader::ReadBatch(uint64_t epoch, uint64_t batch, std::span<int64_t> out,
                              TokenBatchInfo* info, uint64_t start) {
  return impl_->Read(epoch, batch, out, info, start);
}
Status TokenLoader::ReadBatch(uint64_t epoch, uint64_t batch, std::span<int32_t> out,
                              TokenBatchInfo* info, uint64_t start) {
  return impl_->Read(epoch, batch, out, info, start);
}

TokenStreamState TokenLoader::StateAt(uint64_t epoch, uint64_t consumed) const {
  const Impl& m = *impl_;
  TokenStreamState s;
  s.epoch = epoch;
  s.position = std::min(consumed, m.epoch_windows);
  s.segment_start = m.segment_start;
  s.weights_hash = m.weights_hash;
  s.sources_hash = m.sources_hash;
  s.counts.resize(m.sources.size());
  const uint64_t g = epoch * m.epoch_windows + s.position;
  for (uint32_t k = 0; k < m.sources.size(); ++k) {
    s.counts[k] =
        m.segment_base[k] + (g > m.segment_start ? m.blend.CountOf(k, g - m.segment_start) : 0);
  }
  return s;
}

Result<uint64_t> TokenLoader::Resume(const TokenStreamState& state) {
  Impl& m = *impl_;
  if (state.position > m.epoch_windows) {
    return Status::InvalidArgument("cannot resume at window " + std::to_string(state.position) +
                                   " of an epoch of " + std::to_string(m.epoch_windows));
  }
  if (state.counts.size() > m.sources.size()) {
    return Status::InvalidArgument("cannot resume: the state has " +
                                   std::to_string(state.counts.size()) + " sources, this loader " +
                                   std::to_string(m.sources.size()) +
                                   " (sources may be appended, not removed)");
  }
  // The sources the state knew must be the first ones here, in order.
  uint64_t prefix = 0x736F7572636573ull;
  for (size_t k = 0; k < state.counts.size(); ++k) {
    prefix = HashUuid(prefix, m.sources[k].volume->info().uuid);
  }
  if (prefix != state.sources_hash) {
    return Status::InvalidArgument(
        "cannot resume: the state's sources are not this loader's first " +
        std::to_string(state.counts.size()) +
        " volumes (same volumes, same order; new ones may only be appended)");
  }
  const uint64_t g = state.epoch * m.epoch_windows + state.position;
  if (m.megatron &&
      (state.weights_hash != m.weights_hash || state.counts.size() != m.sources.size())) {
    return Status::InvalidArgument(
        "cannot resume Megatron's order with other weights or sources: it is another order");
  }
  const bool same = state.weights_hash == m.weights_hash &&
                    state.counts.size() == m.sources.size() && state.segment_start <= g;
  m.segment_base.assign(m.sources.size(), 0);
  if (same) {
    // The same segment continues: its base is what was drawn before it.
    for (uint32_t k = 0; k < m.sources.size(); ++k) {
      const uint64_t in = m.blend.CountOf(k, g - state.segment_start);
      if (in > state.counts[k]) {
        return Status::InvalidArgument("cannot resume: the state's counts do not fit its stream");
      }
      m.segment_base[k] = state.counts[k] - in;
    }
    m.segment_start = state.segment_start;
  } else {
    // Other weights (or sources appended): a new segment from here.
    for (size_t k = 0; k < state.counts.size(); ++k) m.segment_base[k] = state.counts[k];
    m.segment_start = g;
  }
  return state.position;
}

}  // namespace dlfs
