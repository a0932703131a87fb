// SharedSlots and AttachSlot (python/shared_slots.h): the shared batch
// memory of VolumeDataset's DataLoader workers. The main process's side is
// exercised both in this process (through /proc/self's pid) and from a
// forked worker, as DataLoader runs it.
#include "shared_slots.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "testutil.h"

namespace dlfs {
namespace shared_slots_test {

using testing::StatusIs;

TEST(SharedSlotsTest, RefusesSlotCountsOutsideOneTo1024) {
  for (uint32_t slots : {0u, 1025u}) {
    auto r = SharedSlots::Create(slots, 4096);
    ASSERT_THAT(r, StatusIs(StatusCode::kInvalidArgument, "slots must be 1..1024")) << slots;
    EXPECT_EQ(r.status().message(), "slots must be 1..1024");
  }
  ASSERT_OK(SharedSlots::Create(1, 4096));
  ASSERT_OK(SharedSlots::Create(SharedSlots::kMaxSlots, 4096));
}

TEST(SharedSlotsTest, SlotsArePageAlignedDisjointAndInsideTheMemory) {
  ASSERT_OK_AND_ASSIGN(auto s, SharedSlots::Create(3, 5000));
  EXPECT_EQ(s->slot_bytes(), 8192u);  // rounded up to pages, for O_DIRECT
  EXPECT_EQ(s->total(), 4096u + 3 * 8192u);
  EXPECT_GE(s->fd(), 0);
  const std::byte* base = s->Slot(0).data() - 4096;
  for (uint32_t i = 0; i < 3; ++i) {
    const std::span<std::byte> slot = s->Slot(i);
    EXPECT_EQ(slot.size(), 8192u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(slot.data()) % 4096, 0u);
    EXPECT_EQ(slot.data(), base + 4096 + i * 8192);
    std::memset(slot.data(), 'a' + i, slot.size());  // writable, all of it
  }
  EXPECT_EQ(s->Slot(2).data() + 8192, base + s->total());
  EXPECT_EQ(s->Slot(0)[8191], std::byte{'a'});
  EXPECT_EQ(s->Slot(1)[0], std::byte{'b'});
}

TEST(SharedSlotsTest, AcquireTakesEachSlotOnceUntilReleased) {
  ASSERT_OK_AND_ASSIGN(auto s, SharedSlots::Create(3, 4096));
  std::set<int> taken;
  for (int k = 0; k < 3; ++k) taken.insert(s->Acquire(0));
  EXPECT_EQ(taken, (std::set<int>{0, 1, 2}));

  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(s->Acquire(0.02), -1);  // none free: waits out the timeout
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(20));

  s->Release(1);
  EXPECT_EQ(s->Acquire(0), 1);
  EXPECT_EQ(s->Acquire(0), -1);
}

// An Acquire under way when the slot is released gets it. The release
// follows the waiter's start (an event), not a time; while the slot is
// held the waiter cannot return early, whatever the scheduling.
TEST(SharedSlotsTest, AcquireWaitsForARelease) {
  ASSERT_OK_AND_ASSIGN(auto s, SharedSlots::Create(1, 4096));
  ASSERT_EQ(s->Acquire(0), 0);
  std::atomic<bool> waiting{false};
  std::atomic<int> got{-2};
  std::thread waiter([&] {
    waiting = true;
    got = s->Acquire(30);
  });
  EXPECT_TRUE(testing::WaitUntil([&] { return waiting.load(); }));
  EXPECT_EQ(got.load(), -2);  // still waiting: the only slot is taken
  s->Release(0);
  waiter.join();
  EXPECT_EQ(got.load(), 0);
}

TEST(SharedSlotsTest, LeaseSeesTheSlotAndFreesItWhenDestroyed) {
  ASSERT_OK_AND_ASSIGN(auto s, SharedSlots::Create(2, 4096));
  const int slot = s->Acquire(0);
  ASSERT_GE(slot, 0);
  std::memcpy(s->Slot(slot).data(), "batch", 5);

  ASSERT_OK_AND_ASSIGN(auto lease,
                       AttachSlot(::getpid(), s->fd(), s->total(), s->slot_bytes(), slot));
  EXPECT_EQ(lease->slot_bytes(), 4096u);
  EXPECT_EQ(std::memcmp(lease->data(), "batch", 5), 0);
  std::memcpy(lease->data(), "views", 5);  // the same bytes, writable from both sides
  EXPECT_EQ(std::memcmp(s->Slot(slot).data(), "views", 5), 0);

  ASSERT_EQ(s->Acquire(0), 1 - slot);
  EXPECT_EQ(s->Acquire(0), -1);  // both taken while the lease lives
  lease.reset();
  EXPECT_EQ(s->Acquire(0), slot);
}

TEST(SharedSlotsTest, LeasesOfOneMemoryShareOneMapping) {
  ASSERT_OK_AND_ASSIGN(auto s, SharedSlots::Create(3, 4096));
  ASSERT_OK_AND_ASSIGN(auto a, AttachSlot(::getpid(), s->fd(), s->total(), s->slot_bytes(), 0));
  ASSERT_OK_AND_ASSIGN(auto c, AttachSlot(::getpid(), s->fd(), s->total(), s->slot_bytes(), 2));
  EXPECT_EQ(c->data() - a->data(), 2 * 4096);
}

TEST(SharedSlotsTest, AttachRefusesASlotPastTheMemoryAndAMissingFd) {
  ASSERT_OK_AND_ASSIGN(auto s, SharedSlots::Create(2, 4096));
  auto past = AttachSlot(::getpid(), s->fd(), s->total(), s->slot_bytes(), 2);
  ASSERT_THAT(past, StatusIs(StatusCode::kInvalidArgument, "slot out of range"));
  EXPECT_EQ(past.status().message(), "slot out of range of the shared batch memory");

  const int closed = ::dup(s->fd());
  ::close(closed);
  auto missing = AttachSlot(::getpid(), closed, s->total(), s->slot_bytes(), 0);
  ASSERT_THAT(missing, StatusIs(StatusCode::kNotFound, "shared_memory=False"));
  EXPECT_EQ(missing.status().sys_errno(), ENOENT);
  const std::string path = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(closed);
  EXPECT_NE(missing.status().message().find(path), std::string::npos) << missing.status().message();
  EXPECT_NE(missing.status().message().find("shared_memory=False"), std::string::npos);
}

// As DataLoader runs it: the worker (a child) owns the slots and fills one;
// the main process maps it, reads the batch, and its lease's end frees the
// slot in the worker.
TEST(SharedSlotsTest, MainProcessReadsAWorkersSlotAndFreesIt) {
  int to_main[2], to_worker[2];
  ASSERT_EQ(::pipe(to_main), 0);
  ASSERT_EQ(::pipe(to_worker), 0);
  const pid_t worker = ::fork();
  ASSERT_GE(worker, 0);
  if (worker == 0) {
    ::close(to_main[0]);
    ::close(to_worker[1]);
    auto s = SharedSlots::Create(2, 4096);
    if (!s.ok()) ::_exit(2);
    const int slot = (*s)->Acquire(0);
    std::memcpy((*s)->Slot(slot).data(), "from the worker", 15);
    const uint64_t where[4] = {static_cast<uint64_t>((*s)->fd()), (*s)->total(), (*s)->slot_bytes(),
                               static_cast<uint64_t>(slot)};
    if (::write(to_main[1], where, sizeof(where)) != sizeof(where)) ::_exit(3);
    char done;
    if (::read(to_worker[0], &done, 1) != 1) ::_exit(4);  // EOF: the test gave up
    // The main process dropped its lease: both slots are free.
    std::set<int> free;
    for (int k = 0; k < 2; ++k) free.insert((*s)->Acquire(0));
    ::_exit(free == std::set<int>{0, 1} ? 0 : 5);
  }
  ::close(to_main[1]);
  ::close(to_worker[0]);
  // However the test ends, the worker is told (or sees EOF) and reaped.
  struct Reap {
    pid_t pid;
    int fds[2];
    int status = -1;
    ~Reap() {
      for (int fd : fds) ::close(fd);
      if (status < 0) ::waitpid(pid, &status, 0);
    }
  } worker_end{worker, {to_main[0], to_worker[1]}};

  uint64_t where[4];
  ASSERT_EQ(::read(to_main[0], where, sizeof(where)), static_cast<ssize_t>(sizeof(where)));
  {
    ASSERT_OK_AND_ASSIGN(auto lease, AttachSlot(worker, static_cast<int>(where[0]), where[1],
                                                where[2], static_cast<uint32_t>(where[3])));
    EXPECT_EQ(std::memcmp(lease->data(), "from the worker", 15), 0);
  }
  ASSERT_EQ(::write(to_worker[1], "x", 1), 1);
  ASSERT_EQ(::waitpid(worker, &worker_end.status, 0), worker);
  ASSERT_TRUE(WIFEXITED(worker_end.status));
  EXPECT_EQ(WEXITSTATUS(worker_end.status), 0);
}

}  // namespace shared_slots_test
}  // namespace dlfs
