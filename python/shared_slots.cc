#include "shared_slots.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace dlfs {
namespace {

constexpr uint64_t kSlotHeader = 4096;  // the state words' page

std::atomic<uint32_t>* SlotStates(std::byte* base) {
  return reinterpret_cast<std::atomic<uint32_t>*>(base);
}

}  // namespace

// The main process's mapping of one worker's memfd.
class SlotMapping {
 public:
  static Result<std::shared_ptr<SlotMapping>> Open(int pid, int fd, uint64_t total) {
    const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
    const int f = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (f < 0) {
      return Status::FromErrno(errno, path + " (the shared batch memory of DataLoader worker " +
                                          std::to_string(pid) +
                                          "; VolumeDataset(shared_memory=False) avoids it)");
    }
    void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    const int e = errno;
    ::close(f);
    if (p == MAP_FAILED) return Status::FromErrno(e, "mmap of " + path);
    return std::shared_ptr<SlotMapping>(new SlotMapping(static_cast<std::byte*>(p), total));
  }
  ~SlotMapping() { ::munmap(base_, total_); }
  std::byte* base() const { return base_; }

 private:
  SlotMapping(std::byte* base, uint64_t total) : base_(base), total_(total) {}

  std::byte* base_;
  uint64_t total_;
};

Result<std::unique_ptr<SharedSlots>> SharedSlots::Create(uint32_t slots, uint64_t slot_bytes) {
  slot_bytes = (slot_bytes + 4095) / 4096 * 4096;
  if (slots == 0 || slots > kMaxSlots) return Status::InvalidArgument("slots must be 1..1024");
  const uint64_t total = kSlotHeader + uint64_t{slots} * slot_bytes;
  const int fd = static_cast<int>(::syscall(SYS_memfd_create, "dlfs-batches", MFD_CLOEXEC));
  if (fd < 0) return Status::FromErrno(errno, "memfd_create");
  if (::ftruncate(fd, static_cast<off_t>(total)) != 0) {
    const int e = errno;
    ::close(fd);
    return Status::FromErrno(e, "ftruncate of the shared batch memory");
  }
  void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    ::close(fd);
    return Status::FromErrno(e, "mmap of the shared batch memory");
  }
  ::madvise(p, total, 23 /* MADV_POPULATE_WRITE: touch it once, now */);
  return std::unique_ptr<SharedSlots>(
      new SharedSlots(slots, slot_bytes, fd, static_cast<std::byte*>(p), total));
}

SharedSlots::SharedSlots(uint32_t slots, uint64_t slot_bytes, int fd, std::byte* base,
                         uint64_t total)
    : slots_(slots), slot_bytes_(slot_bytes), fd_(fd), base_(base), total_(total) {}

SharedSlots::~SharedSlots() {
  ::munmap(base_, total_);
  ::close(fd_);
}

int SharedSlots::Acquire(double timeout) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  while (true) {
    for (uint32_t i = 0; i < slots_; ++i) {
      uint32_t expected = 0;
      if (SlotStates(base_)[i].compare_exchange_strong(expected, 1)) return static_cast<int>(i);
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void SharedSlots::Release(uint32_t slot) { SlotStates(base_)[slot].store(0); }

std::span<std::byte> SharedSlots::Slot(uint32_t slot) {
  return {base_ + kSlotHeader + uint64_t{slot} * slot_bytes_, slot_bytes_};
}

SlotLease::SlotLease(std::shared_ptr<SlotMapping> mapping, uint32_t slot, uint64_t slot_bytes)
    : mapping_(std::move(mapping)), slot_(slot), slot_bytes_(slot_bytes) {}

SlotLease::~SlotLease() { SlotStates(mapping_->base())[slot_].store(0); }

std::byte* SlotLease::data() const {
  return mapping_->base() + kSlotHeader + uint64_t{slot_} * slot_bytes_;
}

Result<std::shared_ptr<SlotLease>> AttachSlot(int pid, int fd, uint64_t total, uint64_t slot_bytes,
                                              uint32_t slot) {
  // One mapping per worker memory while any lease of it lives: a batch's
  // leases (and the next batches') do not each map the whole memfd.
  static std::mutex mu;
  static std::map<std::pair<int, int>, std::weak_ptr<SlotMapping>> mappings;
  std::shared_ptr<SlotMapping> m;
  {
    std::lock_guard lock(mu);
    auto& w = mappings[{pid, fd}];
    m = w.lock();
    if (!m) {
      DLFS_ASSIGN_OR_RETURN(m, SlotMapping::Open(pid, fd, total));
      w = m;
    }
  }
  if (kSlotHeader + (uint64_t{slot} + 1) * slot_bytes > total) {
    return Status::InvalidArgument("slot out of range of the shared batch memory");
  }
  return std::make_shared<SlotLease>(std::move(m), slot, slot_bytes);
}

}  // namespace dlfs
