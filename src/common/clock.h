// Monotonic wall-clock time for timing breakdowns.
#pragma once

#include <chrono>

namespace dlfs {

// Seconds on the steady clock since an arbitrary epoch; only differences mean
// anything.
inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace dlfs
