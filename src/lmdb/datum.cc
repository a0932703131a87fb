// Caffe Datum from the protobuf wire format (no protobuf library needed:
// the message has seven scalar/bytes fields).
#include "dlfs/lmdb.h"

namespace dlfs {

namespace {

bool ReadVarint(std::span<const std::byte> b, size_t* pos, uint64_t* out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*pos >= b.size()) return false;
    const auto byte = static_cast<uint8_t>(b[(*pos)++]);
    v |= uint64_t{byte & 0x7fu} << shift;
    if ((byte & 0x80) == 0) {
      *out = v;
      return true;
    }
  }
  return false;
}

}  // namespace

Result<Datum> ParseDatum(std::span<const std::byte> b) {
  Datum d;
  size_t pos = 0;
  auto bad = [](const std::string& what) {
    return Status::Corruption("malformed Caffe Datum: " + what);
  };
  while (pos < b.size()) {
    uint64_t tag;
    if (!ReadVarint(b, &pos, &tag)) return bad("truncated field tag");
    const uint64_t field = tag >> 3;
    const uint32_t wire = tag & 7;
    if (wire == 0) {  // varint
      uint64_t v;
      if (!ReadVarint(b, &pos, &v)) return bad("truncated varint");
      switch (field) {
        case 1:
          d.channels = static_cast<int32_t>(v);
          break;
        case 2:
          d.height = static_cast<int32_t>(v);
          break;
        case 3:
          d.width = static_cast<int32_t>(v);
          break;
        case 5:
          d.label = static_cast<int32_t>(v);
          d.has_label = true;
          break;
        case 7:
          d.encoded = v != 0;
          break;
        default:
          break;  // unknown fields are skipped, as protobuf does
      }
    } else if (wire == 2) {  // length-delimited
      uint64_t len;
      if (!ReadVarint(b, &pos, &len)) return bad("truncated length");
      if (len > b.size() - pos) return bad("field " + std::to_string(field) + " runs past the end");
      if (field == 4) d.data = b.subspan(pos, len);
      if (field == 6) {  // packed float_data
        if (len % 4 != 0) return bad("packed float_data is not a multiple of 4 bytes");
        d.float_count += len / 4;
      }
      pos += len;
    } else if (wire == 5) {  // 32-bit (unpacked float_data)
      if (b.size() - pos < 4) return bad("truncated fixed32");
      if (field == 6) ++d.float_count;
      pos += 4;
    } else if (wire == 1) {  // 64-bit
      if (b.size() - pos < 8) return bad("truncated fixed64");
      pos += 8;
    } else {
      return bad("unsupported wire type " + std::to_string(wire));
    }
  }
  if (d.channels < 0 || d.height < 0 || d.width < 0) return bad("negative shape");
  return d;
}

}  // namespace dlfs
