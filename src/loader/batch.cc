#include "dlfs/batch.h"

#include "dlfs/batch_source.h"

#include "loader/batch_data.h"

namespace dlfs {

size_t Batch::size() const { return data_ ? data_->indices.size() : 0; }
uint64_t Batch::epoch() const { return data_ ? data_->epoch : 0; }
uint64_t Batch::sequence() const { return data_ ? data_->sequence : 0; }
uint64_t Batch::index(size_t i) const { return data_->indices[i]; }
uint32_t Batch::label(size_t i) const { return data_->labels[i]; }
std::span<const std::byte> Batch::sample(size_t i) const { return data_->samples[i]; }
size_t Batch::field_count() const {
  if (!data_) return 0;
  return data_->field_count != 0 ? data_->field_count : 1;
}
std::span<const std::byte> Batch::field(size_t i, size_t f) const {
  if (data_->field_count == 0) return data_->samples[i];
  return data_->fields[i * data_->field_count + f];
}
std::span<const uint64_t> Batch::indices() const {
  return data_ ? std::span<const uint64_t>(data_->indices) : std::span<const uint64_t>();
}
std::span<const uint32_t> Batch::sources() const {
  return data_ ? std::span<const uint32_t>(data_->sources) : std::span<const uint32_t>();
}
std::span<const uint32_t> Batch::labels() const {
  return data_ ? std::span<const uint32_t>(data_->labels) : std::span<const uint32_t>();
}
uint64_t Batch::payload_bytes() const { return data_ ? data_->payload_bytes : 0; }
uint64_t Batch::device_bytes() const { return data_ ? data_->device_bytes : 0; }
uint64_t Batch::peer_bytes() const { return data_ ? data_->peer_bytes : 0; }
double Batch::io_seconds() const { return data_ ? data_->io_seconds : 0; }
const TensorView& Batch::tensor() const {
  static const TensorView kNone;
  return data_ ? data_->tensor : kNone;
}

size_t DTypeSize(DType dtype) { return dtype == DType::kFloat32 ? 4 : 1; }

uint64_t TensorView::elements() const {
  if (data == nullptr) return 0;
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

SourceStats SourceStats::operator-(const SourceStats& earlier) const {
  SourceStats d = *this;
  d.io = io - earlier.io;
  d.verify_seconds = verify_seconds - earlier.verify_seconds;
  d.next_wait_seconds = next_wait_seconds - earlier.next_wait_seconds;
  d.cache_hits = cache_hits - earlier.cache_hits;
  d.cache_hit_bytes = cache_hit_bytes - earlier.cache_hit_bytes;
  d.cache_misses = cache_misses - earlier.cache_misses;
  d.cache_fill_bytes = cache_fill_bytes - earlier.cache_fill_bytes;
  d.cache_fill_seconds = cache_fill_seconds - earlier.cache_fill_seconds;
  d.cache_scan_bytes = cache_scan_bytes - earlier.cache_scan_bytes;
  d.cache_scan_seconds = cache_scan_seconds - earlier.cache_scan_seconds;
  d.cache_fill_cpu_seconds = cache_fill_cpu_seconds - earlier.cache_fill_cpu_seconds;
  return d;
}
SourceStats& SourceStats::operator+=(const SourceStats& later) {
  const SourceStats counts = *this;
  *this = later;  // its levels
  io = counts.io;
  io += later.io;
  verify_seconds += counts.verify_seconds;
  next_wait_seconds += counts.next_wait_seconds;
  cache_hits += counts.cache_hits;
  cache_hit_bytes += counts.cache_hit_bytes;
  cache_misses += counts.cache_misses;
  cache_fill_bytes += counts.cache_fill_bytes;
  cache_fill_seconds += counts.cache_fill_seconds;
  cache_scan_bytes += counts.cache_scan_bytes;
  cache_scan_seconds += counts.cache_scan_seconds;
  cache_fill_cpu_seconds += counts.cache_fill_cpu_seconds;
  return *this;
}

bool Batch::owns_bytes() const { return data_ && data_->owns_bytes; }

}  // namespace dlfs
