// Shared batch memory between a DataLoader worker and the main process, for
// VolumeDataset's batched mode and LoaderDataset's batches
// (python/dlfs/torch.py): moving ~100 KB samples through the DataLoader's
// pipes costs more than reading them, and DataLoader's own transport of a
// tensor (a new shared-memory file per tensor, its descriptor passed over a
// socket) costs more than the loader takes to make a batch held in memory.
//
// The worker owns a SharedSlots: a memfd of `slots` slots. It takes a free
// slot (Acquire), reads a batch straight into it (Slot: page-aligned, so
// O_DIRECT reads land there without a copy) and sends the main process only
// (pid, fd(), total(), slot_bytes(), slot) and where the samples are. The
// main process maps that memfd through /proc/<pid>/fd/<fd> (AttachSlot) and
// hands out views of the slot; when its SlotLease is destroyed the slot is
// free for the worker again.
//
// Layout of the memory: the first 4 KiB page holds one atomic uint32 state
// word per slot (0 free, 1 taken); slot i is the slot_bytes() bytes at
// 4096 + i * slot_bytes().
//
// Thread and process safety: Acquire and Release may be called from any
// thread of any process mapping the memory (the state words are atomics).
// A slot's bytes belong to whoever took it until it is released.
//
// No Python here (so the C++ tests cover it): the binding maps the Status
// errors to exceptions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "dlfs/status.h"

namespace dlfs {

class SharedSlots {
 public:
  static constexpr uint32_t kMaxSlots = 1024;  // state words that fit the first page

  // `slots` slots of at least `slot_bytes` bytes (rounded up to 4 KiB), in
  // a new memfd mapped here and populated now (the first batch does not pay
  // for page faults). InvalidArgument for slots outside 1..kMaxSlots; the
  // errno of memfd_create, ftruncate or mmap when they fail.
  static Result<std::unique_ptr<SharedSlots>> Create(uint32_t slots, uint64_t slot_bytes);
  ~SharedSlots();
  SharedSlots(const SharedSlots&) = delete;
  SharedSlots& operator=(const SharedSlots&) = delete;

  // A free slot, now taken; -1 when none came free within `timeout`
  // seconds (polled every 200 us, so a release elsewhere is seen).
  int Acquire(double timeout);
  // Frees `slot` (REQUIRES: slot < slots()).
  void Release(uint32_t slot);
  // The bytes of `slot` (REQUIRES: slot < slots()).
  std::span<std::byte> Slot(uint32_t slot);

  int fd() const { return fd_; }  // close-on-exec; closed with this object
  uint32_t slots() const { return slots_; }
  uint64_t total() const { return total_; }  // bytes of the memfd
  uint64_t slot_bytes() const { return slot_bytes_; }

 private:
  SharedSlots(uint32_t slots, uint64_t slot_bytes, int fd, std::byte* base, uint64_t total);

  uint32_t slots_;
  uint64_t slot_bytes_;
  int fd_;
  std::byte* base_;
  uint64_t total_;
};

class SlotMapping;

// One slot of a worker's SharedSlots, mapped in another process; frees the
// slot (in the worker's state word) when destroyed. Leases of one worker's
// memory share one mapping, unmapped with the last of them.
class SlotLease {
 public:
  SlotLease(std::shared_ptr<SlotMapping> mapping, uint32_t slot, uint64_t slot_bytes);
  ~SlotLease();
  SlotLease(const SlotLease&) = delete;
  SlotLease& operator=(const SlotLease&) = delete;

  std::byte* data() const;  // writable, slot_bytes() long
  uint64_t slot_bytes() const { return slot_bytes_; }

 private:
  std::shared_ptr<SlotMapping> mapping_;
  uint32_t slot_;
  uint64_t slot_bytes_;
};

// Slot `slot` of the SharedSlots whose memfd is `fd` in process `pid`, as
// that process's fd(), total() and slot_bytes() describe it. The errno of
// opening /proc/<pid>/fd/<fd> (the message names it, the worker, and
// VolumeDataset(shared_memory=False), which avoids it) or of mmap;
// InvalidArgument when the slot lies past `total`. Thread-safe.
Result<std::shared_ptr<SlotLease>> AttachSlot(int pid, int fd, uint64_t total, uint64_t slot_bytes,
                                              uint32_t slot);

}  // namespace dlfs
