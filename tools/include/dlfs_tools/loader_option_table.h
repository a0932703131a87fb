// The loader's options, each declared once (dlfs_tools/option_table.h): the
// keywords of dlfs.Loader and dlfs.ImageLoader (python/loader_keywords.h),
// in the order of their signature, and the loader flags of `dlfs bench`
// (apps/dlfs/bench_verb.cc). A new option is one entry in one of the three
// tables below; its default is its field's in LoaderConfig.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "dlfs/io_engine.h"
#include "dlfs/loader.h"
#include "dlfs/memory.h"
#include "dlfs/shard_options.h"
#include "dlfs/volume.h"
#include "dlfs_tools/option_table.h"

namespace dlfs::options {

// What the loader options set: the loader's, how its volumes are opened,
// a mixture's (of several volumes) and a sharded job's (MPI).
struct LoaderConfig {
  LoaderOptions loader;
  VolumeOpenOptions open;
  // None: O_DIRECT unless samples are much smaller than a block
  // (LoaderOptions::auto_direct_io); true or false: as said. Applied by
  // Finish().
  std::optional<bool> direct_io;
  // Of a mixture only; none: equal weights.
  std::optional<std::vector<double>> weights;
  uint64_t epoch_samples = 0;
  bool cycle = false;
  bool shard_local = false;  // a ShardLoader over node-local targets
  ShardLoaderOptions shard;  // its .loader is `loader`, not this one

  bool sharded() const { return shard_local || shard.cluster_cache; }
  bool mixture_options() const { return weights || epoch_samples != 0 || cycle; }
  // Folds the options set here into `loader` (direct_io).
  void Finish() {
    if (direct_io) {
      loader.engine.direct_io = *direct_io;
      loader.auto_direct_io = false;
    }
  }
};

template <typename T>
using LoaderOption = Option<LoaderConfig, T>;

// The keywords of both dlfs.Loader and dlfs.ImageLoader, in signature order
// (after `volume`); those with a flag are `dlfs bench`'s too.
inline constexpr auto kLoaderOptions = std::tuple{
    LoaderOption<uint32_t>{
        .keyword = "batch_size",
        .field = &At<&LoaderConfig::loader, &LoaderOptions::sampler, &SamplerOptions::batch_size>,
        .flag = "--batch",
        .help = "Samples per batch",
        .required = true},
    LoaderOption<bool>{
        .keyword = "shuffle",
        .field = &At<&LoaderConfig::loader, &LoaderOptions::sampler, &SamplerOptions::shuffle>},
    LoaderOption<uint64_t>{
        .keyword = "seed",
        .field = &At<&LoaderConfig::loader, &LoaderOptions::sampler, &SamplerOptions::seed>,
        .flag = "--seed",
        .help = "Shuffle seed"},
    LoaderOption<uint32_t>{
        .keyword = "rank",
        .field = &At<&LoaderConfig::loader, &LoaderOptions::sampler, &SamplerOptions::rank>},
    LoaderOption<uint32_t>{
        .keyword = "world_size",
        .field = &At<&LoaderConfig::loader, &LoaderOptions::sampler, &SamplerOptions::world_size>},
    LoaderOption<bool>{
        .keyword = "drop_last",
        .field = &At<&LoaderConfig::loader, &LoaderOptions::sampler, &SamplerOptions::drop_last>},
    LoaderOption<uint32_t>{.keyword = "prefetch_batches",
                           .field = &At<&LoaderConfig::loader, &LoaderOptions::prefetch_batches>,
                           .flag = "--prefetch",
                           .help = "Batches read ahead"},
    LoaderOption<uint32_t>{
        .keyword = "queue_depth",
        .field = &At<&LoaderConfig::loader, &LoaderOptions::engine, &EngineOptions::queue_depth>,
        .flag = "--queue-depth",
        .help = "Reads in flight per I/O thread"},
    LoaderOption<uint32_t>{.keyword = "io_threads",
                           .field = &At<&LoaderConfig::loader, &LoaderOptions::io_threads>,
                           .flag = "--io-threads",
                           .help = "I/O threads (one ring each); 0: two where reads go through "
                                   "the page cache\nand the process has two cores to itself, "
                                   "else one"},
    LoaderOption<EngineKind>{
        .keyword = "engine",
        .field = &At<&LoaderConfig::loader, &LoaderOptions::engine, &EngineOptions::kind>,
        .flag = "--engine",
        .help = "I/O engine",
        .names = kEngineKindNames},
    LoaderOption<std::optional<bool>>{
        .keyword = "direct_io",
        .field = &At<&LoaderConfig::direct_io>,
        // --buffered second: CLI11 runs the callbacks in this order, so
        // with both flags --buffered wins, as it always has.
        .settings = {{{"--direct", true,
                       "O_DIRECT even for samples much smaller than a block (by default those are "
                       "read\nthrough the page cache, where O_DIRECT would read 2.5x their bytes "
                       "or more)"},
                      {"--buffered", false, "Read through the page cache (no O_DIRECT)"}}}},
    LoaderOption<bool>{.keyword = "verify_checksums",
                       .field = &At<&LoaderConfig::loader, &LoaderOptions::verify_checksums>,
                       .settings = {{{"--no-verify", false, "Skip CRC32C checks of samples"}}}},
    LoaderOption<bool>{
        .keyword = "coalesce",
        .field = &At<&LoaderConfig::loader, &LoaderOptions::plan, &ReadPlanOptions::coalesce>,
        .settings = {{{"--no-coalesce", false, "One read per sample"}}}},
    // A range, a sequence of indices or None (python/loader_keywords.cc).
    LoaderOption<SampleSubset>{.keyword = "indices",
                               .field = &At<&LoaderConfig::loader, &LoaderOptions::subset>,
                               .python_object = true},
    LoaderOption<uint64_t>{
        .keyword = "cache_budget",
        .field = &At<&LoaderConfig::loader, &LoaderOptions::cache_budget>,
        .flag = "--cache-budget",
        .help = "Node cache: samples in memory shared by the node's processes, up to this many\n"
                "bytes, filled by large sequential reads of the volume. auto: a quarter of what\n"
                "the job may use (MemAvailable and its memory cgroup's limit): a volume it holds\n"
                "whole is held from the first epoch when 2 or more --epochs follow it, else not\n"
                "filled; one it holds in part is filled where the measured saving beats the cost;\n"
                "a size (or $DLFS_CACHE_BUDGET): filled by the end of the first epoch whatever\n"
                "it costs; 0: off. A volume held whole of at most 2 GiB is filled before the\n"
                "first read. Suffixes K, M, G, T",
        .parse = &ParseByteBudget,
        .default_text = "auto",
        .python_object = true},  // bytes, a size as the flag takes it, or None
    LoaderOption<bool>{.keyword = "cache_shared",
                       .field = &At<&LoaderConfig::loader, &LoaderOptions::cache_shared>},
    LoaderOption<bool>{.keyword = "skip_bad_samples",
                       .field = &At<&LoaderConfig::loader, &LoaderOptions::skip_bad_samples>},
    LoaderOption<uint32_t>{.keyword = "max_bad_samples",
                           .field = &At<&LoaderConfig::loader, &LoaderOptions::max_bad_samples>},
    // Indices, or records with an "index" (python/loader_keywords.cc).
    LoaderOption<std::vector<uint64_t>>{
        .keyword = "quarantine",
        .field = &At<&LoaderConfig::loader, &LoaderOptions::quarantine>,
        .python_object = true},
    LoaderOption<std::optional<std::vector<double>>>{
        .keyword = "weights",
        .field = &At<&LoaderConfig::weights>,
        .flag = "--weights",
        .help = "With several volumes: each one's share of an epoch, e.g. 0.7,0.3 (default equal)",
        .show_default = false},
    LoaderOption<uint64_t>{.keyword = "epoch_samples",
                           .field = &At<&LoaderConfig::epoch_samples>,
                           .flag = "--epoch-samples",
                           .help = "With several volumes: samples per epoch (default: the most the "
                                   "weights allow before a volume runs out)",
                           .show_default = false},
    LoaderOption<bool>{
        .keyword = "cycle",
        .field = &At<&LoaderConfig::cycle>,
        .settings = {{{"--cycle", true,
                       "With several volumes: a volume smaller than its share starts over"}}}},
    // An MPI communicator or None (python/distributed.h): the job.
    LoaderOption<std::monostate>{.keyword = "comm", .python_object = true},
    LoaderOption<bool>{
        .keyword = "shard_local",
        .field = &At<&LoaderConfig::shard_local>,
        .settings = {{{"--shard-local", true,
                       "mpirun: node n reads only the targets t with t mod nodes = n (its "
                       "node-local\nshard); a sample on another node's target comes from that "
                       "node over MPI"}}}},
    LoaderOption<bool>{
        .keyword = "cluster_cache",
        .field = &At<&LoaderConfig::shard, &ShardLoaderOptions::cluster_cache>,
        .settings = {{{"--cluster-cache", true,
                       "mpirun: the nodes' caches (--cache-budget each) form one cache; a "
                       "sample\nanother node keeps comes from it over MPI, storage serves only "
                       "what no\nnode keeps (every rank must be able to read the volume)"}}}},
    LoaderOption<uint32_t>{.keyword = "window_batches",
                           .field = &At<&LoaderConfig::shard, &ShardLoaderOptions::window_batches>,
                           .flag = "--window",
                           .help = "mpirun --shard-local or --cluster-cache: batches per exchange"},
    LoaderOption<bool>{
        .keyword = "read_ahead",
        .field = &At<&LoaderConfig::shard, &ShardLoaderOptions::read_ahead>,
        .settings = {{{"--read-ahead", true,
                       "mpirun --shard-local or --cluster-cache: plan and read the next window "
                       "on a\nthread while this one is used"}}}},
    // {target: path} or the text every verb's --target-map takes
    // (python/loader_keywords.cc).
    LoaderOption<std::map<uint32_t, std::string>>{
        .keyword = "target_map",
        .field = &At<&LoaderConfig::open, &VolumeOpenOptions::target_map>,
        .python_object = true},
    LoaderOption<DirectorySharing>{
        .keyword = "directory",
        .field = &At<&LoaderConfig::open, &VolumeOpenOptions::directory_sharing>,
        .names = kDirectorySharingNames,
        .empty_keeps_default = true},
    LoaderOption<std::string>{.keyword = "node_name",
                              .field = &At<&LoaderConfig::open, &VolumeOpenOptions::node_name>},
    // The epochs the job will read; `dlfs bench` sets it from its --epochs.
    LoaderOption<uint32_t>{.keyword = "epochs",
                           .field = &At<&LoaderConfig::loader, &LoaderOptions::planned_epochs>},
};

// dlfs.Loader's last keyword (dlfs.ImageLoader takes one field, field=).
inline constexpr auto kLoaderFieldsOption = std::tuple{
    LoaderOption<std::vector<std::string>>{
        .keyword = "fields",
        .field = &At<&LoaderConfig::loader, &LoaderOptions::fields>,
        .flag = "--fields",
        .help = "Read these fields of each sample, e.g. jpg,cls (format v2; needed when\n"
                "samples have several fields): raw fields are handed out\n"
                "zero-copy, zstd ones are decompressed by the loader, so samples/s and the\n"
                "payload MB/s (decoded bytes) include decompression. With --decode: the\n"
                "image field only",
        .show_default = false,
        .none_keeps_default = true},
};

// The keywords of dlfs.Loader.
inline constexpr auto kLoaderKeywords = std::tuple_cat(kLoaderOptions, kLoaderFieldsOption);

// Flags of `dlfs bench` only.
inline constexpr auto kBenchLoaderFlags = std::tuple{
    LoaderOption<uint64_t>{
        .field = &At<&LoaderConfig::loader, &LoaderOptions::plan, &ReadPlanOptions::coalesce_gap>,
        .flag = "--coalesce-gap",
        .help = "Merge reads whose gap is at most this"},
    LoaderOption<bool>{
        .field = &At<&LoaderConfig::loader, &LoaderOptions::engine, &EngineOptions::sqpoll>,
        .settings = {{{"--sqpoll", true, "io_uring SQPOLL (a kernel thread polls; uses a core)"}}}},
    LoaderOption<uint32_t>{.field = &At<&LoaderConfig::loader, &LoaderOptions::engine,
                                        &EngineOptions::nbd, &NbdOptions::connections>,
                           .flag = "--nbd-connections",
                           .help = "Connections per NBD target and I/O thread (if the server "
                                   "allows multi-conn)"},
    LoaderOption<double>{.field = &At<&LoaderConfig::loader, &LoaderOptions::engine,
                                      &EngineOptions::nbd, &NbdOptions::timeout_seconds>,
                         .flag = "--nbd-timeout",
                         .help = "Seconds before an unanswered NBD read fails (its connection is "
                                 "reopened)"},
    LoaderOption<uint32_t>{.field = &At<&LoaderConfig::loader, &LoaderOptions::engine,
                                        &EngineOptions::nbd, &NbdOptions::reconnects>,
                           .flag = "--nbd-reconnects",
                           .help = "Attempts to reconnect a lost NBD connection before its reads "
                                   "fail"},
};

}  // namespace dlfs::options
