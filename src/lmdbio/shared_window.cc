#include "lmdbio/shared_window.h"

#include <string>

#include "dlfs/mpi.h"
#include "lmdbio/run_plan.h"

namespace dlfs::lmdbio {

Status SharedWindow::Reserve(MPI_Comm node, uint64_t bytes) {
  if (bytes <= capacity_ && win_ != MPI_WIN_NULL) return Status::Ok();
  Free();
  // Grow with headroom, so steps of slightly varying size do not each
  // reallocate; round to 2 MiB (huge-page friendly).
  const uint64_t want = ((bytes + bytes / 4 + kAlign) + (2u << 20) - 1) & ~uint64_t{(2u << 20) - 1};
  int local = 0;
  MPI_Comm_rank(node, &local);
  void* mine = nullptr;
  const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(local == 0 ? want : 0), 1,
                                         MPI_INFO_NULL, node, &mine, &win_);
  if (rc != MPI_SUCCESS)
    return MpiError(rc, "MPI_Win_allocate_shared of " + std::to_string(want) + " bytes");
  MPI_Aint size = 0;
  int disp = 0;
  void* base = nullptr;
  MPI_Win_shared_query(win_, 0, &size, &disp, &base);
  const auto addr = reinterpret_cast<uintptr_t>(base);
  base_ = reinterpret_cast<std::byte*>(AlignUp(addr));
  capacity_ = static_cast<uint64_t>(size) - (AlignUp(addr) - addr);
  MPI_Win_lock_all(MPI_MODE_NOCHECK, win_);
  ++generation_;
  return Status::Ok();
}

void SharedWindow::Sync() {
  if (win_ != MPI_WIN_NULL) MPI_Win_sync(win_);
}

void SharedWindow::Free() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (win_ == MPI_WIN_NULL || finalized) return;
  MPI_Win_unlock_all(win_);
  MPI_Win_free(&win_);
  base_ = nullptr;
  capacity_ = 0;
}

}  // namespace dlfs::lmdbio
