#include "loader/batch_read.h"

#include <algorithm>
#include <set>

#include "loader/batch_data.h"

namespace dlfs::loader_internal {

namespace {
constexpr size_t kNamesShown = 8;  // in an error, then "and N more"
}

std::string SampleName(const Volume& volume, uint64_t index) {
  return volume.path() + ": sample " + std::to_string(index) + " '" +
         volume.directory().Path(index) + "'";
}

Status UnreadableSamples(const Volume& volume, std::span<const uint64_t> indices,
                         const std::vector<size_t>& positions,
                         const std::vector<Status>& failures) {
  // Each sample once, in batch order.
  std::vector<uint64_t> named;
  std::set<uint64_t> seen;
  for (size_t p : positions) {
    if (seen.insert(indices[p]).second) named.push_back(indices[p]);
  }
  const Status& first = failures[positions.front()];
  if (named.size() == 1) return first.WithContext(SampleName(volume, named[0]));
  std::string what = volume.path() + ": samples ";
  for (size_t i = 0; i < named.size() && i < kNamesShown; ++i) {
    if (i > 0) what += ", ";
    what += std::to_string(named[i]) + " '" + volume.directory().Path(named[i]) + "'";
  }
  if (named.size() > kNamesShown) {
    what += " and " + std::to_string(named.size() - kNamesShown) + " more";
  }
  return first.WithContext(what);
}

BatchRead::BatchRead(const Volume& volume, std::span<const uint64_t> indices,
                     const PlanOptions& options)
    : volume_(volume), indices_(indices), alignment_(std::max<uint32_t>(options.alignment, 1)) {
  PlanBatch(volume.directory(), indices, options, &plan_);
  if (!plan_.unlocated.empty()) {
    // Samples the directory could not locate fail as unreadable ones do.
    failed_.assign(indices_.size(), Status::Ok());
    for (size_t k = 0; k < indices_.size(); ++k) {
      if (!plan_.unlocated[k].ok()) {
        failed_[k] = plan_.unlocated[k];
        any_failed_ = true;
      }
    }
  }
}

void BatchRead::Complete(size_t r, const Status& status) {
  std::vector<Status>& results = round_ == 0 ? round0_ : round1_;
  if (r < results.size()) results[r] = status;
}

std::vector<size_t> BatchRead::PositionsIn(uint64_t begin, uint64_t end) const {
  std::vector<size_t> out;
  for (size_t k = 0; k < indices_.size(); ++k) {
    if (!plan_.unlocated.empty() && !plan_.unlocated[k].ok()) continue;  // read nothing
    const uint64_t off = plan_.sample_offsets[k];
    // An empty sample counts as its first byte, so a failed read that
    // held its position names it too.
    const uint64_t len = std::max<uint64_t>(plan_.info[k].length, 1);
    if (off < end && begin < off + len) out.push_back(k);
  }
  return out;
}

bool BatchRead::NextRound(std::vector<ReadRequest>* out) {
  out->clear();
  if (round_ < 0) {
    round_ = 0;
    for (const PlannedRead& r : plan_.reads) {
      out->push_back(ReadRequest{r.target, r.offset, r.length, base_ + r.buffer_offset, slot_});
    }
    round0_.assign(plan_.reads.size(), Status::Ok());
    return true;
  }
  if (failed_.empty()) failed_.assign(indices_.size(), Status::Ok());
  auto fail = [&](const std::vector<size_t>& positions, const Status& st) {
    for (size_t k : positions) {
      if (failed_[k].ok()) failed_[k] = st;
      any_failed_ = true;
    }
  };
  if (round_ == 1) {
    for (size_t j = 0; j < subs_.size(); ++j) {
      if (!round1_[j].ok()) {
        fail(PositionsIn(subs_[j].buffer_offset, subs_[j].buffer_offset + subs_[j].length),
             round1_[j]);
      }
    }
    round_ = 2;
    return false;
  }
  if (round_ != 0) return false;
  const uint64_t a = alignment_;
  subs_.clear();
  for (size_t r = 0; r < plan_.reads.size(); ++r) {
    if (round0_[r].ok()) continue;
    const PlannedRead& pr = plan_.reads[r];
    std::vector<size_t> in = PositionsIn(pr.buffer_offset, pr.buffer_offset + pr.length);
    std::set<uint64_t> distinct;
    for (size_t k : in) distinct.insert(indices_[k]);
    if (distinct.size() <= 1) {
      fail(in, round0_[r]);  // one sample: it is the one, no retry needed
      continue;
    }
    // Re-read each sample's own blocks (a block shared by neighbours once),
    // so that only samples whose bytes really cannot be read are named.
    std::sort(in.begin(), in.end(), [&](size_t x, size_t y) {
      return plan_.sample_offsets[x] < plan_.sample_offsets[y];
    });
    uint64_t covered = pr.buffer_offset;
    const uint64_t read_end = pr.buffer_offset + pr.length;
    for (size_t k : in) {
      const SampleInfo& s = plan_.info[k];
      const uint64_t begin = s.offset / a * a;
      const uint64_t end = std::max((s.offset + s.length + a - 1) / a * a, begin + a);
      const uint64_t buf_begin = plan_.sample_offsets[k] - (s.offset - begin);
      const uint64_t from = std::max({buf_begin, covered, pr.buffer_offset});
      const uint64_t to = std::min(buf_begin + (end - begin), read_end);
      if (from >= to) continue;
      subs_.push_back(Sub{from, to - from, r});
      covered = to;
    }
  }
  if (subs_.empty()) {
    round_ = 2;
    return false;
  }
  round_ = 1;
  round1_.assign(subs_.size(), Status::Ok());
  for (const Sub& sub : subs_) {
    const PlannedRead& pr = plan_.reads[sub.parent];
    out->push_back(ReadRequest{pr.target, pr.offset + (sub.buffer_offset - pr.buffer_offset),
                               sub.length, base_ + sub.buffer_offset, slot_});
  }
  return true;
}

Result<Batch> BatchRead::Finish(std::shared_ptr<const void> owner, uint64_t epoch,
                                uint64_t sequence, double io_seconds) const {
  DLFS_ASSIGN_OR_RETURN(std::shared_ptr<Batch::Data> data,
                        FinishData(std::move(owner), epoch, sequence, io_seconds));
  return Batch(std::move(data));
}

Result<std::shared_ptr<Batch::Data>> BatchRead::FinishData(std::shared_ptr<const void> owner,
                                                           uint64_t epoch, uint64_t sequence,
                                                           double io_seconds,
                                                           bool skip_failed) const {
  if (any_failed_ && !skip_failed) {
    std::vector<size_t> positions;
    for (size_t k = 0; k < failed_.size(); ++k) {
      if (!failed_[k].ok()) positions.push_back(k);
    }
    return UnreadableSamples(volume_, indices_, positions, failed_);
  }
  auto data = std::make_shared<Batch::Data>();
  data->owner = std::move(owner);
  data->owns_bytes = true;  // the buffer is this read's alone (a loader slab, a reader's)
  data->epoch = epoch;
  data->sequence = sequence;
  data->device_bytes = plan_.buffer_bytes;
  data->io_seconds = io_seconds;
  data->indices.reserve(indices_.size());
  data->samples.reserve(indices_.size());
  data->labels.reserve(indices_.size());
  for (size_t k = 0; k < indices_.size(); ++k) {
    if (any_failed_ && !failed_[k].ok()) {
      data->left_out.emplace_back(indices_[k], failed_[k].message());
      continue;
    }
    const SampleInfo& s = plan_.info[k];
    data->indices.push_back(indices_[k]);
    data->samples.emplace_back(base_ + plan_.sample_offsets[k], s.length);
    data->labels.push_back(s.label);
    data->payload_bytes += s.length;
  }
  return data;
}

}  // namespace dlfs::loader_internal
