#include "cache/sequential_fill.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <system_error>
#include <vector>

#include "common/clock.h"
#include "dlfs/memory.h"
#include "volume/scan.h"

namespace dlfs::cache_internal {

namespace {

double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

}  // namespace

// Everything the thread shares; leaked, not destroyed, in a child of fork().
struct SequentialFill::State {
  std::shared_ptr<NodeCache> cache;
  std::shared_ptr<const Volume> volume;
  Options options;
  mutable std::mutex mu;
  std::condition_variable cv;
  bool started = false;
  bool stop = false;
  bool finished = false;  // the thread has nothing more to do
  Stats stats;
  std::thread thread;
};

SequentialFill::Options SequentialFill::Options::ForReader(
    uint64_t cache_budget, uint32_t planned_epochs, const FaultInjection& faults,
    std::function<ReaderProgress()> progress) {
  Options o;
  o.requested = CacheBudgetRequested(cache_budget);
  o.epochs_after = planned_epochs > 0 ? planned_epochs - 1.0 : kAssumedEpochsAfter;
  o.faults = faults;
  o.progress = std::move(progress);
  return o;
}

bool SequentialFill::MemoryShort() {
  const MemoryLimit m = ReadMemoryLimit();
  const uint64_t floor = m.cgroup_limit > 0 ? m.cgroup_limit / 4 : uint64_t{256} << 20;
  return (m.mem_available > 0 || m.cgroup_limit > 0) && m.usable() < floor;
}

SequentialFill::SequentialFill(std::shared_ptr<NodeCache> cache,
                               std::shared_ptr<const Volume> volume, Options options)
    : pid_(::getpid()), state_(std::make_unique<State>()) {
  State& s = *state_;
  s.cache = std::move(cache);
  s.volume = std::move(volume);
  s.options = std::move(options);
  s.stats.running = true;
  try {
    s.thread = std::thread([&s] { Run(s); });
  } catch (const std::system_error&) {
    s.finished = true;  // no thread: the cache fills no further
    s.stats.running = false;
  }
  if (s.options.requested) Start();
}

SequentialFill::~SequentialFill() {
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

void SequentialFill::Start() {
  {
    std::lock_guard lock(state_->mu);
    if (state_->started) return;
    state_->started = true;
  }
  state_->cv.notify_all();
}

void SequentialFill::WaitFilled(double stall_seconds) {
  State& s = *state_;
  uint64_t seen = s.cache->fill_windows_done();
  double moved = Now();
  std::unique_lock lock(s.mu);
  while (!s.stop) {
    const uint64_t windows = s.stats.windows, done = s.cache->fill_windows_done();
    // Done here and on the node: no window left, every claimed one in.
    if (s.finished && (s.stats.windows == 0 || done >= windows || !s.stats.decision.fill)) return;
    if (done != seen) {
      seen = done;
      moved = Now();
    } else if (s.finished && Now() - moved > stall_seconds) {
      return;  // another process's window never finished: it died
    }
    s.cv.wait_for(lock, std::chrono::milliseconds(5));
  }
}

SequentialFill::Stats SequentialFill::stats() const {
  std::lock_guard lock(state_->mu);
  return state_->stats;
}

void SequentialFill::Run(State& s) {
  {
    const FaultInjection& f = s.options.faults;
    std::unique_lock lock(s.mu);
    s.cv.wait(lock, [&] { return s.stop || s.started; });
    if (s.stop || f.eio_every || f.short_every || f.eagain_every || f.delay_us) {
      s.finished = true;
      s.stats.running = false;
      return;
    }
  }
  NodeCache& cache = *s.cache;
  const Volume& volume = *s.volume;
  const volume_internal::VolumeScan scan(volume, cache.fill_window_bytes());
  {
    std::lock_guard lock(s.mu);
    s.stats.windows = scan.windows();
  }
  const double cpu0 = ThreadCpuSeconds();
  // Touched before anything is timed: fresh memory costs as much as the
  // read on some VMs, and would count as the probe's reading.
  uint64_t largest = 0;
  for (size_t w = 0; w < scan.windows(); ++w) largest = std::max(largest, scan.window_bytes(w));
  std::vector<std::byte> buffer(largest);
  // Reads and copies one window: its read and copy times go to the stats.
  auto fill_window = [&](uint64_t w) {
    const double t0 = Now();
    // The next window (the one this process, or another of the node,
    // claims next) is read by the kernel while this one is read and
    // copied: one synchronous 4 MiB read at a time, with the default
    // read-ahead, read 1.6 GB at 0.4 GB/s here against 3 GB/s for the
    // loader's random reads with 64 in flight.
    if (w + 1 < scan.windows()) {
      const int next_fd = volume.target_fd(scan.window_target(w + 1));
      if (next_fd >= 0) {
        (void)::posix_fadvise(next_fd, static_cast<off_t>(scan.window_offset(w + 1)),
                              static_cast<off_t>(scan.window_bytes(w + 1)), POSIX_FADV_WILLNEED);
      }
    }
    double read_done = 0;
    const FaultInjection& f = s.options.faults;
    (void)scan.Read(
        w, &buffer, [&](uint64_t index, std::span<const std::byte> bytes, const Status& read) {
          if (read_done == 0) read_done = Now();
          if (f.eio_length > 0) {
            const SampleInfo info = volume.directory().sample(index);
            if (info.target == f.eio_target && info.offset < f.eio_offset + f.eio_length &&
                f.eio_offset < info.offset + info.length) {
              return;  // in the damaged range
            }
          }
          if (read.ok()) (void)cache.Admit(index, bytes);  // checked against the directory there
        });
    const double t1 = Now();
    if (read_done == 0) read_done = t1;
    // Read once for the cache: keep it out of the page cache (the node
    // cache holds it now; twice would be memory for nothing).
    const int fd = volume.target_fd(scan.window_target(w));
    if (fd >= 0) {
      (void)::posix_fadvise(fd, static_cast<off_t>(scan.window_offset(w)),
                            static_cast<off_t>(scan.window_bytes(w)), POSIX_FADV_DONTNEED);
    }
    cache.FillWindowDone();
    std::lock_guard lock(s.mu);
    ++s.stats.windows_filled;
    s.stats.bytes_read += scan.window_bytes(w);
    s.stats.scan_seconds += read_done - t0;
    s.stats.fill_seconds += t1 - read_done;
    s.stats.cpu_seconds = ThreadCpuSeconds() - cpu0;
  };
  auto stopped = [&] {
    std::lock_guard lock(s.mu);
    return s.stop;
  };
  auto memory_short = [&] {
    if (!s.options.memory_short || !s.options.memory_short()) return false;
    std::lock_guard lock(s.mu);
    s.stats.memory_short = true;
    return true;
  };

  // The probe: one window, which measures reading and copying here.
  std::optional<uint64_t> w;
  if (!memory_short()) w = cache.ClaimFillWindow(scan.windows());
  if (w) fill_window(*w);
  bool fill = false;
  if (w && !stopped()) {
    FillInputs in;
    in.requested = s.options.requested;
    in.epochs_after = s.options.epochs_after;
    Stats st;
    {
      std::lock_guard lock(s.mu);
      st = s.stats;
    }
    const double bytes = std::max<double>(st.bytes_read, 1);
    in.costs.scan = st.scan_seconds / bytes;
    in.costs.fill = st.fill_seconds / bytes;
    const NodeCacheStats cs = cache.stats();
    in.cacheable_bytes = std::min(volume.info().data_bytes, cs.capacity) -
                         std::min(std::min(volume.info().data_bytes, cs.capacity), cs.used);
    if (!in.requested) {
      // What each later epoch saves per cached byte: what the caller has
      // waited per byte it got. Measured over a window's worth of batches
      // at least (the first batches of a run wait for the pipeline to fill).
      const double deadline = Now() + 2.0;
      ReaderProgress p = s.options.progress ? s.options.progress() : ReaderProgress{};
      while (p.payload_bytes < st.bytes_read && Now() < deadline && !stopped()) {
        std::unique_lock lock(s.mu);
        s.cv.wait_for(lock, std::chrono::milliseconds(10));
        lock.unlock();
        p = s.options.progress ? s.options.progress() : ReaderProgress{};
      }
      in.costs.read = p.payload_bytes ? p.caller_wait_seconds / p.payload_bytes : 0;
    }
    const FillDecision d = DecideFill(in);
    fill = d.fill;
    std::lock_guard lock(s.mu);
    s.stats.decided = true;
    s.stats.decision = d;
  }
  while (fill && !stopped() && !cache.full() && !memory_short()) {
    w = cache.ClaimFillWindow(scan.windows());
    if (!w) break;
    fill_window(*w);
  }
  {
    std::lock_guard lock(s.mu);
    s.finished = true;
    s.stats.running = false;
    s.stats.cpu_seconds = ThreadCpuSeconds() - cpu0;
  }
  s.cv.notify_all();
}

}  // namespace dlfs::cache_internal
