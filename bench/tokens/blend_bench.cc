// A blend's decisions per second (TokenBlend, src/tokens/blend.h): which
// source each window of the stream draws from, for K = 1 .. 1,000 sources,
// one decision at a time as the token loader makes them; and the closed-form
// counts a resume or a batch start needs. The goal of issue 48: >= 20 M
// decisions per second per core at K = 100. See README.md.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "tokens/blend.h"

namespace {

using dlfs::tokens_internal::TokenBlend;

TokenBlend Blend(int64_t k) {
  std::vector<double> weights(static_cast<size_t>(k));
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = 1.0 + static_cast<double>(i % 7);
  return *TokenBlend::Create(weights, 42);
}

void BM_Decisions(benchmark::State& state) {
  const TokenBlend blend = Blend(state.range(0));
  std::vector<uint64_t> counts(static_cast<size_t>(state.range(0)));
  uint64_t g = 0;
  for (auto _ : state) {
    for (int i = 0; i < 1024; ++i) ++counts[blend.SourceOf(g++)];
  }
  benchmark::DoNotOptimize(counts.data());
  state.SetItemsProcessed(state.iterations() * 1024);
}
BENCHMARK(BM_Decisions)->Arg(1)->Arg(10)->Arg(100)->Arg(1000);

// Where every source stands at a far position (a resume): K floor sums.
void BM_CountsAt(benchmark::State& state) {
  const TokenBlend blend = Blend(state.range(0));
  std::vector<uint64_t> counts(static_cast<size_t>(state.range(0)));
  uint64_t g = uint64_t{1} << 40;
  for (auto _ : state) {
    blend.Counts(g++, counts);
    benchmark::DoNotOptimize(counts.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CountsAt)->Arg(10)->Arg(100)->Arg(1000);

}  // namespace

BENCHMARK_MAIN();
