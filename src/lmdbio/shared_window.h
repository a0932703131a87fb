// The node's shared window: where the windowed LMDBIO modes put a read
// step's records for every rank of the node.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>

#include "dlfs/status.h"

namespace dlfs::lmdbio {

// An MPI-3 shared window over one node: local rank 0 owns the memory, every
// rank of the node maps it. The usable base is 4 KiB-aligned (the same
// offset in every process, since mappings are page-aligned). Freeing it is
// collective over the node (the destructor; skipped after MPI_Finalize).
class SharedWindow {
 public:
  SharedWindow() = default;
  SharedWindow(const SharedWindow&) = delete;
  SharedWindow& operator=(const SharedWindow&) = delete;
  ~SharedWindow() { Free(); }

  // Collective over `node`; every rank passes the same `bytes`. Keeps the
  // contents only when no reallocation is needed.
  Status Reserve(MPI_Comm node, uint64_t bytes);

  // Makes this process's stores visible to the node (MPI_Win_sync).
  void Sync();
  std::byte* base() const { return base_; }
  uint64_t capacity() const { return capacity_; }
  uint64_t generation() const { return generation_; }  // bumps on every reallocation

 private:
  void Free();

  MPI_Win win_ = MPI_WIN_NULL;
  std::byte* base_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace dlfs::lmdbio
