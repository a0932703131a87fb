// Token corpora (dlfs/pack.h's megatron and tokens sources): Megatron-LM
// indexed datasets and raw token files, packed into token volumes
// (docs/format.md §10.11).
//
// Nothing is kept per document: the .idx is read in batches of sequences,
// the tokens in pieces of a few MiB, converted to the volume's width where
// the source's differs, and handed to VolumeBuilder::AddBatch a run of
// whole documents at a time (a document larger than a piece streams through
// BeginSample/Append). Every count and offset is 64-bit, and every claim
// of a header is checked against the files' sizes before it sizes
// anything.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/file_util.h"
#include "pack/importer.h"

namespace dlfs::pack_internal {

namespace {

// Tokens are read and converted in pieces of this many source bytes.
constexpr uint64_t kPiece = 16u << 20;
// Sequences of a .idx read per batch.
constexpr uint64_t kSequenceBatch = 1u << 16;
// A document is at most this many bytes (a sample's limit).
constexpr uint64_t kMaxDocumentBytes = 0xFFFFFFFFull;

// The integer dtypes token ids come in.
enum class Dtype { kU8, kI8, kI16, kU16, kI32, kU32, kI64, kU64 };

uint32_t SizeOf(Dtype d) {
  switch (d) {
    case Dtype::kU8:
    case Dtype::kI8:
      return 1;
    case Dtype::kI16:
    case Dtype::kU16:
      return 2;
    case Dtype::kI32:
    case Dtype::kU32:
      return 4;
    case Dtype::kI64:
    case Dtype::kU64:
      return 8;
  }
  return 1;
}

const char* NameOf(Dtype d) {
  static const char* const kNames[] = {"uint8", "int8",   "int16", "uint16",
                                       "int32", "uint32", "int64", "uint64"};
  return kNames[static_cast<int>(d)];
}

// Whether every value of `d` fits a uint16 token id without looking.
bool FitsUint16(Dtype d) {
  return d == Dtype::kU8 || d == Dtype::kI8 || d == Dtype::kI16 || d == Dtype::kU16;
}

Result<uint32_t> ParseTokenDtype(const std::string& s) {
  if (s == "uint16") return 2u;
  if (s == "uint32") return 4u;
  return Status::InvalidArgument("token dtype '" + s + "': token ids are uint16 or uint32");
}

// A file read with pread, whose size is known.
class SourceFile {
 public:
  static Result<SourceFile> Open(const std::string& path) {
    SourceFile f;
    f.path_ = path;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno(errno, path);
    f.fd_ = std::make_shared<ScopedFd>(fd);
    struct stat st;
    if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, path);
    if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + ": not a regular file");
    f.size_ = static_cast<uint64_t>(st.st_size);
    // Read once, front to back (the .idx's arrays side by side).
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return f;
  }
  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  // Exactly n bytes at `offset`; past the end is a truncation naming `what`.
  Status Read(void* buf, uint64_t n, uint64_t offset, const std::string& what) const {
    if (offset > size_ || n > size_ - offset) {
      return Status::Corruption(path_ + ": truncated: " + what + " lies at bytes [" +
                                std::to_string(offset) + ", " + std::to_string(offset + n) +
                                "), the file has " + std::to_string(size_));
    }
    return PreadFull(fd_->get(), buf, n, offset, path_);
  }

 private:
  std::string path_;
  std::shared_ptr<ScopedFd> fd_;
  uint64_t size_ = 0;
};

// 8-aligned bytes (what converting reads as arrays of integers).
class Buffer {
 public:
  std::byte* data() { return reinterpret_cast<std::byte*>(words_.data()); }
  void Reserve(uint64_t n) {
    if (words_.size() * 8 < n) words_.resize((n + 7) / 8);
  }

 private:
  std::vector<uint64_t> words_;
};

// Converts n tokens of type S to type D; the index of the first that does
// not fit D (negative or too large), or n when all do.
template <typename S, typename D>
uint64_t Convert(const S* in, uint64_t n, D* out) {
  constexpr uint64_t kMax = std::numeric_limits<D>::max();
  bool ok = true;
  for (uint64_t i = 0; i < n; ++i) {
    const S v = in[i];
    if constexpr (std::is_signed_v<S>) ok &= v >= 0;
    if constexpr (sizeof(S) > sizeof(D)) ok &= static_cast<uint64_t>(v) <= kMax;
    out[i] = static_cast<D>(v);
  }
  if (ok) return n;
  for (uint64_t i = 0; i < n; ++i) {
    const S v = in[i];
    if ((std::is_signed_v<S> && v < 0) || static_cast<uint64_t>(v) > kMax) return i;
  }
  return n;
}

template <typename D>
uint64_t ConvertTo(Dtype src, const std::byte* in, uint64_t n, D* out) {
  switch (src) {
    case Dtype::kU8:
      return Convert(reinterpret_cast<const uint8_t*>(in), n, out);
    case Dtype::kI8:
      return Convert(reinterpret_cast<const int8_t*>(in), n, out);
    case Dtype::kI16:
      return Convert(reinterpret_cast<const int16_t*>(in), n, out);
    case Dtype::kU16:
      return Convert(reinterpret_cast<const uint16_t*>(in), n, out);
    case Dtype::kI32:
      return Convert(reinterpret_cast<const int32_t*>(in), n, out);
    case Dtype::kU32:
      return Convert(reinterpret_cast<const uint32_t*>(in), n, out);
    case Dtype::kI64:
      return Convert(reinterpret_cast<const int64_t*>(in), n, out);
    case Dtype::kU64:
      return Convert(reinterpret_cast<const uint64_t*>(in), n, out);
  }
  return n;
}

// The value of token i of `in` (for messages).
std::string ValueAt(Dtype src, const std::byte* in, uint64_t i) {
  const std::byte* p = in + i * SizeOf(src);
  switch (src) {
    case Dtype::kI8:
      return std::to_string(*reinterpret_cast<const int8_t*>(p));
    case Dtype::kI16:
      return std::to_string(*reinterpret_cast<const int16_t*>(p));
    case Dtype::kI32:
      return std::to_string(*reinterpret_cast<const int32_t*>(p));
    case Dtype::kI64:
      return std::to_string(*reinterpret_cast<const int64_t*>(p));
    default: {
      uint64_t v = 0;
      std::memcpy(&v, p, SizeOf(src));
      return std::to_string(v);
    }
  }
}

// Tokens of a source file, in pieces, as the volume's token ids: a copy
// when the widths agree, else converted and checked.
class TokenReader {
 public:
  TokenReader(const SourceFile& file, Dtype src, uint64_t data_offset, uint32_t width)
      : file_(file), src_(src), base_(data_offset), width_(width) {}

  uint32_t width() const { return width_; }
  // Tokens a piece holds: kPiece bytes of the source's or the volume's.
  uint64_t per_piece() const { return kPiece / std::max(SizeOf(src_), width_); }
  // Tokens [first, first + n) of the file (n <= per_piece()), converted;
  // valid until the next call.
  Result<std::span<const std::byte>> Read(uint64_t first, uint64_t n, const std::string& what) {
    const uint32_t s = SizeOf(src_);
    in_.Reserve(n * s);
    DLFS_RETURN_IF_ERROR(file_.Read(in_.data(), n * s, base_ + first * s, what));
    if ((width_ == 2 && src_ == Dtype::kU16) || (width_ == 4 && src_ == Dtype::kU32)) {
      return std::span<const std::byte>(in_.data(), n * width_);
    }
    out_.Reserve(n * width_);
    const uint64_t bad =
        width_ == 2 ? ConvertTo(src_, in_.data(), n, reinterpret_cast<uint16_t*>(out_.data()))
                    : ConvertTo(src_, in_.data(), n, reinterpret_cast<uint32_t*>(out_.data()));
    if (bad < n) {
      return Status::InvalidArgument(
          file_.path() + ": token " + std::to_string(first + bad) + " (byte " +
          std::to_string(base_ + (first + bad) * s) + ") is " + ValueAt(src_, in_.data(), bad) +
          ", not a uint" + std::to_string(8 * width_) + " token id" +
          (width_ == 2 ? " (--token-dtype uint32 stores ids up to 2^32 - 1)" : ""));
    }
    return std::span<const std::byte>(out_.data(), n * width_);
  }

 private:
  const SourceFile& file_;
  Dtype src_;
  uint64_t base_;
  uint32_t width_;
  Buffer in_, out_;
};

// The smallest width holding every token of [offset, offset + count * size)
// of `file` (the scan a dtype of more than 16 bits needs): 2 or 4, or an
// error naming the first token that is no token id.
Result<uint32_t> ScanWidth(const SourceFile& file, Dtype src, uint64_t offset, uint64_t count) {
  if (FitsUint16(src)) {
    // Only the sign can be wrong: found when converting.
    return 2u;
  }
  TokenReader reader(file, src, offset, 4);  // checks < 2^32 and >= 0
  const uint64_t per = reader.per_piece();
  for (uint64_t first = 0; first < count; first += per) {
    const uint64_t n = std::min(per, count - first);
    DLFS_ASSIGN_OR_RETURN(const std::span<const std::byte> ids,
                          reader.Read(first, n, "tokens " + std::to_string(first)));
    const uint32_t* p = reinterpret_cast<const uint32_t*>(ids.data());
    uint32_t high = 0;
    for (uint64_t i = 0; i < n; ++i) high = std::max(high, p[i]);
    if (high > 0xFFFF) return 4u;
  }
  return 2u;
}

// Hands documents to the builder: runs of whole documents through AddBatch,
// a document larger than a piece streamed.
class DocumentWriter {
 public:
  DocumentWriter(PackContext& ctx, TokenReader& reader, const std::string& what)
      : ctx_(ctx), reader_(reader), what_(what) {}

  // Documents of lengths[k] tokens (labels[k], or none when labels is
  // empty), their tokens the reader's [first_token, ...).
  Status Add(uint64_t first_token, std::span<const uint64_t> lengths,
             std::span<const uint32_t> labels) {
    const uint32_t w = reader_.width();
    const uint64_t per = reader_.per_piece();
    uint64_t token = first_token;
    size_t k = 0;
    while (k < lengths.size()) {
      // The run of documents [k, j) that fits a piece (at least one).
      size_t j = k;
      uint64_t run = 0;
      byte_lengths_.clear();
      while (j < lengths.size() && (j == k || run + lengths[j] <= per) && lengths[j] <= per) {
        run += lengths[j];
        byte_lengths_.push_back(lengths[j] * w);
        ++j;
      }
      if (j == k) {  // one document larger than a piece
        DLFS_RETURN_IF_ERROR(Stream(token, lengths[k], labels.empty() ? kNoLabel : labels[k]));
        token += lengths[k];
        ++k;
        continue;
      }
      DLFS_ASSIGN_OR_RETURN(const std::span<const std::byte> ids,
                            reader_.Read(token, run, what_ + " " + std::to_string(documents_)));
      DLFS_RETURN_IF_ERROR(ctx_.builder().AddBatch(
          ids, byte_lengths_, labels.empty() ? labels : labels.subspan(k, j - k)));
      documents_ += j - k;
      token += run;
      k = j;
      DLFS_RETURN_IF_ERROR(ctx_.Tick());
    }
    return Status::Ok();
  }

  // Documents added so far (for messages).
  uint64_t documents() const { return documents_; }

 private:
  Status Stream(uint64_t first, uint64_t count, uint32_t label) {
    VolumeBuilder& b = ctx_.builder();
    DLFS_RETURN_IF_ERROR(b.BeginSample("", label));
    const uint64_t per = reader_.per_piece();
    for (uint64_t done = 0; done < count;) {
      const uint64_t n = std::min(per, count - done);
      Result<std::span<const std::byte>> ids =
          reader_.Read(first + done, n, what_ + " " + std::to_string(documents_));
      Status st = ids.ok() ? b.Append(*ids) : ids.status();
      if (!st.ok()) {
        b.AbortSample();
        return st;
      }
      done += n;
    }
    DLFS_RETURN_IF_ERROR(b.EndSample());
    ++documents_;
    return ctx_.Tick();
  }

  PackContext& ctx_;
  TokenReader& reader_;
  std::string what_;
  uint64_t documents_ = 0;
  std::vector<uint64_t> byte_lengths_;
};

// ---- Megatron-LM indexed datasets

constexpr unsigned char kMegatronMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr uint64_t kMegatronHeader = 9 + 8 + 1 + 8 + 8;

struct MegatronIndex {
  SourceFile idx, bin;
  Dtype dtype = Dtype::kU16;
  uint64_t sequences = 0;
  uint64_t documents = 0;  // entries of document_indices
  bool modes = false;      // multimodal: int8 sequence_modes follow
  uint64_t lengths_at = 0, pointers_at = 0, modes_at = 0;
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "dir/name", "dir/name.bin" or "dir/name.idx" -> "dir/name".
std::string MegatronPrefix(const std::string& source) {
  if (EndsWith(source, ".bin") || EndsWith(source, ".idx")) {
    return source.substr(0, source.size() - 4);
  }
  return source;
}

Result<MegatronIndex> ReadMegatronIndex(const std::string& source) {
  const std::string prefix = MegatronPrefix(source);
  MegatronIndex m;
  DLFS_ASSIGN_OR_RETURN(m.idx, SourceFile::Open(prefix + ".idx"));
  DLFS_ASSIGN_OR_RETURN(m.bin, SourceFile::Open(prefix + ".bin"));
  const std::string& path = m.idx.path();
  unsigned char h[kMegatronHeader];
  if (m.idx.size() < kMegatronHeader) {
    return Status::Corruption(path + ": " + std::to_string(m.idx.size()) +
                              " bytes is too small for a Megatron index header (34 bytes)");
  }
  DLFS_RETURN_IF_ERROR(m.idx.Read(h, sizeof h, 0, "the header"));
  if (std::memcmp(h, kMegatronMagic, sizeof kMegatronMagic) != 0) {
    return Status::Corruption(path +
                              ": bad magic (not a Megatron-LM index: it starts with "
                              "MMIDIDX\\0\\0)");
  }
  uint64_t version = 0;
  std::memcpy(&version, h + 9, 8);
  if (version != 1) {
    return Status::NotSupported(path + ": Megatron index version " + std::to_string(version) +
                                " (only version 1 is known)");
  }
  const uint8_t code = h[17];
  switch (code) {
    case 1:
      m.dtype = Dtype::kU8;
      break;
    case 2:
      m.dtype = Dtype::kI8;
      break;
    case 3:
      m.dtype = Dtype::kI16;
      break;
    case 4:
      m.dtype = Dtype::kI32;
      break;
    case 5:
      m.dtype = Dtype::kI64;
      break;
    case 6:
      return Status::InvalidArgument(path + ": float64 tokens are not token ids (dtype code 6)");
    case 7:
      return Status::InvalidArgument(path + ": float32 tokens are not token ids (dtype code 7)");
    case 8:
      m.dtype = Dtype::kU16;
      break;
    default:
      return Status::Corruption(path + ": unknown dtype code " + std::to_string(code) +
                                " (Megatron's are 1..8)");
  }
  std::memcpy(&m.sequences, h + 18, 8);
  std::memcpy(&m.documents, h + 26, 8);
  // sequence_lengths (int32), sequence_pointers (int64), document_indices
  // (int64), then int8 sequence_modes when multimodal: the file's size says
  // which (Megatron's reader is told). Counts are claims: bounded by the
  // size before any product is formed.
  const uint64_t size = m.idx.size();
  const uint64_t room = size - kMegatronHeader;
  if (m.sequences > room / 12 || m.documents > room / 8 ||
      12 * m.sequences + 8 * m.documents > room) {
    return Status::Corruption(path + ": its header claims " + std::to_string(m.sequences) +
                              " sequences and " + std::to_string(m.documents) +
                              " document indices, more than its " + std::to_string(size) +
                              " bytes hold");
  }
  const uint64_t plain = kMegatronHeader + 12 * m.sequences + 8 * m.documents;
  if (size == plain + m.sequences && m.sequences > 0) {
    m.modes = true;
  } else if (size != plain) {
    return Status::Corruption(path + ": " + std::to_string(size) + " bytes, but " +
                              std::to_string(m.sequences) + " sequences and " +
                              std::to_string(m.documents) + " document indices take " +
                              std::to_string(plain) + " (or " +
                              std::to_string(plain + m.sequences) + " with sequence modes)");
  }
  m.lengths_at = kMegatronHeader;
  m.pointers_at = m.lengths_at + 4 * m.sequences;
  m.modes_at = m.pointers_at + 8 * m.sequences + 8 * m.documents;
  return m;
}

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

Result<uint32_t> TokenWidth(const std::string& source, SourceKind kind,
                            const PackOptions& options) {
  if (!options.token_dtype.empty() && !(kind == SourceKind::kTokens && !EndsWith(source, ".npy"))) {
    return ParseTokenDtype(options.token_dtype);  // the volume's, as asked
  }
  if (kind == SourceKind::kMegatron) {
    DLFS_ASSIGN_OR_RETURN(const MegatronIndex m, ReadMegatronIndex(source));
    return ScanWidth(m.bin, m.dtype, 0, m.bin.size() / SizeOf(m.dtype));
  }
  DLFS_ASSIGN_OR_RETURN(const TokenFile t, OpenTokenFile(source, options.token_dtype));
  if (!options.token_dtype.empty()) return ParseTokenDtype(options.token_dtype);
  return ScanWidth(t.file, t.dtype, t.data_offset, t.count);
}

bool IsMegatronSource(const std::string& source) {
  const std::string prefix = MegatronPrefix(source);
  struct stat a, b;
  return ::stat((prefix + ".idx").c_str(), &a) == 0 && S_ISREG(a.st_mode) &&
         ::stat((prefix + ".bin").c_str(), &b) == 0 && S_ISREG(b.st_mode);
}

Status ImportMegatron(const std::string& source, uint32_t width, PackContext& ctx) {
  DLFS_ASSIGN_OR_RETURN(MegatronIndex m, ReadMegatronIndex(source));
  const std::string& idx = m.idx.path();
  const std::string& bin = m.bin.path();
  const uint64_t n = m.sequences;
  const uint32_t s = SizeOf(m.dtype);
  if (ctx.wants_progress()) ctx.set_total_samples(n);
  ctx.BeginSource(bin);
  // Where the last sequence ends says at once whether the .bin is whole.
  if (n > 0) {
    int32_t length = 0;
    int64_t pointer = 0;
    DLFS_RETURN_IF_ERROR(m.idx.Read(&length, 4, m.lengths_at + 4 * (n - 1), "sequence lengths"));
    DLFS_RETURN_IF_ERROR(m.idx.Read(&pointer, 8, m.pointers_at + 8 * (n - 1), "sequence pointers"));
    if (length >= 0 && pointer >= 0) {
      const uint64_t end =
          static_cast<uint64_t>(pointer) + uint64_t{static_cast<uint32_t>(length)} * s;
      if (end > m.bin.size()) {
        return Status::Corruption(bin + ": truncated: " + idx + " says its last sequence (" +
                                  std::to_string(n - 1) + ") ends at byte " + std::to_string(end) +
                                  ", the file has " + std::to_string(m.bin.size()) + " bytes");
      }
    }
  } else if (m.bin.size() != 0) {
    return Status::Corruption(bin + ": " + std::to_string(m.bin.size()) + " bytes, but " + idx +
                              " has no sequence");
  }
  TokenReader reader(m.bin, m.dtype, 0, width);
  DocumentWriter writer(ctx, reader, bin + ": sequence");
  std::vector<int32_t> lengths(std::min(n, kSequenceBatch));
  std::vector<int64_t> pointers(lengths.size());
  std::vector<int8_t> modes(m.modes ? lengths.size() : 0);
  std::vector<uint64_t> tokens(lengths.size());
  std::vector<uint32_t> labels(m.modes ? lengths.size() : 0);
  uint64_t expected = 0;  // where the next sequence starts in the .bin
  for (uint64_t first = 0; first < n; first += kSequenceBatch) {
    const uint64_t c = std::min(kSequenceBatch, n - first);
    DLFS_RETURN_IF_ERROR(
        m.idx.Read(lengths.data(), 4 * c, m.lengths_at + 4 * first, "sequence lengths"));
    DLFS_RETURN_IF_ERROR(
        m.idx.Read(pointers.data(), 8 * c, m.pointers_at + 8 * first, "sequence pointers"));
    if (m.modes) {
      DLFS_RETURN_IF_ERROR(m.idx.Read(modes.data(), c, m.modes_at + first, "sequence modes"));
    }
    const uint64_t batch_start = expected;
    for (uint64_t k = 0; k < c; ++k) {
      const uint64_t i = first + k;
      if (lengths[k] < 0) {
        return Status::Corruption(idx + ": sequence " + std::to_string(i) + " has length " +
                                  std::to_string(lengths[k]));
      }
      if (pointers[k] < 0 || static_cast<uint64_t>(pointers[k]) != expected) {
        return Status::Corruption(idx + ": sequence " + std::to_string(i) + " starts at byte " +
                                  std::to_string(pointers[k]) + " of " + bin + ", not where " +
                                  (i == 0 ? std::string("the file starts (0)")
                                          : "sequence " + std::to_string(i - 1) + " ends (" +
                                                std::to_string(expected) + ")") +
                                  ": the sequences must lie back to back");
      }
      const uint64_t len = static_cast<uint32_t>(lengths[k]);
      if (len * width > kMaxDocumentBytes) {
        return Status::InvalidArgument(idx + ": sequence " + std::to_string(i) + " has " +
                                       std::to_string(len) + " tokens: a document holds at most " +
                                       std::to_string(kMaxDocumentBytes / width) + " uint" +
                                       std::to_string(8 * width) + " tokens (4 GiB - 1 bytes)");
      }
      expected += len * s;
      if (expected > m.bin.size()) {
        return Status::Corruption(bin + ": truncated: sequences 0.." + std::to_string(i) + " of " +
                                  idx + " need " + std::to_string(expected) +
                                  " bytes, the file has " + std::to_string(m.bin.size()));
      }
      tokens[k] = len;
      if (m.modes) {
        if (modes[k] < 0) {
          return Status::Corruption(idx + ": sequence " + std::to_string(i) + " has mode " +
                                    std::to_string(modes[k]));
        }
        labels[k] = static_cast<uint32_t>(modes[k]);
      }
    }
    DLFS_RETURN_IF_ERROR(writer.Add(batch_start / s, std::span<const uint64_t>(tokens.data(), c),
                                    std::span<const uint32_t>(labels.data(), m.modes ? c : 0)));
  }
  if (expected != m.bin.size()) {
    return Status::Corruption(bin + ": " + std::to_string(m.bin.size()) + " bytes, but the " +
                              std::to_string(n) + " sequences of " + idx + " end at byte " +
                              std::to_string(expected));
  }
  return Status::Ok();
}

Status ImportTokens(const std::string& source, uint32_t width, PackContext& ctx) {
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

}  // namespace dlfs::pack_internal
