// VerifyVolume: read every sample of a volume and check its CRC32C
// (`dlfs verify`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dlfs/bad_sample.h"
#include "dlfs/status.h"
#include "dlfs/volume.h"

namespace dlfs {

struct VerifyReport {
  uint64_t samples_checked = 0;
  uint64_t bytes_checked = 0;
  uint64_t total_samples = 0;  // the volume's: how far samples_checked has to go
  uint64_t total_bytes = 0;    // the volume's data bytes: how far bytes_checked has to go
  uint64_t bad_samples = 0;
  // Each bad sample, as a loader's quarantine= takes them (reason: the
  // message passed to on_bad_sample).
  std::vector<BadSample> bad;
  Status backup_superblock;  // CheckBackupSuperblock()'s verdict (every target)
  // A compact directory's names, name order and tree
  // (SampleDirectory::CheckAll); its blocks of samples fail their samples.
  Status directory;
  // A token volume (docs/format.md §10.11): its stream's chunks compared
  // with the token checks as the samples were read (chunks touched by bytes
  // that could not be read are not), those that differ, and the verdict:
  // Corruption naming the first few chunks that differ.
  uint64_t token_chunks_checked = 0;
  uint64_t bad_token_chunks = 0;
  Status tokens;
  double seconds = 0;
};

struct VerifyOptions {
  // Called for each sample whose bytes do not match their checksum (or
  // cannot be read), with a message naming the volume, index and path, as it
  // is found (the report's `bad` has them all at the end).
  std::function<void(uint64_t index, const Status& problem)> on_bad_sample;
  // Called about every 100 ms with the samples checked so far.
  std::function<void(const VerifyReport& so_far)> on_progress;
};

// Reads every target's data region in large sequential windows (target by
// target, in offset order) and checks every sample. Where a window cannot
// be read (EIO from a bad range), its samples are read one by one: exactly
// those whose own bytes cannot be read are reported (as IOError naming the
// sample), and checking goes on with the rest. Then it compares each
// target's superblock copy with its primary (the primaries were checked by
// Volume::Open). Returns an error only when verification itself could not
// run; corrupt samples are counted in the report and passed to
// on_bad_sample, and a damaged superblock copy is reported in
// report->backup_superblock.
Status VerifyVolume(const Volume& volume, const VerifyOptions& options, VerifyReport* report);

// What RepairSuperblock did.
struct SuperblockRepair {
  bool repaired = false;  // a superblock was rewritten (false: nothing to do, or dry_run)
  uint64_t offset = 0;    // where: 0 (the primary) or the copy's offset at the file's end
  std::string what;       // one line naming the file, the superblock and why
};

// Every target file holds its superblock twice: at offset 0 and in its
// last 4 KiB (docs/format.md §2). When exactly one of them is damaged (or
// they differ, the primary being intact), rewrites that one from the other:
// one 4 KiB write and an fsync, nothing else touched. Works on the file
// alone, without opening the volume (a damaged primary is what stops
// Volume::Open). Corruption naming both when both are damaged;
// NotSupported for a block device. dry_run says what it would do.
Result<SuperblockRepair> RepairSuperblock(const std::string& path, bool dry_run = false);

}  // namespace dlfs
