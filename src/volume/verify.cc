#include "dlfs/verify.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include "common/clock.h"
#include "common/file_util.h"

namespace dlfs {

namespace {
constexpr uint64_t kWindow = 8u << 20;
}

Status VerifyVolume(const Volume& volume, const VerifyOptions& options, VerifyReport* report) {
  const double start = Now();
  auto last = start - 1;  // the first report comes at once
  *report = VerifyReport{};
  if (volume.closed()) return Status::InvalidArgument(volume.path() + ": volume is closed");
  const SampleDirectory& dir = volume.directory();
  std::vector<uint64_t> order(dir.size());
  std::iota(order.begin(), order.end(), uint64_t{0});
  // Target by target, each in offset order: large sequential reads per file.
  std::sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) {
    const SampleInfo x = dir.sample(a), y = dir.sample(b);
    return x.target != y.target ? x.target < y.target : x.offset < y.offset;
  });

  std::vector<std::byte> window;
  uint32_t win_target = 0;
  uint64_t win_begin = 0, win_end = 0;  // range of target win_target held in `window`
  for (uint64_t i : order) {
    const SampleInfo s = dir.sample(i);
    if (s.target != win_target || s.offset < win_begin || s.offset + s.length > win_end) {
      const TargetInfo& target = volume.info().target_details[s.target];
      const uint64_t want = std::max<uint64_t>(kWindow, s.length);
      const uint64_t n = std::min(want, target.size - s.offset);
      window.resize(n);
      Status st = PreadFull(volume.target_fd(s.target), window.data(), n, s.offset, target.path);
      if (!st.ok()) {
        ++report->bad_samples;
        if (options.on_bad_sample) options.on_bad_sample(i, st);
        win_begin = win_end = 0;
        continue;
      }
      win_target = s.target;
      win_begin = s.offset;
      win_end = s.offset + n;
    }
    const Status check = volume.CheckSample(i, {window.data() + (s.offset - win_begin), s.length});
    ++report->samples_checked;
    report->bytes_checked += s.length;
    if (!check.ok()) {
      ++report->bad_samples;
      if (options.on_bad_sample) options.on_bad_sample(i, check);
    }
    if (options.on_progress && (report->samples_checked & 1023) == 0) {
      const double now = Now();
      if (now - last >= 0.1) {
        last = now;
        report->seconds = now - start;
        options.on_progress(*report);
      }
    }
  }
  report->backup_superblock = volume.CheckBackupSuperblock();
  report->seconds = Now() - start;
  return Status::Ok();
}

}  // namespace dlfs
