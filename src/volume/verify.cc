#include "dlfs/verify.h"

#include <span>
#include <vector>

#include "common/clock.h"
#include "common/file_util.h"
#include "directory/token_checks.h"
#include "volume/field_decode.h"
#include "volume/scan.h"

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
  const volume_internal::VolumeScan scan(volume, kWindow);
  DLFS_ASSIGN_OR_RETURN(std::unique_ptr<IoEngine> engine,
                        volume_internal::VolumeScan::CreateEngine(volume));
  io_internal::ReadDriver driver(*engine);
  std::vector<std::byte> window, decoded;
  // A token volume's samples are its stream, in storage order: its chunks
  // are checked as the samples go by, from the bytes read for them.
  const bool tokens = dir.token_width() != 0;
  tokens::TokenStreamChecker stream(dir, volume.path());
  auto check_sample = [&](uint64_t i, std::span<const std::byte> bytes, Status check) {
    if (tokens && check.ok() && !bytes.empty()) {
      stream.Feed(dir.sample(i).offset - dir.token_stream_offset(), bytes);
    }
    ++report->samples_checked;
    report->bytes_checked += bytes.size();
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
  };
  for (size_t w = 0; w < scan.windows(); ++w) {
    // A window that cannot be read is read sample by sample: the samples
    // whose own bytes cannot be read are the bad ones.
    (void)scan.Read(w, driver, &window,
                    [&](uint64_t i, std::span<const std::byte> bytes, const Status& read) {
                      check_sample(i, bytes, read);
                    });
  }
  report->backup_superblock = volume.CheckBackupSuperblock();
  // The blocks of samples were checked above, each by its first sample; the
  // rest of a compact directory (names, their order, the tree) here.
  if (dir.compact()) report->directory = dir.CheckAll();
  if (tokens) {
    stream.Finish();
    report->token_chunks_checked = stream.checked();
    report->bad_token_chunks = stream.bad();
    if (stream.bad() > 0) {
      std::string message = std::to_string(stream.bad()) + " of " +
                            std::to_string(dir.token_chunk_count()) +
                            " token chunks differ from their checks:";
      for (const Status& e : stream.errors()) message += " " + e.message() + ";";
      message.pop_back();
      if (stream.bad() > stream.errors().size()) message += "; ...";
      report->tokens = Status::Corruption(message);
    }
  }
  report->seconds = Now() - start;
  return Status::Ok();
}

}  // namespace dlfs
