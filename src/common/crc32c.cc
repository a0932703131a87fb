#include "common/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace dlfs::crc32c {

namespace {

#if defined(__x86_64__)
// Buffers this small go through the CPU's crc32 instruction inline, without
// a branch per tail size: a token document of ~20 bytes took 16 ns through
// crc32_iscsi (or a plain loop), 11 ns so (mostly the mispredicted branches
// of varying lengths).
constexpr size_t kSmall = 64;
// Set during static initialization, maybe before libgcc's own: initialized
// here first.
const bool kHaveSse42 = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2") != 0;
}();

__attribute__((target("sse4.2"))) uint32_t SmallExtend(uint32_t reg, const unsigned char* p,
                                                       size_t n) {
  if (n < 8) {
    for (; n > 0; ++p, --n) reg = _mm_crc32_u8(reg, *p);
    return reg;
  }
  const unsigned char* const end = p + n;
  uint64_t r = reg;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    r = _mm_crc32_u64(r, v);
  }
  // The last t = n < 8 bytes: taken from the 8 bytes ending at `end`. Fed
  // from a zero register after 8 - t zero bytes they give their CRC; the
  // register's own bytes are the message's next four, XORed into them, and
  // what of it lies past them is shifted down (linearity of the CRC). For
  // t = 0 every shift below is by 64 bits in two steps, giving r itself.
  const unsigned t = static_cast<unsigned>(n);
  uint64_t w;
  std::memcpy(&w, end - 8, 8);
  const uint64_t tail = (w >> (63 - 8 * t)) >> 1;
  const uint64_t mask = (~uint64_t{0} >> (63 - 8 * t)) >> 1;
  const uint64_t v = ((tail ^ r) & mask);
  return static_cast<uint32_t>((r >> (8 * t)) ^ _mm_crc32_u64(0, (v << (63 - 8 * t)) << 1));
}
#endif

}  // namespace

uint32_t Extend(uint32_t crc, const void* data, size_t n) {
  // ISA-L works on the un-inverted register and takes an `int` length, so
  // invert around the call and feed buffers over 2 GiB in pieces.
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  uint32_t reg = ~crc;
#if defined(__x86_64__)
  if (n <= kSmall && kHaveSse42) return ~SmallExtend(reg, p, n);
#endif
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
