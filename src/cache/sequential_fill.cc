#include "cache/sequential_fill.h"

#include <fcntl.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "common/affinity.h"
#include "common/clock.h"
#include "dlfs/memory.h"
#include "volume/scan.h"

namespace dlfs::cache_internal {

namespace {

// The CPUs this thread may run on (its affinity, inherited from the
// process): ticks idle (or waiting for I/O) and in all, from /proc/stat.
struct CpuTicks {
  double idle = 0, total = 0;
  int cpus = 0;
};

CpuTicks ReadCpuTicks() {
  CpuTicks t;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (::sched_getaffinity(0, sizeof mask, &mask) != 0) return t;
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return t;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    int cpu = -1;
    unsigned long long v[8] = {};  // user nice system idle iowait irq softirq steal
    if (std::sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &v[0], &v[1],
                    &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 9 ||
        cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &mask)) {
      continue;
    }
    t.idle += static_cast<double>(v[3] + v[4]);
    for (unsigned long long x : v) t.total += static_cast<double>(x);
    ++t.cpus;
  }
  std::fclose(f);
  return t;
}

// The cores idle between two readings (0 when unknown).
double IdleCores(const CpuTicks& a, const CpuTicks& b) {
  const double total = b.total - a.total;
  if (total <= 0 || b.cpus == 0) return 0;
  return (b.idle - a.idle) / total * b.cpus;
}

// /proc/stat counts in ticks of 10 ms: over a span shorter than this, the
// idle cores are estimated from this process's own CPU time instead.
constexpr double kTickedSpan = 0.5;

double ProcessCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

// What this thread has waited for a core since it started: runnable but
// not running (/proc/thread-self/schedstat, its second field); 0 where the
// kernel does not say.
double QueuedSeconds() {
  std::FILE* f = std::fopen("/proc/thread-self/schedstat", "r");
  if (f == nullptr) return 0;
  unsigned long long run_ns = 0, wait_ns = 0;
  const bool ok = std::fscanf(f, "%llu %llu", &run_ns, &wait_ns) == 2;
  std::fclose(f);
  return ok ? static_cast<double>(wait_ns) / 1e9 : 0;
}

}  // namespace

// The longest the caller's steady waits are measured for.
constexpr double kMeasureSeconds = 0.1;

// What a fill not asked for reads past its decision before it decides
// again on what it measured (probe windows are 1-4 MiB), or an eighth of
// the volume where that is less.
constexpr uint64_t kRedecideAfter = uint64_t{16} << 20;

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
  std::atomic<ReadersWait> readers_wait{ReadersWait::kNo};
  std::atomic<bool> deciding{true};  // deciding()
  std::string declined;              // DecideHoldWhole's reason not to fill
  Stats stats;
  std::thread thread;
};

SequentialFill::Options SequentialFill::Options::ForReader(
    uint64_t cache_budget, uint32_t planned_epochs, uint64_t epoch_bytes,
    const EngineOptions& engine, std::function<ReaderProgress()> progress) {
  Options o;
  o.requested = CacheBudgetRequested(cache_budget);
  o.epochs_after = planned_epochs > 0 ? planned_epochs - 1.0 : kAssumedEpochsAfter;
  o.epoch_bytes = epoch_bytes;
  o.engine = engine;
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
  if (!s.options.requested && s.options.hold_when_it_fits && s.cache->holds_all()) {
    const HoldWhole h = DecideHoldWhole(s.options.epochs_after);
    s.options.requested = h.hold;
    if (h.hold) s.options.requested_as = kHeldWhole;
    s.declined = h.reason;
  }
  // Nothing to measure of the reader (its CPU clock: deciding()).
  if (s.options.requested || !s.declined.empty()) s.deciding.store(false);
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

bool SequentialFill::requested() const { return state_->options.requested; }

bool SequentialFill::deciding() const { return state_->deciding.load(std::memory_order_relaxed); }

SequentialFill::ReadersWait SequentialFill::readers_wait() const {
  return state_->readers_wait.load(std::memory_order_relaxed);
}

void SequentialFill::Start() {
  {
    std::lock_guard lock(state_->mu);
    if (state_->started) return;
    state_->started = true;
  }
  state_->cv.notify_all();
}

void SequentialFill::Stop() {
  {
    std::lock_guard lock(state_->mu);
    state_->stop = true;
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
    // Done here and on the node: no window left, every claimed one in. Or
    // stopped short (memory, or a full region): the windows left are not
    // coming, and the readers read those samples themselves.
    if (s.finished && (s.stats.windows == 0 || done >= windows || !s.stats.decision.fill ||
                       s.stats.memory_short || s.cache->full())) {
      return;
    }
    if (done != seen) {
      seen = done;
      moved = Now();
    } else if (s.finished && Now() - moved > stall_seconds) {
      return;  // another process's window never finished: it died
    }
    s.cv.wait_for(lock, std::chrono::milliseconds(5));
  }
}

std::string SequentialFill::Stats::Outcome() const {
  if (!decided || bytes_read == 0) return "";
  const double seconds = std::max(0.0, scan_seconds - scan_queued_seconds) +
                         std::max(0.0, fill_seconds - fill_queued_seconds);
  char text[128];
  std::snprintf(text, sizeof text, "; filled %.1f MB at %.2f s/GB (predicted %.2f)",
                static_cast<double>(bytes_read) / 1e6,
                seconds / static_cast<double>(bytes_read) * 1e9, decision.cost_per_gb);
  return text;
}

SequentialFill::Stats SequentialFill::stats() const {
  std::lock_guard lock(state_->mu);
  return state_->stats;
}

void SequentialFill::Run(State& s) {
  {
    const FaultInjection& f = s.options.engine.faults;
    std::unique_lock lock(s.mu);
    s.cv.wait(lock, [&] { return s.stop || s.started; });
    if (s.stop || f.eio_every || f.short_every || f.eagain_every || f.delay_us) {
      s.finished = true;
      s.stats.running = false;
      return;
    }
    if (!s.declined.empty()) {
      s.stats.decided = true;
      s.stats.decision.reason = s.declined;
      s.finished = true;
      s.stats.running = false;
      s.deciding.store(false, std::memory_order_relaxed);
      return;
    }
  }
  NodeCache& cache = *s.cache;
  const Volume& volume = *s.volume;
  // The volume's windows, made when this process first reads one: one that
  // only follows the node's decision not to fill never needs them.
  std::optional<volume_internal::VolumeScan> scanned;
  auto windows = [&]() -> const volume_internal::VolumeScan& {
    if (!scanned) {
      scanned.emplace(volume, cache.fill_window_bytes());
      std::lock_guard lock(s.mu);
      s.stats.windows = scanned->windows();
    }
    return *scanned;
  };
  // Made (and touched) by the first window this process fills, before it
  // is timed: fresh memory costs as much as the read on some VMs, and
  // would count as the probe's reading. Not before: a process that only
  // follows the node's decision not to fill never needs it, and 4 MiB of
  // fresh memory took 25 % of a 2-rank Fashion-MNIST epoch here.
  std::vector<std::byte> buffer;
  // The fill's own reads, made with the buffer (and for the same reason).
  std::unique_ptr<IoEngine> engine;
  // The window's samples read whole, in `buffer` until the next window.
  std::vector<NodeCache::Offer> offers;
  std::optional<io_internal::ReadDriver> driver;
  // Reads and copies one window: its read and copy times go to the stats.
  auto fill_window = [&](uint64_t w) {
    const volume_internal::VolumeScan& scan = windows();
    if (!driver) {
      Result<std::unique_ptr<IoEngine>> made =
          volume_internal::VolumeScan::CreateEngine(volume, s.options.engine);
      if (!made.ok()) {
        // The readers still read; the fill ends here, and says why.
        cache.FillWindowDone();
        std::lock_guard lock(s.mu);
        s.stop = true;
        s.stats.decision.reason = "no fill: " + made.status().message();
        return;
      }
      engine = std::move(*made);
      driver.emplace(*engine);
    }
    if (buffer.empty()) {
      uint64_t largest = 0;
      for (size_t k = 0; k < scan.windows(); ++k) largest = std::max(largest, scan.window_bytes(k));
      buffer.resize(largest);
    }
    const double q0 = QueuedSeconds(), t0 = Now(), c0 = ThreadCpuSeconds();
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
    double read_done = 0, q_read = 0;
    offers.clear();
    (void)scan.Read(w, *driver, &buffer,
                    [&](uint64_t index, std::span<const std::byte> bytes, const Status& read) {
                      if (read_done == 0) {
                        read_done = Now();
                        q_read = QueuedSeconds();
                      }
                      if (!read.ok()) return;
                      // Bytes in the window's buffer are offered together
                      // once it is read; a sample read on its own (its
                      // window's read failed) lies in the scan's memory,
                      // valid only now.
                      const auto at = reinterpret_cast<uintptr_t>(bytes.data());
                      const auto from = reinterpret_cast<uintptr_t>(buffer.data());
                      const bool in_window =
                          at >= from && at + bytes.size() <= from + buffer.size();
                      if (in_window) {
                        offers.push_back({index, bytes});
                      } else {
                        (void)cache.Admit(index, bytes);
                      }
                    });
    (void)cache.AdmitMany(offers);  // checked against the directory there
    const double t1 = Now(), q1 = QueuedSeconds();
    if (read_done == 0) {
      read_done = t1;
      q_read = q1;
    }
    // Read once for the cache: keep it out of the page cache (the node
    // cache holds it now; twice would be memory for nothing). Not where the
    // page warmer holds the volume there for the readers' first epoch: the
    // fill runs ahead of them, and dropped pages are read again, one fault
    // at a time (under mpirun -np 2, a budget given made Fashion-MNIST's
    // first epoch twice as long as with the pages kept).
    const int fd = volume.target_fd(scan.window_target(w));
    if (fd >= 0 && !s.options.later_epochs_warm) {
      (void)::posix_fadvise(fd, static_cast<off_t>(scan.window_offset(w)),
                            static_cast<off_t>(scan.window_bytes(w)), POSIX_FADV_DONTNEED);
    }
    cache.FillWindowDone();
    std::lock_guard lock(s.mu);
    ++s.stats.windows_filled;
    s.stats.bytes_read += scan.window_bytes(w);
    s.stats.scan_seconds += read_done - t0;
    s.stats.fill_seconds += t1 - read_done;
    s.stats.scan_queued_seconds += std::max(0.0, q_read - q0);
    s.stats.fill_queued_seconds += std::max(0.0, q1 - q_read);
    s.stats.cpu_seconds += ThreadCpuSeconds() - c0;
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

  auto progress = [&] { return s.options.progress ? s.options.progress() : ReaderProgress{}; };
  // Waits (at most `seconds`) until the caller has been handed `bytes` in all.
  auto await_progress = [&](uint64_t bytes, double seconds = 2.0) {
    const double deadline = Now() + seconds;
    ReaderProgress p = progress();
    while (p.payload_bytes < bytes && Now() < deadline && !stopped()) {
      std::unique_lock lock(s.mu);
      s.cv.wait_for(lock, std::chrono::milliseconds(10));
      lock.unlock();
      p = progress();
    }
    return p;
  };
  const uint64_t epoch_bytes =
      s.options.epoch_bytes ? s.options.epoch_bytes : volume.info().data_bytes;
  // Every process of the node follows its decision and fills beside this
  // one, each at most a core's worth: with two ranks filling, a
  // Fashion-MNIST fill counted as one process's lasted "15 epochs" of 16,
  // and was stopped where holding the volume made the job 1.1x faster.
  // (The node's cores, not this process's: ranks bound to a core each
  // fill on their own cores.)
  auto fillers = [&] {
    const double cpus = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
    return std::clamp(static_cast<double>(cache.stats().sharers), 1.0, cpus);
  };
  // The epochs still to read after the one the caller is in.
  auto epochs_after = [&] {
    if (s.options.requested || epoch_bytes == 0) return s.options.epochs_after;
    const double done = std::floor(static_cast<double>(progress().payload_bytes) / epoch_bytes);
    return std::max(0.0, s.options.epochs_after - done);
  };
  // The probe: two windows, the second measured, for what reading and
  // copying cost here. The first pays for setting the region up (its first
  // block mapped, the kernel's structures): a 1.6 GB volume's first window
  // cost 5-6 s/GB where the fill went on at 1.9.
  double probe_scan_wall = 0;  // the measured window's reading, waits included, per byte
  auto probe = [&]() -> std::optional<FillCosts> {
    std::optional<FillCosts> measured;
    for (int k = 0; k < 2; ++k) {
      std::optional<uint64_t> w;
      if (!memory_short() && !stopped()) w = cache.ClaimFillWindow(windows().windows());
      if (!w) break;
      Stats before;
      {
        std::lock_guard lock(s.mu);
        before = s.stats;
      }
      const uint64_t reserved0 = cache.stats().reserved_bytes;
      fill_window(*w);
      // The copy's time includes mapping the cache's memory, a whole block
      // at a time: a window smaller than a block maps more than it fills,
      // which the rest of the fill then does not pay again. Per byte
      // mapped, then.
      const uint64_t reserved = cache.stats().reserved_bytes - reserved0;
      // Time spent waiting for a core is not a cost: the readers ran then.
      // On a node whose cores the readers keep busy it was half the probe's
      // time and more, which made filling look twice as dear as it was.
      std::lock_guard lock(s.mu);
      const Stats& st = s.stats;
      const double bytes = std::max<double>(st.bytes_read - before.bytes_read, 1);
      const double scan = st.scan_seconds - before.scan_seconds;
      const double fill = st.fill_seconds - before.fill_seconds;
      const double scan_queued = st.scan_queued_seconds - before.scan_queued_seconds;
      const double fill_queued = st.fill_queued_seconds - before.fill_queued_seconds;
      // Its duration, though, is all of it: the fill goes at that pace.
      const double mapped = std::max<double>(bytes, reserved);
      probe_scan_wall = scan / bytes;
      measured = FillCosts{.scan = std::max(0.0, scan - scan_queued) / bytes,
                           .fill = std::max(0.0, fill - fill_queued) / mapped,
                           .wall = scan / bytes + fill / mapped};
    }
    return measured;
  };

  // Where a decision may wait for the second epoch, warm (measure() says
  // why); every process of the node computes the same.
  const bool contended =
      s.options.page_cached && (cache.stats().sharers > 1 || AffinityCpus() <= 1);
  const bool deferrable = !s.options.requested && (s.options.later_epochs_warm || contended);
  std::optional<FillCosts> costs;
  int32_t measured_by = ::getpid();
  std::string no_probe;  // why the measurement stopped before its probe
  if (s.options.requested) {
    costs = probe();
  } else {
    // What each later epoch saves per cached byte: what the caller spends
    // in the reader per byte it gets, in steady state and with nothing
    // filling. So it is measured before the probe, and not over the
    // caller's first bytes: the first batch waits for the whole pipeline to
    // start (0.1-0.3 s of a 0.2 s Fashion-MNIST epoch here, which counted
    // as a saving of every later epoch), and while a window is filled the
    // fill takes CPU the caller may need: the waits it causes are not
    // savings. Past the first read-ahead window (or 1/16 of the epoch),
    // over the next `share` of the epoch (at most `span` bytes, or a tenth
    // of a second). (Over NBD, 784-byte samples came at 15 MB/s: two
    // windows' worth took a quarter of the first epoch.)
    struct Steady {
      double read = 0, pace = 0;
      double cpu = 0;   // the reader's CPU per byte (0: not known)
      double idle = 0;  // cores this thread may run on that the readers left idle
      bool ok = false;  // the caller got bytes within the deadlines
    };
    constexpr uint64_t kMiB = uint64_t{1} << 20;
    // The processes that run on this one's cores, itself included: the
    // node's processes sharing the cache where this one may run on every
    // core (alike, as ranks are), else (bound to some) itself.
    auto processes_here = [&]() -> double {
      const bool shared_cores = AffinityCpus() >= ::sysconf(_SC_NPROCESSORS_ONLN);
      return shared_cores ? std::max<uint32_t>(1, cache.stats().sharers) : 1;
    };
    auto steady = [&](uint64_t from, uint64_t span, double share) {
      Steady m;
      const uint64_t settle = std::max(kMiB, s.options.settle_bytes);
      const ReaderProgress a = await_progress(from + std::min(settle, epoch_bytes / 16));
      const CpuTicks ta = ReadCpuTicks();
      const double a_time = Now(), a_cpu = ProcessCpuSeconds();
      const uint64_t want = std::min(span, static_cast<uint64_t>(epoch_bytes * share));
      const ReaderProgress b = await_progress(a.payload_bytes + want, kMeasureSeconds);
      const CpuTicks tb = ReadCpuTicks();
      const double b_time = Now(), b_cpu = ProcessCpuSeconds();
      if (b.payload_bytes > a.payload_bytes) {
        const auto got = static_cast<double>(b.payload_bytes - a.payload_bytes);
        m.read = std::max(0.0, (b.caller_wait_seconds - a.caller_wait_seconds) / got);
        // A caller gets its bytes no faster than it waits for them.
        m.pace = std::max((b_time - a_time) / got, m.read);
        m.cpu = std::max(0.0, (b.reader_cpu_seconds - a.reader_cpu_seconds) / got);
        m.ok = true;
      }
      // What the fill's thread would take from the reader: nothing where
      // a core it may run on was idle while the reader ran (one process on
      // a node of spare cores), all of its time where none was (a rank per
      // core, or ranks bound to one core each). A warm Fashion-MNIST epoch
      // lasts 22 ms here, a few of /proc/stat's 10 ms ticks: over a span
      // that short the ticks said anything from 0 to 100 %. There the busy
      // cores are this process's CPU time over the span, times the node's
      // processes sharing the cache where they share this one's cores
      // (alike, as ranks are).
      m.idle = IdleCores(ta, tb);
      if (b_time - a_time < kTickedSpan && b_time > a_time) {
        const int cpus = std::max(1, AffinityCpus());
        const double busy = (b_cpu - a_cpu) / (b_time - a_time) * processes_here();
        m.idle = std::max(0.0, cpus - busy);
      }
      return m;
    };
    // Filling a byte copies it out of the page cache (and into fresh
    // memory), at least what reading it in a warm epoch costs: with one
    // epoch left it cannot pay, and the probe alone would cost (a 4 MiB
    // window in fresh memory took ~30 ms of a ~40 ms epoch here; windows
    // are smaller since, node_cache.h). So for one process too, whose
    // first epoch reads the volume ahead into the page cache: a
    // Fashion-MNIST fill decided over 2 epochs stopped after 29 MB, 1.2x
    // the cache off's time.
    // c/k where k processes share c < k cores, else 1.
    auto oversubscribed = [&] {
      const double cpus = std::max(1, AffinityCpus()), k = processes_here();
      return k > cpus ? cpus / k : 1.0;
    };
    auto one_epoch_left = [&] {
      if (!s.options.page_cached || epochs_after() > 1) return false;
      no_probe = "no fill: one epoch left, and filling costs at least what reading it warm does";
      return true;
    };
    auto measure = [&]() -> std::optional<FillCosts> {
      if (epochs_after() <= 0) return std::nullopt;
      const uint64_t span = std::max(4 * kMiB, s.options.measure_bytes);
      // Through the page cache, the first epoch reads the device and the
      // later ones memory, where it holds them: two to four times faster
      // here, so what the first epoch waits overstates what a cached one
      // saves as much (never understates it). Where the page warmer holds
      // the volume, or the fill competes with the readers for the cores
      // (several processes read the volume on this node, or this one may
      // run on one core only), that overstatement filled 5-epoch jobs at a
      // loss. There the first epoch decides only when sure (below); else
      // the waits are measured again in the second epoch, warm, and a fill
      // decided then is done at once.
      // Elsewhere one process with cores to spare decides in the first
      // epoch, as the fill costs it little and pays even for one epoch.
      // (Deciding every Fashion-MNIST job in its second epoch made
      // 20-epoch ones 1.15x slower than a budget given, whose fill goes on
      // beside the first epoch's reads, which leave the cores waiting for
      // the device.)
      const bool warm_first = deferrable && epochs_after() <= 2;
      if (warm_first) {
        // Too few epochs for a sure fill: decided warm, without a probe
        // while the first epoch is read.
        await_progress(epoch_bytes, std::numeric_limits<double>::infinity());
        if (stopped() || epochs_after() <= 0 || one_epoch_left()) return std::nullopt;
      }
      const Steady first = warm_first ? steady(progress().payload_bytes, epoch_bytes, 1.0 / 2)
                                      : steady(progress().payload_bytes, span, 1.0 / 8);
      if (one_epoch_left()) return std::nullopt;
      std::optional<FillCosts> c = probe();
      if (!c) return c;
      if (first.ok) {
        c->read = first.read;
        c->pace = first.pace;
      } else {
        // A caller too slow to get more data before the deadlines: its
        // waits since its start, the probe's time included.
        uint64_t probed = 0;
        {
          std::lock_guard lock(s.mu);
          probed = s.stats.bytes_read;
        }
        const ReaderProgress p = await_progress(probed);
        c->read = p.payload_bytes ? p.caller_wait_seconds / p.payload_bytes : 0;
        c->pace = c->read;
      }
      // The device reads the volume at least as fast as the reader reads
      // it: one window read beside the reader's 64 in flight waits behind
      // them (a 1.6 GB volume's was predicted at 2.8 s/GB to read, and its
      // fill read it at 0.28).
      if (c->pace > 0 && c->scan > c->pace) {
        c->wall -= probe_scan_wall - c->pace;
        c->scan = c->pace;
      }
      c->slowed = std::clamp(1 - first.idle, 0.0, 1.0);
      if (!deferrable) return c;
      if (warm_first) {
        c->read = first.cpu > 0 ? first.cpu : first.read * oversubscribed();
        c->slowed = 1;
        c->wall = 0;
        c->at_once = true;
        return c;
      }
      // Sure either way, with the whole fill taken from the readers? No
      // fill where even the first epoch's time in the reader (its waits or
      // its CPU, the larger) would not repay it. A fill where a fifth of
      // the reader's CPU would: its waits grow with the processes sharing
      // the cores (4 ranks on 2: a 5-epoch Fashion-MNIST job's first epoch
      // said filling saved 1.95 s, where its epochs took 0.05 s), its CPU
      // does not. The decision then counts the larger of waits and CPU as
      // the saving, so the fill's decisions after every window stop it
      // only where even that would not repay the rest (counting the fifth,
      // a 20-epoch fill under mpirun -np 2 stopped after 9 MB of 55).
      FillInputs in;
      in.epochs_after = epochs_after();
      in.epoch_bytes = epoch_bytes;
      in.fillers = fillers();
      in.costs = *c;
      in.costs.slowed = 1;
      in.costs.read = std::max(first.read, first.cpu);
      in.cacheable_bytes = volume.info().data_bytes;
      const FillDecision most = DecideFill(in);
      if (most.saving_seconds < most.cost_seconds) {
        c->slowed = 1;  // so the decision below agrees: no fill
        return c;
      }
      // With more processes than cores, each one's CPU in the first epoch
      // grows too (each maps and faults the volume: 4 ranks on 2 cores
      // filled 5-epoch Fashion-MNIST jobs at a loss with a fifth), so the
      // margin grows as they do.
      const double margin = s.options.sure_margin / oversubscribed();
      in.costs.read = first.cpu / margin;
      if (first.cpu > 0 && DecideFill(in).fill) {
        c->read = std::max(first.read, first.cpu);
        return c;
      }
      // More processes than cores reading a volume the page cache holds:
      // not measured again. Warm, their waits and CPU both said 20-epoch
      // Fashion-MNIST fills saved 0.5-0.7 s (4 ranks on 2 cores), where
      // holding it took 0.8-1.1x the cache off's time, and a fill made at
      // once cost 1.1-1.2x. Decided on what is sure, then: no fill.
      if (s.options.later_epochs_warm && oversubscribed() < 1) {
        c->read = in.costs.read;
        c->slowed = 1;
        return c;
      }
      // Unsure: measured again in the second epoch, warm, over half of it.
      await_progress(epoch_bytes, std::numeric_limits<double>::infinity());
      if (stopped() || epochs_after() <= 0 || one_epoch_left()) return std::nullopt;
      const Steady warm = steady(progress().payload_bytes, epoch_bytes, 1.0 / 2);
      if (!warm.ok) return c;
      // Warm, the page cache holds the volume: what a cached epoch saves
      // is the reader's CPU (its copies, planning and checks), where it is
      // known. Waits overstate it where processes share cores: each of k
      // on c < k cores waits k/c times its own work (4 ranks on 2: their
      // waits said a 20-epoch fill saved 0.5-0.7 s, and holding the volume
      // took the time the cache off did).
      c->read = warm.cpu > 0 ? warm.cpu : warm.read * oversubscribed();
      c->pace = warm.pace;
      c->slowed = 1;
      c->wall = 0;
      c->at_once = true;
      return c;
    };
    // Measured once per node; the others wait for the figures (as long as
    // the process measuring lives).
    while (!stopped() && !cache.full()) {
      costs = cache.fill_costs(&measured_by);
      if (costs) break;
      if (cache.ClaimFillMeasurement()) {
        measured_by = ::getpid();
        costs = measure();
        cache.PublishFillCosts(costs ? &*costs : nullptr);  // none: another may measure
        break;
      }
      std::unique_lock lock(s.mu);
      s.cv.wait_for(lock, std::chrono::milliseconds(10));
    }
  }
  // A fill decided warm is done while the readers wait (readers_wait, below):
  // all of its time is theirs, and it lasts no epoch.
  auto at_once = [&](FillInputs& in) {
    if (!in.costs.at_once) return;
    in.costs.slowed = 1;
    in.costs.wall = 0;
  };
  bool fill = false;
  if (!costs && !stopped() && !s.options.requested && (epochs_after() <= 0 || !no_probe.empty())) {
    std::lock_guard lock(s.mu);
    s.stats.decided = true;
    s.deciding.store(false, std::memory_order_relaxed);
    s.stats.decision.reason = no_probe.empty() ? "no fill: no epoch after this one" : no_probe;
  }
  if (costs && !stopped()) {
    FillInputs in;
    in.requested = s.options.requested;
    in.requested_as = s.options.requested_as;
    in.epochs_after = epochs_after();
    in.epoch_bytes = epoch_bytes;
    in.fillers = fillers();
    in.costs = *costs;
    at_once(in);
    const NodeCacheStats cs = cache.stats();
    const uint64_t room = std::min(volume.info().data_bytes, cs.capacity);
    in.cacheable_bytes = room - std::min(room, cs.used);
    FillDecision d = DecideFill(in);
    if (measured_by != ::getpid())
      d.reason += "; costs measured by process " + std::to_string(measured_by);
    fill = d.fill;
    // Where the fill competes with the readers for the cores, beside warm
    // epochs it takes the cores they keep busy, and its windows arrive too
    // late to pay. Under mpirun -np 2, a 20-epoch Fashion-MNIST fill made
    // beside the epochs left the job 1.1-1.3x slower than a budget given,
    // whose fill the first epoch's end waits for: decided in the second
    // epoch, epochs 3-5 took 100 ms against 20 each; decided in the
    // first, 1.26x. So the readers wait for it: decided warm, at once;
    // decided in the first epoch, at its end, as for a budget given. (Not
    // one process with cores to itself: there the fill beside the epochs
    // made 20-epoch jobs 0.9-1.0x a budget given's time, and waiting at
    // the first epoch's end, which came before most of the fill, 1.17x.)
    if (fill && !s.options.requested && (costs->at_once || contended)) {
      d.reason +=
          costs->at_once ? "; the readers wait for it" : "; the first epoch's end waits for it";
      s.readers_wait.store(costs->at_once ? ReadersWait::kNow : ReadersWait::kAtEpochEnd,
                           std::memory_order_relaxed);
    }
    std::lock_guard lock(s.mu);
    s.stats.decided = true;
    s.deciding.store(false, std::memory_order_relaxed);
    s.stats.decision = d;
  }
  // The probe is one window, and its copy may land in memory the kernel had
  // at hand: it under-predicted a 1.5 GB fill's copy 7x here. So a fill that
  // was not asked for decides again after every window with what its
  // windows so far cost, and stops once the rest would not pay.
  uint64_t filled_at_decision = 0;
  {
    std::lock_guard lock(s.mu);
    filled_at_decision = s.stats.bytes_read;
  }
  while (fill && !stopped() && !cache.full() && !memory_short()) {
    const std::optional<uint64_t> w = cache.ClaimFillWindow(windows().windows());
    if (!w) break;
    fill_window(*w);
    if (s.options.requested || !costs) continue;
    FillInputs in;
    in.epochs_after = epochs_after();
    in.epoch_bytes = epoch_bytes;
    in.fillers = fillers();
    in.costs = *costs;
    {
      std::lock_guard lock(s.mu);
      const Stats& st = s.stats;
      // Too little since the decision to say more than the probe did.
      const uint64_t after = std::min(kRedecideAfter, volume.info().data_bytes / 8);
      if (st.bytes_read < filled_at_decision + after) continue;
      const double bytes = static_cast<double>(st.bytes_read);
      in.costs.scan = std::max(0.0, st.scan_seconds - st.scan_queued_seconds) / bytes;
      in.costs.fill = std::max(0.0, st.fill_seconds - st.fill_queued_seconds) / bytes;
      in.costs.wall = (st.scan_seconds + st.fill_seconds) / bytes;
    }
    at_once(in);
    const NodeCacheStats cs = cache.stats();
    const uint64_t room = std::min(volume.info().data_bytes, cs.capacity);
    in.cacheable_bytes = room - std::min(room, cs.used);
    if (in.cacheable_bytes == 0) break;
    const FillDecision d = DecideFill(in);
    if (d.fill) continue;
    fill = false;
    std::lock_guard lock(s.mu);
    char text[96];
    std::snprintf(text, sizeof text, "stopped after %.1f MB, as filling cost more than measured: ",
                  static_cast<double>(s.stats.bytes_read) / 1e6);
    s.stats.decision.fill = false;
    s.stats.decision.reason = text + d.reason + "; was " + s.stats.decision.reason;
  }
  {
    std::lock_guard lock(s.mu);
    s.finished = true;
    s.stats.running = false;
  }
  s.readers_wait.store(ReadersWait::kNo, std::memory_order_relaxed);
  s.deciding.store(false, std::memory_order_relaxed);
  s.cv.notify_all();
}

}  // namespace dlfs::cache_internal
