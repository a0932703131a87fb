// Helpers shared by the libFuzzer harnesses (docs/reliability.md).
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace dlfs::fuzz {

// Stops the run as a crash: the harness found an input that breaks a
// promise (e.g. a freshly packed volume that does not verify).
[[noreturn]] inline void Broken(const char* what) {
  std::fprintf(stderr, "dlfs fuzz invariant broken: %s\n", what);
  std::abort();
}

// A file in memory (memfd) with a path that opens it: /proc/self/fd/N.
// Reused across inputs; Set replaces its contents.
class MemFile {
 public:
  explicit MemFile(const char* name) : fd_(::memfd_create(name, MFD_CLOEXEC)) {
    if (fd_ < 0) Broken("memfd_create failed");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  void Set(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) Broken("ftruncate");
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) Broken("pwrite");
      done += static_cast<size_t>(n);
    }
  }
  // A sparse file of `size` bytes (zeros).
  void SetSize(uint64_t size) {
    if (::ftruncate(fd_, 0) != 0 || ::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      Broken("ftruncate");
    }
  }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

// A directory on tmpfs for harnesses whose code under test takes paths
// (importers); made once per process.
inline const std::string& ScratchDir() {
  static const std::string dir = [] {
    std::string tmpl = "/dev/shm/dlfs-fuzz-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      tmpl = "/tmp/dlfs-fuzz-XXXXXX";
      if (::mkdtemp(tmpl.data()) == nullptr) Broken("mkdtemp");
    }
    // Removed at exit (crashes leave it; the directory name says what it is).
    static std::string keep = tmpl;
    std::atexit([] { std::system(("rm -rf '" + keep + "'").c_str()); });
    return tmpl;
  }();
  return dir;
}

inline void WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) Broken("fopen");
  if (size > 0 && std::fwrite(data, 1, size, f) != size) Broken("fwrite");
  std::fclose(f);
}

}  // namespace dlfs::fuzz
