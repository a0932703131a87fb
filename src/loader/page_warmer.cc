#include "loader/page_warmer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <system_error>

#include "io/io_backend.h"

namespace dlfs::loader_internal {

namespace {

// Each target's data region is asked for in pieces, in file order: the
// kernel reads at most the device's readahead size per call
// (read_ahead_kb, 128 KiB by default) and drops the rest of a larger
// request.
constexpr uint64_t kPieceBytes = uint64_t{128} << 10;
// Mapped in pieces too, so a stop is seen within one.
constexpr uint64_t kMapPieceBytes = uint64_t{2} << 20;

}  // namespace

bool PageWarmer::Warms(const Volume& volume, uint64_t usable_memory) {
  const uint64_t bytes = volume.info().data_bytes;
  if (bytes == 0 || usable_memory == 0 || bytes > usable_memory / 4) return false;
  // Only files and devices have a page cache to read ahead into (not an
  // NBD export or an S3 object).
  bool any_local = false;
  for (uint32_t t = 0; t < volume.info().target_details.size(); ++t) {
    any_local = any_local || volume.target_fd(t) >= 0;
  }
  return any_local;
}

std::unique_ptr<PageWarmer> PageWarmer::ForVolume(std::shared_ptr<const Volume> volume,
                                                  uint64_t usable_memory, bool map) {
  if (!Warms(*volume, usable_memory)) return nullptr;
  return std::unique_ptr<PageWarmer>(new PageWarmer(std::move(volume), map));
}

PageWarmer::PageWarmer(std::shared_ptr<const Volume> volume, bool map)
    : volume_(std::move(volume)), map_(map), pid_(::getpid()) {}

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
  // By target and offset, from the superblocks' data regions alone: no
  // per-sample work, whatever the volume's size or layout.
  const std::vector<TargetInfo>& targets = volume_->info().target_details;
  for (uint32_t t = 0; t < targets.size() && !stop_.load(std::memory_order_relaxed); ++t) {
    const int fd = volume_->target_fd(t);
    if (fd < 0) continue;
    const uint64_t end = targets[t].data_offset + targets[t].data_length;
    for (uint64_t at = targets[t].data_offset; at < end && !stop_.load(std::memory_order_relaxed);
         at += kPieceBytes) {
      const uint64_t n = std::min(kPieceBytes, end - at);
      if (::posix_fadvise(fd, static_cast<off_t>(at), static_cast<off_t>(n), POSIX_FADV_WILLNEED) ==
          0) {
        advised_.fetch_add(n, std::memory_order_relaxed);
      }
    }
  }
  for (uint32_t t = 0; map_ && t < targets.size() && !stop_.load(std::memory_order_relaxed); ++t) {
    Populate(t);
  }
}

void PageWarmer::Populate(uint32_t t) {
  const int fd = volume_->target_fd(t);
  if (fd < 0) return;
  Result<io_internal::MappedFile> m =
      io_internal::AcquireMapping(fd, volume_->info().target_details[t].path);
  if (!m.ok() || m->base == nullptr || !m->guarded) {
    if (m.ok()) io_internal::ReleaseMapping(*m);
    return;  // the reads fault their pages in themselves
  }
  const TargetInfo& info = volume_->info().target_details[t];
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t end = std::min(info.data_offset + info.data_length, m->size);
  for (uint64_t at = info.data_offset / page * page;
       at < end && !stop_.load(std::memory_order_relaxed); at += kMapPieceBytes) {
    const uint64_t n = std::min(kMapPieceBytes, end - at);
    // Waits for the piece's pages (read ahead above), then maps them. A
    // kernel before 5.14 refuses (EINVAL): the reads' faults map them.
    if (::madvise(const_cast<std::byte*>(m->base) + at, n, MADV_POPULATE_READ) != 0 &&
        errno != EINTR) {
      break;
    }
  }
  io_internal::ReleaseMapping(*m);
}

}  // namespace dlfs::loader_internal
