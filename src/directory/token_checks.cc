#include "directory/token_checks.h"

#include <algorithm>
#include <cstdio>

#include "common/crc32c.h"

namespace dlfs::tokens {

namespace {

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string Prefix(std::string_view volume_path) {
  return volume_path.empty() ? std::string() : std::string(volume_path) + ": ";
}

}  // namespace

Result<ChunkRange> CoveringChunks(const SampleDirectory& dir, uint64_t first_token,
                                  uint64_t count) {
  const uint32_t w = dir.token_width();
  if (w == 0) return Status::NotSupported("not a token volume");
  const uint64_t tokens = dir.token_count();
  if (first_token > tokens || count > tokens - first_token) {
    return Status::InvalidArgument("tokens [" + std::to_string(first_token) + ", +" +
                                   std::to_string(count) + ") lie past the corpus's " +
                                   std::to_string(tokens) + " tokens");
  }
  ChunkRange r;
  if (count == 0) return r;
  const uint32_t shift = dir.token_check_shift();
  const uint64_t bytes = tokens * w;
  r.first_chunk = first_token * w >> shift;
  const uint64_t last_byte = (first_token + count) * w - 1;
  r.end_chunk = (last_byte >> shift) + 1;
  r.begin = r.first_chunk << shift;
  r.end = std::min(r.end_chunk << shift, bytes);
  return r;
}

Status ChunkMismatch(const SampleDirectory& dir, uint64_t chunk, uint32_t stored, uint32_t computed,
                     std::string_view volume_path) {
  const uint32_t shift = dir.token_check_shift();
  const uint64_t bytes = dir.token_count() * dir.token_width();
  const uint64_t begin = chunk << shift;
  const uint64_t end = std::min(begin + (uint64_t{1} << shift), bytes);
  const uint32_t w = dir.token_width();
  return Status::Corruption(Prefix(volume_path) + "token chunk " + std::to_string(chunk) +
                            " (stream bytes [" + std::to_string(begin) + ", " +
                            std::to_string(end) + "), tokens [" + std::to_string(begin / w) + ", " +
                            std::to_string(end / w) + ")): checksum mismatch (stored " +
                            Hex32(stored) + ", computed " + Hex32(computed) + ")");
}

Status CheckTokenPieces(const SampleDirectory& dir, uint64_t stream_byte_begin,
                        std::initializer_list<std::span<const std::byte>> pieces,
                        std::string_view volume_path) {
  if (dir.token_width() == 0)
    return Status::NotSupported(Prefix(volume_path) + "not a token volume");
  const uint32_t shift = dir.token_check_shift();
  const uint64_t chunk_bytes = uint64_t{1} << shift;
  const uint64_t stream = dir.token_count() * dir.token_width();
  uint64_t total = 0;
  for (const auto& p : pieces) total += p.size();
  const uint64_t end = stream_byte_begin + total;
  if (stream_byte_begin % chunk_bytes != 0 || stream_byte_begin > stream || total > stream ||
      end > stream || (end % chunk_bytes != 0 && end != stream)) {
    return Status::InvalidArgument(Prefix(volume_path) + "token stream bytes [" +
                                   std::to_string(stream_byte_begin) + ", " + std::to_string(end) +
                                   ") are not whole chunks of " + std::to_string(chunk_bytes) +
                                   " bytes of the stream's " + std::to_string(stream));
  }
  uint64_t chunk = stream_byte_begin >> shift;
  uint64_t filled = 0;
  uint32_t crc = 0;
  auto end_chunk = [&]() -> Status {
    DLFS_ASSIGN_OR_RETURN(const uint32_t stored, dir.TokenCheck(chunk));
    if (stored != crc) return ChunkMismatch(dir, chunk, stored, crc, volume_path);
    ++chunk;
    filled = 0;
    crc = 0;
    return Status::Ok();
  };
  for (std::span<const std::byte> p : pieces) {
    while (!p.empty()) {
      const uint64_t n = std::min<uint64_t>(p.size(), chunk_bytes - filled);
      crc = crc32c::Extend(crc, p.data(), n);
      filled += n;
      p = p.subspan(n);
      if (filled == chunk_bytes) DLFS_RETURN_IF_ERROR(end_chunk());
    }
  }
  if (filled > 0) DLFS_RETURN_IF_ERROR(end_chunk());  // the stream's last, shorter chunk
  return Status::Ok();
}

Status CheckTokenRange(const SampleDirectory& dir, uint64_t stream_byte_begin,
                       std::span<const std::byte> bytes, std::string_view volume_path) {
  return CheckTokenPieces(dir, stream_byte_begin, {bytes}, volume_path);
}

TokenStreamChecker::TokenStreamChecker(const SampleDirectory& dir, std::string volume_path)
    : dir_(dir),
      path_(std::move(volume_path)),
      chunk_bytes_(dir.token_width() == 0 ? 0 : uint64_t{1} << dir.token_check_shift()),
      stream_bytes_(dir.token_count() * dir.token_width()) {}

void TokenStreamChecker::EndChunk() {
  if (!broken_) {
    ++checked_;
    Result<uint32_t> stored = dir_.TokenCheck(chunk_);
    Status st = stored.ok() ? (*stored == crc_ ? Status::Ok()
                                               : ChunkMismatch(dir_, chunk_, *stored, crc_, path_))
                            : stored.status();
    if (!st.ok()) {
      ++bad_;
      if (errors_.size() < 10) errors_.push_back(std::move(st));
    }
  }
  ++chunk_;
  filled_ = 0;
  crc_ = 0;
  broken_ = false;
}

void TokenStreamChecker::Feed(uint64_t stream_offset, std::span<const std::byte> bytes) {
  if (chunk_bytes_ == 0 || bytes.empty()) return;
  if (stream_offset > stream_bytes_ || bytes.size() > stream_bytes_ - stream_offset) return;
  if (stream_offset != next_) {
    // A gap (or bytes fed again): the chunks it touches are not checked.
    const uint64_t chunk = stream_offset / chunk_bytes_;
    if (chunk != chunk_ || stream_offset < next_) {
      chunk_ = chunk;
      crc_ = 0;
    }
    filled_ = stream_offset - chunk * chunk_bytes_;
    broken_ = true;
  }
  while (!bytes.empty()) {
    const uint64_t n = std::min<uint64_t>(bytes.size(), chunk_bytes_ - filled_);
    crc_ = crc32c::Extend(crc_, bytes.data(), n);
    filled_ += n;
    bytes = bytes.subspan(n);
    if (filled_ == chunk_bytes_ || chunk_ * chunk_bytes_ + filled_ == stream_bytes_) EndChunk();
  }
  next_ = chunk_ * chunk_bytes_ + filled_;
}

void TokenStreamChecker::Finish() {
  // Feed ends the stream's last chunk as its last byte goes by; a chunk
  // left partial was not read whole and stays unchecked.
}

}  // namespace dlfs::tokens
