// The options of `dlfs lmdb read` (apps/dlfs/lmdb_verbs.cc), each declared
// once (dlfs_tools/option_table.h); their defaults are LmdbReadOptions' own.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>

#include "dlfs/io_engine.h"
#include "dlfs/lmdbio_options.h"
#include "dlfs_tools/option_table.h"

namespace dlfs::options {

// An LMDB is a local file: the engines that read one (not nbd).
inline constexpr EnumName<EngineKind> kLocalEngineNames[] = {
    kEngineKindNames[0], kEngineKindNames[1], kEngineKindNames[2]};
static_assert(kEngineKindNames[3].value == EngineKind::kNbd);

template <typename T>
using LmdbReadOption = Option<LmdbReadOptions, T>;

inline constexpr auto kLmdbReadOptions = std::tuple{
    LmdbReadOption<LmdbioMode>{.field = &At<&LmdbReadOptions::reader, &LmdbioOptions::mode>,
                               .flag = "--mode",
                               .help = "Mode",
                               .names = kLmdbioModeNames},
    LmdbReadOption<uint32_t>{.field = &At<&LmdbReadOptions::reader, &LmdbioOptions::batch_size>,
                             .flag = "-b,--batch",
                             .help = "Global batch size (a multiple of the ranks)"},
    LmdbReadOption<uint64_t>{.field = &At<&LmdbReadOptions::iterations>,
                             .flag = "-n,--iters",
                             .help = "Iterations to read"},
    LmdbReadOption<uint32_t>{
        .field = &At<&LmdbReadOptions::reader, &LmdbioOptions::readers_per_node>,
        .flag = "--readers-per-node",
        .help = "Readers per node (lmm-dm and later; lmm always has one)"},
    LmdbReadOption<EngineKind>{
        .field = &At<&LmdbReadOptions::reader, &LmdbioOptions::engine>,
        .flag = "--engine",
        .help = "Explicit reads (dio modes); auto picks uring where available",
        .names = kLocalEngineNames},
    LmdbReadOption<bool>{
        .field = &At<&LmdbReadOptions::reader, &LmdbioOptions::direct_io>,
        .settings = {{{"--buffered", false,
                       "Explicit reads (dio modes) through the page cache (no O_DIRECT)"}}}},
    LmdbReadOption<bool>{
        .field = &At<&LmdbReadOptions::reader, &LmdbioOptions::prefetch>,
        .settings = {{{"--no-prefetch", false, "lmm-dm: no speculative prefetch"}}}},
    LmdbReadOption<uint64_t>{
        .field = &At<&LmdbReadOptions::reader, &LmdbioOptions::coalesce_bytes>,
        .flag = "--coalesce-bytes",
        .help = "coal: bytes each reader reads per step (sets iterations per read)"},
    LmdbReadOption<uint32_t>{
        .field = &At<&LmdbReadOptions::reader, &LmdbioOptions::max_coalesce_iters>,
        .flag = "--max-coalesce-iters",
        .help = "coal: at most this many iterations per read"},
    LmdbReadOption<uint32_t>{.field = &At<&LmdbReadOptions::reader, &LmdbioOptions::stagger_group>,
                             .flag = "--stagger",
                             .help = "stag: readers that read at the same time"},
    LmdbReadOption<bool>{
        .field = &At<&LmdbReadOptions::check>,
        .settings = {{{"--check", true,
                       "Compare every record with the value the parser finds at its index, and "
                       "count how often each record was read"}}}},
    LmdbReadOption<std::string>{
        .field = &At<&LmdbReadOptions::counters_file>,
        .flag = "--counters",
        .help = "A file of \"name value\" counters (e.g. pfs-emu's MOUNT/.pfs-emu-stats) read "
                "before and after the iterations; reports how much each grew",
        .show_default = false},
    LmdbReadOption<bool>{
        .field = &At<&LmdbReadOptions::drop_cache>,
        .settings = {{{"--drop-cache", true,
                       "Drop the page cache before reading (root; for benchmarks)"}}}},
};

}  // namespace dlfs::options
