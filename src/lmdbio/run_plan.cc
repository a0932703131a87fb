#include "lmdbio/run_plan.h"

#include <algorithm>

namespace dlfs::lmdbio {

std::vector<Run> PlanRuns(std::vector<Extent> extents, uint64_t file_size, uint64_t base) {
  std::sort(extents.begin(), extents.end(),
            [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
  std::vector<Run> runs;
  for (const Extent& e : extents) {
    const uint64_t start = AlignDown(e.offset);
    const uint64_t end = std::min(AlignUp(e.offset + e.length), file_size);
    if (!runs.empty() && start <= runs.back().file + runs.back().length + kMergeGap) {
      Run& r = runs.back();
      r.length = std::max(r.length, end - r.file);
    } else {
      runs.push_back({start, end - start, 0});
    }
  }
  uint64_t w = base;
  for (Run& r : runs) {
    r.window = w;
    w += AlignUp(r.length);
  }
  return runs;
}

uint64_t RunsEnd(const std::vector<Run>& runs, uint64_t base) {
  return runs.empty() ? base : runs.back().window + AlignUp(runs.back().length);
}

uint64_t Locate(const std::vector<Run>& runs, uint64_t offset) {
  auto it = std::upper_bound(runs.begin(), runs.end(), offset,
                             [](uint64_t o, const Run& r) { return o < r.file; });
  --it;
  return it->window + (offset - it->file);
}

const Run* FindRun(const std::vector<Run>& runs, uint64_t offset) {
  auto it = std::upper_bound(runs.begin(), runs.end(), offset,
                             [](uint64_t o, const Run& r) { return o < r.file; });
  if (it == runs.begin() || offset >= std::prev(it)->file + std::prev(it)->length) return nullptr;
  return &*std::prev(it);
}

std::pair<uint64_t, uint64_t> ReaderPart(uint64_t total, uint32_t readers, uint32_t k) {
  const uint64_t base = total / readers, extra = total % readers;
  const uint64_t begin = k * base + std::min<uint64_t>(k, extra);
  return {begin, begin + base + (k < extra ? 1 : 0)};
}

std::vector<Run> ReaderShare(const std::vector<Run>& runs, uint64_t total, uint32_t readers,
                             uint32_t k, uint64_t read_bytes) {
  const uint64_t share = AlignUp((total + readers - 1) / readers);
  const uint64_t cap = std::max(kAlign, std::min(AlignUp(read_bytes), share));
  std::vector<Run> mine;
  for (const Run& r : runs) {
    for (uint64_t at = 0; at < r.length; at += cap) {
      const Run piece{r.file + at, std::min(cap, r.length - at), r.window + at};
      if (piece.window * readers / std::max<uint64_t>(total, 1) == k) mine.push_back(piece);
    }
  }
  return mine;
}

}  // namespace dlfs::lmdbio
