// Options of the LMDBIO reader (dlfs/lmdbio.h) and of its measuring run
// (dlfs_tools/lmdb_read.h), in a header that needs no MPI so that programs built
// either way can hold them. The modes are explained in dlfs/lmdbio.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "dlfs/enum_names.h"
#include "dlfs/io_engine.h"
#include "dlfs/status.h"

namespace dlfs {

enum class LmdbioMode {
  kBaseline,
  kLmm,
  kLmmDm,
  kLmmDio,
  kLmmDioProv,
  kLmmDioProvCoal,
  kLmmDioProvCoalStag,
};

inline constexpr EnumName<LmdbioMode> kLmdbioModeNames[] = {
    {LmdbioMode::kBaseline, "baseline"},
    {LmdbioMode::kLmm, "lmm"},
    {LmdbioMode::kLmmDm, "lmm-dm"},
    {LmdbioMode::kLmmDio, "lmm-dio"},
    {LmdbioMode::kLmmDioProv, "lmm-dio-prov"},
    {LmdbioMode::kLmmDioProvCoal, "lmm-dio-prov-coal"},
    {LmdbioMode::kLmmDioProvCoalStag, "lmm-dio-prov-coal-stag"}};

// "baseline", "lmm-dio-prov", ...
inline std::string_view LmdbioModeName(LmdbioMode mode) { return NameOf(kLmdbioModeNames, mode); }
inline Result<LmdbioMode> ParseLmdbioMode(std::string_view name) {
  return ParseEnum(kLmdbioModeNames, name, "LMDBIO mode");
}

struct LmdbioOptions {
  LmdbioMode mode = LmdbioMode::kLmmDioProvCoalStag;
  uint32_t batch_size = 64;  // global batch B; a multiple of the number of ranks
  // Readers per node from lmm-dm on (lmm has one). Capped at the node's size.
  uint32_t readers_per_node = 1;
  bool prefetch = true;  // lmm-dm's speculative prefetch (madvise WILLNEED)
  // Explicit reads (lmm-dio on): the engine and whether to use O_DIRECT.
  // O_DIRECT by default: values go straight into the node's window, which is
  // the cache, and buffered reads would add the kernel's readahead past the
  // end of every run (other nodes' records) and split each read into
  // readahead-sized requests. Where the file system has no O_DIRECT the
  // engine reads through the page cache and says so in its description.
  EngineKind engine = EngineKind::kPread;
  bool direct_io = true;
  uint64_t coalesce_bytes = uint64_t{4} << 20;  // target bytes per read step per reader (coal)
  uint32_t max_coalesce_iters = 64;             // never coalesce more iterations than this
  // Iterations the job will run, when known (0: unknown): coalesced reads
  // then never fetch records for iterations past the end.
  uint64_t planned_iterations = 0;
  uint32_t stagger_group = 1;  // readers reading at once (stag)
};

struct LmdbReadOptions {
  // The reader's options; its planned_iterations is set to `iterations`.
  LmdbioOptions reader;
  uint64_t iterations = 100;
  // Compare every record with the bytes the record map (LmdbRecordMap,
  // plain pread) finds at its index, and count how often each record was
  // read.
  bool check = false;
  // A file of "name value" counter lines, e.g. pfs-emu's MOUNT/.pfs-emu-stats
  // (empty: none). Rank 0 reads it right before and right after the
  // iterations, so the report's counters are what the file system served
  // for them (the open excluded).
  std::string counters_file;
  // Rank 0 drops the page cache (root only) right before the reader opens
  // the database (after check's parse of it), so the run reads from
  // storage; when it cannot, a warning on stderr.
  bool drop_cache = false;
};

}  // namespace dlfs
