#include "loader/memory_tier.h"

#include <algorithm>

#include "common/file_util.h"
#include "loader/batch_read.h"

namespace dlfs::loader_internal {

namespace {

struct Span {
  uint32_t target;
  uint64_t begin;  // aligned
  uint64_t end;
};

Span AlignedExtent(const SampleInfo& s, uint64_t a) {
  const uint64_t begin = s.offset / a * a;
  // An empty sample still owns a block, so its (empty) span points into
  // the tier like any other.
  return {s.target, begin, std::max((s.offset + s.length + a - 1) / a * a, begin + a)};
}

}  // namespace

std::shared_ptr<MemoryTier> MemoryTier::Create(const Volume& volume,
                                               std::span<const uint64_t> subset, uint32_t alignment,
                                               uint64_t budget) {
  const SampleDirectory& dir = volume.directory();
  const uint64_t a = std::max<uint32_t>(alignment, 1);
  const uint64_t n = subset.empty() ? dir.size() : subset.size();
  if (n == 0 || budget == 0) return nullptr;
  // The payload alone must fit before anything is sized by it.
  uint64_t payload = 0;
  if (subset.empty()) {
    payload = volume.info().data_bytes;
  } else {
    for (uint64_t i : subset) payload += dir.sample(i).length;
  }
  if (payload > budget) return nullptr;

  std::shared_ptr<MemoryTier> tier(new MemoryTier(volume, static_cast<uint32_t>(a)));
  std::vector<Span> ext(n);
  bool sorted = true;
  for (uint64_t k = 0; k < n; ++k) {
    ext[k] = AlignedExtent(dir.sample(subset.empty() ? k : subset[k]), a);
    if (k > 0 && (ext[k].target < ext[k - 1].target ||
                  (ext[k].target == ext[k - 1].target && ext[k].begin < ext[k - 1].begin))) {
      sorted = false;
    }
  }
  if (!sorted) {
    std::sort(ext.begin(), ext.end(), [](const Span& x, const Span& y) {
      return x.target != y.target ? x.target < y.target : x.begin < y.begin;
    });
  }
  tier->runs_.resize(volume.target_count());
  uint64_t total = 0;
  for (size_t k = 0; k < ext.size();) {
    Span run = ext[k++];
    while (k < ext.size() && ext[k].target == run.target && ext[k].begin <= run.end + kMergeGap) {
      run.end = std::max(run.end, ext[k++].end);
    }
    tier->runs_[run.target].push_back(Run{run.begin, run.end - run.begin, total, 0});
    total += run.end - run.begin;
    if (total > budget) return nullptr;
  }
  tier->memory_ = AllocateLarge(total);
  if (!tier->memory_) return nullptr;
  tier->bytes_ = total;
  for (auto& runs : tier->runs_) {
    for (Run& r : runs) {
      r.first_chunk = tier->chunks_.size();
      for (uint64_t at = 0; at < r.length; at += kChunkBytes) {
        tier->chunks_.push_back(Chunk{static_cast<uint32_t>(&runs - tier->runs_.data()),
                                      r.offset + at, std::min(kChunkBytes, r.length - at),
                                      tier->memory_.get() + r.memory_offset + at});
      }
    }
  }
  tier->loaded_.assign(tier->chunks_.size(), 0);
  if (!subset.empty()) {
    tier->subset_ = true;
    tier->subset_sorted_.assign(subset.begin(), subset.end());
    std::sort(tier->subset_sorted_.begin(), tier->subset_sorted_.end());
  }
  return tier;
}

const MemoryTier::Run& MemoryTier::RunOf(const SampleInfo& s) const {
  const std::vector<Run>& runs = runs_[s.target];
  auto it = std::upper_bound(runs.begin(), runs.end(), s.offset,
                             [](uint64_t off, const Run& r) { return off < r.offset; });
  return *(it - 1);  // the tier holds the sample: some run starts at or before it
}

std::pair<size_t, size_t> MemoryTier::ChunksOf(const SampleInfo& s) const {
  const Run& r = RunOf(s);
  const Span e = AlignedExtent(s, alignment_);
  const uint64_t end = std::min(e.end, r.offset + r.length);
  return {r.first_chunk + (e.begin - r.offset) / kChunkBytes,
          r.first_chunk + (end - 1 - r.offset) / kChunkBytes};
}

std::vector<size_t> MemoryTier::NeedOrder(std::span<const uint64_t> order) const {
  const SampleDirectory& dir = volume_.directory();
  std::vector<uint8_t> seen(chunks_.size(), 0);
  std::vector<size_t> out;
  out.reserve(chunks_.size());
  for (uint64_t i : order) {
    const auto [first, last] = ChunksOf(dir.sample(i));
    for (size_t c = first; c <= last; ++c) {
      if (!seen[c]) {
        seen[c] = 1;
        out.push_back(c);
      }
    }
  }
  for (size_t c = 0; c < chunks_.size(); ++c) {
    if (!seen[c]) out.push_back(c);
  }
  return out;
}

std::vector<uint64_t> MemoryTier::SamplesIn(size_t c) const {
  const SampleDirectory& dir = volume_.directory();
  const Chunk& ch = chunks_[c];
  std::vector<std::pair<uint64_t, uint64_t>> found;  // (offset, index)
  auto consider = [&](uint64_t i) {
    const SampleInfo s = dir.sample(i);
    const Span e = AlignedExtent(s, alignment_);
    if (e.target == ch.target && e.begin < ch.offset + ch.length && ch.offset < e.end) {
      found.emplace_back(s.offset, i);
    }
  };
  if (subset_) {
    for (uint64_t i : subset_sorted_) consider(i);
  } else {
    for (uint64_t i = 0; i < dir.size(); ++i) consider(i);
  }
  std::sort(found.begin(), found.end());
  std::vector<uint64_t> out;
  for (const auto& f : found) out.push_back(f.second);
  return out;
}

MemoryTier::Extent MemoryTier::SampleExtent(uint64_t index) const {
  const SampleInfo s = volume_.directory().sample(index);
  const Run& r = RunOf(s);
  const auto e = AlignedExtent(s, alignment_);
  const uint64_t end = std::min(e.end, r.offset + r.length);
  return {s.target, e.begin, end - e.begin, memory_.get() + r.memory_offset + (e.begin - r.offset)};
}

void MemoryTier::MarkLoaded(size_t c, const std::map<uint64_t, Status>& failed) {
  {
    std::lock_guard lock(mu_);
    if (!loaded_[c]) {
      loaded_[c] = 1;
      ++loaded_count_;
    }
    for (const auto& [i, st] : failed) failed_.emplace(i, st);
    UpdateComplete();
  }
  cv_.notify_all();
}

std::vector<uint64_t> MemoryTier::BeginRetry() {
  std::lock_guard lock(mu_);
  std::vector<uint64_t> out;
  for (const auto& [i, st] : failed_) {
    out.push_back(i);
    retrying_[i] = true;
  }
  failed_.clear();
  UpdateComplete();
  return out;
}

void MemoryTier::MarkRetried(uint64_t index, const Status& status) {
  {
    std::lock_guard lock(mu_);
    retrying_.erase(index);
    if (!status.ok()) failed_[index] = status;
    UpdateComplete();
  }
  cv_.notify_all();
}

void MemoryTier::UpdateComplete() {
  complete_.store(loaded_count_ == chunks_.size() && failed_.empty() && retrying_.empty(),
                  std::memory_order_release);
}

Status MemoryTier::Wait(std::span<const uint64_t> indices) const {
  if (complete()) return Status::Ok();
  const SampleDirectory& dir = volume_.directory();
  std::vector<std::pair<size_t, size_t>> chunks(indices.size());
  for (size_t k = 0; k < indices.size(); ++k) chunks[k] = ChunksOf(dir.sample(indices[k]));
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] {
    for (size_t k = 0; k < indices.size(); ++k) {
      for (size_t c = chunks[k].first; c <= chunks[k].second; ++c) {
        if (!loaded_[c]) return false;
      }
      if (!retrying_.empty() && retrying_.count(indices[k])) return false;
    }
    return true;
  });
  if (failed_.empty()) return Status::Ok();
  std::vector<size_t> positions;
  std::vector<Status> failures(indices.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    auto it = failed_.find(indices[k]);
    if (it != failed_.end()) {
      positions.push_back(k);
      failures[k] = it->second;
    }
  }
  if (positions.empty()) return Status::Ok();
  return UnreadableSamples(volume_, indices, positions, failures);
}

std::span<const std::byte> MemoryTier::Sample(uint64_t index) const {
  const SampleInfo s = volume_.directory().sample(index);
  const Run& r = RunOf(s);
  return {memory_.get() + r.memory_offset + (s.offset - r.offset), s.length};
}

}  // namespace dlfs::loader_internal
