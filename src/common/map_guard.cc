#include "common/map_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace dlfs::map_guard {

namespace {

constexpr int kSlots = 256;

struct Slot {
  std::atomic<uintptr_t> begin{0};  // 0: free
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> faulted{false};
};

Slot g_slots[kSlots];
std::atomic<bool> g_any_fault{false};
struct sigaction g_previous;
std::once_flag g_installed;

// Async-signal-safe: atomics, mmap and sigaction only.
void OnSigbus(int sig, siginfo_t* info, void* context) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& s : g_slots) {
    const uintptr_t begin = s.begin.load(std::memory_order_acquire);
    if (begin == 0 || addr < begin || addr >= s.end.load(std::memory_order_acquire)) continue;
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    void* at = reinterpret_cast<void*>(addr & ~(page - 1));
    if (::mmap(at, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
      s.faulted.store(true, std::memory_order_release);
      g_any_fault.store(true, std::memory_order_release);
      return;  // the access is retried, and reads zeros
    }
    break;
  }
  // Not ours: as if this handler were not there.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) {
      g_previous.sa_sigaction(sig, info, context);
      return;
    }
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGBUS, &dfl, nullptr);
  ::raise(SIGBUS);
}

void Install() {
  struct sigaction sa {};
  sa.sa_sigaction = OnSigbus;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, &g_previous);
}

}  // namespace

bool Register(const void* base, size_t length) {
  std::call_once(g_installed, Install);
  const uintptr_t b = reinterpret_cast<uintptr_t>(base);
  for (Slot& s : g_slots) {
    uintptr_t expected = 0;
    if (s.begin.load(std::memory_order_relaxed) != 0) continue;
    // Claim the slot with a marker first, so the handler never sees a
    // begin without its end.
    if (!s.begin.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) continue;
    s.faulted.store(false, std::memory_order_relaxed);
    s.end.store(b + length, std::memory_order_release);
    s.begin.store(b, std::memory_order_release);
    return true;
  }
  return false;
}

void Unregister(const void* base) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(base);
  for (Slot& s : g_slots) {
    if (s.begin.load(std::memory_order_acquire) == b) {
      s.end.store(0, std::memory_order_release);
      s.begin.store(0, std::memory_order_release);
      return;
    }
  }
}

bool AnyFault() { return g_any_fault.load(std::memory_order_relaxed); }

bool Faulted(const void* base) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(base);
  for (const Slot& s : g_slots) {
    if (s.begin.load(std::memory_order_acquire) == b) {
      return s.faulted.load(std::memory_order_acquire);
    }
  }
  return false;
}

}  // namespace dlfs::map_guard
