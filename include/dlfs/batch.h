// Batch: one batch of samples as a BatchSource (dlfs/batch_source.h) hands
// it out — sample indices, labels, and each sample's bytes as a span into a
// buffer the batch shares.
//
// Fields (format v2, docs/format.md §4.8): a source created with
// LoaderOptions::fields hands out, per sample, those fields in that order:
// field(i, f) is field f of sample i, decoded (raw fields are spans into the
// read buffer, compressed ones are decompressed into a buffer the batch
// owns), and sample(i) is field(i, 0). Without fields, field_count() is 1
// and field(i, 0) is sample(i), the sample's whole stored bytes.
//
// A batch made by a decode stage (dlfs/decode_stage.h) also holds one dense
// tensor of all its images (tensor()); its samples are then the images'
// slices of that tensor, and payload_bytes()/device_bytes() still count the
// encoded bytes read from storage.
//
// Memory: the bytes live in a buffer owned by the batch (usually a loader's
// recycled I/O buffer); copies of a Batch share it, and it is released when
// the last copy is destroyed — even after the source that made it is gone.
//
// Thread safety: a Batch is an immutable value; copies may be read and
// destroyed from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace dlfs {

// Element type of a batch tensor.
enum class DType : uint8_t { kUint8 = 0, kFloat32 = 1 };
size_t DTypeSize(DType dtype);  // bytes per element

// A dense, C-ordered (row-major) tensor inside memory the batch owns.
// `data` is writable: the memory belongs to this batch alone (the consumer
// may normalise in place), and is recycled only after the last Batch copy is
// gone.
struct TensorView {
  void* data = nullptr;  // nullptr: the batch has no tensor
  DType dtype = DType::kUint8;
  std::vector<int64_t> shape;  // outermost first, e.g. {N, C, H, W}

  explicit operator bool() const { return data != nullptr; }
  uint64_t elements() const;  // product of shape (0 without a tensor)
  uint64_t bytes() const { return elements() * DTypeSize(dtype); }
};

class Batch {
 public:
  // What a batch holds; defined by the library (src/loader/batch_data.h).
  struct Data;

  Batch() = default;  // empty: size() == 0
  // For batch sources: wraps data the source filled in.
  explicit Batch(std::shared_ptr<const Data> data) : data_(std::move(data)) {}

  size_t size() const;
  uint64_t epoch() const;
  uint64_t sequence() const;       // batch number within the epoch
  uint64_t index(size_t i) const;  // REQUIRES: i < size()
  uint32_t label(size_t i) const;  // kNoLabel when the sample has none
  // Sample i's bytes: its field 0 when the source reads fields.
  std::span<const std::byte> sample(size_t i) const;
  // Fields per sample: LoaderOptions::fields' count, or 1 (the whole
  // sample) without; 0 for an empty Batch().
  size_t field_count() const;
  // REQUIRES: i < size(), f < field_count().
  std::span<const std::byte> field(size_t i, size_t f) const;
  std::span<const uint64_t> indices() const;
  // Which source each sample came from (a mixture's, dlfs/mixture.h: the
  // position of its volume; index(i) is then within that volume); empty
  // for a batch of one volume.
  std::span<const uint32_t> sources() const;
  std::span<const uint32_t> labels() const;
  uint64_t payload_bytes() const;  // sum of sample sizes (of the fields' decoded sizes)
  uint64_t device_bytes() const;   // bytes read from storage (alignment, gaps)
  // Bytes received from other nodes' caches (an MPI ShardLoader with
  // cluster_cache; 0 for other sources).
  uint64_t peer_bytes() const;
  double io_seconds() const;  // from submitting the batch's reads to the last completion
  // The batch's images as one tensor (decode stages); empty TensorView
  // otherwise. Valid as long as this Batch (or a copy) lives.
  const TensorView& tensor() const;
  // True when the samples' (and fields') bytes are this batch's alone (a loader's buffer
  // made for it): no other batch, epoch or cache reads them, so a consumer
  // may change them in place (Python then hands out writable views).
  // Samples repeated within the batch may share bytes. False when the bytes
  // are shared (an exchange window, a cache) or the source does not say.
  bool owns_bytes() const;

 private:
  std::shared_ptr<const Data> data_;
};

}  // namespace dlfs
