#include "dlfs/verify.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include "common/clock.h"
#include "common/file_util.h"
#include "volume/field_decode.h"

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
  report->total_samples = dir.size();
  report->total_bytes = volume.info().data_bytes;
  std::vector<uint64_t> order(dir.size());
  std::iota(order.begin(), order.end(), uint64_t{0});
  // Target by target, each in offset order: large sequential reads per file.
  std::sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) {
    const SampleInfo x = dir.sample(a), y = dir.sample(b);
    return x.target != y.target ? x.target < y.target : x.offset < y.offset;
  });

  std::vector<std::byte> window, sample, decoded;
  uint32_t win_target = 0;
  uint64_t win_begin = 0, win_end = 0;  // range of target win_target held in `window`
  uint64_t failed_end = 0;              // the window's read failed: read alone below this
  for (uint64_t i : order) {
    const SampleInfo s = dir.sample(i);
    if (s.target != win_target || s.offset < win_begin || s.offset + s.length > win_end) {
      const TargetInfo& target = volume.info().target_details[s.target];
      const uint64_t want = std::max<uint64_t>(kWindow, s.length);
      const uint64_t n = std::min(want, target.size - s.offset);
      window.resize(n);
      Status st = volume.ReadTarget(s.target, window.data(), n, s.offset, target.path);
      win_target = s.target;
      win_begin = s.offset;
      win_end = s.offset + n;
      // Part of the window could not be read: which samples are lost is
      // only known sample by sample, so every sample in this window is read
      // on its own (the healthy ones verify as usual).
      failed_end = st.ok() ? 0 : win_end;
    }
    Status check;
    std::span<const std::byte> bytes{window.data() + (s.offset - win_begin), s.length};
    if (s.offset < failed_end) {
      sample.resize(s.length);
      // "v.dlfs: sample 7 'train/00007': read at offset 20480: Input/output error"
      std::string what = volume.path() + ": sample " + std::to_string(i) + " '" + dir.Path(i) + "'";
      if (s.target != 0) {
        what += " on target " + std::to_string(s.target) + " (" +
                volume.info().target_details[s.target].path + ")";
      }
      check = volume.ReadTarget(s.target, sample.data(), s.length, s.offset, what);
      bytes = sample;
    }
    ++report->samples_checked;
    report->bytes_checked += s.length;
    // Format v2: every field's own CRC first (so a damaged sample's message
    // names the field), and every compressed field decodes to its recorded
    // length; then the sample's CRC.
    if (check.ok() && dir.has_fields()) {
      for (const FieldInfo& f : dir.Fields(i)) {
        const auto stored = bytes.subspan(f.offset_in_sample, f.stored_length);
        // Nothing is sized by the decoded length before the frame agrees.
        check = CheckFieldBeforeDecoding(volume, i, f, stored, true);
        if (check.ok() && f.codec != FieldCodec::kNone) {
          decoded.resize(f.decoded_length);
          check = volume.DecodeField(i, f, stored, decoded, /*verify=*/false);
        }
        if (!check.ok()) break;
      }
    }
    if (check.ok()) check = volume.CheckSample(i, bytes);
    if (!check.ok()) {
      ++report->bad_samples;
      report->bad.push_back({i, dir.Path(i), volume.path(), check.message()});
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
