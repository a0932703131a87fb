// Decoding a field into memory sized by its decoded length. That length
// comes from the directory, which damage that also recomputed the region's
// checksum can make lie (up to 4 GiB per field), so nothing is sized by it
// before the stored bytes checked out: their CRC32C (with `verify`) and, for
// a compressed field, a zstd frame that declares exactly that length
// (docs/format.md §4.8.4). Errors name the volume, the sample and the field
// (Volume::FieldContext), as Volume::DecodeField's do.
//
// Thread safety: as Volume's const methods.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dlfs/status.h"
#include "dlfs/volume.h"

namespace dlfs {

// Everything that can be checked about field `f` of sample `index` from its
// stored bytes without decoding: with `verify` the CRC32C, then, for a
// compressed field, the frame's declared content size against
// f.decoded_length and that the frame fills `stored`.
Status CheckFieldBeforeDecoding(const Volume& v, uint64_t index, const FieldInfo& f,
                                std::span<const std::byte> stored, bool verify);

// Field `f` of sample `index` decoded into a new buffer, allocated only once
// CheckFieldBeforeDecoding passed.
Result<std::vector<std::byte>> DecodeFieldToVector(const Volume& v, uint64_t index,
                                                   const FieldInfo& f,
                                                   std::span<const std::byte> stored, bool verify);

}  // namespace dlfs
