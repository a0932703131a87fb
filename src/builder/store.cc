// VolumeBuilder::Impl: storing a sample once it is complete — its fields
// compressed (the dictionary trained on the first samples), its bytes placed
// on a target, the image stage's results committed in order, and dropped
// samples taken out. The public calls are in volume_builder.cc.
#include <algorithm>
#include <optional>

#include "builder/builder_impl.h"
#include "common/crc32c.h"
#include "dlfs/builder.h"

namespace dlfs {

Status VolumeBuilder::Impl::SetUpCompression(const Options::Compression& c) {
  if (c.train_dictionary) {
    if (!c.zstd) {
      return Status::InvalidArgument("training a zstd dictionary needs zstd compression");
    }
    if (!c.dictionary.empty()) {
      return Status::InvalidArgument("give a zstd dictionary or train one, not both");
    }
    training_ = true;
  }
  if (!c.dictionary.empty()) {
    if (!c.zstd) return Status::InvalidArgument("a zstd dictionary needs zstd compression");
    DLFS_ASSIGN_OR_RETURN(dict_, format::ZstdDictionary::Create(c.dictionary, c.level));
  }
  if (c.min_saving < 0 || c.min_saving >= 1) {
    return Status::InvalidArgument("compression's minimum saving must be in [0, 1)");
  }
  return Status::Ok();
}

Status VolumeBuilder::Impl::WriteBytes(PendingSample& s, format::TreeField* f,
                                       std::span<const std::byte> data) {
  if (data.size() > uint64_t{0xFFFFFFFFu} - s.length) {
    return Status::InvalidArgument("sample larger than 4 GiB - 1 bytes");
  }
  s.crc32c = crc32c::Extend(s.crc32c, data.data(), data.size());
  s.length += static_cast<uint32_t>(data.size());
  if (f != nullptr) {
    f->crc32c = crc32c::Extend(f->crc32c, data.data(), data.size());
    f->stored_length += static_cast<uint32_t>(data.size());
  }
  return Write(targets_[s.target], data);
}

Status VolumeBuilder::Impl::StoreField(PendingSample& s, format::TreeField& f,
                                       std::span<const std::byte> raw) {
  f.decoded_length = static_cast<uint32_t>(raw.size());
  std::vector<std::byte> packed;
  if (!raw.empty()) {
    DLFS_ASSIGN_OR_RETURN(packed, format::ZstdCompress(raw, options_.compress.level, dict_.get()));
  }
  const double limit = static_cast<double>(raw.size()) * (1.0 - options_.compress.min_saving);
  if (!raw.empty() && static_cast<double>(packed.size()) <= limit) {
    f.codec =
        static_cast<uint8_t>(dict_ ? format::FieldCodec::kZstdDict : format::FieldCodec::kZstd);
    dict_used_ = dict_used_ || dict_ != nullptr;
    return WriteBytes(s, &f, packed);
  }
  return WriteBytes(s, &f, raw);
}

Status VolumeBuilder::Impl::TrainAndWrite() {
  const uint64_t total = held_bytes_;
  const size_t capacity =
      std::max<size_t>(1024, std::min<size_t>(options_.compress.dictionary_max_bytes, total / 10));
  auto dict = format::TrainZstdDictionary(held_, capacity);
  if (!dict.ok()) {
    return Status::InvalidArgument(path_ + ": cannot train a zstd dictionary on the first " +
                                   std::to_string(held_.size()) + " fields (" +
                                   std::to_string(total) + " bytes): " + dict.status().message() +
                                   "; compress without a dictionary");
  }
  DLFS_ASSIGN_OR_RETURN(dict_, format::ZstdDictionary::Create(*dict, options_.compress.level));
  options_.compress.dictionary = std::move(*dict);
  training_ = false;
  // With image preparation only the samples back from the stage are held;
  // those left out hold nothing and are not placed.
  const uint64_t held_samples = stage_ ? committed_ : samples_.size();
  for (uint64_t n = 0; n < held_samples; ++n) {
    if (stage_ && dropped_[n]) continue;
    PendingSample& s = samples_[n];
    DLFS_RETURN_IF_ERROR(PlaceAndStore(
        s, std::span<std::vector<std::byte>>(held_.data() + s.first_field, s.field_count)));
  }
  std::vector<std::vector<std::byte>>().swap(held_);
  held_bytes_ = 0;
  return Status::Ok();
}

Status VolumeBuilder::Impl::PlaceAndStore(PendingSample& s,
                                          std::span<std::vector<std::byte>> field_bytes) {
  s.target = PickTarget();
  TargetFile& tf = targets_[s.target];
  DLFS_RETURN_IF_ERROR(Pad(tf, options_.align));
  s.offset = tf.Tell();
  for (uint32_t j = 0; j < s.field_count; ++j) {
    format::TreeField& f = fields_[s.first_field + j];
    std::vector<std::byte>& bytes = field_bytes[j];
    if (options_.compress.zstd) {
      DLFS_RETURN_IF_ERROR(StoreField(s, f, bytes));
    } else {
      if (bytes.size() > 0xFFFFFFFFu) {
        return Status::InvalidArgument("field larger than 4 GiB - 1 bytes");
      }
      DLFS_RETURN_IF_ERROR(WriteBytes(s, &f, bytes));
      f.decoded_length = f.stored_length;
    }
    std::vector<std::byte>().swap(bytes);
  }
  data_bytes_ += s.length;
  return Status::Ok();
}

Status VolumeBuilder::Impl::SubmitPrepared(builder_internal::PrepSample sample) {
  Status st;
  // Room in the window first: what is taken back is written meanwhile.
  while (stage_->in_flight() >= stage_->window() && st.ok()) {
    std::optional<builder_internal::PrepSample> done = stage_->TakeNext(/*wait=*/true);
    st = Commit(*done);
  }
  stage_->Submit(std::move(sample));
  Status rest = TakePrepared(/*all=*/false);  // keeps the stage moving whatever st is
  DLFS_RETURN_IF_ERROR(st);
  DLFS_RETURN_IF_ERROR(rest);
  return NextUnreported();
}

Status VolumeBuilder::Impl::NextUnreported() {
  if (unreported_.empty()) return Status::Ok();
  Status st = std::move(unreported_.front());
  unreported_.pop_front();
  return st;
}

Status VolumeBuilder::Impl::TakePrepared(bool all) {
  Status first;
  while (std::optional<builder_internal::PrepSample> done = stage_->TakeNext(all)) {
    Status st = Commit(*done);
    if (first.ok()) first = st;
  }
  return first;
}

Status VolumeBuilder::Impl::Commit(builder_internal::PrepSample& p) {
  PendingSample& s = samples_[p.sample];
  ++committed_;
  if (!p.status.ok()) {
    // Left out: nothing of it is written; training keeps the held fields
    // aligned with fields_ by holding nothing for them.
    dropped_[p.sample] = true;
    if (training_) held_.resize(held_.size() + p.fields.size());
    if (!options_.images.skip_unreadable) {
      unreported_.push_back(std::move(p.status));
      return Status::Ok();
    }
    ++image_stats_.skipped;
    if (image_stats_.skipped_examples.size() < 10) {
      image_stats_.skipped_examples.push_back(p.status.message());
    }
    return Status::Ok();
  }
  std::vector<std::vector<std::byte>> bytes;
  bytes.reserve(p.fields.size());
  for (builder_internal::PrepSample::Field& f : p.fields) {
    if (f.image) {
      const PreparedImage& r = f.result;
      ++image_stats_.images;
      image_stats_.bytes_in += f.given_bytes;
      image_stats_.bytes_out += f.bytes.size();
      if (r.changed) {
        ++image_stats_.changed;
        image_stats_.resized += r.resized;
        image_stats_.as_jpeg += r.stored == StoredImage::kJpeg;
        image_stats_.as_png += r.stored == StoredImage::kPng;
        image_stats_.as_raw += r.stored == StoredImage::kRaw;
        image_records_.push_back(format::TreeImage{
            static_cast<uint32_t>(p.sample), static_cast<uint16_t>(fields_[f.index].field),
            static_cast<uint8_t>(r.stored),
            static_cast<uint8_t>(r.resized ? format::kImageRecordResized : 0), r.original.width,
            r.original.height});
      }
    }
    bytes.push_back(std::move(f.bytes));
  }
  if (!training_) return PlaceAndStore(s, bytes);
  for (std::vector<std::byte>& b : bytes) {
    held_bytes_ += b.size();
    held_.push_back(std::move(b));
  }
  if (held_bytes_ >= options_.compress.training_bytes ||
      held_.size() >= options_.compress.training_fields) {
    return TrainAndWrite();
  }
  return Status::Ok();
}

void VolumeBuilder::Impl::RemoveDropped() {
  std::vector<uint32_t> renumber(samples_.size());
  size_t kept = 0;
  for (size_t n = 0; n < samples_.size(); ++n) {
    renumber[n] = static_cast<uint32_t>(kept);
    if (!dropped_[n]) samples_[kept++] = samples_[n];
  }
  samples_.resize(kept);
  dropped_.assign(kept, false);
  // Only samples that were written have records.
  for (format::TreeImage& r : image_records_) r.sample = renumber[r.sample];
}

}  // namespace dlfs
