// Megatron-LM indexed datasets (a .bin of tokens and its .idx) packed into
// token volumes (docs/format.md §10.11). The .idx is read in batches of
// sequences; every claim of its header is checked against the files' sizes
// before it sizes anything. What both token importers share is in
// token_source.h.
#include <sys/stat.h>

#include <cstring>

#include "pack/token_source.h"

namespace dlfs::pack_internal {

namespace token_source {

namespace {

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

}  // namespace

Result<uint32_t> MegatronWidth(const std::string& source) {
  DLFS_ASSIGN_OR_RETURN(const MegatronIndex m, ReadMegatronIndex(source));
  return ScanWidth(m.bin, m.dtype, 0, m.bin.size() / SizeOf(m.dtype));
}

bool IsMegatronDataset(const std::string& source) {
  const std::string prefix = MegatronPrefix(source);
  struct stat a, b;
  return ::stat((prefix + ".idx").c_str(), &a) == 0 && S_ISREG(a.st_mode) &&
         ::stat((prefix + ".bin").c_str(), &b) == 0 && S_ISREG(b.st_mode);
}

Status ImportMegatronDataset(const std::string& source, uint32_t width, PackContext& ctx) {
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

}  // namespace token_source

bool IsMegatronSource(const std::string& source) { return token_source::IsMegatronDataset(source); }

Status ImportMegatron(const std::string& source, uint32_t width, PackContext& ctx) {
  return token_source::ImportMegatronDataset(source, width, ctx);
}

}  // namespace dlfs::pack_internal
