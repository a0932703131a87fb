#include "dlfs/sample_reader.h"

#include <mutex>

#include "common/clock.h"
#include "loader/batch_data.h"
#include "loader/batch_read.h"
#include "loader/fields.h"
#include "loader/slab_pool.h"

namespace dlfs {

class SampleReader::Impl {
 public:
  std::shared_ptr<Volume> volume;
  SampleReaderOptions options;
  std::unique_ptr<IoEngine> engine;
  std::shared_ptr<loader_internal::SlabPool> pool;
  // {0} for a volume of one compressed field (its samples are decoded),
  // empty for samples stored whole.
  std::vector<uint32_t> fields;
  std::shared_ptr<loader_internal::DecodedBuffers> decoded =
      std::make_shared<loader_internal::DecodedBuffers>();
  std::mutex mu;
  std::vector<ReadRequest> requests;
  std::vector<Status> results;
};

namespace {

// Where decoded samples start in a caller's buffer: after the reads.
uint64_t DecodedOffset(uint64_t read_bytes) { return (read_bytes + 63) / 64 * 64; }

}  // namespace

SampleReader::SampleReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SampleReader::~SampleReader() = default;

Result<std::unique_ptr<SampleReader>> SampleReader::Create(std::shared_ptr<Volume> volume,
                                                           const SampleReaderOptions& options) {
  if (!volume) return Status::InvalidArgument("no volume");
  if (options.engine.queue_depth == 0) {
    return Status::InvalidArgument("queue_depth must be at least 1");
  }
  if (options.plan.max_read < 4096)
    return Status::InvalidArgument("max_read must be at least 4096");
  auto impl = std::make_unique<Impl>();
  DLFS_ASSIGN_OR_RETURN(impl->fields, loader_internal::ResolveFields(*volume, {}));
  impl->volume = std::move(volume);
  impl->options = options;
  DLFS_ASSIGN_OR_RETURN(impl->engine,
                        CreateEngine(impl->volume->OpenTargetPaths(), options.engine));
  impl->pool = std::make_shared<loader_internal::SlabPool>(
      impl->engine->alignment(), impl->engine.get(), options.engine.buffer_slots);
  return std::unique_ptr<SampleReader>(new SampleReader(std::move(impl)));
}

namespace {

Status CheckIndices(const Volume& vol, std::span<const uint64_t> indices) {
  for (uint64_t i : indices) {
    if (i >= vol.size()) {
      return Status::InvalidArgument(vol.path() + ": sample index " + std::to_string(i) +
                                     " out of range (volume has " + std::to_string(vol.size()) +
                                     " samples)");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<Batch> SampleReader::Read(std::span<const uint64_t> indices, bool verify) {
  return ReadInto(indices, {}, verify);
}

Result<uint64_t> SampleReader::BufferBytes(std::span<const uint64_t> indices) {
  Impl& m = *impl_;
  DLFS_RETURN_IF_ERROR(CheckIndices(*m.volume, indices));
  loader_internal::PlanOptions po;
  po.read = m.options.plan;
  po.alignment = m.engine->alignment();
  const uint64_t read = loader_internal::BatchRead(*m.volume, indices, po).buffer_bytes();
  if (m.fields.empty()) return read;
  return DecodedOffset(read) + loader_internal::DecodedBytes(*m.volume, m.fields, indices);
}

Result<Batch> SampleReader::ReadInto(std::span<const uint64_t> indices, std::span<std::byte> buffer,
                                     bool verify) {
  Impl& m = *impl_;
  const Volume& vol = *m.volume;
  DLFS_RETURN_IF_ERROR(CheckIndices(vol, indices));
  std::lock_guard lock(m.mu);
  loader_internal::PlanOptions po;
  po.read = m.options.plan;
  po.alignment = m.engine->alignment();
  loader_internal::BatchRead read(vol, indices, po);
  std::shared_ptr<loader_internal::Slab> slab;
  std::byte* base = buffer.data();
  uint32_t slot = ReadRequest::kNoSlot;
  if (buffer.empty()) {
    slab = m.pool->Acquire(read.buffer_bytes());
    if (!slab) {
      return Status::Unavailable(vol.path() + ": out of memory for " +
                                 std::to_string(read.buffer_bytes()) + " bytes of samples");
    }
    base = slab->data;
    slot = slab->slot;
  }
  std::span<std::byte> decoded_into;  // decoded samples, when the caller gave the buffer
  if (!buffer.empty()) {
    const uint64_t need = m.fields.empty()
                              ? read.buffer_bytes()
                              : DecodedOffset(read.buffer_bytes()) +
                                    loader_internal::DecodedBytes(vol, m.fields, indices);
    if (buffer.size() < need || reinterpret_cast<uintptr_t>(base) % 4096 != 0) {
      return Status::InvalidArgument(
          vol.path() + ": these samples need a 4 KiB-aligned buffer of " + std::to_string(need) +
          " bytes, not " + std::to_string(buffer.size()));
    }
    if (!m.fields.empty()) decoded_into = buffer.subspan(DecodedOffset(read.buffer_bytes()));
  }
  const double t0 = Now();
  read.Start(base, slot, &m.requests);
  do {
    m.results.assign(m.requests.size(), Status::Ok());
    DLFS_RETURN_IF_ERROR(m.engine->Read(m.requests, m.results).WithContext(vol.path()));
    for (size_t r = 0; r < m.results.size(); ++r) read.Complete(r, m.results[r]);
  } while (read.NextRound(&m.requests));
  std::shared_ptr<const void> owner = slab;
  DLFS_ASSIGN_OR_RETURN(std::shared_ptr<Batch::Data> data,
                        read.FinishData(std::move(owner), 0, 0, Now() - t0));
  if (!m.fields.empty()) {
    // Checks each field's stored bytes, then decodes it.
    DLFS_RETURN_IF_ERROR(loader_internal::SplitFields(vol, m.fields, verify, data.get(),
                                                      m.decoded.get(), decoded_into));
  } else if (verify) {
    for (size_t i = 0; i < data->indices.size(); ++i) {
      DLFS_RETURN_IF_ERROR(vol.CheckSample(data->indices[i], data->samples[i]));
    }
  }
  return Batch(std::move(data));
}

const std::string& SampleReader::description() const { return impl_->engine->description(); }

}  // namespace dlfs
