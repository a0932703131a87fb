// `dlfs pack`: Pack (dlfs/pack.h) with a progress line and a summary.
#include <atomic>
#include <csignal>
#include <cstdio>

#include "cli.h"
#include "dlfs/image_prep.h"
#include "dlfs/pack.h"
#include "pack/pack_option_table.h"

namespace dlfs::cli {
namespace {

struct PackArgs {
  std::string source;
  std::string output;
  options::PackConfig config;  // the flags of kPackOptions (pack/pack_option_table.h)
  bool quiet = false;
};

std::atomic<bool> g_cancel{false};
extern "C" void OnSignal(int) { g_cancel.store(true); }

// Pack names the PackOptions field that would change an error or the
// report; say which flag sets it.
constexpr Rewording kPackFlags[] = {
    {"(set overwrite to", "(use --force to"},
    {"(set skip_unreadable to", "(use --skip-unreadable to"},
    {"the fields option applies", "--fields applies"},
    {"the all_files option applies", "--all-files applies"},
    {"the lmdb_payload_only option applies", "--datum-payload applies"},
    {"all_files packs", "--all-files packs"},
    {"the skip_hidden option applies", "--skip-hidden applies"},
    {"skip_hidden left out", "--skip-hidden left out"},
    {"skip_hidden leaves", "--skip-hidden leaves"},
    {"(target_paths)", "(--target-path)"},
    {"target_paths (or none)", "--target-path options (or none)"},
    {"a trained dictionary needs zstd compression", "--dict needs --compress zstd[:LEVEL]"},
    {"compression '", "--compress '"},
    {"align must", "--align must"},
    {": class_names gives", ": --class-names gives"},
    {"class_names renamed", "--class-names renamed"},
    {"needs the lmdb_payload_only option", "needs --datum-payload"},
    {"jpeg_probability must", "--jpeg-probability must"},
    {"smart_threshold must", "--smart-threshold must"},
    {"a token volume (token_width)", "a token volume"},
    {"the token_dtype option", "--token-dtype"},
    {"the lengths option", "--lengths"},
    {"the eod option", "--eod"}};

int RunPack(PackArgs& args) {
  PackOptions& options = args.config.pack;
  VolumeBuilder::Options& volume = options.volume;
  options.fields = ParseFieldNames(args.config.fields);
  auto compression = ParseCompression(args.config.compress, args.config.dict);
  if (!compression.ok()) return Fail(compression.status().Reworded(kPackFlags));
  volume.compress = std::move(*compression);
  options.cancel = &g_cancel;
  const ProgressLine progress(args.quiet);
  options.on_progress = progress.Callback(FormatPackProgress);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  auto stats = Pack(args.source, args.output, options);
  progress.Clear();
  if (!stats.ok()) return Fail(stats.status().Reworded(kPackFlags));
  for (const std::string& r : stats->removed_temporaries) {
    std::fprintf(stderr, "dlfs: removed stale temporary file %s\n", r.c_str());
  }
  const std::string report = FormatPackReport(*stats, args.source, args.output, volume);
  std::fputs(Reworded(report, kPackFlags).c_str(), stdout);
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
