// Time for timing breakdowns and reports: monotonic wall-clock seconds and
// this process's (or thread's) CPU seconds. Every module times through
// these, so a figure in one report means the same as in another.
#pragma once

#include <sys/resource.h>
#include <time.h>

#include <chrono>

namespace dlfs {

// Seconds on the steady clock since an arbitrary epoch; only differences mean
// anything.
inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// User + system CPU seconds of this process (all threads) so far.
inline double CpuSeconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

// CPU seconds of the calling thread so far (nanosecond resolution).
inline double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace dlfs
