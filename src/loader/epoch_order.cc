#include "loader/epoch_order.h"

#include <algorithm>

namespace dlfs::loader_internal {

Status EpochOrder::Batch(uint64_t seq, uint64_t batch_size, std::vector<uint64_t>* out) const {
  out->clear();
  if (listed) {
    out->assign(indices.begin() + static_cast<ptrdiff_t>(starts[seq]),
                indices.begin() + static_cast<ptrdiff_t>(starts[seq + 1]));
    return Status::Ok();
  }
  if (per_batch) {
    *out = per_batch(epoch, seq);
    for (uint64_t i : *out) {
      if (i >= volume_samples) {
        return Status::InvalidArgument(volume + ": batch " + std::to_string(seq) + " of epoch " +
                                       std::to_string(epoch) + " of the explicit order has index " +
                                       std::to_string(i) + ", past the volume's " +
                                       std::to_string(volume_samples) + " samples");
      }
    }
    return Status::Ok();
  }
  const uint64_t first = (seq - first_seq) * batch_size;
  if (first >= ranked.size()) return Status::Ok();
  out->resize(std::min(batch_size, ranked.size() - first));
  ranked.Fill(first, out->size(), out->data());
  return Status::Ok();
}

std::vector<uint64_t> EpochOrder::All(uint64_t batches, uint64_t batch_size) const {
  if (listed) return indices;
  if (!per_batch) return ranked.ToVector();
  std::vector<uint64_t> all, one;
  for (uint64_t k = first_seq; k < batches; ++k) {
    (void)Batch(k, batch_size, &one);
    all.insert(all.end(), one.begin(), one.end());
  }
  return all;
}

std::shared_ptr<const EpochOrder> EpochOrders::Get(uint64_t epoch,
                                                   std::shared_ptr<const EpochOrder> part) {
  if (part && part->epoch == epoch) return part;
  std::lock_guard lock(mu_);
  for (const auto& o : orders_) {
    if (o->epoch == epoch) return o;
  }
  std::shared_ptr<EpochOrder> o;
  if (options_.order) {
    o = Explicit(epoch);
  } else {
    o = std::make_shared<EpochOrder>();
    o->epoch = epoch;
    if (options_.batch_order) {
      o->per_batch = options_.batch_order;
      o->volume_samples = volume_samples_;
      o->volume = volume_;
    } else {
      o->ranked = sampler_.Ranked(epoch, options_.subset);  // O(1): computed per batch
    }
  }
  orders_.push_back(o);
  if (orders_.size() > 4) orders_.pop_front();
  return o;
}

void EpochOrders::Clear() {
  std::lock_guard lock(mu_);
  orders_.clear();
}

std::shared_ptr<EpochOrder> EpochOrders::Explicit(uint64_t epoch) const {
  std::shared_ptr<const LoaderOrder> given = options_.order(epoch);
  auto o = std::make_shared<EpochOrder>();
  o->epoch = epoch;
  o->listed = true;
  bool fits = given && given->batch_starts.size() == batches_ + 1 &&
              given->batch_starts.front() == 0 &&
              given->batch_starts.back() == given->indices.size();
  for (size_t k = 1; fits && k < given->batch_starts.size(); ++k) {
    fits = given->batch_starts[k - 1] <= given->batch_starts[k];
  }
  for (size_t k = 0; fits && k < given->indices.size(); ++k) {
    fits = given->indices[k] < volume_samples_;
  }
  if (fits) {
    o->indices = given->indices;
    o->starts = given->batch_starts;
  } else {
    o->error =
        Status::InvalidArgument(volume_ + ": the explicit order of epoch " + std::to_string(epoch) +
                                " does not fit (batch starts must rise from 0 to its size over " +
                                std::to_string(batches_) + " batches; indices below " +
                                std::to_string(volume_samples_) + ")");
    o->starts.assign(batches_ + 1, 0);
  }
  return o;
}

}  // namespace dlfs::loader_internal
