// Helpers shared by the standalone peer benchmarks (io/file_reader.cc,
// io/lmdb_bench.cc; bench/CMakeLists.txt puts this folder on their include path),
// which deliberately do not link the dlfs library.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"

namespace dlfs_bench {

using dlfs::CpuSeconds;  // header-only: the peers still do not link dlfs
using dlfs::Now;

// Fisher-Yates with a fixed generator and an unbiased bounded draw, so the
// order depends on the seed only (std::shuffle's is the library's choice).
inline void Shuffle(std::vector<std::string>* v, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = v->size(); i > 1; --i) {
    const uint64_t bound = i;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t r;
    do r = rng();
    while (r >= limit);
    std::swap((*v)[i - 1], (*v)[r % bound]);
  }
}

// Prints "PROGRAM: MESSAGE" and exits with 2 (bad input).
[[noreturn]] inline void Die(const char* program, const std::string& msg) {
  std::fprintf(stderr, "%s: %s\n", program, msg.c_str());
  std::exit(2);
}

}  // namespace dlfs_bench
