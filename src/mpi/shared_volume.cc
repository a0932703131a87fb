// OpenShared: one metadata read per job, one directory copy per node.
#include <algorithm>
#include <cstring>
#include <optional>

#include "common/clock.h"
#include "common/crc32c.h"
#include "common/file_util.h"
#include "dlfs/distributed.h"
#include "volume/node_directory.h"

namespace dlfs {

namespace {

// MPI counts are ints: broadcast large buffers in pieces.
void BcastBytes(std::byte* data, uint64_t n, int root, MPI_Comm comm) {
  constexpr uint64_t kPiece = uint64_t{1} << 30;
  for (uint64_t at = 0; at < n; at += kPiece) {
    MPI_Bcast(data + at, static_cast<int>(std::min(kPiece, n - at)), MPI_BYTE, root, comm);
  }
}

// What rank 0 tells everyone about the directory before it is shared.
struct DirectoryHeader {
  uint64_t superblocks = 0;
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
  uint32_t mapped = 0;  // a compact directory each rank maps from the volume file
  char uuid[40] = {};
};

// How a node holds the directory, as its leader tells the node's ranks.
enum NodeCopy : int {
  kOwnRegion = 0,    // a node region holding the bytes rank 0 checked
  kOtherRegion = 1,  // a node region another process had made: check it in full
  kPrivate = 2,      // no region: every rank of the node gets its own copy
};

}  // namespace

Result<std::shared_ptr<Volume>> OpenShared(MPI_Comm comm, const std::string& path,
                                           const VolumeOpenOptions& options,
                                           SharedOpenStats* stats) {
  const double start = Now();
  SharedOpenStats local_stats;
  DLFS_ASSIGN_OR_RETURN(NodeTopology topo, NodeTopology::Create(comm));

  // 1. Rank 0 reads and checks the metadata (a private copy, dropped below).
  std::shared_ptr<Volume> first;
  VolumeMetadata md;
  DirectoryHeader header;
  Status st;
  if (topo.rank() == 0) {
    VolumeOpenOptions o = options;
    o.metadata = nullptr;
    o.directory_sharing = DirectorySharing::kPrivate;
    auto v = Volume::Open(path, o);
    if (v.ok()) {
      first = *v;
      md = first->metadata();
      for (const auto& sb : md.superblocks) local_stats.metadata_bytes_read += sb.size();
      header.superblocks = md.superblocks.size();
      header.bytes = md.directory_bytes;
      header.mapped = md.directory_mapped ? 1 : 0;
      if (!md.directory_mapped) {
        local_stats.metadata_bytes_read += md.directory_bytes;
        header.crc32c = crc32c::Value(md.directory.get(), md.directory_bytes);
      }
      std::snprintf(header.uuid, sizeof header.uuid, "%s", first->info().uuid.c_str());
    } else {
      st = v.status();
    }
  }
  DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm, st));

  // 2. Everyone gets the superblocks (a few KB). One rank 0 did not open
  // (open_only) arrives empty; the ranks holding that target read it.
  MPI_Bcast(&header, sizeof header, MPI_BYTE, 0, comm);
  md.superblocks.resize(header.superblocks);
  md.directory_bytes = header.bytes;
  for (auto& sb : md.superblocks) {
    uint64_t n = sb.size();
    MPI_Bcast(&n, 1, MPI_UINT64_T, 0, comm);
    sb.resize(n);
    BcastBytes(sb.data(), sb.size(), 0, comm);
  }

  // The last step: every rank opens over `md` (rank 0 drops its private
  // copy), and all agree on the outcome.
  auto open_over = [&]() -> Result<std::shared_ptr<Volume>> {
    first.reset();
    VolumeOpenOptions o = options;
    o.metadata = &md;
    auto v = Volume::Open(path, o);
    st = v.ok() ? Status::Ok() : v.status();
    DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm, st));
    local_stats.seconds = Now() - start;
    if (stats) *stats = local_stats;
    return *v;
  };
  if (header.mapped) {
    // A compact directory: every rank maps it from the volume file, and the
    // page cache holds it once per node (docs/format.md §10). Nothing of
    // size n crosses the network.
    md.directory = nullptr;
    md.directory_mapped = true;
    return open_over();
  }

  // 3. Node leaders receive the directory and publish it as their node's
  // region (or, where none can be made, keep it as their own); the other
  // ranks attach the region their leader published. (A leader receives
  // into its own memory first: making the region may fail or be retried,
  // and the broadcast must happen exactly once on every leader.)
  const volume_internal::NodeDirectoryKey key{.uuid = header.uuid,
                                              .bytes = header.bytes,
                                              .crc32c = header.crc32c,
                                              .node_name = topo.node_name()};
  std::shared_ptr<const std::byte> directory;
  std::string region, note;
  int copy = kOwnRegion;
  if (topo.local_rank() == 0) {
    std::shared_ptr<const std::byte> received = md.directory;
    if (topo.rank() != 0) {
      std::shared_ptr<std::byte> own = AllocateLarge(header.bytes);
      if (!own) return Status::Unavailable(path + ": cannot allocate the directory");
      received = own;
    }
    BcastBytes(const_cast<std::byte*>(received.get()), header.bytes, 0, topo.leaders());
    auto published = volume_internal::PublishNodeDirectory(key, [&](std::byte* dst) {
      std::memcpy(dst, received.get(), header.bytes);
      return Status::Ok();
    });
    if (published.ok()) {
      directory = published->bytes;
      region = published->path;
      copy = published->created ? kOwnRegion : kOtherRegion;
      if (published->created) local_stats.window_bytes = header.bytes;
    } else {
      note = published.status().message();
      copy = kPrivate;
      directory = std::move(received);
    }
  }
  MPI_Bcast(&copy, 1, MPI_INT, 0, topo.node());
  if (copy == kPrivate) {
    // Memory per rank rather than per node, and said so on every rank.
    uint64_t length = note.size();
    MPI_Bcast(&length, 1, MPI_UINT64_T, 0, topo.node());
    note.resize(length);
    MPI_Bcast(note.data(), static_cast<int>(length), MPI_CHAR, 0, topo.node());
    if (topo.local_rank() != 0) {
      std::shared_ptr<std::byte> own = AllocateLarge(header.bytes);
      if (!own) return Status::Unavailable(path + ": cannot allocate the directory");
      directory = own;
    }
    BcastBytes(const_cast<std::byte*>(directory.get()), header.bytes, 0, topo.node());
  } else if (topo.local_rank() != 0) {
    auto attached = volume_internal::AttachNodeDirectory(key);
    if (attached.ok() && *attached) {
      directory = (*attached)->bytes;
      region = (*attached)->path;
    } else {
      st = attached.ok() ? Status::Unavailable(path + ": the node copy of its directory vanished")
                         : attached.status();
    }
  }
  DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm, st));

  // 4. Every rank opens over the node's copy (rank 0 drops its private one).
  md.directory = directory;
  // Rank 0 checked these bytes (checksum, every entry) before sending them;
  // a region made by someone else is checked as if read from storage.
  md.directory_validated = copy != kOtherRegion;
  md.directory_region = region;
  local_stats.note =
      note.empty() ? "" : "no node copy of the directory (" + note + "); a copy per rank instead";
  return open_over();
}

}  // namespace dlfs
