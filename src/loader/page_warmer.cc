#include "loader/page_warmer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <system_error>

#include "volume/scan.h"

namespace dlfs::loader_internal {

namespace {

// Windows in storage order, each asked for in pieces: the kernel reads at
// most the device's readahead size per call (read_ahead_kb, 128 KiB by
// default) and drops the rest of a larger request.
constexpr uint64_t kWindowBytes = uint64_t{4} << 20;
constexpr uint64_t kPieceBytes = uint64_t{128} << 10;

}  // namespace

std::unique_ptr<PageWarmer> PageWarmer::ForVolume(std::shared_ptr<const Volume> volume,
                                                  uint64_t usable_memory) {
  const uint64_t bytes = volume->info().data_bytes;
  if (bytes == 0 || usable_memory == 0 || bytes > usable_memory / 4) return nullptr;
  return std::unique_ptr<PageWarmer>(new PageWarmer(std::move(volume)));
}

PageWarmer::PageWarmer(std::shared_ptr<const Volume> volume)
    : volume_(std::move(volume)), pid_(::getpid()) {}

PageWarmer::~PageWarmer() {
  if (::getpid() != pid_) {
    // A child of fork(): the thread is the parent's; its std::thread must
    // not be joined or destroyed joinable here.
    if (thread_.joinable()) thread_.detach();
    return;
  }
  stop_.store(true, std::memory_order_relaxed);
  Join();
}

void PageWarmer::Start() {
  if (started_) return;
  started_ = true;
  try {
    thread_ = std::thread([this] { Run(); });
  } catch (const std::system_error&) {
    // No thread: the loader reads the pages itself, as without a warmer.
  }
}

void PageWarmer::Join() {
  if (thread_.joinable()) thread_.join();
}

void PageWarmer::Run() {
  const volume_internal::VolumeScan scan(*volume_, kWindowBytes);
  for (size_t w = 0; w < scan.windows() && !stop_.load(std::memory_order_relaxed); ++w) {
    const int fd = volume_->target_fd(scan.window_target(w));
    if (fd < 0) continue;
    const uint64_t end = scan.window_offset(w) + scan.window_bytes(w);
    for (uint64_t at = scan.window_offset(w); at < end; at += kPieceBytes) {
      const uint64_t n = std::min(kPieceBytes, end - at);
      if (::posix_fadvise(fd, static_cast<off_t>(at), static_cast<off_t>(n), POSIX_FADV_WILLNEED) ==
          0) {
        advised_.fetch_add(n, std::memory_order_relaxed);
      }
    }
  }
}

}  // namespace dlfs::loader_internal
