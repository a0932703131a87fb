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

Result<std::unique_ptr<IoEngine>> VolumeScan::CreateEngine(const Volume& volume,
                                                           const EngineOptions& base) {
  EngineOptions eo;
  eo.kind = EngineKind::kPread;
  eo.direct_io = false;
  eo.queue_depth = 1;
  eo.caller_thread = true;  // as the reads of Volume: timed on the scanning thread
  eo.nbd = base.nbd;
  eo.nbd.connections = 1;
  eo.faults.eio_target = base.faults.eio_target;
  eo.faults.eio_offset = base.faults.eio_offset;
  eo.faults.eio_length = base.faults.eio_length;
  return dlfs::CreateEngine(volume.OpenTargetPaths(), eo);
}

uint32_t VolumeScan::window_target(size_t w) const {
  if (compact_) return compact_targets_[w];
  return volume_.directory().sample(index(starts_[w])).target;
}

uint64_t VolumeScan::window_offset(size_t w) const {
  if (compact_) return compact_offsets_[w];
  return volume_.directory().sample(index(starts_[w])).offset;
}

template <typename Fn>
void VolumeScan::ForEachSample(size_t w, Fn&& fn) const {
  const SampleDirectory& dir = volume_.directory();
  if (!compact_) {
    for (size_t k = starts_[w]; k < starts_[w + 1]; ++k)
      fn(index(k), Result<SampleInfo>(dir.sample(index(k))));
    return;
  }
  for (size_t k = compact_first_[w]; k < compact_first_[w + 1]; ++k) {
    const Piece& piece = compact_pieces_[k];
    const uint64_t base = piece.block * dir.block_samples();
    // A block that fails its check: every sample of it reports that.
    for (uint64_t i = base + piece.first; i < base + piece.end; ++i) fn(i, dir.Locate(i));
  }
}

// One window as a ReadJob: round 0 reads its extent whole; round 1 reads,
// each on its own, the samples that read did not deliver (all of them when
// it failed; a sample of a compact block lying outside the window). Nothing
// is kept per sample of a window read whole (a window of small samples holds
// thousands, and fresh memory for them cost more than the read here).
class VolumeScan::WindowJob final : public io_internal::ReadJob {
 public:
  WindowJob(const VolumeScan& scan, size_t w, std::span<std::byte> window)
      : scan_(scan),
        w_(w),
        target_(scan.window_target(w)),
        offset_(scan.window_offset(w)),
        window_(window) {}

  bool NextRound(std::vector<ReadRequest>* out) override {
    out->clear();
    if (round_ == 0) {
      round_ = 1;
      out->push_back(
          ReadRequest{target_, offset_, window_.size(), window_.data(), ReadRequest::kNoSlot});
      return true;
    }
    if (round_ != 1) return false;
    round_ = 2;
    // Which samples are read alone: all when the window failed, else those
    // a compact directory places outside it (none in a tree directory).
    if (window_status_.ok() && !scan_.compact_) return false;
    uint64_t total = 0;
    scan_.ForEachSample(w_, [&](uint64_t i, const Result<SampleInfo>& s) {
      if (!s.ok() || (window_status_.ok() && Inside(*s))) return;
      alone_.push_back(Alone{i, *s, total, Status::Ok()});
      total += s->length;
    });
    if (alone_.empty()) return false;
    alone_bytes_.resize(total);
    for (const Alone& a : alone_) {
      out->push_back(ReadRequest{a.info.target, a.info.offset, a.info.length,
                                 alone_bytes_.data() + a.at, ReadRequest::kNoSlot});
    }
    return true;
  }

  void Complete(size_t r, const Status& status) override {
    if (round_ == 1) {
      window_status_ = status;
    } else if (r < alone_.size()) {
      alone_[r].read = status;
    }
  }

  // The engine broke: nothing of the window counts as read.
  void Fail(const Status& status) {
    window_status_ = status;
    broken_ = status;
  }

  const Status& window_status() const { return window_status_; }

  // Each sample's bytes (or why not), in storage order.
  void Visit(const Volume& volume, const VolumeScan::Visit& visit) const {
    const SampleDirectory& dir = volume.directory();
    size_t next = 0;  // into alone_, which is in the same order
    scan_.ForEachSample(w_, [&](uint64_t i, const Result<SampleInfo>& s) {
      if (!s.ok()) {
        visit(i, {}, s.status());
        return;
      }
      Status read = broken_;
      std::span<const std::byte> bytes;
      if (next < alone_.size() && alone_[next].index == i) {
        const Alone& a = alone_[next++];
        read = a.read;
        if (read.ok()) bytes = {alone_bytes_.data() + a.at, a.info.length};
      } else if (read.ok()) {
        bytes = window_.subspan(s->offset - offset_, s->length);
      }
      if (read.ok()) {
        visit(i, bytes, Status::Ok());
        return;
      }
      // "v.dlfs: sample 7 'train/00007': ... Input/output error"
      std::string what = volume.path() + ": sample " + std::to_string(i) + " '" + dir.Path(i) + "'";
      if (s->target != 0) {
        what += " on target " + std::to_string(s->target) + " (" +
                volume.info().target_details[s->target].path + ")";
      }
      visit(i, {}, read.WithContext(what));
    });
  }

 private:
  struct Alone {
    uint64_t index;
    SampleInfo info;
    uint64_t at;  // its bytes' place in alone_bytes_
    Status read;
  };

  bool Inside(const SampleInfo& s) const {
    return s.target == target_ && s.offset >= offset_ &&
           s.offset + s.length <= offset_ + window_.size();
  }

  const VolumeScan& scan_;
  size_t w_;
  uint32_t target_;
  uint64_t offset_;
  std::span<std::byte> window_;
  int round_ = 0;  // 1: the window read; 2: the samples alone
  Status window_status_;
  Status broken_;  // the engine's failure: every sample's
  std::vector<Alone> alone_;
  std::vector<std::byte> alone_bytes_;
};

Status VolumeScan::Read(size_t w, io_internal::ReadDriver& driver, std::vector<std::byte>* buffer,
                        const Visit& visit) const {
  buffer->resize(extents_[w]);
  WindowJob job(*this, w, *buffer);
  if (Status st = driver.Run(job); !st.ok()) job.Fail(st.WithContext(volume_.path()));
  job.Visit(volume_, visit);
  return job.window_status();
}

}  // namespace dlfs::volume_internal
