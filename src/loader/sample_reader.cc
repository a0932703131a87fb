#include "dlfs/sample_reader.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>

#include "cache/node_cache.h"
#include "cache/sequential_fill.h"
#include "common/clock.h"
#include "loader/batch_data.h"
#include "loader/batch_planner.h"
#include "loader/batch_read.h"
#include "loader/fields.h"
#include "loader/slab_pool.h"

namespace dlfs {

class SampleReader::Impl {
 public:
  std::shared_ptr<Volume> volume;
  SampleReaderOptions options;
  std::unique_ptr<IoEngine> engine;
  std::unique_ptr<io_internal::ReadDriver> driver;  // over `engine`
  std::shared_ptr<loader_internal::SlabPool> pool;
  // {0} for a volume of one compressed field (its samples are decoded),
  // empty for samples stored whole.
  std::vector<uint32_t> fields;
  std::shared_ptr<loader_internal::DecodedBuffers> decoded =
      std::make_shared<loader_internal::DecodedBuffers>();
  std::shared_ptr<cache_internal::NodeCache> cache;  // null: none
  std::unique_ptr<cache_internal::SequentialFill> fill;
  std::atomic<uint64_t> read_ns{0};     // callers waiting in ReadInto
  std::atomic<uint64_t> read_bytes{0};  // sample bytes ReadInto returned
  std::string description;
  std::mutex mu;

  ~Impl() { fill.reset(); }  // before the counters it asks for progress
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
  // As the Loader: samples much smaller than a block are read buffered.
  EngineOptions eo = options.engine;
  std::string read_note;
  DLFS_ASSIGN_OR_RETURN(impl->engine,
                        loader_internal::CreateEngineForSamples(
                            *impl->volume, {}, options.auto_direct_io, false, &eo, &read_note));
  impl->driver = std::make_unique<io_internal::ReadDriver>(*impl->engine);
  impl->description = impl->engine->description();
  if (!read_note.empty()) impl->description += " (" + read_note + ")";
  impl->pool = std::make_shared<loader_internal::SlabPool>(
      impl->engine->alignment(), impl->engine.get(), options.engine.buffer_slots);
  cache_internal::NodeCacheOptions co;
  co.budget = ResolveCacheBudget(options.cache_budget, ReadMemoryLimit());
  co.shared = options.cache_shared;
  impl->cache = cache_internal::NodeCache::Open(*impl->volume, co, nullptr);
  if (impl->cache) {
    Impl* raw = impl.get();
    auto fo = cache_internal::SequentialFill::Options::ForReader(
        options.cache_budget, options.planned_epochs, 0, options.engine, [raw] {
          return cache_internal::SequentialFill::ReaderProgress{
              raw->read_ns.load(std::memory_order_relaxed) / 1e9,
              raw->read_bytes.load(std::memory_order_relaxed)};
        });
    impl->fill =
        std::make_unique<cache_internal::SequentialFill>(impl->cache, impl->volume, std::move(fo));
  }
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
  if (m.fill) m.fill->Start();  // measures the reads' waits from here
  const double t0 = Now();
  loader_internal::PlanOptions po;
  po.read = m.options.plan;
  po.alignment = m.engine->alignment();
  // Samples the node cache holds are not read.
  std::vector<std::optional<std::span<const std::byte>>> cached(indices.size());
  std::vector<uint64_t> misses;
  uint64_t cached_bytes = 0;  // as laid out in a caller's buffer
  if (m.cache) {
    for (size_t k = 0; k < indices.size(); ++k) {
      cached[k] = m.cache->Find(indices[k]);
      if (cached[k]) {
        cached_bytes += DecodedOffset(cached[k]->size());
      } else {
        misses.push_back(indices[k]);
      }
    }
  }
  std::span<const uint64_t> to_read = m.cache ? std::span<const uint64_t>(misses) : indices;
  std::optional<loader_internal::BatchRead> read;
  read.emplace(vol, to_read, po);
  const uint64_t decoded =
      m.fields.empty() ? 0 : loader_internal::DecodedBytes(vol, m.fields, indices);
  // A caller's buffer holds the reads, then cached samples, then decoded ones.
  auto need = [&] {
    const uint64_t r = read->buffer_bytes();
    return cached_bytes + decoded == 0 ? r : DecodedOffset(r) + cached_bytes + decoded;
  };
  if (!buffer.empty() && cached_bytes > 0 && need() > buffer.size()) {
    // The cached samples do not fit beside the reads in the caller's
    // buffer (sized by BufferBytes for reading them all): read them all.
    cached.assign(indices.size(), std::nullopt);
    cached_bytes = 0;
    to_read = indices;
    read.emplace(vol, to_read, po);
  }
  std::shared_ptr<loader_internal::Slab> slab;
  std::byte* base = buffer.data();
  uint32_t slot = ReadRequest::kNoSlot;
  if (buffer.empty()) {
    slab = m.pool->Acquire(read->buffer_bytes());
    if (!slab) {
      return Status::Unavailable(vol.path() + ": out of memory for " +
                                 std::to_string(read->buffer_bytes()) + " bytes of samples");
    }
    base = slab->data;
    slot = slab->slot;
  } else {
    if (buffer.size() < need() || reinterpret_cast<uintptr_t>(base) % 4096 != 0) {
      return Status::InvalidArgument(
          vol.path() + ": these samples need a 4 KiB-aligned buffer of " + std::to_string(need()) +
          " bytes, not " + std::to_string(buffer.size()));
    }
  }
  if (!to_read.empty()) {
    read->SetBuffer(base, slot);
    DLFS_RETURN_IF_ERROR(m.driver->Run(*read).WithContext(vol.path()));
  }
  std::shared_ptr<const void> owner = slab;
  DLFS_ASSIGN_OR_RETURN(std::shared_ptr<Batch::Data> data,
                        read->FinishData(std::move(owner), 0, 0, Now() - t0));
  if (to_read.size() != indices.size()) {
    // In the order asked: cached samples as spans into the cache, or copies
    // in the caller's buffer after the reads.
    auto all = std::make_shared<Batch::Data>();
    struct Owners {
      std::shared_ptr<const void> slab;
      std::shared_ptr<cache_internal::NodeCache> cache;
    };
    all->owner = std::make_shared<Owners>(Owners{data->owner, m.cache});
    all->owns_bytes = !buffer.empty();  // copies are the caller's; the cache's are shared
    all->io_seconds = data->io_seconds;
    all->device_bytes = data->device_bytes;
    all->indices.assign(indices.begin(), indices.end());
    all->labels.resize(indices.size());
    all->samples.resize(indices.size());
    uint64_t at = DecodedOffset(read->buffer_bytes());
    for (size_t k = 0, r = 0; k < indices.size(); ++k) {
      all->labels[k] = vol.directory().label(indices[k]);
      if (!cached[k]) {
        all->samples[k] = data->samples[r++];
      } else if (buffer.empty()) {
        all->samples[k] = *cached[k];
      } else {
        std::memcpy(base + at, cached[k]->data(), cached[k]->size());
        all->samples[k] = {base + at, cached[k]->size()};
        at += DecodedOffset(cached[k]->size());
      }
      all->payload_bytes += all->samples[k].size();
    }
    data = std::move(all);
  }
  if (!m.fields.empty()) {
    // Checks each field's stored bytes, then decodes it.
    const std::span<std::byte> decoded_into =
        buffer.empty() ? std::span<std::byte>()
                       : buffer.subspan(DecodedOffset(read->buffer_bytes()) + cached_bytes);
    DLFS_RETURN_IF_ERROR(loader_internal::SplitFields(vol, m.fields, verify, data.get(),
                                                      m.decoded.get(), decoded_into));
  } else if (verify) {
    for (size_t i = 0; i < data->indices.size(); ++i) {
      DLFS_RETURN_IF_ERROR(vol.CheckSample(data->indices[i], data->samples[i]));
    }
  }
  m.read_ns.fetch_add(static_cast<uint64_t>((Now() - t0) * 1e9), std::memory_order_relaxed);
  m.read_bytes.fetch_add(data->payload_bytes, std::memory_order_relaxed);
  return Batch(std::move(data));
}

const std::string& SampleReader::description() const { return impl_->description; }

}  // namespace dlfs
