// ShardLoader::Impl: reading this rank's part of a window from storage.
#include "mpi/shard_loader_impl.h"

namespace dlfs {

std::shared_ptr<WindowBytes> ShardLoader::Impl::AcquireWindowBytes() {
  for (auto& w : pool_) {
    if (w.use_count() == 1) return w;
  }
  auto w = std::make_shared<WindowBytes>();
  if (pool_.size() < 3) pool_.push_back(w);
  return w;
}

Status ShardLoader::Impl::ReadLocal(const std::vector<uint64_t>& indices, int node, Buffer* buf,
                                    std::vector<std::span<const std::byte>>* spans,
                                    std::vector<Status>* status, uint64_t* device_bytes) {
  const SampleDirectory& dir = volume_->directory();
  const uint64_t a = std::max<uint32_t>(engine_->alignment(), 1);
  std::vector<ReadRequest> requests;
  std::vector<uint64_t> at(indices.size());
  uint64_t total = 0;
  for (size_t i = 0; i < indices.size(); ++i) {
    const SampleInfo s = dir.sample(indices[i]);
    const uint64_t from = s.offset / a * a;
    const uint64_t to = (s.offset + s.length + a - 1) / a * a;
    at[i] = total + (s.offset - from);
    total += to - from;
  }
  spans->assign(indices.size(), {});
  status->assign(indices.size(), Status::Ok());
  if (!buf->Reserve(total)) return Status::Unavailable("out of memory for a shard window");
  std::byte* base = buf->data.get();
  uint64_t cursor = 0;
  for (size_t i = 0; i < indices.size(); ++i) {
    const SampleInfo s = dir.sample(indices[i]);
    if (node >= 0 && OwnerNode(indices[i]) != node) {
      // Asked for a sample this node does not hold: the requester's
      // topology differs from ours (e.g. DLFS_RANKS_PER_NODE not set alike).
      (*status)[i] = Status::InvalidArgument("sample " + std::to_string(indices[i]) +
                                             " is not held by node " + std::to_string(node));
    }
    const uint64_t from = s.offset / a * a;
    const uint64_t to = (s.offset + s.length + a - 1) / a * a;
    requests.push_back({s.target, from, to - from, base + cursor, ReadRequest::kNoSlot});
    (*spans)[i] = {base + at[i], s.length};
    cursor += to - from;
  }
  std::vector<Status> results;
  DLFS_RETURN_IF_ERROR(driver_->Read(std::move(requests), &results));
  *device_bytes += total;
  for (size_t i = 0; i < results.size(); ++i) {
    if ((*status)[i].ok() && !results[i].ok()) {
      (*status)[i] =
          results[i].WithContext(volume_->path() + ": sample " + std::to_string(indices[i]) + " '" +
                                 dir.Path(indices[i]) + "'");
    }
  }
  return Status::Ok();
}

}  // namespace dlfs
