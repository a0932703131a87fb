// The epoch order's cost per index: order version 2 (EpochPermutation, a
// Feistel bijection computed per position) against the Fisher-Yates shuffle
// it replaced (order version 1, the peer: a permutation of all n samples
// built in memory before the first batch), in the same run. See README.md.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <numeric>
#include <string_view>
#include <vector>

#include "common/xoshiro.h"
#include "dlfs/sampler.h"

namespace {

using dlfs::EpochPermutation;

constexpr uint64_t kBatch = 256;

// The sizes: 1e6 and 1e8 (the measurement), 1e9 (its goal), 2^30 + 1
// (just past a power of two: the worst case of a power-of-two domain) and
// 2^64 - 1 (the largest).
void Sizes(benchmark::internal::Benchmark* b) {
  for (int64_t n : {int64_t{1000000}, int64_t{100000000}, int64_t{1000000000},
                    (int64_t{1} << 30) + 1, int64_t{-1}}) {
    b->Arg(n);
  }
}
uint64_t SizeOf(const benchmark::State& state) { return static_cast<uint64_t>(state.range(0)); }

// A loader's use: the samples of consecutive positions, a batch at a time.
void BM_Order(benchmark::State& state) {
  const uint64_t n = SizeOf(state);
  const EpochPermutation p(n, 7, 3);
  std::vector<uint64_t> out(kBatch);
  uint64_t first = 0;
  for (auto _ : state) {
    p.Map(first, kBatch, out.data());
    benchmark::DoNotOptimize(out.data());
    first += kBatch;
    if (first + kBatch > n) first = 0;
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
  state.counters["rounds"] = p.rounds();
}
BENCHMARK(BM_Order)->Apply(Sizes);

// A rank's order (8 ranks, rank 3), and the same after two elastic resumes:
// what the Loader's I/O threads ask for each batch they plan.
void BM_RankOrder(benchmark::State& state) {
  const uint64_t n = SizeOf(state);
  const bool resumed = state.range(1) != 0;
  auto sampler = dlfs::Sampler::Create(n, {.seed = 7, .rank = 3, .world_size = 8});
  const std::vector<dlfs::EpochSegment> done = {{4, 2, 256, 1001}, {16, 1, 128, 77}};
  const dlfs::RankOrder o = resumed ? *sampler->Ranked(3, done, {}) : sampler->Ranked(3);
  std::vector<uint64_t> out(kBatch);
  uint64_t first = 0;
  for (auto _ : state) {
    o.Fill(first, kBatch, out.data());
    benchmark::DoNotOptimize(out.data());
    first += kBatch;
    if (first + kBatch > o.size()) first = 0;
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
}
BENCHMARK(BM_RankOrder)->Args({100000000, 0})->Args({100000000, 1})->Args({1000000000, 1});

// The peer: order version 1, as dlfs computed it before (sampler.cc at
// 1c88799): Fisher-Yates over [0, n), xoshiro256** seeded by SplitMix64,
// Lemire's bounded integers. Each iteration builds the whole permutation;
// items are its indices, so items/s compares with BM_Order's.
void BM_FisherYates(benchmark::State& state) {
  const uint64_t n = SizeOf(state);
  std::vector<uint64_t> p(n);
  for (auto _ : state) {
    std::iota(p.begin(), p.end(), uint64_t{0});
    uint64_t sm = 7 ^ (3 * 0xd1342543de82ef95ull + 0x2545f4914f6cdd1dull);
    uint64_t seeds[4];
    for (uint64_t& w : seeds) w = dlfs::SplitMixOutput(sm += dlfs::kSplitMixGamma);
    dlfs::Xoshiro256ss rng(seeds);
    for (uint64_t i = n - 1; i > 0; --i) std::swap(p[i], p[rng.Below(i + 1)]);
    benchmark::DoNotOptimize(p.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
  state.counters["bytes_per_index"] = sizeof(uint64_t);
}
BENCHMARK(BM_FisherYates)->Arg(1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FisherYates)->Arg(100000000)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--help") {
      std::printf(
          "dlfs_order_bench: the epoch order's indices per second per core, with the\n"
          "Fisher-Yates shuffle it replaced beside it (bench/order/README.md). The flags\n"
          "used there:\n"
          "  --benchmark_filter=REGEX    only the benchmarks matching REGEX, e.g. BM_Order\n"
          "  --benchmark_min_time=SECS   run each benchmark at least SECS seconds\n"
          "Google Benchmark's flags:\n");
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
