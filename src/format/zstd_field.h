// zstd for fields (docs/format.md §4.8.4): compressing a field as the writer
// stores it, and checking and decoding a stored frame as a reader must —
// the frame's declared size is checked against the directory before any
// memory is sized by it.
//
// Thread safety: plain functions; a ZstdDictionary is immutable after Create
// and may be shared by any number of threads.
#pragma once

#include <zstd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dlfs/status.h"

namespace dlfs::format {

// A trained zstd dictionary, prepared for compressing (at one level) and
// for decompressing.
class ZstdDictionary {
 public:
  // InvalidArgument when `bytes` is not a zstd-format dictionary (magic
  // 0xEC30A437 and a non-zero ID, as ZDICT_trainFromBuffer makes) or zstd
  // cannot load its tables.
  // With level 0 only the decompression side is prepared (what a reader
  // needs); cdict() is then null.
  static Result<std::shared_ptr<const ZstdDictionary>> Create(std::span<const std::byte> bytes,
                                                              int level);
  ~ZstdDictionary();
  const ZSTD_CDict* cdict() const { return cdict_; }
  const ZSTD_DDict* ddict() const { return ddict_; }
  // The ID in the dictionary's header, which frames compressed with it
  // carry (never 0).
  unsigned id() const { return id_; }

 private:
  ZstdDictionary() = default;
  unsigned id_ = 0;
  ZSTD_CDict* cdict_ = nullptr;
  ZSTD_DDict* ddict_ = nullptr;
};

// Trains a dictionary of at most `max_bytes` from `samples` (zstd's
// ZDICT_trainFromBuffer). InvalidArgument when zstd finds too little to
// learn from (too few or too uniform samples).
Result<std::vector<std::byte>> TrainZstdDictionary(
    const std::vector<std::vector<std::byte>>& samples, size_t max_bytes);

// `src` as one zstd frame that declares its content size, at `level`, with
// `dict` when given.
Result<std::vector<std::byte>> ZstdCompress(std::span<const std::byte> src, int level,
                                            const ZstdDictionary* dict);

// Checks the frame `stored` against the directory without decoding it:
// Corruption "<what>: ..." when it is not a zstd frame, its declared content
// size is missing or differs from `decoded_length`, or it does not fill
// `stored` exactly. Allocates nothing.
Status ZstdCheckFrame(std::span<const std::byte> stored, uint64_t decoded_length,
                      const std::string& what);

// Decodes the frame `stored` into `out`, whose size is the field's
// decoded_length. Corruption "<what>: ..." when the frame's declared content
// size is missing or differs from out.size() (checked before decoding), the
// frame does not fill `stored` exactly, decoding fails, or the output has
// another length, or the frame names another dictionary than `dict` (its
// ID; 0 = none) — `dict` is required for a frame compressed with one and
// refused for a frame without.
Status ZstdDecode(std::span<const std::byte> stored, std::span<std::byte> out,
                  const ZstdDictionary* dict, const std::string& what);

}  // namespace dlfs::format
