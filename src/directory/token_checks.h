// Internal: checking a token volume's stream against its token checks
// (docs/format.md §10.11) — what a reader of token windows (the token
// loader, Volume::ReadTokens, dlfs verify) shares.
//
// A token volume's documents lie back to back, so the corpus is one stream
// of tokens: target 0's bytes [token_stream_offset(), + token_count() *
// token_width()). Its token checks section holds the CRC32C of every chunk
// of 2^token_check_shift() bytes of that stream (the last one shorter). A
// reader of tokens [first, first + count), a window that may start and end
// inside documents, reads the chunk-aligned range covering it
// (CoveringChunks) and checks those chunks (CheckTokenRange) instead of the
// whole documents the window touches.
//
// Thread safety: plain functions over a SampleDirectory (itself
// thread-safe); a TokenStreamChecker is for one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dlfs/directory.h"
#include "dlfs/status.h"

namespace dlfs::tokens {

// Chunks [first_chunk, end_chunk) of the stream, its bytes [begin, end)
// (stream offsets: add token_stream_offset() for target 0's offsets).
struct ChunkRange {
  uint64_t first_chunk = 0;
  uint64_t end_chunk = 0;
  uint64_t begin = 0;  // first_chunk << shift
  uint64_t end = 0;    // min(end_chunk << shift, the stream's bytes)
};

// The chunks covering tokens [first_token, first_token + count) (none for
// count 0). InvalidArgument past the corpus's end; NotSupported for a
// volume that is not a token volume.
Result<ChunkRange> CoveringChunks(const SampleDirectory& dir, uint64_t first_token, uint64_t count);

// Checks `bytes`, the stream's bytes from `stream_byte_begin` on, against
// the token checks: stream_byte_begin must be a multiple of the chunk size
// and the bytes must end at a chunk boundary or at the stream's end
// (exactly what CoveringChunks gives). Corruption naming `volume_path`, the
// chunk, its stream bytes and tokens, and both CRCs for the first chunk
// that differs; InvalidArgument for a range that is not chunk-aligned.
Status CheckTokenRange(const SampleDirectory& dir, uint64_t stream_byte_begin,
                       std::span<const std::byte> bytes, std::string_view volume_path = {});
// The same for a range given in pieces, back to back (e.g. the part of a
// chunk before a caller's window, the window, the part after it).
Status CheckTokenPieces(const SampleDirectory& dir, uint64_t stream_byte_begin,
                        std::initializer_list<std::span<const std::byte>> pieces,
                        std::string_view volume_path = {});

// The message of a chunk whose CRC differs (shared by the checkers).
Status ChunkMismatch(const SampleDirectory& dir, uint64_t chunk, uint32_t stored, uint32_t computed,
                     std::string_view volume_path);

// Checks the stream as it goes by in order (dlfs verify): Feed the bytes at
// increasing stream offsets, then Finish. A gap between two Feeds (bytes
// that could not be read) leaves the chunks it touches unchecked.
class TokenStreamChecker {
 public:
  TokenStreamChecker(const SampleDirectory& dir, std::string volume_path);

  void Feed(uint64_t stream_offset, std::span<const std::byte> bytes);
  // Checks the last chunk, if it was fed whole.
  void Finish();

  uint64_t checked() const { return checked_; }  // chunks compared
  uint64_t bad() const { return bad_; }          // of them, not matching
  // Every chunk that failed, in order: the first few messages.
  const std::vector<Status>& errors() const { return errors_; }

 private:
  void EndChunk();

  const SampleDirectory& dir_;
  std::string path_;
  uint64_t chunk_bytes_ = 0;
  uint64_t stream_bytes_ = 0;
  uint64_t next_ = 0;    // the stream offset the next Feed continues at
  uint64_t chunk_ = 0;   // the chunk being summed
  uint64_t filled_ = 0;  // its bytes summed so far
  uint32_t crc_ = 0;     // their CRC
  bool broken_ = false;  // a gap fell in it: not checked
  uint64_t checked_ = 0;
  uint64_t bad_ = 0;
  std::vector<Status> errors_;
};

}  // namespace dlfs::tokens
