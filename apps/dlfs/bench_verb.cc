// `dlfs bench`: RunEpochs (dlfs_tools/bench.h) over a loader, a mixture, a decode
// stage, or under mpirun RunBenchJob (dlfs/distributed.h); the reports are
// dlfs_tools/report.h's.
#include <cstdio>

#include "cli.h"
#include "dlfs/decode_stage.h"
#include "dlfs/memory.h"
#include "dlfs/shard_options.h"
#include "dlfs_tools/bench_volumes.h"
#include "dlfs_tools/decode_option_table.h"
#include "dlfs_tools/loader_option_table.h"
#ifdef DLFS_HAVE_MPI
#include "dlfs_tools/mpi_report.h"
#endif

namespace dlfs::cli {

namespace {

struct BenchArgs {
  VolumeArgs volume;
  // Further volumes: with them, a weighted mixture (dlfs/mixture.h).
  std::vector<std::string> mixture;
  options::LoaderConfig loader;  // the loader's flags (loader/loader_option_table.h)
  VolumeBenchOptions run;        // one process (its loader and mixture options are set when run)
  BenchJobOptions job;           // mpirun (its loader and bench are run's)
  bool json = false;
  bool decode = false;  // batches go through a DecodeStage
  DecodeStageOptions decode_stage;
};

// BenchVolumes names its options; say which flags set them.
constexpr Rewording kBenchFlags[] = {
    {"weights, epoch_samples and cycle", "--weights, --epoch-samples and --cycle"},
    {"decode reads one volume, not a mixture", "bench --decode reads one volume"}};

int RunBenchMpi(BenchArgs& args) {
#ifdef DLFS_HAVE_MPI
  return RunWithMpi([&](int rank, int world) {
    BenchJobOptions& job = args.job;
    job.open = args.volume.open;
    job.source.loader = args.run.loader;
    job.bench = args.run.bench;
    if (!args.json && rank == 0) {
      job.bench.on_epoch = [world](const EpochReport& e) { Print(FormatJobEpochLine(e, world)); };
    }
    auto report = RunBenchJob(MPI_COMM_WORLD, args.volume.path, job);
    if (!report.ok()) return FailOnRank0(rank, report.status());
    if (rank == 0) {
      const BenchJobSetup setup = {args.volume.path, job.source.loader.sampler.batch_size,
                                   job.shard_local, job.private_open, job.source.cluster_cache};
      Print(FormatBenchJobReport(*report, setup, FormatOf(args.json)));
    }
    return kExitOk;
  });
#else
  (void)args;
  return kExitError;
#endif
}

int RunBench(BenchArgs& args) {
  options::LoaderConfig& loader = args.loader;
  loader.Finish();
  // The epochs to be read decide whether the node cache's fill pays.
  if (loader.loader.planned_epochs == 0) loader.loader.planned_epochs = args.run.bench.epochs;
  args.run.loader = loader.loader;
  args.run.weights = loader.weights.value_or(std::vector<double>{});
  args.run.epoch_samples = loader.epoch_samples;
  args.run.cycle = loader.cycle;
  args.job.shard_local = loader.shard_local;
  args.job.source = loader.shard;
  if (LaunchedByMpirun()) {
    if (args.decode || !args.mixture.empty()) {
      return Fail(Status::NotSupported(
          std::string(args.decode ? "bench --decode" : "a mixture of several volumes") +
          " does not run under mpirun yet; run it without mpirun (one process)"));
    }
    return RunBenchMpi(args);
  }
  if (args.job.shard_local || args.job.private_open || args.job.source.cluster_cache) {
    return Fail(
        Status::InvalidArgument("--shard-local, --cluster-cache and --private-open need mpirun"));
  }
  VolumeBenchOptions& o = args.run;
  o.open = args.volume.open;
  if (args.decode) o.decode = args.decode_stage;
  o.on_cache_note = [](const std::string& note) {
    std::fprintf(stderr, "dlfs: warning: %s\n", note.c_str());
  };
  if (!args.json) {
    o.bench.on_epoch = [decode = args.decode](const EpochReport& e) {
      Print(FormatEpochLine(e, decode));
    };
  }
  std::vector<std::string> paths = {args.volume.path};
  paths.insert(paths.end(), args.mixture.begin(), args.mixture.end());
  auto run = BenchVolumes(paths, o);
  if (!run.ok()) return Fail(run.status().Reworded(kBenchFlags));
  Print(FormatVolumeBenchReport(paths, o, *run, FormatOf(args.json)));
  return kExitOk;
}

}  // namespace

void AddBench(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<BenchArgs>();
  auto* b = app.add_subcommand(
      "bench",
      "Read full shuffled epochs through the batch loader and report throughput.\n"
      "Under mpirun: one job; the volume is opened collectively (one directory copy per\n"
      "node) and rank 0 reports samples/s of all ranks together.");
  AddVolumeArgs(b, &args->volume);
  b->add_option("more", args->mixture,
                "Further volumes: read a weighted mixture of all of them (see --weights)");
  AddOptions(b, options::kLoaderKeywords, &args->loader);
  AddOptions(b, options::kBenchLoaderFlags, &args->loader);
  b->get_option("--cluster-cache")->excludes("--shard-local");
  AddDefaulted(b, "--epochs", args->run.bench.epochs, "Epochs to read");
  b->add_flag("--drop-cache", args->run.bench.drop_cache,
              "Drop the page cache before each epoch (root), else fadvise(DONTNEED) the volume");
  b->add_flag("--json", args->json, "One JSON object instead of text");
  b->add_flag("--private-open", args->job.private_open,
              "mpirun: every rank reads the directory itself (to compare with the collective "
              "open)");
  ImageOptions& image = args->decode_stage.image;
  auto* decode = b->add_flag("--decode", args->decode,
                             "Decode and transform every sample on --decode-threads (needs "
                             "--size); reports\nimages/s and CPU per image");
  const size_t decode_options = b->get_options().size();
  auto* size = b->add_option("--size", image.transform.size, "Output images are SIZE x SIZE");
  AddOptions(b, options::kDecodeOptions, &image);
  AddOptions(b, options::kDecodeStageFlags, &args->decode_stage);
  NeedAllSince(b, decode_options, decode);
  b->callback([b, args, size, exit_code] {
    if (args->decode && size->count() == 0) throw CLI::ValidationError("--decode needs --size N");
    if (b->count("--window") + b->count("--read-ahead") > 0 && !args->loader.sharded()) {
      throw CLI::ValidationError("--window and --read-ahead need --shard-local or --cluster-cache");
    }
    *exit_code = RunBench(*args);
  });
}

}  // namespace dlfs::cli
