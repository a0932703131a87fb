#include "common/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
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

}  // namespace dlfs::crc32c
