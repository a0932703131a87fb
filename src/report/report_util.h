// Helpers shared by the report formatters (dlfs_tools/report.h).
#pragma once

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace dlfs::report_internal {

// printf into a string.
[[gnu::format(printf, 1, 2)]] inline std::string Printf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  char small[256];
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(small, sizeof small, format, args);
  va_end(args);
  std::string out;
  if (n < static_cast<int>(sizeof small)) {
    out.assign(small, n < 0 ? 0 : n);
  } else {
    out.resize(n);
    std::vsnprintf(out.data(), n + 1, format, again);
  }
  va_end(again);
  return out;
}

// "1 entry", "3 entries": a count and its noun.
inline std::string Count(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// The document and a newline; invalid UTF-8 (paths are bytes) becomes
// U+FFFD instead of throwing. `indent` -1: one line.
inline std::string Dump(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace) + '\n';
}

}  // namespace dlfs::report_internal
