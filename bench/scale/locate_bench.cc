// Locating samples in a volume's directory: the rate of SampleDirectory::
// Locate (index -> target, offset, length, CRC, label) for random indices
// on one core, the first time each block is used (its check included) and
// once every block was checked, and of path lookups when the samples have
// names. Prints one JSON object (bench/scale/scale_bench.py reads it).
//
//   build/bench/dlfs_locate_bench VOLUME [--lookups 10000000] [--paths 100000]
#include <CLI/CLI.hpp>
#include <cinttypes>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/clock.h"
#include "dlfs/volume.h"

using namespace dlfs;

int main(int argc, char** argv) {
  CLI::App app{"Rate of locating random samples in a volume's directory"};
  std::string path;
  uint64_t lookups = 10000000, paths = 100000, seed = 1;
  app.add_option("volume", path, "Volume to measure")->required();
  app.add_option("--lookups", lookups, "Random indices located per pass");
  app.add_option("--paths", paths, "Random path lookups (volumes with names)");
  app.add_option("--seed", seed, "Seed of the random indices");
  CLI11_PARSE(app, argc, argv);

  double t0 = Now();
  auto opened = Volume::Open(path);
  const double open_s = Now() - t0;
  if (!opened.ok()) {
    std::fprintf(stderr, "%s\n", opened.status().ToString().c_str());
    return 2;
  }
  const SampleDirectory& dir = (*opened)->directory();
  const uint64_t n = dir.size();
  if (n == 0) {
    std::fprintf(stderr, "%s: no samples\n", path.c_str());
    return 2;
  }
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> indices(std::min<uint64_t>(lookups, uint64_t{1} << 24));
  for (uint64_t& i : indices) i = rng() % n;
  // Pass 1: blocks checked as they are first used; pass 2: all checked.
  auto pass = [&]() {
    uint64_t sum = 0, done = 0;
    const double start = Now();
    while (done < lookups) {
      for (uint64_t k = 0; k < indices.size() && done < lookups; ++k, ++done) {
        const Result<SampleInfo> s = dir.Locate(indices[k]);
        sum += s.ok() ? s->offset + s->length : 1;
      }
    }
    const double seconds = Now() - start;
    return std::pair<double, uint64_t>(static_cast<double>(done) / seconds, sum);
  };
  const auto [first_rate, sum1] = pass();
  const auto [warm_rate, sum2] = pass();
  // As the loader's planner locates a batch: LocateMany over 256 at a time.
  double many_rate = 0;
  {
    std::vector<SampleInfo> out(256);
    std::vector<Status> failed;
    uint64_t done = 0, sum = 0;
    const double start = Now();
    while (done < lookups) {
      for (uint64_t k = 0; k + 256 <= indices.size() && done < lookups; k += 256, done += 256) {
        dir.LocateMany(std::span(indices).subspan(k, 256), out, &failed);
        sum += out[0].offset + out[255].length;
      }
    }
    many_rate = static_cast<double>(done) / (Now() - start);
    if (sum == 0) std::fprintf(stderr, " ");
  }
  double path_rate = 0;
  if (dir.has_names() && paths > 0) {
    std::vector<std::string> names;
    for (uint64_t k = 0; k < paths; ++k) names.push_back(dir.Path(rng() % n));
    uint64_t found = 0;
    const double start = Now();
    for (const std::string& p : names) found += dir.Lookup(p).ok();
    path_rate = static_cast<double>(paths) / (Now() - start);
    if (found != paths) std::fprintf(stderr, "only %" PRIu64 " of the paths found\n", found);
  }
  std::printf("{\"volume\": \"%s\", \"samples\": %" PRIu64
              ", \"compact\": %s, \"open_seconds\": %.6f, "
              "\"locate_per_second_first_use\": %.0f, \"locate_per_second\": %.0f, "
              "\"locate_many_per_second\": %.0f, \"path_lookups_per_second\": %.0f, "
              "\"checksum\": %" PRIu64 "}\n",
              path.c_str(), n, dir.compact() ? "true" : "false", open_s, first_rate, warm_rate,
              many_rate, path_rate, (sum1 ^ sum2) & 1);
  return 0;
}
