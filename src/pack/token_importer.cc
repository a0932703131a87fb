// Raw token files (dlfs/pack.h's tokens source: a .npy array or a headerless
// file of one dtype), cut into documents by a lengths file or an
// end-of-document id, packed into token volumes (docs/format.md §10.11).
// Megatron-LM datasets are megatron_importer.cc's; what both share is
// token_source.h.
//
// Nothing is kept per document: the lengths are read in batches, the tokens
// in pieces of a few MiB, converted to the volume's width where the
// source's differs, and handed to VolumeBuilder::AddBatch a run of whole
// documents at a time (a document larger than a piece streams through
// BeginSample/Append). Every count and offset is 64-bit.
#include "pack/token_source.h"

namespace dlfs::pack_internal {

namespace token_source {

namespace {

// ---- Raw token files

struct TokenFile {
  SourceFile file;
  Dtype dtype = Dtype::kU16;
  uint64_t data_offset = 0;
  uint64_t count = 0;
};

// The dtype of a .npy 'descr' ('<u2', '|u1', ...).
Result<Dtype> NpyDtype(const std::string& descr, const std::string& path) {
  static const std::pair<const char*, Dtype> kKnown[] = {
      {"|u1", Dtype::kU8},  {"<u1", Dtype::kU8},  {"|i1", Dtype::kI8},  {"<i1", Dtype::kI8},
      {"<i2", Dtype::kI16}, {"<u2", Dtype::kU16}, {"<i4", Dtype::kI32}, {"<u4", Dtype::kU32},
      {"<i8", Dtype::kI64}, {"<u8", Dtype::kU64}};
  for (const auto& [name, d] : kKnown) {
    if (descr == name) return d;
  }
  if (descr.size() >= 2 && descr[1] == 'f') {
    const std::string bits = std::to_string(8 * std::atoi(descr.c_str() + 2));
    return Status::InvalidArgument(path + ": float" + bits + " tokens are not token ids");
  }
  if (!descr.empty() && descr[0] == '>') {
    return Status::NotSupported(path + ": big-endian tokens ('" + descr +
                                "'); save them little-endian (astype('<u2') or '<u4')");
  }
  return Status::InvalidArgument(path + ": dtype '" + descr +
                                 "' is not an integer dtype of token ids");
}

// The value of `key` in a .npy header's dict ("'descr': '<u2'" -> "'<u2'").
std::string NpyField(const std::string& header, const std::string& key) {
  const size_t k = header.find("'" + key + "'");
  if (k == header.npos) return "";
  size_t v = header.find(':', k);
  if (v == header.npos) return "";
  ++v;
  while (v < header.size() && header[v] == ' ') ++v;
  size_t end = v;
  if (end < header.size() && header[end] == '(') {
    end = header.find(')', end);
    return end == header.npos ? "" : header.substr(v, end + 1 - v);
  }
  if (end < header.size() && header[end] == '\'') {
    end = header.find('\'', end + 1);
    return end == header.npos ? "" : header.substr(v + 1, end - v - 1);
  }
  while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
  return header.substr(v, end - v);
}

// A 1-D .npy array: its dtype, where its data starts and its length.
Result<TokenFile> OpenNpy(const std::string& path) {
  TokenFile t;
  DLFS_ASSIGN_OR_RETURN(t.file, SourceFile::Open(path));
  unsigned char pre[12];
  if (t.file.size() < 10) return Status::Corruption(path + ": too small for a .npy header");
  DLFS_RETURN_IF_ERROR(t.file.Read(pre, std::min<uint64_t>(12, t.file.size()), 0, "the header"));
  if (std::memcmp(pre, "\x93NUMPY", 6) != 0) {
    return Status::Corruption(path + ": not a .npy file (bad magic)");
  }
  const unsigned major = pre[6];
  uint64_t header_len = 0, at = 0;
  if (major == 1) {
    header_len = pre[8] | (uint64_t{pre[9]} << 8);
    at = 10;
  } else if (major == 2 || major == 3) {
    header_len =
        pre[8] | (uint64_t{pre[9]} << 8) | (uint64_t{pre[10]} << 16) | (uint64_t{pre[11]} << 24);
    at = 12;
  } else {
    return Status::NotSupported(path + ": .npy format version " + std::to_string(major));
  }
  if (header_len > (1u << 20)) return Status::Corruption(path + ": implausible .npy header");
  std::string header(header_len, '\0');
  DLFS_RETURN_IF_ERROR(t.file.Read(header.data(), header_len, at, "the header"));
  const std::string descr = NpyField(header, "descr");
  const std::string fortran = NpyField(header, "fortran_order");
  const std::string shape = NpyField(header, "shape");
  if (descr.empty() || shape.empty()) {
    return Status::Corruption(path + ": .npy header without descr or shape: " + header);
  }
  DLFS_ASSIGN_OR_RETURN(t.dtype, NpyDtype(descr, path));
  // "(N,)": one dimension.
  uint64_t n = 0;
  size_t digits = 0;
  size_t i = 1;
  while (i < shape.size() && shape[i] >= '0' && shape[i] <= '9') {
    n = n * 10 + static_cast<uint64_t>(shape[i] - '0');
    ++i;
    ++digits;
  }
  while (i < shape.size() && shape[i] == ' ') ++i;
  if (digits == 0 || digits > 19 || i >= shape.size() || shape[i] != ',' ||
      shape.find_first_of("0123456789", i) != shape.npos) {
    return Status::InvalidArgument(path + ": an array of shape " + shape +
                                   "; token ids are a 1-D array");
  }
  (void)fortran;  // irrelevant for one dimension
  t.data_offset = at + header_len;
  const uint64_t room = t.file.size() - std::min(t.file.size(), t.data_offset);
  if (n > room / SizeOf(t.dtype) || n * SizeOf(t.dtype) != room) {
    return Status::Corruption(path + ": its header says " + std::to_string(n) + " " +
                              NameOf(t.dtype) + " values, the file holds " + std::to_string(room) +
                              " bytes after the header");
  }
  t.count = n;
  return t;
}

Result<TokenFile> OpenTokenFile(const std::string& path, const std::string& token_dtype) {
  if (EndsWith(path, ".npy")) return OpenNpy(path);
  if (token_dtype.empty()) {
    return Status::InvalidArgument(path +
                                   ": a flat binary file of tokens needs the token_dtype "
                                   "option (uint16 or uint32): its dtype is not recorded");
  }
  TokenFile t;
  DLFS_ASSIGN_OR_RETURN(const uint32_t w, ParseTokenDtype(token_dtype));
  t.dtype = w == 2 ? Dtype::kU16 : Dtype::kU32;
  DLFS_ASSIGN_OR_RETURN(t.file, SourceFile::Open(path));
  if (t.file.size() % w != 0) {
    return Status::Corruption(path + ": " + std::to_string(t.file.size()) +
                              " bytes are not whole " + token_dtype + " tokens");
  }
  t.count = t.file.size() / w;
  return t;
}

// Document lengths from a .npy array or a text file (one per line), read
// in batches.
class LengthsReader {
 public:
  static Result<LengthsReader> Open(const std::string& path) {
    LengthsReader r;
    r.path_ = path;
    if (EndsWith(path, ".npy")) {
      DLFS_ASSIGN_OR_RETURN(TokenFile t, OpenNpy(path));
      r.npy_ = true;
      r.file_ = std::move(t.file);
      r.dtype_ = t.dtype;
      r.offset_ = t.data_offset;
      r.count_ = t.count;
    } else {
      DLFS_ASSIGN_OR_RETURN(r.file_, SourceFile::Open(path));
    }
    return r;
  }
  // The count when known in advance (.npy), else 0.
  uint64_t known_count() const { return npy_ ? count_ : 0; }

  // Up to `max` more lengths into *out (none at the end).
  Status Next(uint64_t max, std::vector<uint64_t>* out) {
    out->clear();
    if (npy_) {
      const uint64_t n = std::min(max, count_ - done_);
      const uint32_t s = SizeOf(dtype_);
      buf_.Reserve(n * s);
      DLFS_RETURN_IF_ERROR(file_.Read(buf_.data(), n * s, offset_ + done_ * s, "lengths"));
      out->resize(n);
      const uint64_t bad = ConvertTo(dtype_, buf_.data(), n, out->data());
      if (bad < n) {
        return Status::InvalidArgument(path_ + ": length " + std::to_string(done_ + bad) + " is " +
                                       ValueAt(dtype_, buf_.data(), bad));
      }
      done_ += n;
      return Status::Ok();
    }
    // Text: unsigned integers, one per line (blank lines and '\r' allowed).
    while (out->size() < max) {
      if (pos_ == text_.size()) {
        if (at_ == file_.size()) break;
        const uint64_t n = std::min<uint64_t>(1u << 20, file_.size() - at_);
        text_.resize(n);
        DLFS_RETURN_IF_ERROR(file_.Read(text_.data(), n, at_, "lengths"));
        at_ += n;
        pos_ = 0;
      }
      const char c = text_[pos_++];
      if (c >= '0' && c <= '9') {
        if (value_ > (std::numeric_limits<uint64_t>::max() - 9) / 10) {
          return Status::InvalidArgument(path_ + ": line " + std::to_string(line_) +
                                         ": a length too large");
        }
        value_ = value_ * 10 + static_cast<uint64_t>(c - '0');
        digits_ = true;
      } else if (c == '\n') {
        EndLine(out);
      } else if (c != '\r' && c != ' ' && c != '\t') {
        return Status::InvalidArgument(path_ + ": line " + std::to_string(line_) + ": '" +
                                       std::string(1, c) +
                                       "' in a document length (one unsigned integer per line)");
      }
    }
    if (out->size() < max && at_ == file_.size() && pos_ == text_.size()) EndLine(out);
    return Status::Ok();
  }

 private:
  void EndLine(std::vector<uint64_t>* out) {
    if (digits_) out->push_back(value_);
    value_ = 0;
    digits_ = false;
    ++line_;
  }

  std::string path_;
  SourceFile file_;
  bool npy_ = false;
  Dtype dtype_ = Dtype::kU64;
  uint64_t offset_ = 0, count_ = 0, done_ = 0;
  Buffer buf_;
  std::string text_;
  uint64_t at_ = 0, pos_ = 0, value_ = 0, line_ = 1;
  bool digits_ = false;
};

// Cuts the tokens at each end-of-document token (kept at its document's
// end); the tokens after the last one are the last document.
Status ImportByEod(const TokenFile& t, TokenReader& reader, uint64_t eod, PackContext& ctx) {
  const uint32_t w = reader.width();
  if (eod > (w == 2 ? 0xFFFFull : 0xFFFFFFFFull)) {
    return Status::InvalidArgument(t.file.path() + ": end-of-document id " + std::to_string(eod) +
                                   " is not a uint" + std::to_string(8 * w) +
                                   " token id, so no token is one");
  }
  VolumeBuilder& b = ctx.builder();
  const uint64_t per = (4u << 20) / 8;  // tokens per piece: <= 4 MiB of ids
  std::vector<uint64_t> lengths;
  bool open = false;  // a document begun in an earlier piece
  for (uint64_t first = 0; first < t.count; first += per) {
    const uint64_t n = std::min(per, t.count - first);
    DLFS_ASSIGN_OR_RETURN(const std::span<const std::byte> ids,
                          reader.Read(first, n, "tokens " + std::to_string(first)));
    auto is_eod = [&](uint64_t i) {
      if (w == 2) return reinterpret_cast<const uint16_t*>(ids.data())[i] == eod;
      return reinterpret_cast<const uint32_t*>(ids.data())[i] == eod;
    };
    uint64_t start = 0;  // where the current document starts in this piece
    uint64_t batch_start = 0;
    lengths.clear();
    for (uint64_t i = 0; i < n; ++i) {
      if (!is_eod(i)) continue;
      if (open) {
        DLFS_RETURN_IF_ERROR(b.Append(ids.subspan(0, (i + 1) * w)));
        DLFS_RETURN_IF_ERROR(b.EndSample());
        open = false;
        batch_start = i + 1;
      } else {
        lengths.push_back((i + 1 - start) * w);
      }
      start = i + 1;
    }
    if (open) {
      DLFS_RETURN_IF_ERROR(b.Append(ids));
    } else {
      DLFS_RETURN_IF_ERROR(
          b.AddBatch(ids.subspan(batch_start * w, (start - batch_start) * w), lengths, {}));
      if (start < n) {
        DLFS_RETURN_IF_ERROR(b.BeginSample(""));
        open = true;
        DLFS_RETURN_IF_ERROR(b.Append(ids.subspan(start * w)));
      }
    }
    DLFS_RETURN_IF_ERROR(ctx.Tick());
  }
  if (open) DLFS_RETURN_IF_ERROR(b.EndSample());
  return Status::Ok();
}

}  // namespace

Result<uint32_t> TokenWidthOf(const std::string& source, SourceKind kind,
                              const PackOptions& options) {
  if (!options.token_dtype.empty() && !(kind == SourceKind::kTokens && !EndsWith(source, ".npy"))) {
    return ParseTokenDtype(options.token_dtype);  // the volume's, as asked
  }
  if (kind == SourceKind::kMegatron) return token_source::MegatronWidth(source);
  DLFS_ASSIGN_OR_RETURN(const TokenFile t, OpenTokenFile(source, options.token_dtype));
  if (!options.token_dtype.empty()) return ParseTokenDtype(options.token_dtype);
  return ScanWidth(t.file, t.dtype, t.data_offset, t.count);
}

Status ImportTokenFile(const std::string& source, uint32_t width, PackContext& ctx) {
  const PackOptions& o = ctx.options();
  if (o.lengths.empty() == !o.eod.has_value()) {
    return Status::InvalidArgument(
        source + ": " +
        (o.lengths.empty() ? std::string("tokens need the lengths option (a file of document "
                                         "lengths) or the eod option (the end-of-document id) "
                                         "to be cut into documents")
                           : std::string("give the lengths option or the eod option, not both")));
  }
  DLFS_ASSIGN_OR_RETURN(const TokenFile t, OpenTokenFile(source, o.token_dtype));
  ctx.BeginSource(source);
  TokenReader reader(t.file, t.dtype, t.data_offset, width);
  if (o.eod) return ImportByEod(t, reader, *o.eod, ctx);
  DLFS_ASSIGN_OR_RETURN(LengthsReader lengths, LengthsReader::Open(o.lengths));
  if (ctx.wants_progress()) ctx.set_total_samples(lengths.known_count());
  DocumentWriter writer(ctx, reader, source + ": document");
  std::vector<uint64_t> batch;
  uint64_t token = 0;
  uint64_t documents = 0;
  while (true) {
    DLFS_RETURN_IF_ERROR(lengths.Next(kSequenceBatch, &batch));
    if (batch.empty()) break;
    const uint64_t first = token;
    for (const uint64_t len : batch) {
      if (len > t.count - token) {
        return Status::InvalidArgument(o.lengths + ": the lengths sum past the " +
                                       std::to_string(t.count) + " tokens of " + source +
                                       " (at length " + std::to_string(documents) + ")");
      }
      if (len * width > kMaxDocumentBytes) {
        return Status::InvalidArgument(o.lengths + ": length " + std::to_string(documents) +
                                       " is " + std::to_string(len) +
                                       " tokens: a document holds at most 4 GiB - 1 bytes");
      }
      token += len;
      ++documents;
    }
    DLFS_RETURN_IF_ERROR(writer.Add(first, batch, {}));
  }
  if (token != t.count) {
    return Status::InvalidArgument(o.lengths + ": the lengths sum to " + std::to_string(token) +
                                   " tokens, but " + source + " holds " + std::to_string(t.count));
  }
  return Status::Ok();
}

}  // namespace token_source

Result<uint32_t> TokenWidth(const std::string& source, SourceKind kind,
                            const PackOptions& options) {
  return token_source::TokenWidthOf(source, kind, options);
}

Status ImportTokens(const std::string& source, uint32_t width, PackContext& ctx) {
  return token_source::ImportTokenFile(source, width, ctx);
}

}  // namespace dlfs::pack_internal
