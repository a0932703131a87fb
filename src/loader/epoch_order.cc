#include "loader/epoch_order.h"

namespace dlfs::loader_internal {

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
    o = std::make_shared<EpochOrder>(
        EpochOrder{epoch, 0, 0, sampler_.RankIndices(epoch, options_.subset)});
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
