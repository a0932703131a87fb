#include "volume/scan.h"

#include <algorithm>

namespace dlfs::volume_internal {

VolumeScan::VolumeScan(const Volume& volume, uint64_t window_bytes) : volume_(volume) {
  const SampleDirectory& dir = volume.directory();
  if (dir.compact()) {
    ScanCompact(window_bytes);
    return;
  }
  const uint64_t n = dir.size();
  // Target by target, each in offset order: large sequential reads per file.
  auto before = [](const SampleInfo& x, const SampleInfo& y) {
    return x.target != y.target ? x.target < y.target : x.offset < y.offset;
  };
  // A packed volume's samples are stored in index order: then no order is
  // kept (nor memory touched for one) and no sort is made (one through
  // dir.sample() took 10-16 ms of a 70,000-sample volume, on the cores
  // the readers use).
  bool sorted = true;
  for (uint64_t i = 1; i < n && sorted; ++i) sorted = !before(dir.sample(i), dir.sample(i - 1));
  if (!sorted) {
    struct Place {
      SampleInfo info;
      uint64_t index;
    };
    std::vector<Place> places(n);
    for (uint64_t i = 0; i < n; ++i) places[i] = {dir.sample(i), i};
    std::sort(places.begin(), places.end(),
              [&](const Place& a, const Place& b) { return before(a.info, b.info); });
    order_.resize(n);
    for (uint64_t k = 0; k < n; ++k) order_[k] = places[k].index;
  }
  uint32_t target = 0;
  uint64_t begin = 0, end = 0;
  for (uint64_t k = 0; k < n; ++k) {
    const SampleInfo s = dir.sample(index(k));
    if (k == 0 || s.target != target || s.offset + s.length > begin + window_bytes) {
      if (k > 0) extents_.push_back(end - begin);
      starts_.push_back(k);
      target = s.target;
      begin = end = s.offset;
    }
    end = std::max(end, s.offset + s.length);
  }
  if (n > 0) extents_.push_back(end - begin);
  starts_.push_back(n);
}

void VolumeScan::ScanCompact(uint64_t window_bytes) {
  compact_ = true;
  const SampleDirectory& dir = volume_.directory();
  const std::vector<TargetInfo>& targets = volume_.info().target_details;
  // Each target's blocks in index order, which is their storage order.
  std::vector<std::vector<uint64_t>> of(targets.size());
  std::vector<std::vector<uint64_t>> offsets(targets.size());
  for (uint64_t b = 0; b < dir.block_count(); ++b) {
    const SampleDirectory::BlockPlace p = dir.block_place(b);
    // A damaged entry: its block still goes somewhere, and reading it
    // reports the block's error.
    const uint32_t t = p.target < targets.size() ? p.target : 0;
    of[t].push_back(b);
    offsets[t].push_back(p.data_offset);
  }
  compact_first_.push_back(0);
  auto close_window = [&](uint32_t t, uint64_t begin, uint64_t end) {
    compact_first_.push_back(compact_pieces_.size());
    compact_offsets_.push_back(begin);
    compact_targets_.push_back(t);
    extents_.push_back(end - begin);
  };
  for (uint32_t t = 0; t < targets.size(); ++t) {
    const uint64_t region_end = targets[t].data_offset + targets[t].data_length;
    // Where block k of this target spans: to the next one's start.
    auto span = [&](size_t k) {
      const uint64_t begin = std::min(offsets[t][k], region_end);
      const uint64_t end = k + 1 < of[t].size() ? offsets[t][k + 1] : region_end;
      return std::pair<uint64_t, uint64_t>(begin, std::clamp(end, begin, region_end));
    };
    bool open = false;
    uint64_t w_begin = 0, w_end = 0;
    for (size_t k = 0; k < of[t].size(); ++k) {
      const uint64_t b = of[t][k];
      const uint64_t count = std::min(dir.block_samples(), dir.size() - b * dir.block_samples());
      const auto [begin, end] = span(k);
      if (open && end - w_begin <= window_bytes) {  // joins the open window
        compact_pieces_.push_back({b, 0, count});
        w_end = end;
        continue;
      }
      if (open) close_window(t, w_begin, w_end);
      open = false;
      if (end - begin <= window_bytes) {
        compact_pieces_.push_back({b, 0, count});
        open = true;
        w_begin = begin;
        w_end = end;
        continue;
      }
      // A block larger than a window: windows of its samples (located, so
      // the block is checked here; one that fails is one window whose
      // samples report its error).
      const uint64_t first = b * dir.block_samples();
      uint64_t j0 = 0, p_begin = begin, p_end = begin;
      for (uint64_t j = 0; j < count; ++j) {
        const Result<SampleInfo> s = dir.Locate(first + j);
        if (!s.ok()) {
          compact_pieces_.push_back({b, 0, count});
          close_window(t, begin, end);
          j0 = count;
          break;
        }
        const uint64_t s_end = std::clamp(s->offset + s->length, p_begin, end);
        if (j > j0 && s_end - p_begin > window_bytes) {
          compact_pieces_.push_back({b, j0, j});
          close_window(t, p_begin, p_end);
          j0 = j;
          p_begin = std::clamp(s->offset, p_end, end);
        }
        p_end = std::max(p_end, s_end);
      }
      if (j0 < count) {
        compact_pieces_.push_back({b, j0, count});
        close_window(t, p_begin, end);
      }
    }
    if (open) close_window(t, w_begin, w_end);
  }
  starts_.assign(compact_offsets_.size() + 1, 0);  // windows() counts these
}

Status VolumeScan::ReadCompact(size_t w, std::vector<std::byte>* buffer, const Visit& visit) const {
  const SampleDirectory& dir = volume_.directory();
  const uint32_t t = compact_targets_[w];
  const TargetInfo& target = volume_.info().target_details[t];
  const uint64_t first = compact_offsets_[w];
  const uint64_t n = extents_[w];
  buffer->resize(n);
  const Status window = volume_.ReadTarget(t, buffer->data(), n, first, target.path);
  std::vector<std::byte> alone;
  for (size_t k = compact_first_[w]; k < compact_first_[w + 1]; ++k) {
    const Piece& piece = compact_pieces_[k];
    const uint64_t base = piece.block * dir.block_samples();
    for (uint64_t i = base + piece.first; i < base + piece.end; ++i) {
      const Result<SampleInfo> located = dir.Locate(i);
      if (!located.ok()) {
        visit(i, {}, located.status());  // a block that fails its check: every sample of it
        continue;
      }
      const SampleInfo& s = *located;
      if (window.ok() && s.target == t && s.offset >= first && s.offset + s.length <= first + n) {
        visit(i, {buffer->data() + (s.offset - first), s.length}, Status::Ok());
        continue;
      }
      alone.resize(s.length);
      std::string what =
          volume_.path() + ": sample " + std::to_string(i) + " '" + dir.Path(i) + "'";
      if (s.target != 0) what += " on target " + std::to_string(s.target);
      const Status read = volume_.ReadTarget(s.target, alone.data(), s.length, s.offset, what);
      visit(i, alone, read);
    }
  }
  return window;
}

uint32_t VolumeScan::window_target(size_t w) const {
  if (compact_) return compact_targets_[w];
  return volume_.directory().sample(index(starts_[w])).target;
}

uint64_t VolumeScan::window_offset(size_t w) const {
  if (compact_) return compact_offsets_[w];
  return volume_.directory().sample(index(starts_[w])).offset;
}

Status VolumeScan::Read(size_t w, std::vector<std::byte>* buffer, const Visit& visit) const {
  if (compact_) return ReadCompact(w, buffer, visit);
  const SampleDirectory& dir = volume_.directory();
  const SampleInfo first = dir.sample(index(starts_[w]));
  const TargetInfo& target = volume_.info().target_details[first.target];
  const uint64_t n = extents_[w];
  buffer->resize(n);
  const Status window =
      volume_.ReadTarget(first.target, buffer->data(), n, first.offset, target.path);
  std::vector<std::byte> alone;
  for (size_t k = starts_[w]; k < starts_[w + 1]; ++k) {
    const uint64_t i = index(k);
    const SampleInfo s = dir.sample(i);
    if (window.ok()) {
      visit(i, {buffer->data() + (s.offset - first.offset), s.length}, Status::Ok());
      continue;
    }
    // Part of the window could not be read: which samples are lost is only
    // known sample by sample.
    alone.resize(s.length);
    // "v.dlfs: sample 7 'train/00007': read at offset 20480: Input/output error"
    std::string what = volume_.path() + ": sample " + std::to_string(i) + " '" + dir.Path(i) + "'";
    if (s.target != 0) what += " on target " + std::to_string(s.target) + " (" + target.path + ")";
    const Status read = volume_.ReadTarget(s.target, alone.data(), s.length, s.offset, what);
    visit(i, alone, read);
  }
  return window;
}

}  // namespace dlfs::volume_internal
