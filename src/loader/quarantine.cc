#include "loader/quarantine.h"

#include <algorithm>

#include "loader/batch_read.h"

namespace dlfs::loader_internal {

Status Quarantine::ListAhead(const std::vector<uint64_t>& indices) {
  for (uint64_t i : indices) {
    if (i >= volume_.size()) {
      return Status::InvalidArgument("quarantined sample " + std::to_string(i) +
                                     " is out of range (" + volume_.path() + " has " +
                                     std::to_string(volume_.size()) + " samples)");
    }
    Add(i, "listed as quarantined when the loader was created");
  }
  std::lock_guard lock(mu_);
  listed_ahead_ = bad_.size();
  return Status::Ok();
}

void Quarantine::Add(uint64_t index, const std::string& why) {
  std::lock_guard lock(mu_);
  if (!set_.insert(index).second) return;
  bad_.push_back({index, volume_.directory().Path(index), volume_.path(), why});
  const size_t found = bad_.size() - listed_ahead_;
  if (found > budget_ && over_budget_.ok()) {
    std::string names;
    for (size_t i = listed_ahead_; i < bad_.size() && i < listed_ahead_ + 8; ++i) {
      names += (i > listed_ahead_ ? "; " : "") + SampleName(volume_, bad_[i].index) + ": " +
               bad_[i].reason;
    }
    if (found > 8) names += "; and " + std::to_string(found - 8) + " more";
    over_budget_ = Status::Corruption(
        volume_.path() + ": " + std::to_string(found) +
        " bad samples, more than max_bad_samples=" + std::to_string(budget_) + " (" + names + ")");
  }
}

Status Quarantine::Check(Batch::Data* data, const std::function<Status(Batch::Data*)>& check) {
  for (auto& [index, why] : data->left_out) Add(index, why);
  data->left_out.clear();
  std::vector<size_t> drop;
  for (size_t i = 0; i < data->indices.size(); ++i) {
    if (set_.count(data->indices[i])) drop.push_back(i);
  }
  LeaveOut(data, drop);
  if (!skip_) return over_budget_.ok() ? check(data) : over_budget_;
  const Batch::Data before = *data;  // check may have split some fields when it fails
  Status st = check(data);
  if (!st.ok()) {
    // Which samples: each on its own.
    *data = before;
    drop.clear();
    for (size_t i = 0; i < data->indices.size(); ++i) {
      Batch::Data one;
      one.owner = data->owner;
      one.indices = {data->indices[i]};
      one.labels = {data->labels[i]};
      one.samples = {data->samples[i]};
      const Status bad = check(&one);
      if (!bad.ok()) {
        drop.push_back(i);
        Add(data->indices[i], bad.message());
      }
    }
    if (drop.empty()) return st;  // not a sample's fault (e.g. out of memory)
    LeaveOut(data, drop);
    st = check(data);
  }
  return over_budget_.ok() ? st : over_budget_;
}

void Quarantine::LeaveOut(Batch::Data* data, const std::vector<size_t>& positions) {
  if (positions.empty()) return;
  size_t kept = 0;
  for (size_t i = 0, p = 0; i < data->indices.size(); ++i) {
    if (p < positions.size() && positions[p] == i) {
      ++p;
      data->payload_bytes -= std::min<uint64_t>(data->payload_bytes, data->samples[i].size());
      continue;
    }
    data->indices[kept] = data->indices[i];
    data->labels[kept] = data->labels[i];
    data->samples[kept] = data->samples[i];
    if (i < data->checked.size()) data->checked[kept] = data->checked[i];
    ++kept;
  }
  data->indices.resize(kept);
  data->labels.resize(kept);
  data->samples.resize(kept);
  if (!data->checked.empty()) data->checked.resize(kept);
}

std::vector<BadSample> Quarantine::records() const {
  std::lock_guard lock(mu_);
  return bad_;
}

std::vector<uint64_t> Quarantine::indices() const {
  std::lock_guard lock(mu_);
  return {set_.begin(), set_.end()};
}

}  // namespace dlfs::loader_internal
