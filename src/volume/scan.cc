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

// One window as a ReadJob: round 0 reads its extent whole; round 1 reads,
// each on its own, the samples that read did not deliver (all of them when
// it failed; a sample of a compact block lying outside the window).
class VolumeScan::WindowJob final : public io_internal::ReadJob {
 public:
  struct Entry {
    uint64_t index;
    SampleInfo info;
    Status located;      // the directory's answer (not OK: nothing is read)
    Status read;         // of a sample read alone
    int64_t alone = -1;  // where round 1 put its bytes in alone_; -1: in the window
  };

  WindowJob(uint32_t target, uint64_t offset, std::span<std::byte> window,
            std::vector<Entry> entries)
      : target_(target), offset_(offset), window_(window), entries_(std::move(entries)) {}

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
    uint64_t total = 0;
    for (Entry& e : entries_) {
      if (!e.located.ok() || (window_status_.ok() && Inside(e.info))) continue;
      e.alone = static_cast<int64_t>(total);
      total += e.info.length;
      alone_requests_.push_back(&e);
    }
    if (alone_requests_.empty()) return false;
    alone_.resize(total);
    for (const Entry* e : alone_requests_) {
      out->push_back(ReadRequest{e->info.target, e->info.offset, e->info.length,
                                 alone_.data() + e->alone, ReadRequest::kNoSlot});
    }
    return true;
  }

  void Complete(size_t r, const Status& status) override {
    if (round_ == 1) {
      window_status_ = status;
    } else if (r < alone_requests_.size()) {
      alone_requests_[r]->read = status;
    }
  }

  // The engine broke: nothing of the window counts as read.
  void Fail(const Status& status) {
    window_status_ = status;
    for (Entry& e : entries_) {
      e.alone = 0;
      e.read = status;
    }
  }

  const Status& window_status() const { return window_status_; }

  // Each sample's bytes (or why not), in storage order.
  void Visit(const Volume& volume, const VolumeScan::Visit& visit) {
    const SampleDirectory& dir = volume.directory();
    for (const Entry& e : entries_) {
      if (!e.located.ok()) {
        visit(e.index, {}, e.located);
      } else if (e.alone < 0) {
        visit(e.index, window_.subspan(e.info.offset - offset_, e.info.length), Status::Ok());
      } else if (e.read.ok()) {
        visit(e.index, {alone_.data() + e.alone, e.info.length}, Status::Ok());
      } else {
        // "v.dlfs: sample 7 'train/00007': ... Input/output error"
        std::string what =
            volume.path() + ": sample " + std::to_string(e.index) + " '" + dir.Path(e.index) + "'";
        if (e.info.target != 0) {
          what += " on target " + std::to_string(e.info.target) + " (" +
                  volume.info().target_details[e.info.target].path + ")";
        }
        visit(e.index, {}, e.read.WithContext(what));
      }
    }
  }

 private:
  bool Inside(const SampleInfo& s) const {
    return s.target == target_ && s.offset >= offset_ &&
           s.offset + s.length <= offset_ + window_.size();
  }

  uint32_t target_;
  uint64_t offset_;
  std::span<std::byte> window_;
  std::vector<Entry> entries_;
  int round_ = 0;  // 1: the window read; 2: the samples alone
  Status window_status_;
  std::vector<std::byte> alone_;
  std::vector<Entry*> alone_requests_;  // round 1's requests, in order
};

Status VolumeScan::Read(size_t w, io_internal::ReadDriver& driver, std::vector<std::byte>* buffer,
                        const Visit& visit) const {
  const SampleDirectory& dir = volume_.directory();
  std::vector<WindowJob::Entry> entries;
  if (compact_) {
    for (size_t k = compact_first_[w]; k < compact_first_[w + 1]; ++k) {
      const Piece& piece = compact_pieces_[k];
      const uint64_t base = piece.block * dir.block_samples();
      for (uint64_t i = base + piece.first; i < base + piece.end; ++i) {
        Result<SampleInfo> located = dir.Locate(i);
        // A block that fails its check: every sample of it reports that.
        if (located.ok()) {
          entries.push_back({i, *located, Status::Ok(), Status::Ok()});
        } else {
          entries.push_back({i, SampleInfo{}, located.status(), Status::Ok()});
        }
      }
    }
  } else {
    entries.reserve(starts_[w + 1] - starts_[w]);
    for (size_t k = starts_[w]; k < starts_[w + 1]; ++k) {
      entries.push_back({index(k), dir.sample(index(k)), Status::Ok(), Status::Ok()});
    }
  }
  buffer->resize(extents_[w]);
  WindowJob job(window_target(w), window_offset(w), *buffer, std::move(entries));
  if (Status st = driver.Run(job); !st.ok()) job.Fail(st.WithContext(volume_.path()));
  job.Visit(volume_, visit);
  return job.window_status();
}

}  // namespace dlfs::volume_internal
