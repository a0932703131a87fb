#include "cache/filler.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <system_error>

#include "common/clock.h"
#include "dlfs/memory.h"

namespace dlfs::cache_internal {

CacheFiller::CacheFiller(std::shared_ptr<NodeCache> cache, std::function<Progress()> progress,
                         std::function<bool()> memory_short)
    : pid_(::getpid()), state_(std::make_unique<State>()) {
  state_->cache = std::move(cache);
  state_->progress = std::move(progress);
  state_->memory_short = std::move(memory_short);
}

bool CacheFiller::MemoryShort() {
  const MemoryLimit m = ReadMemoryLimit();
  const uint64_t floor = m.cgroup_limit > 0 ? m.cgroup_limit / 4 : uint64_t{256} << 20;
  return (m.mem_available > 0 || m.cgroup_limit > 0) && m.usable() < floor;
}

CacheFiller::~CacheFiller() {
  if (::getpid() != pid_) {
    (void)state_.release();  // the parent's thread and locks: leave them alone
    return;
  }
  {
    std::lock_guard lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  if (state_->thread.joinable()) state_->thread.join();
}

void CacheFiller::Offer(std::shared_ptr<const Batch::Data> read) {
  State& s = *state_;
  if (s.cache->full() || ::getpid() != pid_) return;
  {
    std::lock_guard lock(s.mu);
    if (s.stop || s.queue.size() >= kHeld) return;  // busy or resting: skip this batch
    s.queue.push_back(std::move(read));
    if (!s.thread.joinable()) {
      try {
        s.thread = std::thread([&s] { Run(s); });
      } catch (const std::system_error&) {
        s.stop = true;                     // no thread: the cache stays as it is
        read = std::move(s.queue.back());  // released outside the lock
        s.queue.clear();
        return;
      }
    }
  }
  s.cv.notify_one();
}

bool CacheFiller::holding() const {
  std::lock_guard lock(state_->mu);
  return !state_->queue.empty() && state_->queue.front() != nullptr;
}

void CacheFiller::Run(State& s) {
  // Nice 19, this thread only (Linux): CPU nobody else wants first.
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
  constexpr double kBoundShare = 0.05, kDutyCycle = 0.03;
  struct Mark {
    double wall, wait, device_bytes, hit_bytes;
  };
  auto mark = [&] {
    const Progress p = s.progress();
    return Mark{Now(), p.caller_wait_seconds, static_cast<double>(p.device_bytes),
                static_cast<double>(s.cache->stats().hit_bytes)};
  };
  Mark last = mark();
  double credit = 0;  // seconds the cache saved that filling has not spent
  double memory_checked = -1;
  bool short_of_memory = false;
  while (true) {
    std::shared_ptr<const Batch::Data> job;
    {
      std::unique_lock lock(s.mu);
      s.cv.wait(lock, [&] { return s.stop || !s.queue.empty(); });
      if (s.stop) return;
      job = s.queue.front();
    }
    const double t0 = Now();
    if (t0 - memory_checked >= 0.1 || memory_checked < 0) {
      short_of_memory = s.memory_short && s.memory_short();
      memory_checked = t0;
    }
    for (size_t k = 0; !short_of_memory && k < job->indices.size() && !s.cache->full(); ++k) {
      (void)s.cache->Admit(job->indices[k], job->samples[k]);
    }
    const double busy = Now() - t0;
    {
      // The batch's buffer may now be reused. Its last reference goes
      // outside the lock: returning a buffer wakes the reader, which may
      // ask holding() under a lock of its own.
      std::deque<std::shared_ptr<const Batch::Data>> dropped;
      std::unique_lock lock(s.mu);
      dropped.push_back(std::move(s.queue.front()));
      s.queue.pop_front();
      const bool full = s.cache->full();
      if (full) {
        s.stop = true;  // nothing more to do; Offer drops what comes
        for (auto& q : s.queue) dropped.push_back(std::move(q));
        s.queue.clear();
      }
      lock.unlock();
      job.reset();
      dropped.clear();
      if (s.on_release) s.on_release();
      if (full) return;
    }
    const Mark now = mark();
    const double wall = now.wall - last.wall;
    if (wall > 0 && (now.wait - last.wait) / wall > kBoundShare) {
      if (now.device_bytes > last.device_bytes) {
        credit += (now.hit_bytes - last.hit_bytes) * wall / (now.device_bytes - last.device_bytes);
      }
      double rest = busy * (1 / kDutyCycle - 1);
      const double spend = std::min(rest, credit);
      rest -= spend;
      credit -= spend;
      // Batches offered while resting are skipped: the queue looks full.
      std::unique_lock lock(s.mu);
      s.queue.push_back(nullptr);
      s.cv.wait_for(lock, std::chrono::duration<double>(rest), [&] { return s.stop; });
      s.queue.pop_back();
      if (s.stop) return;
    }
    last = mark();
  }
}

}  // namespace dlfs::cache_internal
