// ShardLoader::Impl: epochs, resuming, and handing out batches.
#include "mpi/shard_loader_impl.h"

#include <cmath>

#include "common/clock.h"

namespace dlfs {

void ShardLoader::Impl::SetEpoch(uint64_t epoch) {
  // The loop after LoadState sets the restored epoch first: keep the
  // restored position.
  const bool keep = resume_pending_ && epoch == epoch_;
  resume_pending_ = false;
  if (keep) return;
  Discard();
  epoch_ = epoch;
  next_batch_ = 0;
  window_end_ = 0;
  order_ = sampler_->Ranked(epoch, options_.loader.subset);
  epoch_batches_ = sampler_->batches_per_epoch();
  done_.clear();
  window_hint_ = 0;
}

uint64_t ShardLoader::Impl::LargeWindow() const {
  const uint64_t per_window = std::min<uint64_t>(
      uint64_t{options_.window_batches} * options_.loader.sampler.batch_size, order_.size());
  const double w = static_cast<double>(per_window);
  return static_cast<uint64_t>(w * sizes_.exact_mean + 4 * std::sqrt(w) * sizes_.stddev);
}

SourceState ShardLoader::Impl::Identity() const {
  const LoaderOptions& o = options_.loader;
  SourceState s;
  s.volume_uuid = volume_->info().uuid;
  s.volume_samples = volume_->size();
  s.samples = o.subset.Count(volume_->size());
  s.subset_crc = subset_crc_;
  s.sampler = o.sampler;
  return s;
}

SourceState ShardLoader::Impl::SaveState() const {
  SourceState s = Identity();
  s.epoch = epoch_;
  s.batches = next_batch_;
  s.done = done_;
  s.quarantined = bad_samples_->indices();
  return s;
}

Status ShardLoader::Impl::LoadState(const SourceState& state) {
  // Node-local placement does not depend on the ranks' shares, so the rest
  // of an epoch splits among another number of ranks like a whole one.
  const std::string& who = volume_->path();
  Status st = CheckResumable(state, Identity(), who);
  for (uint64_t i : state.quarantined) {
    if (st.ok() && i >= volume_->size()) {
      st = Status::InvalidArgument(who +
                                   ": cannot resume from this state: it quarantines "
                                   "sample " +
                                   std::to_string(i) + " of " + std::to_string(volume_->size()));
    }
  }
  const ResumePoint at = PlanResume(state, options_.loader.sampler);
  RankOrder rest;
  if (st.ok() && !at.done.empty()) {
    Result<RankOrder> r = sampler_->Ranked(at.epoch, at.done, options_.loader.subset);
    if (r.ok()) {
      rest = std::move(r).value();
    } else {
      st =
          Status::InvalidArgument(who + ": cannot resume from this state: " + r.status().message());
    }
  }
  const uint64_t b = options_.loader.sampler.batch_size;
  const uint64_t batches =
      at.done.empty() ? sampler_->batches_per_epoch() : (rest.size() + b - 1) / b;
  if (st.ok() && at.batches > batches) {
    st = Status::InvalidArgument(who + ": cannot resume from this state: it says " +
                                 std::to_string(at.batches) + " batches were handed out of " +
                                 std::to_string(batches));
  }
  DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm_, st));
  DLFS_RETURN_IF_ERROR(
      AgreeOnValues(comm_, {{"the resumed epoch", std::to_string(at.epoch)},
                            {"the batches handed out", std::to_string(at.batches)},
                            {"the batches left", std::to_string(batches - at.batches)}}));
  for (uint64_t i : state.quarantined) bad_samples_->Add(i, "left out by the state resumed from");
  resume_pending_ = false;
  SetEpoch(at.epoch);
  if (!at.done.empty()) {
    order_ = std::move(rest);
    epoch_batches_ = batches;
    done_ = at.done;
  }
  next_batch_ = at.batches;  // the next Next() exchanges from here
  resume_pending_ = true;
  return Status::Ok();
}

Result<bool> ShardLoader::Impl::Next(Batch* batch) {
  resume_pending_ = false;
  if (next_batch_ >= epoch_batches_) return false;
  if (next_batch_ >= window_end_) DLFS_RETURN_IF_ERROR(Exchange(next_batch_));
  const uint64_t k = next_batch_++;
  const uint64_t b = options_.loader.sampler.batch_size;
  const uint64_t begin = k * b, end = std::min<uint64_t>(begin + b, order_.size());

  auto data = std::make_shared<Batch::Data>();
  if (cache_) {
    // Samples found in the node cache point into its mapping: the batch
    // keeps it as well as the window's buffers.
    struct Owners {
      std::shared_ptr<WindowBytes> window;
      std::shared_ptr<cache_internal::NodeCache> cache;
    };
    data->owner = std::make_shared<Owners>(Owners{window_bytes_, cache_});
  } else {
    data->owner = window_bytes_;
  }
  data->epoch = epoch_;
  data->sequence = k;
  const SampleDirectory& dir = volume_->directory();
  for (uint64_t p = begin; p < end; ++p) {
    const uint64_t at = p - window_first_position_;
    const uint64_t index = window_indices_[at];
    if (!status_[at].ok()) {
      if (!options_.loader.skip_bad_samples) return status_[at];
      data->left_out.emplace_back(index, status_[at].message());  // quarantined below
      continue;
    }
    const auto bytes = samples_[at];
    data->device_bytes += storage_bytes_[at];
    data->peer_bytes += peer_bytes_[at];
    data->indices.push_back(index);
    data->labels.push_back(dir.sample(index).label);
    data->samples.push_back(bytes);
    data->payload_bytes += bytes.size();
  }
  auto check = [this](Batch::Data* d) {
    if (!field_ids_.empty()) {
      return loader_internal::SplitFields(*volume_, field_ids_, options_.loader.verify_checksums, d,
                                          decoded_buffers_.get());
    }
    if (options_.loader.verify_checksums) {
      for (size_t i = 0; i < d->indices.size(); ++i) {
        DLFS_RETURN_IF_ERROR(volume_->CheckSample(d->indices[i], d->samples[i]));
      }
    }
    return Status::Ok();
  };
  DLFS_RETURN_IF_ERROR(bad_samples_->active() ? bad_samples_->Check(data.get(), check)
                                              : check(data.get()));
  *batch = Batch(std::move(data));
  return true;
}

}  // namespace dlfs
