// Reports: the text and JSON documents `dlfs` prints about a volume, a
// verify run, a benchmark or an LMDB database, for any tool that wants to
// print the same (the CLI only chooses which and where).
//
// Library dlfs_report (CMake target dlfs::report), built with the CLI (it
// needs nlohmann_json) and installed with dlfs: find_package(dlfs) gives it
// to any program. The MPI runs' reports are in dlfs_tools/mpi_report.h (library
// dlfs_mpi_report, not installed).
//
// Every function only formats its arguments and returns the text (or, for
// listings, hands it out line by line). Text
// reports end in '\n'. JSON documents are one object, indented by 2 spaces
// unless a function says one line, with the keys the CLI's --json output has
// always had (scripts parse them; add keys, never rename them); strings
// holding invalid UTF-8 (paths are bytes) get U+FFFD in its place.
// Thread safety: none needed (no shared state).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dlfs/batch_source.h"
#include "dlfs/decode.h"
#include "dlfs/decode_stage.h"
#include "dlfs/directory.h"
#include "dlfs/lmdb.h"
#include "dlfs/loader.h"
#include "dlfs/memory.h"  // HumanBytes
#include "dlfs/pack.h"
#include "dlfs/summary.h"
#include "dlfs/verify.h"
#include "dlfs_tools/bench.h"
#include "dlfs_tools/bench_volumes.h"

namespace dlfs {

enum class ReportFormat { kText, kJson };

// One progress line: "\r  VERB N[ of TOTAL] samples[ (P%)], BYTES[, R
// samples/s, B/s]EXTRA[, ETA m:ss]" and the terminal's erase-to-end-of-line,
// so that writing it again overwrites it. `total` 0: unknown. `fraction` is
// how much of the work is done; negative when unknown (no percentage and no
// ETA).
std::string ProgressLine(std::string_view verb, uint64_t samples, uint64_t total, uint64_t bytes,
                         double seconds, double fraction, std::string_view extra = "");

// Image preparation options in words, as `dlfs pack` and `dlfs info` show
// them: "max side 256 (bilinear), raw pixels, RGB".
std::string DescribeImagePrep(const ImagePrepOptions& options);

// `dlfs pack`'s ProgressLine: how far by samples, or (tar) by source bytes.
std::string FormatPackProgress(const PackProgress& progress);
// What a finished Pack wrote (text): samples, bytes, classes and time, the
// trained dictionary, the targets, and the sources left out (what
// ImageFolder would not load, naming the all_files option; the skipped
// unreadable ones), and what image preparation did. `volume` is the
// PackOptions::volume given to Pack.
std::string FormatPackReport(const PackStats& stats, const std::string& source,
                             const std::string& output, const VolumeBuilder::Options& volume);

// `dlfs info`: the summary as a table, or one JSON object.
std::string FormatVolumeSummary(const VolumeSummary& summary, ReportFormat format);

// `dlfs ls`: one line for sample `index`: "INDEX\tSIZE\tLABEL\tPATH" (and
// "\tFIELDS" in a volume with fields; LABEL "-" for none), or a one-line JSON
// object {path, index, size, label, class[, fields][, prepared]} — prepared
// (volumes with an images section): the sample's changed images, each
// {field, stored, resized, width, height} with the original's size.
std::string FormatSampleLine(const SampleDirectory& directory, uint64_t index, ReportFormat format);
// One line for directory `dir`: "PATH/", or {path, type: "dir", samples,
// subdirs}.
std::string FormatDirectoryLine(const SampleDirectory& directory, uint64_t dir,
                                ReportFormat format);
// The line naming FormatSampleLine's text columns: "INDEX\tSIZE\tLABEL\tPATH"
// (and "\tFIELDS" in a volume with fields).
std::string SampleLinesHeader(const SampleDirectory& directory);
// `dlfs ls PATH`: for a directory, its subdirectories' lines, then its
// samples' lines; with `recursive` instead every sample below it, depth
// first in name order; for a sample, its line (as `ls FILE`). In text,
// SampleLinesHeader comes before the first sample's line. Each line
// goes to `out` as it is made (a volume may hold millions). NotFound (as
// SampleDirectory::Resolve) when nothing is at `path`.
Status ListPath(const SampleDirectory& directory, std::string_view path, bool recursive,
                ReportFormat format, const std::function<void(const std::string&)>& out);

// `dlfs epoch`: one index per line; with `ranks` > 0, `indices` holds rank
// 0's, then rank 1's, ... (equally many each) and each line is
// "RANK<TAB>INDEX".
std::string FormatEpochIndices(std::span<const uint64_t> indices, int ranks);

// `dlfs verify` of the volume at `path`: one line, or a JSON object with
// the counts, `bad_samples` (records as a loader's quarantine takes them)
// and the superblock copy's verdict.
std::string FormatVerifyReport(const std::string& path, const VerifyReport& report,
                               ReportFormat format);
// `dlfs verify`'s ProgressLine: how far by bytes (verify reads sequentially,
// so time follows bytes).
std::string FormatVerifyProgress(const VerifyReport& so_far);

// `dlfs bench` in one process: BenchVolumes(paths, options) returned `run`.
// The run's totals, where the time went, memory and cache (JSON adds each
// epoch); with options.decode, images/s and CPU per image instead.
std::string FormatVolumeBenchReport(const std::vector<std::string>& paths,
                                    const VolumeBenchOptions& options, const VolumeBenchResult& run,
                                    ReportFormat format);
// The line printed after each epoch of such a run (text); `decode`: as
// options.decode was set.
std::string FormatEpochLine(const EpochReport& epoch, bool decode);

// `dlfs lmdb info`: the database's tree, pages, values and first Datum.
std::string FormatLmdbSummary(const LmdbSummary& summary, ReportFormat format);

}  // namespace dlfs
