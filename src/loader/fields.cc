#include "loader/fields.h"

#include <memory>
#include <new>

#include "loader/batch_read.h"

namespace dlfs::loader_internal {

namespace {

std::string FieldList(const SampleDirectory& dir) {
  std::string out;
  for (uint32_t f = 0; f < dir.field_count(); ++f) {
    if (f > 0) out += ", ";
    out += "'" + std::string(dir.field_name(f)) + "'";
  }
  return out;
}

std::string FieldsOf(const SampleDirectory& dir, uint64_t index) {
  std::string out;
  for (const FieldInfo& f : dir.Fields(index)) {
    if (!out.empty()) out += ", ";
    out += "'" + std::string(dir.field_name(f.field)) + "'";
  }
  return out.empty() ? "none" : out;
}

}  // namespace

Result<std::vector<uint32_t>> ResolveFields(const Volume& volume,
                                            const std::vector<std::string>& names) {
  const SampleDirectory& dir = volume.directory();
  if (names.empty()) {
    // Samples stored whole are handed out as read; a volume of one field
    // (a compressed ImageFolder pack) hands out that field, decoded.
    if (!dir.has_field_records()) return std::vector<uint32_t>{};
    DLFS_RETURN_IF_ERROR(volume.PlainSamples());
    return std::vector<uint32_t>{0};
  }
  std::vector<uint32_t> ids;
  for (const std::string& name : names) {
    const std::optional<uint32_t> id = dir.FindField(name);
    if (!id) {
      return Status::InvalidArgument(volume.path() + ": has no field '" + name +
                                     "'; its fields: " + FieldList(dir));
    }
    for (uint32_t seen : ids) {
      if (seen == *id) return Status::InvalidArgument("field '" + name + "' is asked for twice");
    }
    ids.push_back(*id);
  }
  return ids;
}

std::shared_ptr<std::byte> DecodedBuffers::Acquire(uint64_t bytes) {
  std::byte* data = nullptr;
  uint64_t capacity = 0;
  {
    std::lock_guard lock(mu_);
    for (size_t k = 0; k < idle_.size(); ++k) {
      if (idle_[k].capacity >= bytes) {
        data = idle_[k].data;
        capacity = idle_[k].capacity;
        idle_.erase(idle_.begin() + static_cast<ptrdiff_t>(k));
        break;
      }
    }
  }
  if (data == nullptr) {
    capacity = bytes + bytes / 4;  // room for the next, slightly larger batch
    data = new (std::nothrow) std::byte[capacity];
    if (data == nullptr) return nullptr;
  }
  std::weak_ptr<DecodedBuffers> pool = weak_from_this();
  return std::shared_ptr<std::byte>(data, [pool, capacity](std::byte* p) {
    if (auto alive = pool.lock()) {
      alive->Release(p, capacity);
    } else {
      delete[] p;
    }
  });
}

void DecodedBuffers::Release(std::byte* data, uint64_t capacity) {
  {
    std::lock_guard lock(mu_);
    if (idle_.size() < kMaxIdle) {
      idle_.push_back({data, capacity});
      return;
    }
  }
  delete[] data;
}

DecodedBuffers::~DecodedBuffers() {
  for (const Idle& b : idle_) delete[] b.data;
}

uint64_t DecodedBytes(const Volume& volume, std::span<const uint32_t> fields,
                      std::span<const uint64_t> indices) {
  uint64_t bytes = 0;
  for (uint64_t index : indices) {
    for (uint32_t f : fields) {
      const std::optional<FieldInfo> info = volume.directory().Field(index, f);
      if (info && info->codec != FieldCodec::kNone) bytes += info->decoded_length;
    }
  }
  return bytes;
}

Status SplitFields(const Volume& volume, std::span<const uint32_t> fields, bool verify,
                   Batch::Data* data, DecodedBuffers* buffers, std::span<std::byte> into,
                   bool cached_decoded) {
  const SampleDirectory& dir = volume.directory();
  const size_t n = data->indices.size();
  const size_t k = fields.size();
  // Each Field() result is made in its slot (guaranteed copy elision):
  // copying it out of a temporary the callee had just written field by
  // field stalled on store forwarding, half of this function's time on a
  // v2 volume held in memory (0.93x the v1 volume's rate).
  std::vector<std::optional<FieldInfo>> infos(n * k);
  uint64_t decoded_bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t index = data->indices[i];
    const bool held_decoded = cached_decoded && i < data->checked.size() && data->checked[i];
    const std::vector<FieldInfo> stored_order =
        held_decoded ? dir.Fields(index) : std::vector<FieldInfo>{};
    for (size_t f = 0; f < k; ++f) {
      std::optional<FieldInfo>& info = infos[i * k + f];
      ::new (static_cast<void*>(&info)) std::optional<FieldInfo>(dir.Field(index, fields[f]));
      if (!info) {
        return Status::NotFound(SampleName(volume, index) + " has no field '" +
                                std::string(dir.field_name(fields[f])) + "' (it has " +
                                FieldsOf(dir, index) + ")");
      }
      if (held_decoded) {
        // The field decoded lies after the decoded fields stored before it:
        // a raw field of the decoded sample.
        uint64_t at = 0;
        for (const FieldInfo& before : stored_order) {
          if (before.field == info->field) break;
          at += before.decoded_length;
        }
        info->offset_in_sample = static_cast<uint32_t>(at);
        info->stored_length = info->decoded_length;
        info->codec = FieldCodec::kNone;
      }
      if (uint64_t{info->offset_in_sample} + info->stored_length > data->samples[i].size()) {
        return Status::Corruption(volume.FieldContext(index, fields[f]) +
                                  ": lies outside the sample's extent");
      }
      if (info->codec != FieldCodec::kNone) decoded_bytes += info->decoded_length;
    }
  }
  // One buffer for the batch's decoded fields, released with its last copy.
  std::shared_ptr<std::byte> decoded;
  if (decoded_bytes > 0 && !into.empty()) {
    if (into.size() < decoded_bytes) {
      return Status::InvalidArgument(volume.path() + ": " + std::to_string(decoded_bytes) +
                                     " bytes of decoded fields do not fit a buffer of " +
                                     std::to_string(into.size()));
    }
    decoded = std::shared_ptr<std::byte>(into.data(), [](std::byte*) {});  // the caller's
  } else if (decoded_bytes > 0) {
    if (buffers != nullptr) {
      decoded = buffers->Acquire(decoded_bytes);
    } else {
      std::byte* p = new (std::nothrow) std::byte[decoded_bytes];
      if (p != nullptr) decoded.reset(p, std::default_delete<std::byte[]>());
    }
  }
  if (decoded_bytes > 0 && !decoded) {
    return Status::Unavailable(volume.path() + ": out of memory for " +
                               std::to_string(decoded_bytes) + " bytes of decoded fields");
  }
  std::vector<std::span<const std::byte>> out(n * k);
  uint64_t at = 0, payload = 0;
  for (size_t i = 0; i < n; ++i) {
    // A sample the node cache handed out was checked whole against the
    // directory's CRC32C (in this process, on first use): its fields' bytes
    // are those checked. Checking each field again on every read was what
    // was left once the data was in memory (0.13x a v1 volume's rate).
    const bool check = verify && !(i < data->checked.size() && data->checked[i]);
    for (size_t f = 0; f < k; ++f) {
      const FieldInfo& info = *infos[i * k + f];
      const std::span<const std::byte> stored =
          data->samples[i].subspan(info.offset_in_sample, info.stored_length);
      if (info.codec == FieldCodec::kNone) {
        if (check) DLFS_RETURN_IF_ERROR(volume.DecodeField(data->indices[i], info, stored, {}));
        out[i * k + f] = stored;
      } else {
        const std::span<std::byte> dst(decoded.get() + at, info.decoded_length);
        DLFS_RETURN_IF_ERROR(volume.DecodeField(data->indices[i], info, stored, dst, check));
        out[i * k + f] = dst;
        at += info.decoded_length;
      }
      payload += out[i * k + f].size();
    }
  }
  data->field_count = static_cast<uint32_t>(k);
  data->fields = std::move(out);
  for (size_t i = 0; i < n; ++i) data->samples[i] = data->fields[i * k];
  data->payload_bytes = payload;
  data->decoded = std::move(decoded);
  return Status::Ok();
}

}  // namespace dlfs::loader_internal
