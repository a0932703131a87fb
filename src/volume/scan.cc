#include "volume/scan.h"

#include <algorithm>
#include <numeric>

namespace dlfs::volume_internal {

VolumeScan::VolumeScan(const Volume& volume, uint64_t window_bytes) : volume_(volume) {
  const SampleDirectory& dir = volume.directory();
  order_.resize(dir.size());
  std::iota(order_.begin(), order_.end(), uint64_t{0});
  // Target by target, each in offset order: large sequential reads per file.
  std::sort(order_.begin(), order_.end(), [&](uint64_t a, uint64_t b) {
    const SampleInfo x = dir.sample(a), y = dir.sample(b);
    return x.target != y.target ? x.target < y.target : x.offset < y.offset;
  });
  uint32_t target = 0;
  uint64_t begin = 0;
  for (size_t k = 0; k < order_.size(); ++k) {
    const SampleInfo s = dir.sample(order_[k]);
    if (k == 0 || s.target != target || s.offset + s.length > begin + window_bytes) {
      starts_.push_back(k);
      target = s.target;
      begin = s.offset;
    }
  }
  starts_.push_back(order_.size());
}

uint64_t VolumeScan::window_bytes(size_t w) const {
  const SampleDirectory& dir = volume_.directory();
  const SampleInfo first = dir.sample(order_[starts_[w]]);
  uint64_t end = first.offset;
  for (size_t k = starts_[w]; k < starts_[w + 1]; ++k) {
    const SampleInfo s = dir.sample(order_[k]);
    end = std::max(end, s.offset + s.length);
  }
  return end - first.offset;
}

uint32_t VolumeScan::window_target(size_t w) const {
  return volume_.directory().sample(order_[starts_[w]]).target;
}

uint64_t VolumeScan::window_offset(size_t w) const {
  return volume_.directory().sample(order_[starts_[w]]).offset;
}

Status VolumeScan::Read(size_t w, std::vector<std::byte>* buffer, const Visit& visit) const {
  const SampleDirectory& dir = volume_.directory();
  const SampleInfo first = dir.sample(order_[starts_[w]]);
  const TargetInfo& target = volume_.info().target_details[first.target];
  const uint64_t n = window_bytes(w);
  buffer->resize(n);
  const Status window =
      volume_.ReadTarget(first.target, buffer->data(), n, first.offset, target.path);
  std::vector<std::byte> alone;
  for (size_t k = starts_[w]; k < starts_[w + 1]; ++k) {
    const uint64_t i = order_[k];
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
