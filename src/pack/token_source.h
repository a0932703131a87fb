// Internal: what the token importers share — token_importer.cc (raw token
// files: .npy or headerless, cut by lengths or an end-of-document id) and
// megatron_importer.cc (Megatron-LM indexed datasets): the source dtypes,
// a source file read with pread, tokens read in pieces and converted to the
// volume's width (checked), and the writer that hands runs of whole
// documents to VolumeBuilder::AddBatch.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "common/file_util.h"
#include "pack/importer.h"

namespace dlfs::pack_internal::token_source {

// Tokens are read and converted in pieces of this many source bytes.
constexpr uint64_t kPiece = 16u << 20;
// Sequences of a .idx read per batch.
constexpr uint64_t kSequenceBatch = 1u << 16;
// A document is at most this many bytes (a sample's limit).
constexpr uint64_t kMaxDocumentBytes = 0xFFFFFFFFull;

// The integer dtypes token ids come in.
enum class Dtype { kU8, kI8, kI16, kU16, kI32, kU32, kI64, kU64 };

inline uint32_t SizeOf(Dtype d) {
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

inline const char* NameOf(Dtype d) {
  static const char* const kNames[] = {"uint8", "int8",   "int16", "uint16",
                                       "int32", "uint32", "int64", "uint64"};
  return kNames[static_cast<int>(d)];
}

// Whether every value of `d` fits a uint16 token id without looking.
inline bool FitsUint16(Dtype d) {
  return d == Dtype::kU8 || d == Dtype::kI8 || d == Dtype::kI16 || d == Dtype::kU16;
}

inline Result<uint32_t> ParseTokenDtype(const std::string& s) {
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
inline std::string ValueAt(Dtype src, const std::byte* in, uint64_t i) {
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
inline Result<uint32_t> ScanWidth(const SourceFile& file, Dtype src, uint64_t offset,
                                  uint64_t count) {
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

inline bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Megatron-LM datasets (megatron_importer.cc): the width the volume needs
// for the tokens of `source` (a .bin/.idx pair).
Result<uint32_t> MegatronWidth(const std::string& source);
Status ImportMegatronDataset(const std::string& source, uint32_t width, PackContext& ctx);
bool IsMegatronDataset(const std::string& source);

}  // namespace dlfs::pack_internal::token_source
