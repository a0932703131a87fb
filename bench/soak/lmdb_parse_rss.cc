// Replays LMDB inputs (e.g. the lmdb fuzzer's corpus) through the calls
// fuzz/lmdb_fuzzer.cc makes -- LmdbRecordMap::Build with and without
// overflow-header checks, ParseDatum on the input and on each value -- in a
// plain build, LOOPS times, printing RSS after each pass: whether memory
// grows with the library alone (docs/reliability.md, long fuzz runs).
//   g++ -std=c++20 -O2 -Iinclude bench/soak/lmdb_parse_rss.cc -o lmdb_parse_rss \
//     build/libdlfs.a -lnbd -luring -lzstd -lturbojpeg -lspng -larchive -lz -llmdb -lfuse3
//   ./lmdb_parse_rss 30 build-fuzz/corpus/lmdb/*
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
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
  uint64_t runs = 0;
  for (int loop = 0; loop < loops; ++loop) {
    for (const std::vector<char>& d : inputs) {
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
