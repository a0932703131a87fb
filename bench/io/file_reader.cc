// File-per-sample reader: the storage half of PyTorch's DataLoader over an
// ImageFolder tree (open, read the whole file, close — no decoding), as the
// baseline that `dlfs bench` is measured against.
//
//   dlfs_file_reader LIST_OR_DIR [--threads N] [--seed S] [--limit K]
//
// LIST_OR_DIR is either a directory (every regular file under it, found by a
// recursive walk, sorted by path) or a text file with one path per line
// (relative paths are taken relative to the list file's directory). The list
// is shuffled deterministically by --seed (Fisher-Yates over a
// std::mt19937_64, the same on every platform); N threads take the next file
// from a shared atomic counter and read it into a per-thread buffer that
// grows as needed. Only the reading is timed: the walk or the list comes
// first, like ImageFolder's scan at construction.
//
// Output: one JSON object {files, bytes, seconds, samples_per_s, mb_per_s,
// cpu_s_per_gb, threads, seed, list_seconds} (1 MB = 10^6 bytes; CPU is
// user+sys of the whole process over the timed part, from getrusage).
// Cold-cache runs are the caller's job (sync; echo 3 >/proc/sys/vm/drop_caches).
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_util.h"

namespace {

using dlfs_bench::CpuSeconds;
using dlfs_bench::Now;
using dlfs_bench::Shuffle;

constexpr char kProgram[] = "dlfs_file_reader";

[[noreturn]] void Die(const std::string& msg) { dlfs_bench::Die(kProgram, msg); }

std::vector<std::string> ListFiles(const std::string& source) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(source, ec)) {
    // The entry's type comes from readdir's d_type: no stat per file, so the
    // walk does not warm the inodes the timed part will need.
    for (fs::recursive_directory_iterator it(source, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->is_regular_file(ec)) files.push_back(it->path().string());
    }
    if (ec) Die(source + ": " + ec.message());
    std::sort(files.begin(), files.end());
    return files;
  }
  std::ifstream in(source);
  if (!in) Die(source + ": " + std::strerror(errno));
  const fs::path base = fs::path(source).parent_path();
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    files.push_back(line[0] == '/' || base.empty() ? line : (base / line).string());
  }
  return files;
}

struct ThreadResult {
  uint64_t files = 0;
  uint64_t bytes = 0;
  std::string error;
};

// Reads one whole file into *buf (grown as needed); returns its size.
bool ReadWhole(const std::string& path, std::vector<char>* buf, uint64_t* size, std::string* err) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *err = path + ": open: " + std::strerror(errno);
    return false;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    *err = path + ": fstat: " + std::strerror(errno);
    ::close(fd);
    return false;
  }
  // Like Python's f.read(): size the buffer from fstat, then read to EOF.
  const uint64_t want = static_cast<uint64_t>(st.st_size) + 1;
  if (buf->size() < want) buf->resize(std::max<uint64_t>(want, buf->size() * 3 / 2));
  uint64_t got = 0;
  while (true) {
    if (got == buf->size()) buf->resize(buf->size() * 2);
    const ssize_t n = ::read(fd, buf->data() + got, buf->size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      *err = path + ": read: " + std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    got += static_cast<uint64_t>(n);
  }
  ::close(fd);
  *size = got;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Reads every file (open, read all, close) in a seeded random order and prints JSON "
      "{files, bytes, seconds, samples_per_s, mb_per_s, cpu_s_per_gb}: the one-file-per-sample "
      "baseline of dlfs bench.",
      kProgram};
  std::string source;
  uint64_t threads = 2, seed = 0, limit = 0;
  app.add_option("LIST_OR_DIR", source,
                 "a directory (every regular file under it) or a file listing one path per line")
      ->required();
  app.add_option("--threads", threads, "reader threads")->check(CLI::Range(1, 1024));
  app.add_option("--seed", seed, "seed of the shuffled order");
  app.add_option("--limit", limit, "read only the first K files of the order (0: all)");
  CLI11_PARSE(app, argc, argv);

  const double l0 = Now();
  std::vector<std::string> files = ListFiles(source);
  if (files.empty()) Die(source + ": no files");
  Shuffle(&files, seed);
  if (limit > 0 && limit < files.size()) files.resize(limit);
  const double list_seconds = Now() - l0;

  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::vector<ThreadResult> results(threads);
  const double cpu0 = CpuSeconds();
  const double t0 = Now();
  {
    std::vector<std::thread> pool;
    for (uint64_t t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        ThreadResult& r = results[t];
        std::vector<char> buf(1 << 20);
        while (!failed.load(std::memory_order_relaxed)) {
          const uint64_t i = next.fetch_add(1, std::memory_order_relaxed);
          if (i >= files.size()) break;
          uint64_t n = 0;
          if (!ReadWhole(files[i], &buf, &n, &r.error)) {
            failed = true;
            break;
          }
          ++r.files;
          r.bytes += n;
        }
      });
    }
    for (auto& th : pool) th.join();
  }
  const double secs = Now() - t0;
  const double cpu = CpuSeconds() - cpu0;
  uint64_t nfiles = 0, nbytes = 0;
  for (const ThreadResult& r : results) {
    if (!r.error.empty()) Die(r.error);
    nfiles += r.files;
    nbytes += r.bytes;
  }
  std::printf(
      "{\"files\": %llu, \"bytes\": %llu, \"seconds\": %.6f, \"samples_per_s\": %.1f, "
      "\"mb_per_s\": %.2f, \"cpu_seconds\": %.4f, \"cpu_s_per_gb\": %.4f, \"threads\": %llu, "
      "\"seed\": %llu, \"list_seconds\": %.4f}\n",
      static_cast<unsigned long long>(nfiles), static_cast<unsigned long long>(nbytes), secs,
      secs > 0 ? nfiles / secs : 0.0, secs > 0 ? nbytes / secs / 1e6 : 0.0, cpu,
      nbytes ? cpu / (nbytes / 1e9) : 0.0, static_cast<unsigned long long>(threads),
      static_cast<unsigned long long>(seed), list_seconds);
  return 0;
}
