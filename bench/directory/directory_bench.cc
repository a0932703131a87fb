// Directory benchmark: how fast a volume with many samples opens, how much
// memory its directory takes, and how fast samples are found in it.
//
// It builds a synthetic volume with VolumeBuilder (N samples of a few bytes,
// named "d0123/0000123" over --dirs directories, labels over --classes
// classes), then:
//   * opens it with Volume::Open --runs times with a warm page cache, in this
//     process and in forked children (a fresh process, like a job starting
//     up), and reports the median and minimum; then times Open's three
//     phases separately on the same file: reading the directory region into
//     a fresh buffer, checksumming it, validating it (SampleDirectory::Create);
//   * reports the directory's memory per sample: in total, for the 32-byte
//     sample entries, for directories/classes/header and for the names (the
//     string pool); and the malloc'd memory and RSS growth of one Open;
//   * times random lookups by path (SampleDirectory::Lookup) and by index
//     (sample(i), Path(i));
//   * prints the ratios to the targets of the core issue: open in under 1 s
//     warm, at most 32 bytes per sample plus names.
// The volume is deleted at the end unless --keep. With --volume FILE it
// measures an existing volume instead and never deletes it.
//
//   build/bench/dlfs_directory_bench [--samples 10000000] [--path /tmp] ...
#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/crc32c.h"
#include "common/file_util.h"
#include "dlfs/builder.h"
#include "dlfs/volume.h"
#include "format/format.h"

namespace {

double Seconds(double a, double b) { return b - a; }

struct Stats {
  double median = 0, min = 0, max = 0;
};

Stats Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Stats s;
  if (v.empty()) return s;
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  s.min = v.front();
  s.max = v.back();
  return s;
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "dlfs_directory_bench: %s\n", what.c_str());
  std::exit(2);
}

template <typename T>
T Check(dlfs::Result<T> r, const char* what) {
  if (!r.ok()) Die(std::string(what) + ": " + r.status().ToString());
  return std::move(r).value();
}

void Check(const dlfs::Status& st, const char* what) {
  if (!st.ok()) Die(std::string(what) + ": " + st.ToString());
}

// Resident set size of this process, bytes.
uint64_t RssBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

// Times one Volume::Open in a forked child, i.e. with none of this
// process's freed memory to reuse: what a job opening the volume at start-up
// pays. Returns milliseconds, or a negative value if the child failed.
double OpenInChild(const std::string& file) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::close(fds[0]);
    const auto t0 = dlfs::Now();
    auto v = dlfs::Volume::Open(file);
    double ms = Seconds(t0, dlfs::Now()) * 1e3;
    if (!v.ok()) ms = -1;
    (void)!::write(fds[1], &ms, sizeof ms);
    ::_exit(0);
  }
  ::close(fds[1]);
  double ms = -1;
  if (::read(fds[0], &ms, sizeof ms) != static_cast<ssize_t>(sizeof ms)) ms = -1;
  ::close(fds[0]);
  ::waitpid(pid, nullptr, 0);
  return ms;
}

// Bytes this process holds from malloc (heap chunks in use plus mmap'd ones).
// Unlike the RSS it does not depend on whether freed memory gets reused.
uint64_t MallocBytes() {
  const struct mallinfo2 mi = ::mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

// Peak resident set size of this process so far (VmHWM), bytes.
uint64_t PeakRssBytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // kB
  }
  return 0;
}

bool DropCaches() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f) return false;
  f << "3\n";
  f.flush();
  return static_cast<bool>(f);
}

// splitmix64: a cheap deterministic scramble for labels and payloads.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int Digits(uint64_t v) {
  int d = 1;
  while (v >= 10) {
    v /= 10;
    ++d;
  }
  return d;
}

// Appends v in decimal, zero-padded to `width` digits.
void AppendPadded(std::string& out, uint64_t v, int width) {
  const std::string digits = std::to_string(v);
  if (static_cast<int>(digits.size()) < width) out.append(width - digits.size(), '0');
  out += digits;
}

// Keeps a value alive so the optimizer cannot drop the loop computing it.
volatile uint64_t g_sink;

struct Options {
  uint64_t samples = 10'000'000;
  std::string path = "/tmp";
  std::string volume;  // existing volume to measure instead of building one
  uint32_t dirs = 1000;
  uint32_t classes = 1000;
  uint32_t sample_bytes = 1;
  int runs = 5;
  uint64_t lookups = 1'000'000;
  uint64_t seed = 1;
  bool keep = false;
  bool cold = false;
};

// Builds the synthetic volume; returns the seconds it took.
double Build(const Options& o, const std::string& file) {
  const auto t0 = dlfs::Now();
  auto builder =
      Check(dlfs::VolumeBuilder::Create(file, {.align = 1, .overwrite = true}), "create builder");
  const int name_width = std::max(7, Digits(o.samples - 1));
  const int dir_width = std::max(4, Digits(o.dirs - 1));
  std::vector<std::byte> payload(o.sample_bytes);
  std::string path;
  for (uint64_t i = 0; i < o.samples; ++i) {
    const uint64_t h = Mix(i ^ o.seed);
    for (uint32_t b = 0; b < o.sample_bytes; ++b) payload[b] = std::byte(h >> (8 * (b % 8)));
    path = "d";
    AppendPadded(path, i % o.dirs, dir_width);
    path += '/';
    AppendPadded(path, i, name_width);
    Check(builder->Add(path, payload, static_cast<uint32_t>(h % o.classes)), "add sample");
    if ((i + 1) % 1'000'000 == 0 && ::isatty(STDERR_FILENO)) {
      std::fprintf(stderr, "\r  added %" PRIu64 " samples", i + 1);
    }
  }
  if (::isatty(STDERR_FILENO)) std::fprintf(stderr, "\r\033[K  finishing...");
  Check(builder->Finish(), "finish volume");
  if (::isatty(STDERR_FILENO)) std::fprintf(stderr, "\r\033[K");
  return Seconds(t0, dlfs::Now());
}

void Row(const char* metric, const std::string& median, const std::string& min,
         const std::string& target, const std::string& ratio) {
  std::printf("  %-38s %10s %10s %10s  %s\n", metric, median.c_str(), min.c_str(), target.c_str(),
              ratio.c_str());
}

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"dlfs directory benchmark: open time, memory per sample and lookup speed"};
  app.add_option("--samples", o.samples, "Samples in the synthetic volume")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{4'000'000'000}));
  app.add_option("--path", o.path,
                 "Where to build the volume: a directory (the file is created in it) or a "
                 "file path")
      ->capture_default_str();
  app.add_option("--volume", o.volume,
                 "Measure this existing volume instead of building one (never deleted)")
      ->check(CLI::ExistingFile);
  app.add_option("--dirs", o.dirs, "Directories the samples are spread over")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1'000'000u));
  app.add_option("--classes", o.classes, "Label classes")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1'000'000u));
  app.add_option("--sample-bytes", o.sample_bytes, "Bytes per sample")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  app.add_option("--runs", o.runs, "Timed repetitions of each measurement")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--lookups", o.lookups, "Random lookups per run")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{100'000'000}));
  app.add_option("--seed", o.seed, "Seed for labels, payloads and the lookup order")
      ->capture_default_str();
  app.add_flag("--keep", o.keep, "Keep the built volume");
  app.add_flag("--cold", o.cold, "Also time one open after dropping the page cache (needs root)");
  CLI11_PARSE(app, argc, argv);

  std::string file = o.volume;
  double build_s = -1;
  uint64_t build_peak_rss = 0;  // of the whole process, the builder's peak
  bool built = false;
  if (file.empty()) {
    struct stat st;
    file = ::stat(o.path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)
               ? o.path + "/dlfs_directory_bench." + std::to_string(::getpid()) + ".dlfs"
               : o.path;
    std::printf("building %s: %" PRIu64 " samples of %u B over %u directories, %u classes\n",
                file.c_str(), o.samples, o.sample_bytes, o.dirs, o.classes);
    std::fflush(stdout);
    build_s = Build(o, file);
    build_peak_rss = PeakRssBytes();
    built = true;
  }
  // Remove the volume on every exit path from here on (unless --keep).
  struct Cleanup {
    std::string file;
    bool active;
    ~Cleanup() {
      if (active) ::unlink(file.c_str());
    }
  } cleanup{file, built && !o.keep};

  // The first open is untimed: it fills the page cache (a just-built volume
  // is there already) and gives the counts. It is also the one whose
  // resident-set growth is measured, before later opens leave freed memory
  // for malloc to reuse. It stays open for the lookups.
  const uint64_t rss_before = RssBytes(), malloc_before = MallocBytes();
  auto vol = Check(dlfs::Volume::Open(file), "open");
  const uint64_t rss_after = RssBytes(), malloc_after = MallocBytes();
  const dlfs::VolumeInfo info = vol->info();
  const uint64_t n = info.sample_count;
  if (n == 0) Die(file + ": volume has no samples");

  // --- Open, warm --------------------------------------------------------
  std::vector<double> open_ms;
  for (int r = 0; r < o.runs; ++r) {
    const auto t0 = dlfs::Now();
    auto v = Check(dlfs::Volume::Open(file), "open");
    const auto t1 = dlfs::Now();
    open_ms.push_back(Seconds(t0, t1) * 1e3);
    g_sink = v->size();
  }
  std::vector<double> child_ms;
  for (int r = 0; r < o.runs; ++r) {
    const double ms = OpenInChild(file);
    if (ms < 0) Die(file + ": open in a child process failed");
    child_ms.push_back(ms);
  }
  // The same file, phase by phase, as Open does them: read the directory
  // region into a fresh buffer, checksum it, validate it (SampleDirectory::
  // Create, public). Their sum is Open minus the superblock and bookkeeping.
  std::vector<double> read_ms, crc_ms, validate_ms;
  dlfs::SampleDirectory::Expected expected;
  expected.sample_count = info.sample_count;
  expected.dir_count = info.dir_count;
  expected.class_count = info.class_count;
  expected.data_bytes = info.data_bytes;
  expected.data_alignment = info.data_alignment;
  for (const dlfs::TargetInfo& t : info.target_details) {
    expected.data_regions.push_back({t.data_offset, t.data_offset + t.data_length});
  }
  for (int r = 0; r < o.runs; ++r) {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) Die(file + ": " + std::strerror(errno));
    const auto t0 = dlfs::Now();
    // The same allocation Volume::Open uses (huge-page anonymous memory).
    std::shared_ptr<std::byte> buf = dlfs::AllocateLarge(info.directory_bytes);
    uint64_t done = 0;
    while (done < info.directory_bytes) {
      const ssize_t k = ::pread(fd, buf.get() + done, info.directory_bytes - done,
                                static_cast<off_t>(info.directory_offset + done));
      if (k <= 0) Die(file + ": short read of the directory region");
      done += static_cast<uint64_t>(k);
    }
    const auto t1 = dlfs::Now();
    g_sink = dlfs::crc32c::Value(buf.get(), info.directory_bytes);
    const auto t2 = dlfs::Now();
    auto dir = Check(dlfs::SampleDirectory::Create(buf, info.directory_bytes, expected, file),
                     "validate directory");
    const auto t3 = dlfs::Now();
    ::close(fd);
    read_ms.push_back(Seconds(t0, t1) * 1e3);
    crc_ms.push_back(Seconds(t1, t2) * 1e3);
    validate_ms.push_back(Seconds(t2, t3) * 1e3);
  }
  double cold_ms = -1;
  bool cold_done = false;
  if (o.cold) {
    if (DropCaches()) {
      const auto t0 = dlfs::Now();
      auto v = Check(dlfs::Volume::Open(file), "open (cold)");
      cold_ms = Seconds(t0, dlfs::Now()) * 1e3;
      cold_done = true;
    } else {
      std::fprintf(stderr, "dlfs_directory_bench: cannot drop caches (not root?); no cold run\n");
    }
  }

  // --- Memory ------------------------------------------------------------
  const dlfs::SampleDirectory& d = vol->directory();
  const uint64_t mem = d.memory_bytes();
  dlfs::format::DirectoryHeader header;
  {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::pread(fd, &header, sizeof header, static_cast<off_t>(info.directory_offset)) !=
                      static_cast<ssize_t>(sizeof header)) {
      Die(file + ": cannot read the directory header");
    }
    ::close(fd);
  }
  uint64_t sample_name_bytes = 0;
  for (uint64_t i = 0; i < n; ++i) sample_name_bytes += d.name(i).size();
  const uint64_t fixed = mem - header.string_bytes;
  const uint64_t sample_entries = header.dirs_offset - header.samples_offset;
  const uint64_t other_fixed = fixed - sample_entries;  // header, dirs, classes

  // --- Lookups -----------------------------------------------------------
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<uint64_t> pick(0, n - 1);
  std::vector<uint64_t> idx(o.lookups);
  for (auto& i : idx) i = pick(rng);
  std::vector<std::string> paths;
  paths.reserve(o.lookups);
  for (uint64_t i : idx) paths.push_back(d.Path(i));
  std::vector<uint64_t> found(o.lookups);
  std::vector<double> lookup_ns, sample_ns, path_ns;
  for (int r = 0; r < o.runs; ++r) {
    auto t0 = dlfs::Now();
    for (uint64_t k = 0; k < o.lookups; ++k) {
      auto res = d.Lookup(paths[k]);
      if (!res.ok()) Die("lookup '" + paths[k] + "': " + res.status().ToString());
      found[k] = *res;
    }
    auto t1 = dlfs::Now();
    lookup_ns.push_back(Seconds(t0, t1) * 1e9 / o.lookups);
    for (uint64_t k = 0; k < o.lookups; ++k) {
      if (found[k] != idx[k]) Die("lookup '" + paths[k] + "' found the wrong sample");
    }

    uint64_t sum = 0;
    t0 = dlfs::Now();
    for (uint64_t i : idx) {
      const dlfs::SampleInfo s = d.sample(i);
      sum += s.offset + s.length + s.label;
    }
    t1 = dlfs::Now();
    g_sink = sum;
    sample_ns.push_back(Seconds(t0, t1) * 1e9 / o.lookups);

    sum = 0;
    t0 = dlfs::Now();
    for (uint64_t i : idx) sum += d.Path(i).size();
    t1 = dlfs::Now();
    g_sink = sum;
    path_ns.push_back(Seconds(t0, t1) * 1e9 / o.lookups);
  }

  // --- Report ------------------------------------------------------------
  const Stats child = Summarize(child_ms);
  const Stats open = Summarize(open_ms), rd = Summarize(read_ms), crc = Summarize(crc_ms);
  const Stats val = Summarize(validate_ms);
  const Stats lk = Summarize(lookup_ns), si = Summarize(sample_ns), pi = Summarize(path_ns);
  const double per_sample = static_cast<double>(mem) / n;
  const double entry_per_sample = static_cast<double>(sample_entries) / n;
  const double other_per_sample = static_cast<double>(other_fixed) / n;
  std::printf("\nvolume     %s (%.1f MB file)\n", file.c_str(), info.volume_size / 1e6);
  std::printf("samples    %" PRIu64 " in %" PRIu64 " directories, %" PRIu64 " classes\n", n,
              info.dir_count, info.class_count);
  if (build_s >= 0) {
    std::printf("build      %.1f s (VolumeBuilder::Add x %" PRIu64
                ", Finish); peak RSS %.1f MB = %.0f B per sample\n",
                build_s, n, build_peak_rss / 1e6, static_cast<double>(build_peak_rss) / n);
  }
  std::printf("directory  %" PRIu64 " bytes = %" PRIu64 " sample entries + %" PRIu64
              " header, dirs, classes + %" PRIu64 " names (%" PRIu64 " of them sample names)\n",
              mem, sample_entries, other_fixed, header.string_bytes, sample_name_bytes);
  std::printf(
      "memory     one open Volume holds %.1f MB of malloc'd memory (RSS +%.1f MB; the region "
      "itself is mmap'd, not malloc'd); "
      "its directory region is %.1f MB\n",
      (static_cast<double>(malloc_after) - static_cast<double>(malloc_before)) / 1e6,
      (static_cast<double>(rss_after) - static_cast<double>(rss_before)) / 1e6, mem / 1e6);
  std::printf("runs       %d (median and min; lookups: %" PRIu64 " random samples per run)\n\n",
              o.runs, o.lookups);

  Row("metric", "median", "min", "target", "ratio (median / target)");
  Row("Volume::Open, warm, same process (ms)", Fmt("%.1f", open.median), Fmt("%.1f", open.min),
      "< 1000", Fmt("%.3f", open.median / 1000) + (open.median < 1000 ? "  met" : "  MISSED"));
  Row("Volume::Open, warm, new process (ms)", Fmt("%.1f", child.median), Fmt("%.1f", child.min),
      "< 1000", Fmt("%.3f", child.median / 1000) + (child.median < 1000 ? "  met" : "  MISSED"));
  Row("  read directory region (ms)", Fmt("%.1f", rd.median), Fmt("%.1f", rd.min), "", "");
  Row("  crc32c of region (ms)", Fmt("%.1f", crc.median), Fmt("%.1f", crc.min), "", "");
  Row("  validate: SampleDirectory::Create (ms)", Fmt("%.1f", val.median), Fmt("%.1f", val.min), "",
      "");
  if (cold_done) Row("Volume::Open, cold cache (ms)", Fmt("%.1f", cold_ms), "", "", "one run");
  Row("directory bytes / sample", Fmt("%.2f", per_sample), "", "", "");
  Row("  sample entries (without names)", Fmt("%.2f", entry_per_sample), "", "<= 32",
      Fmt("%.3f", entry_per_sample / 32) + (entry_per_sample <= 32 ? "  met" : "  MISSED"));
  Row("  dirs, classes, header", Fmt("%.4f", other_per_sample), "", "", "amortised per sample");
  Row("  names (string pool)", Fmt("%.2f", static_cast<double>(header.string_bytes) / n), "", "",
      "");
  Row("Lookup(path), random (ns)", Fmt("%.0f", lk.median), Fmt("%.0f", lk.min), "", "");
  Row("sample(i), random (ns)", Fmt("%.1f", si.median), Fmt("%.1f", si.min), "", "");
  Row("Path(i), random (ns)", Fmt("%.0f", pi.median), Fmt("%.0f", pi.min), "", "");
  if (built && o.keep) std::printf("\nkept %s\n", file.c_str());
  return 0;
}
