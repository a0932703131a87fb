// CRC32C (Castagnoli), the checksum of every dlfs on-disk structure.
//
// Backed by Intel ISA-L's crc32_iscsi, which picks the fastest kernel for the
// CPU at run time (SSE4.2 crc32 / PCLMULQDQ folding), so checksumming keeps up
// with NVMe. Values are the standard CRC32C: Value("123456789") == 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dlfs::crc32c {

// Returns the CRC32C of data[0, n) continuing from `crc`, the CRC32C of the
// bytes before them (0 for none). Thread-safe.
uint32_t Extend(uint32_t crc, const void* data, size_t n);

inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }

// The CRC32C of A followed by B, from crc_a = Value(A), crc_b = Value(B) and
// B's length, without B's bytes (zlib's crc32_combine for the Castagnoli
// polynomial): O(log len_b).
uint32_t Combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

}  // namespace dlfs::crc32c
