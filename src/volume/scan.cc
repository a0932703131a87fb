#include "volume/scan.h"

#include <algorithm>

namespace dlfs::volume_internal {

VolumeScan::VolumeScan(const Volume& volume, uint64_t window_bytes) : volume_(volume) {
  const SampleDirectory& dir = volume.directory();
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

uint32_t VolumeScan::window_target(size_t w) const {
  return volume_.directory().sample(index(starts_[w])).target;
}

uint64_t VolumeScan::window_offset(size_t w) const {
  return volume_.directory().sample(index(starts_[w])).offset;
}

Status VolumeScan::Read(size_t w, std::vector<std::byte>* buffer, const Visit& visit) const {
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
