// Adds a scope's wall time to one of LmdbioTimes' fields.
#pragma once

#include "common/clock.h"

namespace dlfs::lmdbio {

class Stopwatch {
 public:
  explicit Stopwatch(double& acc) : acc_(acc), start_(Now()) {}
  ~Stopwatch() { acc_ += Now() - start_; }
  Stopwatch(const Stopwatch&) = delete;
  Stopwatch& operator=(const Stopwatch&) = delete;

 private:
  double& acc_;
  double start_;
};

}  // namespace dlfs::lmdbio
