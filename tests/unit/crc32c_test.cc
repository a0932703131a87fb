#include "common/crc32c.h"

#include <string>

#include "testutil.h"

namespace dlfs {
namespace crc32c_test {

TEST(Crc32cTest, StandardCheckValues) {
  // RFC 3720 B.4 and the common "123456789" check value.
  EXPECT_EQ(crc32c::Value("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c::Value(zeros.data(), zeros.size()), 0x8A9136AAu);
  const std::string ones(32, '\xff');
  EXPECT_EQ(crc32c::Value(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c::Value("", 0), 0u);
}

TEST(Crc32cTest, ExtendEqualsWholeBuffer) {
  const auto data = testing::RandomBytes(10000, 7);
  const uint32_t whole = crc32c::Value(data.data(), data.size());
  for (size_t split : {size_t{0}, size_t{1}, size_t{63}, size_t{4096}, size_t{9999}}) {
    uint32_t crc = crc32c::Extend(0, data.data(), split);
    crc = crc32c::Extend(crc, data.data() + split, data.size() - split);
    EXPECT_EQ(crc, whole) << "split at " << split;
  }
}

// Small buffers take the crc32 instruction, larger ones ISA-L: both agree
// with the bit-by-bit definition at every length and alignment around the
// switch.
TEST(Crc32cTest, EveryLengthAndAlignmentMatchesTheDefinition) {
  const auto data = testing::RandomBytes(400, 11);
  auto reference = [](uint32_t crc, const std::byte* p, size_t n) {
    crc = ~crc;
    for (size_t i = 0; i < n; ++i) {
      crc ^= static_cast<uint8_t>(p[i]);
      for (int b = 0; b < 8; ++b) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1)));
    }
    return ~crc;
  };
  for (size_t start = 0; start < 9; ++start) {
    for (size_t n = 0; n + start <= 300; ++n) {
      ASSERT_EQ(crc32c::Value(data.data() + start, n), reference(0, data.data() + start, n))
          << start << " " << n;
      ASSERT_EQ(crc32c::Extend(0x12345678u, data.data() + start, n),
                reference(0x12345678u, data.data() + start, n))
          << start << " " << n;
    }
  }
}

TEST(Crc32cTest, CombineEqualsWholeBuffer) {
  const auto data = testing::RandomBytes(10000, 9);
  const uint32_t whole = crc32c::Value(data.data(), data.size());
  for (size_t split :
       {size_t{0}, size_t{1}, size_t{8}, size_t{4096}, size_t{9999}, size_t{10000}}) {
    const uint32_t a = crc32c::Value(data.data(), split);
    const uint32_t b = crc32c::Value(data.data() + split, data.size() - split);
    EXPECT_EQ(crc32c::Combine(a, b, data.size() - split), whole) << "split at " << split;
  }
}

}  // namespace crc32c_test
}  // namespace dlfs
