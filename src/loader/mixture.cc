// MixtureSource: one Loader per volume, each given its batches of the
// epoch's order (LoaderOptions::batch_order), read in lockstep and merged.
// Nothing of the epoch's size is stored: each batch's (volume, index)
// pairs are computed from its positions when a loader plans it and when it
// is merged.
#include "dlfs/mixture.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>

#include "common/xoshiro.h"
#include "loader/batch_data.h"

namespace dlfs {

namespace {

// The streams of the mixture are the Sampler's, under seeds of their own.
uint64_t StreamSeed(uint64_t seed, uint64_t stream) {
  return SplitMixOutput(seed + (stream + 1) * kSplitMixGamma);
}
constexpr uint64_t kLabelStream = 0x6d69787475726531ull;  // "mixture1"

std::string Weight(double w) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", w);
  return text;
}

}  // namespace

class MixtureSource::Impl {
 public:
  // This rank's part of one epoch: the epoch's positions it reads, in
  // order; the batches before first_seq are empty (an elastic resume's rest
  // is the epoch's last batches).
  struct Plan {
    uint64_t epoch = 0;
    uint64_t first_seq = 0;
    RankOrder positions;
  };

  Impl(std::vector<std::shared_ptr<Volume>> volumes, const MixtureOptions& options,
       std::vector<uint64_t> shares, uint64_t samples, Sampler positions)
      : volumes_(std::move(volumes)),
        options_(options),
        shares_(std::move(shares)),
        samples_(samples),
        positions_(std::move(positions)),
        batches_(positions_.batches_per_epoch()) {
    starts_.push_back(0);
    for (size_t v = 0; v < volumes_.size(); ++v) {
      const uint64_t n = volumes_[v]->size();
      rounds_.push_back(n == 0 ? 0 : std::max<uint64_t>(1, (shares_[v] + n - 1) / n));
      starts_.push_back(starts_.back() + shares_[v]);
    }
    identity_ = "mixture[";
    description_ = "mixture of " + std::to_string(volumes_.size()) + " volumes (";
    for (size_t v = 0; v < volumes_.size(); ++v) {
      identity_ += (v ? "," : "") + volumes_[v]->info().uuid + ":" + Weight(options_.weights[v]);
      description_ += (v ? ", " : "") + Weight(options_.weights[v]) + " " + volumes_[v]->path();
    }
    identity_ += ";epoch_samples=" + std::to_string(samples_) +
                 ";cycle=" + (options_.cycle ? "1" : "0") + "]";
    description_ += "), " + std::to_string(samples_) + " samples per epoch";
  }

  ~Impl() { loaders_.clear(); }  // their threads call PlanFor

  // The samples of batch k of `plan` (empty before first_seq): per
  // position, its volume and its index there. The epoch's positions are
  // dealt to the volumes by a shuffle of their shares (position t is share
  // slot u = labels(t); slots starts_[v] .. starts_[v + 1] - 1 are volume
  // v's), and the j-th slot of volume v holds sample perm(j mod n) of the
  // volume's permutation for pass j div n of the epoch (several passes with
  // `cycle`). O(batch) with no state: the same on every rank and thread.
  void BatchSamples(const Plan& plan, uint64_t k, std::vector<uint32_t>* volume,
                    std::vector<uint64_t>* index) const {
    volume->clear();
    index->clear();
    if (k < plan.first_seq) return;
    const uint64_t b = options_.sampler.batch_size;
    const uint64_t first = (k - plan.first_seq) * b;
    if (first >= plan.positions.size()) return;
    const uint64_t count = std::min(b, plan.positions.size() - first);
    const EpochPermutation labels(samples_, StreamSeed(options_.sampler.seed, kLabelStream),
                                  plan.epoch);
    std::vector<uint64_t> pass(volumes_.size(), ~uint64_t{0});
    std::vector<EpochPermutation> perm(volumes_.size());
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t u = labels(plan.positions.At(first + i));
      const auto v = static_cast<uint32_t>(std::upper_bound(starts_.begin(), starts_.end(), u) -
                                           starts_.begin() - 1);
      const uint64_t n = volumes_[v]->size();
      const uint64_t j = u - starts_[v];
      if (pass[v] != j / n) {
        pass[v] = j / n;
        perm[v] = EpochPermutation(n, StreamSeed(options_.sampler.seed, v),
                                   plan.epoch * rounds_[v] + pass[v], options_.sampler.shuffle);
      }
      volume->push_back(v);
      index->push_back(perm[v](j % n));
    }
  }

  // Volume v's indices of batch k of `epoch`: its Loader's batch_order.
  std::vector<uint64_t> VolumeBatch(uint64_t epoch, uint64_t k, uint32_t v) const {
    std::vector<uint32_t> volume;
    std::vector<uint64_t> index, mine;
    BatchSamples(*PlanFor(epoch), k, &volume, &index);
    for (size_t i = 0; i < index.size(); ++i) {
      if (volume[i] == v) mine.push_back(index[i]);
    }
    return mine;
  }

  // This rank's plan of `epoch` after the parts `done`.
  Result<std::shared_ptr<Plan>> MakePlan(uint64_t epoch,
                                         const std::vector<EpochSegment>& done) const {
    auto plan = std::make_shared<Plan>();
    plan->epoch = epoch;
    DLFS_ASSIGN_OR_RETURN(plan->positions, positions_.Ranked(epoch, done, {}));
    const uint64_t b = options_.sampler.batch_size;
    plan->first_seq = batches_ - (plan->positions.size() + b - 1) / b;
    return plan;
  }

  std::shared_ptr<const Plan> PlanFor(uint64_t epoch) const {
    {
      std::lock_guard lock(plans_mu_);
      if (part_ && part_->epoch == epoch) return part_;
    }
    return *MakePlan(epoch, {});  // whole epochs always plan, in O(1)
  }

  void SetEpoch(uint64_t e) {
    started_ = true;
    if (resume_pending_ && e == epoch_) {
      resume_pending_ = false;
      return;
    }
    resume_pending_ = false;
    bool had_part = false;
    {
      std::lock_guard lock(plans_mu_);
      had_part = part_ && part_->epoch == e;
      part_.reset();
      part_done_.clear();
    }
    for (auto& l : loaders_) {
      if (had_part) {
        // Its order for e was the rest's: forget it (LoadState drops orders).
        SourceState s = *l->SaveState();
        s.epoch = e;
        s.batches = 0;
        s.done.clear();
        (void)l->LoadState(s);
      }
      l->SetEpoch(e);
    }
    epoch_ = e;
    next_ = 0;
  }

  Result<bool> Next(Batch* out) {
    if (!started_) SetEpoch(0);
    resume_pending_ = false;
    if (next_ >= batches_) return false;
    const uint64_t k = next_++;
    std::vector<Batch> parts(loaders_.size());
    Status error;
    for (size_t v = 0; v < loaders_.size(); ++v) {
      Result<bool> more = loaders_[v]->Next(&parts[v]);
      if (!more.ok() && error.ok()) error = more.status();
      if (more.ok() && !*more && error.ok()) {
        error = Status::Unavailable(volumes_[v]->path() +
                                    ": its loader ended before the mixture's epoch");
      }
    }
    DLFS_RETURN_IF_ERROR(error);
    std::vector<uint32_t> volume;
    std::vector<uint64_t> index;
    BatchSamples(*PlanFor(epoch_), k, &volume, &index);
    auto data = std::make_shared<Batch::Data>();
    data->epoch = epoch_;
    data->sequence = k;
    const size_t fields = fields_;
    std::vector<size_t> cursor(parts.size(), 0);
    data->indices.reserve(index.size());
    data->sources.reserve(index.size());
    data->labels.reserve(index.size());
    data->samples.reserve(index.size());
    data->fields.reserve(index.size() * fields);
    for (size_t i = 0; i < index.size(); ++i) {
      const uint32_t v = volume[i];
      const Batch& from = parts[v];
      size_t& c = cursor[v];
      // A sample its loader left out (skip_bad_samples) is not in its batch.
      if (c >= from.size() || from.index(c) != index[i]) continue;
      data->indices.push_back(index[i]);
      data->sources.push_back(v);
      data->labels.push_back(from.label(c));
      data->samples.push_back(from.sample(c));
      for (size_t f = 0; f < fields; ++f) data->fields.push_back(from.field(c, f));
      ++c;
    }
    data->field_count = static_cast<uint32_t>(fields);
    for (const Batch& p : parts) {
      data->payload_bytes += p.payload_bytes();
      data->device_bytes += p.device_bytes();
      data->io_seconds = std::max(data->io_seconds, p.io_seconds());
    }
    data->owner = std::make_shared<std::vector<Batch>>(std::move(parts));
    *out = Batch(std::move(data));
    return true;
  }

  SourceState Identity() const {
    SourceState s;
    s.volume_uuid = identity_;
    s.volume_samples = samples_;
    s.samples = samples_;
    s.sampler = options_.sampler;
    return s;
  }

  SourceState SaveState() const {
    SourceState s = Identity();
    s.epoch = epoch_;
    s.batches = next_;
    std::lock_guard lock(plans_mu_);
    if (part_ && part_->epoch == epoch_) {
      s.batches -= part_->first_seq;
      s.done = part_done_;
    }
    return s;
  }

  Status LoadState(const SourceState& state) {
    std::string who = "mixture of";
    for (const auto& v : volumes_) who += " " + v->path();
    DLFS_RETURN_IF_ERROR(CheckResumable(state, Identity(), who));
    const ResumePoint at = PlanResume(state, options_.sampler);
    std::shared_ptr<Plan> part;
    uint64_t first_seq = 0, batches = batches_;
    if (!at.done.empty()) {
      Result<std::shared_ptr<Plan>> p = MakePlan(at.epoch, at.done);
      if (!p.ok()) {
        return Status::InvalidArgument(who +
                                       ": cannot resume from this state: " + p.status().message());
      }
      part = std::move(p).value();
      first_seq = part->first_seq;
      batches = batches_ - first_seq;
    }
    if (at.batches > batches) {
      return Status::InvalidArgument(who + ": cannot resume from this state: it says " +
                                     std::to_string(at.batches) + " batches were handed out of " +
                                     std::to_string(batches));
    }
    {
      std::lock_guard lock(plans_mu_);
      part_ = std::move(part);
      part_done_ = at.done;
    }
    for (auto& l : loaders_) {
      SourceState s = *l->SaveState();
      s.epoch = at.epoch;
      s.batches = first_seq + at.batches;
      s.done.clear();
      DLFS_RETURN_IF_ERROR(l->LoadState(s));
    }
    epoch_ = at.epoch;
    next_ = first_seq + at.batches;
    started_ = resume_pending_ = true;
    return Status::Ok();
  }

  SourceStats Stats() const {
    SourceStats total;
    uint64_t buffers = 0, budgets = 0;
    for (const auto& l : loaders_) {
      SourceStats s = l->source_stats();
      buffers += s.buffer_bytes;
      budgets += s.cache_budget;
      total += s;
    }
    total.buffer_bytes = buffers;
    total.cache_budget = budgets;
    return total;
  }

  std::vector<std::shared_ptr<Volume>> volumes_;
  MixtureOptions options_;
  std::vector<uint64_t> shares_;
  uint64_t samples_;
  Sampler positions_;  // over the epoch's positions (never shuffled: they are)
  uint64_t batches_;
  std::vector<uint64_t> rounds_;  // permutations of each volume per epoch
  std::vector<uint64_t> starts_;  // each volume's first share slot; then samples_
  size_t fields_ = 0;
  std::string identity_, description_;

  mutable std::mutex plans_mu_;
  std::shared_ptr<const Plan> part_;  // the rest of an epoch after an elastic resume
  std::vector<EpochSegment> part_done_;

  uint64_t epoch_ = 0, next_ = 0;
  bool started_ = false, resume_pending_ = false;

  std::vector<std::unique_ptr<Loader>> loaders_;  // last: destroyed first
};

Result<std::unique_ptr<MixtureSource>> MixtureSource::Create(
    std::vector<std::shared_ptr<Volume>> volumes, const MixtureOptions& options,
    const LoaderOptions& loader) {
  if (volumes.empty()) return Status::InvalidArgument("a mixture needs at least one volume");
  for (const auto& v : volumes) {
    if (!v) return Status::InvalidArgument("a mixture's volume is missing");
  }
  const std::vector<double>& w = options.weights;
  if (w.size() != volumes.size()) {
    return Status::InvalidArgument("a mixture of " + std::to_string(volumes.size()) +
                                   " volumes needs as many weights, not " +
                                   std::to_string(w.size()));
  }
  double sum = 0;
  for (size_t v = 0; v < w.size(); ++v) {
    if (!std::isfinite(w[v]) || w[v] < 0) {
      return Status::InvalidArgument("weight " + Weight(w[v]) + " of " + volumes[v]->path() +
                                     " is not a finite number >= 0");
    }
    sum += w[v];
  }
  if (!(sum > 0)) return Status::InvalidArgument("a mixture's weights are all 0");
  if (!loader.subset.all() || loader.order || !loader.quarantine.empty()) {
    return Status::InvalidArgument(
        "a mixture reads whole volumes (no subset, explicit order or quarantine list)");
  }
  // The epoch: as asked, or as long as the weights allow every volume.
  uint64_t samples = options.epoch_samples;
  if (samples == 0) {
    double most = INFINITY;
    for (size_t v = 0; v < w.size(); ++v) {
      if (w[v] > 0) most = std::min(most, volumes[v]->size() / (w[v] / sum));
    }
    samples = static_cast<uint64_t>(std::floor(most + 1e-9));
  }
  if (samples == 0) return Status::InvalidArgument("a mixture's epoch would have no samples");
  // Shares by largest remainder (ties to the earlier volume).
  std::vector<uint64_t> shares(w.size());
  std::vector<std::pair<double, size_t>> rest;
  uint64_t given = 0;
  for (size_t v = 0; v < w.size(); ++v) {
    const double exact = samples * (w[v] / sum);
    shares[v] = static_cast<uint64_t>(std::floor(exact));
    given += shares[v];
    rest.push_back({-(exact - shares[v]), v});
  }
  std::sort(rest.begin(), rest.end());
  for (size_t i = 0; given < samples; ++i, ++given) ++shares[rest[i % rest.size()].second];
  for (size_t v = 0; v < w.size(); ++v) {
    const uint64_t n = volumes[v]->size();
    if (shares[v] > 0 && (n == 0 || (!options.cycle && shares[v] > n))) {
      return Status::InvalidArgument(
          volumes[v]->path() + " has " + std::to_string(n) + " samples, fewer than its share " +
          std::to_string(shares[v]) + " of an epoch of " + std::to_string(samples) + " (weight " +
          Weight(w[v]) + ")" +
          (n == 0 ? ""
                  : ": set cycle to let it start over, or ask for fewer samples per epoch "
                    "(epoch_samples)"));
    }
  }
  SamplerOptions by_position = options.sampler;
  by_position.shuffle = false;  // the positions are already shuffled
  DLFS_ASSIGN_OR_RETURN(Sampler positions, Sampler::Create(samples, by_position));
  auto impl = std::make_unique<Impl>(std::move(volumes), options, std::move(shares), samples,
                                     std::move(positions));
  impl->fields_ = loader.fields.size();
  Impl* self = impl.get();
  for (size_t v = 0; v < self->volumes_.size(); ++v) {
    LoaderOptions o = loader;
    // Chosen I/O threads: a mixture's loaders already read side by side,
    // one I/O thread each (two each would be more threads than the cores
    // that "two" assumes).
    if (o.io_threads == 0 && self->volumes_.size() > 1) o.io_threads = 1;
    o.sampler = SamplerOptions{.shuffle = false, .batch_size = options.sampler.batch_size};
    o.batch_order = [self, v](uint64_t epoch, uint64_t k) {
      return self->VolumeBatch(epoch, k, static_cast<uint32_t>(v));
    };
    o.order_batches = self->batches_;
    DLFS_ASSIGN_OR_RETURN(std::unique_ptr<Loader> l, Loader::Create(self->volumes_[v], o));
    self->loaders_.push_back(std::move(l));
  }
  self->description_ += " <- " + self->loaders_.front()->description();
  return std::unique_ptr<MixtureSource>(new MixtureSource(std::move(impl)));
}

MixtureSource::MixtureSource(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MixtureSource::~MixtureSource() = default;
void MixtureSource::SetEpoch(uint64_t epoch) { impl_->SetEpoch(epoch); }
Result<bool> MixtureSource::Next(Batch* batch) { return impl_->Next(batch); }
uint64_t MixtureSource::batches_per_epoch() const { return impl_->batches_; }
const std::string& MixtureSource::description() const { return impl_->description_; }
SourceStats MixtureSource::source_stats() const { return impl_->Stats(); }
Result<SourceState> MixtureSource::SaveState() const { return impl_->SaveState(); }
Status MixtureSource::LoadState(const SourceState& state) { return impl_->LoadState(state); }
uint64_t MixtureSource::epoch_samples() const { return impl_->samples_; }
const std::vector<uint64_t>& MixtureSource::shares() const { return impl_->shares_; }
const Loader& MixtureSource::loader(size_t volume) const { return *impl_->loaders_.at(volume); }

std::vector<std::pair<uint32_t, uint64_t>> MixtureSource::RankSamples(uint64_t epoch) const {
  const auto plan = impl_->PlanFor(epoch);
  std::vector<std::pair<uint32_t, uint64_t>> out;
  std::vector<uint32_t> volume;
  std::vector<uint64_t> index;
  for (uint64_t k = plan->first_seq; k < impl_->batches_; ++k) {
    impl_->BatchSamples(*plan, k, &volume, &index);
    for (size_t i = 0; i < index.size(); ++i) out.push_back({volume[i], index[i]});
  }
  return out;
}

}  // namespace dlfs
