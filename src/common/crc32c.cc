#include "common/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <array>
#include <climits>

namespace dlfs::crc32c {

uint32_t Extend(uint32_t crc, const void* data, size_t n) {
  // ISA-L works on the un-inverted register and takes an `int` length, so
  // invert around the call and feed buffers over 2 GiB in pieces.
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  uint32_t reg = ~crc;
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    reg = crc32_iscsi(p, static_cast<int>(chunk), reg);
    p += chunk;
    n -= chunk;
  }
  return ~reg;
}

namespace {

// Polynomials over GF(2) modulo the reflected Castagnoli polynomial, bit 31
// holding x^0 (as zlib's crc32.c does for its own polynomial).
constexpr uint32_t kPoly = 0x82f63b78u;

uint32_t MultModP(uint32_t a, uint32_t b) {
  uint32_t m = uint32_t{1} << 31, p = 0;
  while (true) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// x^(n * 2^k) modulo the polynomial, k <= 3.
uint32_t X2nModP(uint64_t n, unsigned k) {
  static const auto table = [] {  // x^(2^i), i < 3 + 64
    std::array<uint32_t, 67> t{};
    uint32_t p = uint32_t{1} << 30;  // x^1
    t[0] = p;
    for (size_t i = 1; i < t.size(); ++i) t[i] = p = MultModP(p, p);
    return t;
  }();
  uint32_t p = uint32_t{1} << 31;  // x^0
  while (n) {
    if (n & 1) p = MultModP(table[k], p);
    n >>= 1;
    ++k;
  }
  return p;
}

}  // namespace

uint32_t Combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return MultModP(X2nModP(len_b, 3), crc_a) ^ crc_b;
}

}  // namespace dlfs::crc32c
