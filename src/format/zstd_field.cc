#include "format/zstd_field.h"

#include <zdict.h>

#include <cstring>

namespace dlfs::format {

namespace {

// One decompression context per thread: creating one costs more than
// decoding a small field.
ZSTD_DCtx* ThreadDctx() {
  thread_local std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> ctx(ZSTD_createDCtx(),
                                                                      ZSTD_freeDCtx);
  return ctx.get();
}

ZSTD_CCtx* ThreadCctx() {
  thread_local std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> ctx(ZSTD_createCCtx(),
                                                                      ZSTD_freeCCtx);
  return ctx.get();
}

}  // namespace

Result<std::shared_ptr<const ZstdDictionary>> ZstdDictionary::Create(
    std::span<const std::byte> bytes, int level) {
  // zstd would take any other bytes as a raw-content dictionary; the format
  // requires a trained one (docs/format.md §4.8.4), whose header zstd then
  // parses and checks (entropy tables), and whose ID frames must name.
  uint32_t magic = 0;
  if (bytes.size() >= 8) std::memcpy(&magic, bytes.data(), 4);
  const unsigned id = ZSTD_getDictID_fromDict(bytes.data(), bytes.size());
  if (magic != ZSTD_MAGIC_DICTIONARY || id == 0) {
    return Status::InvalidArgument("not a zstd dictionary (" + std::to_string(bytes.size()) +
                                   " bytes; no dictionary magic or a zero ID)");
  }
  std::shared_ptr<ZstdDictionary> d(new ZstdDictionary());
  d->id_ = id;
  if (level != 0) d->cdict_ = ZSTD_createCDict(bytes.data(), bytes.size(), level);
  d->ddict_ = ZSTD_createDDict(bytes.data(), bytes.size());
  if ((level != 0 && d->cdict_ == nullptr) || d->ddict_ == nullptr) {
    return Status::InvalidArgument("zstd cannot load the dictionary " + std::to_string(id) + " (" +
                                   std::to_string(bytes.size()) + " bytes): damaged tables");
  }
  return std::shared_ptr<const ZstdDictionary>(std::move(d));
}

ZstdDictionary::~ZstdDictionary() {
  ZSTD_freeCDict(cdict_);
  ZSTD_freeDDict(ddict_);
}

Result<std::vector<std::byte>> TrainZstdDictionary(
    const std::vector<std::vector<std::byte>>& samples, size_t max_bytes) {
  std::vector<std::byte> all;
  std::vector<size_t> sizes;
  for (const auto& s : samples) {
    if (s.empty()) continue;  // nothing to learn; zstd counts samples
    all.insert(all.end(), s.begin(), s.end());
    sizes.push_back(s.size());
  }
  std::vector<std::byte> dict(max_bytes);
  const size_t n = ZDICT_trainFromBuffer(dict.data(), dict.size(), all.data(), sizes.data(),
                                         static_cast<unsigned>(sizes.size()));
  if (ZDICT_isError(n)) {
    return Status::InvalidArgument(std::string("cannot train a zstd dictionary from ") +
                                   std::to_string(samples.size()) +
                                   " samples: " + ZDICT_getErrorName(n));
  }
  dict.resize(n);
  return dict;
}

Result<std::vector<std::byte>> ZstdCompress(std::span<const std::byte> src, int level,
                                            const ZstdDictionary* dict) {
  std::vector<std::byte> out(ZSTD_compressBound(src.size()));
  ZSTD_CCtx* cctx = ThreadCctx();
  const size_t n = dict != nullptr ? ZSTD_compress_usingCDict(cctx, out.data(), out.size(),
                                                              src.data(), src.size(), dict->cdict())
                                   : ZSTD_compressCCtx(cctx, out.data(), out.size(), src.data(),
                                                       src.size(), level);
  if (ZSTD_isError(n)) {
    return Status::InvalidArgument(std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
  }
  out.resize(n);
  return out;
}

Status ZstdCheckFrame(std::span<const std::byte> stored, uint64_t decoded_length,
                      const std::string& what) {
  auto bad = [&](const std::string& problem) { return Status::Corruption(what + ": " + problem); };
  const unsigned long long declared = ZSTD_getFrameContentSize(stored.data(), stored.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR) return bad("not a zstd frame");
  if (declared == ZSTD_CONTENTSIZE_UNKNOWN) return bad("zstd frame does not declare its size");
  if (declared != decoded_length) {
    return bad("zstd frame declares " + std::to_string(declared) + " bytes, the directory says " +
               std::to_string(decoded_length));
  }
  const size_t frame = ZSTD_findFrameCompressedSize(stored.data(), stored.size());
  if (ZSTD_isError(frame) || frame != stored.size()) {
    return bad("zstd frame does not fill the field's " + std::to_string(stored.size()) + " bytes");
  }
  return Status::Ok();
}

Status ZstdDecode(std::span<const std::byte> stored, std::span<std::byte> out,
                  const ZstdDictionary* dict, const std::string& what) {
  auto bad = [&](const std::string& problem) { return Status::Corruption(what + ": " + problem); };
  // The header is checked against the directory first, so a frame that
  // claims a huge size never sizes anything.
  DLFS_RETURN_IF_ERROR(ZstdCheckFrame(stored, out.size(), what));
  // A frame names the dictionary it needs (0: none); a mismatch would
  // decode to garbage or fail obscurely.
  const unsigned need = ZSTD_getDictID_fromFrame(stored.data(), stored.size());
  const unsigned have = dict != nullptr ? dict->id() : 0;
  if (need != have) {
    return bad(need == 0 ? "zstd frame names no dictionary, the codec needs the volume's " +
                               std::to_string(have)
               : have == 0
                   ? "zstd frame needs dictionary " + std::to_string(need) + ", the codec uses none"
                   : "zstd frame needs dictionary " + std::to_string(need) + ", the volume's is " +
                         std::to_string(have));
  }
  ZSTD_DCtx* dctx = ThreadDctx();
  const size_t n =
      dict != nullptr
          ? ZSTD_decompress_usingDDict(dctx, out.data(), out.size(), stored.data(), stored.size(),
                                       dict->ddict())
          : ZSTD_decompressDCtx(dctx, out.data(), out.size(), stored.data(), stored.size());
  if (ZSTD_isError(n)) return bad(std::string("zstd: ") + ZSTD_getErrorName(n));
  if (n != out.size()) {
    return bad("decoded " + std::to_string(n) + " bytes, the directory says " +
               std::to_string(out.size()));
  }
  return Status::Ok();
}

}  // namespace dlfs::format
