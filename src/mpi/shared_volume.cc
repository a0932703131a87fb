// OpenShared: one metadata read per job, one directory copy per node.
#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "common/clock.h"
#include "dlfs/distributed.h"

namespace dlfs {

namespace {

// Owns a node's shared window. The Volume's directory pointer shares
// ownership of it (aliasing shared_ptr), so the window is freed, collectively
// over the node, when the last Volume using it goes.
struct SharedDirectory {
  MPI_Win window = MPI_WIN_NULL;
  ~SharedDirectory() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || window == MPI_WIN_NULL) return;
    MPI_Win_unlock_all(window);
    MPI_Win_free(&window);
  }
};

// MPI counts are ints: broadcast large buffers in pieces.
void BcastBytes(std::byte* data, uint64_t n, int root, MPI_Comm comm) {
  constexpr uint64_t kPiece = uint64_t{1} << 30;
  for (uint64_t at = 0; at < n; at += kPiece) {
    MPI_Bcast(data + at, static_cast<int>(std::min(kPiece, n - at)), MPI_BYTE, root, comm);
  }
}

void Prefault(std::byte* p, uint64_t n, bool write) {
#ifdef MADV_POPULATE_READ
  const uintptr_t page = 4096;
  const uintptr_t from = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t to = reinterpret_cast<uintptr_t>(p) + n;
  ::madvise(reinterpret_cast<void*>(from), to - from,
            write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
#else
  (void)p, (void)n, (void)write;
#endif
}

}  // namespace

Result<std::shared_ptr<Volume>> OpenShared(MPI_Comm comm, const std::string& path,
                                           const VolumeOpenOptions& options,
                                           SharedOpenStats* stats) {
  const double start = Now();
  SharedOpenStats local_stats;
  DLFS_ASSIGN_OR_RETURN(NodeTopology topo, NodeTopology::Create(comm));

  // 1. Rank 0 reads and checks the metadata.
  std::shared_ptr<Volume> first;
  VolumeMetadata md;
  Status st;
  if (topo.rank() == 0) {
    VolumeOpenOptions o = options;
    o.metadata = nullptr;
    auto v = Volume::Open(path, o);
    if (v.ok()) {
      first = *v;
      md = first->metadata();
      for (const auto& sb : md.superblocks) local_stats.metadata_bytes_read += sb.size();
      local_stats.metadata_bytes_read += md.directory_bytes;
    } else {
      st = v.status();
    }
  }
  DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm, st));

  // 2. Everyone gets the superblocks (a few KB). One rank 0 did not open
  // (open_only) arrives empty; the ranks holding that target read it.
  uint64_t header[2] = {md.superblocks.size(), md.directory_bytes};
  MPI_Bcast(header, 2, MPI_UINT64_T, 0, comm);
  md.superblocks.resize(header[0]);
  md.directory_bytes = header[1];
  for (auto& sb : md.superblocks) {
    uint64_t n = sb.size();
    MPI_Bcast(&n, 1, MPI_UINT64_T, 0, comm);
    sb.resize(n);
    BcastBytes(sb.data(), sb.size(), 0, comm);
  }

  // 3. One window per node; leaders receive the directory straight into it.
  auto holder = std::make_shared<SharedDirectory>();
  void* mine = nullptr;
  const uint64_t window_bytes =
      topo.local_rank() == 0 ? std::max<uint64_t>(md.directory_bytes, 1) : 0;
  const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(window_bytes), 1, MPI_INFO_NULL,
                                         topo.node(), &mine, &holder->window);
  if (rc != MPI_SUCCESS) return MpiError(rc, path + ": allocating the shared directory window");
  local_stats.window_bytes = window_bytes;
  MPI_Win_lock_all(MPI_MODE_NOCHECK, holder->window);
  MPI_Aint size = 0;
  int disp = 0;
  void* base = nullptr;
  MPI_Win_shared_query(holder->window, 0, &size, &disp, &base);
  auto* dir = static_cast<std::byte*>(base);
  // Map the whole window in one call per process. Faulting it in 4 KiB at a
  // time costs each rank one fault per page (~95,000 for a 10M-sample
  // directory), which on VMs with shadow paging took seconds per rank.
  // Best effort: without MADV_POPULATE_* (Linux < 5.14) pages fault in lazily.
  if (topo.local_rank() == 0) {
    Prefault(dir, md.directory_bytes, /*write=*/true);
    if (topo.rank() == 0) std::memcpy(dir, md.directory.get(), md.directory_bytes);
    BcastBytes(dir, md.directory_bytes, 0, topo.leaders());
  }
  MPI_Win_sync(holder->window);
  BarrierPolitely(topo.node());
  MPI_Win_sync(holder->window);
  if (topo.local_rank() != 0) Prefault(dir, md.directory_bytes, /*write=*/false);

  // 4. Every rank opens over the shared copy (rank 0 drops its private one).
  md.directory = std::shared_ptr<const std::byte>(holder, dir);
  // Rank 0 checked these bytes (checksum, every entry) before sending them.
  md.directory_validated = true;
  first.reset();
  VolumeOpenOptions o = options;
  o.metadata = &md;
  auto v = Volume::Open(path, o);
  st = v.ok() ? Status::Ok() : v.status();
  DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm, st));
  local_stats.seconds = Now() - start;
  if (stats) *stats = local_stats;
  return *v;
}

}  // namespace dlfs
