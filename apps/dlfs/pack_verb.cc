// `dlfs pack`: Pack (dlfs/pack.h) with a progress line and a summary.
#include <atomic>
#include <csignal>
#include <cstdio>

#include "cli.h"
#include "dlfs/image_prep.h"
#include "dlfs/pack.h"
#include "dlfs_tools/pack_option_table.h"

namespace dlfs::cli {
namespace {

struct PackArgs {
  std::string source;
  std::string output;
  options::PackConfig config;  // the flags of kPackOptions (dlfs_tools/pack_option_table.h)
  bool quiet = false;
};

std::atomic<bool> g_cancel{false};
extern "C" void OnSignal(int) { g_cancel.store(true); }

int RunPack(PackArgs& args) {
  auto resolved = options::ResolvePack(std::move(args.config));
  if (!resolved.ok()) return Fail(resolved.status().Reworded(options::kPackFlagWords));
  PackOptions& options = *resolved;
  const VolumeBuilder::Options& volume = options.volume;
  options.cancel = &g_cancel;
  const ProgressLine progress(args.quiet);
  options.on_progress = progress.Callback(FormatPackProgress);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  auto stats = Pack(args.source, args.output, options);
  progress.Clear();
  if (!stats.ok()) return Fail(stats.status().Reworded(options::kPackFlagWords));
  for (const std::string& r : stats->removed_temporaries) {
    std::fprintf(stderr, "dlfs: removed stale temporary file %s\n", r.c_str());
  }
  const std::string report = FormatPackReport(*stats, args.source, args.output, volume);
  std::fputs(Reworded(report, options::kPackFlagWords).c_str(), stdout);
  return kExitOk;
}

}  // namespace

void AddPack(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<PackArgs>();
  auto* p = app.add_subcommand(
      "pack",
      "Pack a data set (ImageFolder tree, IDX files, tar shards, LMDB database) into a volume,\n"
      "or a token corpus (Megatron-LM indexed dataset, .npy or flat token files) into a token\n"
      "volume");
  p->add_option("source", args->source,
                "Data set to pack: a directory, a tar shard, an LMDB (its directory or\n"
                "data.mdb), a Megatron-LM dataset (its prefix dir/name of name.bin and\n"
                "name.idx, or either file), or a file of token ids (.npy, or flat binary with\n"
                "--from tokens --token-dtype)")
      ->required();
  p->add_option("-o,--output", args->output, "Volume file to create")->required();
  AddOptions(p, options::kPackOptions, &args->config);
  p->get_option("--token-dtype")->check(CLI::IsMember({"uint16", "uint32"}));
  // One path per --target-path (a path may hold a comma).
  p->get_option("--target-path")
      ->delimiter('\0')
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  p->add_flag("-q,--quiet", args->quiet, "No progress output");
  p->callback([args, exit_code] { *exit_code = RunPack(*args); });
}

}  // namespace dlfs::cli
