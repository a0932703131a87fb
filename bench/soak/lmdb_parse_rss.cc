// Replays LMDB inputs (e.g. the lmdb fuzzer's corpus) through the calls
// fuzz/lmdb_fuzzer.cc makes -- LmdbRecordMap::Build with and without
// overflow-header checks, ParseDatum on the input and on each value -- in a
// plain build, LOOPS times, printing RSS after each pass: whether memory
// grows with the library alone (docs/reliability.md, long fuzz runs). With
// MUTATE=1 in the environment each pass first changes 1-8 random bytes of
// every input (seeded, so repeatable): each execution then sees a new input,
// as under a fuzzer, which a cache keyed by input contents would show.
//   g++ -std=c++20 -O2 -Iinclude bench/soak/lmdb_parse_rss.cc -o lmdb_parse_rss \
//     build/libdlfs.a -lnbd -luring -lzstd -lturbojpeg -lspng -larchive -lz -llmdb -lfuse3
//   ./lmdb_parse_rss 30 build-fuzz/corpus/lmdb/*
//   MUTATE=1 ./lmdb_parse_rss 300 build-fuzz/corpus/lmdb/*
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "dlfs/lmdb.h"

namespace {

long RssKb() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * (::sysconf(_SC_PAGESIZE) / 1024);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s LOOPS FILE...\n", argv[0]);
    return 2;
  }
  const int loops = std::atoi(argv[1]);
  std::vector<std::vector<char>> inputs;
  for (int a = 2; a < argc; ++a) {
    std::ifstream f(argv[a], std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "%s: cannot read\n", argv[a]);
      return 2;
    }
    inputs.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  const std::string path = "/dev/shm/lmdb_parse_rss." + std::to_string(::getpid()) + ".mdb";
  const bool mutate = std::getenv("MUTATE") != nullptr;
  std::mt19937_64 rng(1);
  uint64_t runs = 0;
  for (int loop = 0; loop < loops; ++loop) {
    for (std::vector<char>& d : inputs) {
      for (int k = mutate && !d.empty() ? 1 + static_cast<int>(rng() % 8) : 0; k > 0; --k) {
        d[rng() % d.size()] = static_cast<char>(rng());
      }
      const auto* bytes = reinterpret_cast<const std::byte*>(d.data());
      std::ofstream(path, std::ios::binary | std::ios::trunc).write(d.data(), d.size());
      (void)dlfs::ParseDatum({bytes, d.size()});
      for (const bool check : {true, false}) {
        dlfs::LmdbMapOptions options;
        options.check_overflow_headers = check;
        auto map = dlfs::LmdbRecordMap::Build(path, options);
        if (!map.ok()) continue;
        for (uint64_t i = 0; i < map->size() && i < 1000; ++i) {
          const uint64_t at = map->value_offset(i), len = map->value_length(i);
          if (at > d.size() || len > d.size() - at) continue;
          const std::vector<std::byte> value(bytes + at, bytes + at + len);
          (void)dlfs::ParseDatum(value);
        }
      }
      ++runs;
    }
    std::printf("pass %d: %llu runs, RSS %ld KB\n", loop, static_cast<unsigned long long>(runs),
                RssKb());
    std::fflush(stdout);
  }
  ::unlink(path.c_str());
  return 0;
}
