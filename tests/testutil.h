// Helpers shared by the C++ tests.
#pragma once

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "dlfs/status.h"

namespace dlfs::testing {
// The Status of a Status or of a Result<T>, for the macros below.
inline const Status& StatusOf(const Status& st) { return st; }
template <typename T>
Status StatusOf(const Result<T>& r) {
  return r.status();
}

// The matcher behind StatusIs (below); use StatusIs, not this class.
class StatusIsMatcher {
 public:
  StatusIsMatcher(StatusCode code, std::string substring)
      : code_(code), substring_(std::move(substring)) {}

  template <typename T>
  bool MatchAndExplain(const T& value, ::testing::MatchResultListener* listener) const {
    const Status st = StatusOf(value);
    *listener << "whose status is " << st.ToString();
    return st.code() == code_ && st.message().find(substring_) != std::string::npos;
  }
  void DescribeTo(std::ostream* os) const {
    *os << "has status code " << StatusCodeName(code_);
    if (!substring_.empty()) *os << " and a message containing \"" << substring_ << '"';
  }
  void DescribeNegationTo(std::ostream* os) const {
    *os << "does not have status code " << StatusCodeName(code_);
    if (!substring_.empty()) *os << " or has no \"" << substring_ << "\" in its message";
  }

 private:
  StatusCode code_;
  std::string substring_;
};

// EXPECT_THAT(x, StatusIs(StatusCode::kCorruption, "checksum")): x (a Status
// or a Result<T>) has that code and a message containing the substring (any
// message when it is empty). A failure prints the actual code and message.
inline ::testing::PolymorphicMatcher<StatusIsMatcher> StatusIs(StatusCode code,
                                                               std::string substring = "") {
  return ::testing::MakePolymorphicMatcher(StatusIsMatcher(code, std::move(substring)));
}
}  // namespace dlfs::testing

namespace dlfs {
// GoogleTest prints a Status or a Result (e.g. "Actual:" of EXPECT_THAT) as
// its ToString(), not as raw bytes.
inline void PrintTo(const Status& st, std::ostream* os) { *os << st.ToString(); }
template <typename T>
void PrintTo(const Result<T>& r, std::ostream* os) {
  if (r.ok()) {
    *os << "OK: " << ::testing::PrintToString(r.value());
  } else {
    *os << r.status().ToString();
  }
}
}  // namespace dlfs

// ASSERT_OK(expr) / EXPECT_OK(expr): expr is a Status or a Result; on failure
// the message shows the expression and the status (code and message), and
// more context can be streamed: ASSERT_OK(Open(p)) << "while reopening".
#define DLFS_TEST_OK_(expr, fail)                                                         \
  switch (0)                                                                              \
  case 0:                                                                                 \
  default:                                                                                \
    if (const ::dlfs::Status dlfs_st_ = ::dlfs::testing::StatusOf(expr); dlfs_st_.ok()) { \
    } else                                                                                \
      fail() << #expr << " failed: " << dlfs_st_.ToString() << ' '
#define ASSERT_OK(expr) DLFS_TEST_OK_(expr, FAIL)
#define EXPECT_OK(expr) DLFS_TEST_OK_(expr, ADD_FAILURE)

// ASSERT_OK_AND_ASSIGN(auto x, MakeX()): declares x from a Result's value, or
// fails the test printing the status.
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(DLFS_CONCAT_(dlfs_test_result_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr)                          \
  auto tmp = (expr);                                                        \
  ASSERT_TRUE(tmp.ok()) << #expr << " failed: " << tmp.status().ToString(); \
  lhs = std::move(tmp).value()

namespace dlfs::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/dlfs-test-XXXXXX";
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

// Whether two byte ranges are equal, by memcmp: a sanitizer checks that as
// one range, where a byte loop (std::equal) costs a check per byte, which
// was most of a loader test's time under TSan.
inline bool SameBytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

inline std::vector<std::byte> Bytes(std::string_view s) {
  std::vector<std::byte> out(s.size());
  if (!s.empty()) std::memcpy(out.data(), s.data(), s.size());
  return out;
}

// n bytes from mt19937(seed), four per draw (word by word: a byte loop was a
// sanitizer check per byte).
inline std::vector<std::byte> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; i += 4) {
    const uint32_t word = static_cast<uint32_t>(rng());
    std::memcpy(out.data() + i, &word, std::min<size_t>(4, n - i));
  }
  return out;
}

// Overwrites the second half of the file at `path` (a node cache's region)
// with noise, as a stray writer would: what is read from it must be
// checked, never trusted.
inline void NoiseOverSecondHalf(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  const off_t size = ::lseek(fd, 0, SEEK_END);
  std::string noise(size / 2, '\x5a');
  ASSERT_EQ(::pwrite(fd, noise.data(), noise.size(), size / 2),
            static_cast<ssize_t>(noise.size()));
  ::close(fd);
}

inline void WriteFile(const std::string& path, std::span<const std::byte> data) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  ASSERT_TRUE(out.good()) << path;
}

// The whole file (empty when it cannot be read), in one read: a character
// iterator cost a check per byte in the sanitized -O0 test builds (9 s of
// LmdbTest.OverflowValues under ASan).
inline std::vector<std::byte> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const std::streamoff size = in ? static_cast<std::streamoff>(in.tellg()) : 0;
  std::vector<std::byte> out(size > 0 ? static_cast<size_t>(size) : 0);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
  out.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return out;
}

// Polls `done` every millisecond until it holds or `seconds` pass: a wait on
// an event with a deadline, where a fixed sleep would assert too early on a
// loaded machine (and waste time on an idle one). Whether it held.
template <typename Pred>
bool WaitUntil(Pred done, double seconds = 30) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(seconds));
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace dlfs::testing
