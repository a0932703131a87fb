// `dlfs epoch` and `dlfs bench` when launched by mpirun: rank and world come
// from MPI, the volume is opened collectively (one directory copy per node),
// and rank 0 reports for the whole job. The measuring is done by
// RunBenchJob (dlfs/distributed.h); this file formats.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "dlfs/distributed.h"

namespace dlfs::cli {

namespace {

using json = nlohmann::json;

// Errors are collective (the same on every rank); rank 0 prints them.
int FailOnRank0(int rank, const Status& st) {
  if (rank == 0) std::fprintf(stderr, "dlfs: %s\n", st.message().c_str());
  return kExitError;
}

}  // namespace

int RunWithMpi(const std::function<int(int rank, int world)>& body) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int rc = body(rank, world);
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}

bool LaunchedByMpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

int RunEpochMpi(const EpochArgs& args) {
  return RunWithMpi([&](int rank, int world) {
    // Every rank parses the same text: failures are alike without talking.
    auto map = ParseTargetMap(args.volume.target_map);
    if (!map.ok()) return FailOnRank0(rank, map.status());
    VolumeOpenOptions open;
    open.target_map = std::move(*map);
    auto vol = OpenShared(MPI_COMM_WORLD, args.volume.path, open);
    if (!vol.ok()) return FailOnRank0(rank, vol.status());
    LoaderOptions o;
    o.sampler = args.sampler;  // rank and world come from the communicator
    auto loader = CreateLoader(MPI_COMM_WORLD, *vol, o);
    if (!loader.ok()) return FailOnRank0(rank, loader.status());
    // Rank 0 prints "rank<TAB>index" lines, rank by rank, in reading order.
    const std::vector<uint64_t> all = GatherRankIndices(MPI_COMM_WORLD, **loader, args.epoch);
    if (rank == 0) {
      const size_t n = all.size() / world;
      std::string out;
      for (int r = 0; r < world; ++r) {
        for (size_t i = 0; i < n; ++i) {
          out += std::to_string(r) + '\t' + std::to_string(all[r * n + i]) + '\n';
        }
      }
      std::fwrite(out.data(), 1, out.size(), stdout);
    }
    return kExitOk;
  });
}

int RunBenchMpi(const BenchArgs& args) {
  return RunWithMpi([&](int rank, int world) {
    auto map = ParseTargetMap(args.volume.target_map);
    if (!map.ok()) return FailOnRank0(rank, map.status());
    BenchJobOptions job;
    job.open.target_map = std::move(*map);
    job.private_open = args.private_open;
    job.shard_local = args.shard_local;
    job.source = args.source;
    job.bench = args.bench;
    if (!args.json && rank == 0) {
      job.bench.on_epoch = [world](const EpochReport& e) {
        std::printf("epoch %llu: %llu samples in %.2f s: %.0f samples/s, %.1f MB/s (%d ranks)\n",
                    static_cast<unsigned long long>(e.epoch),
                    static_cast<unsigned long long>(e.samples), e.seconds, e.samples_per_s(),
                    e.mb_per_s(), world);
      };
    }
    auto report = RunBenchJob(MPI_COMM_WORLD, args.volume.path, job);
    if (!report.ok()) return FailOnRank0(rank, report.status());
    if (rank != 0) return kExitOk;
    const BenchJobReport& r = *report;
    if (args.json) {
      json epochs = json::array();
      for (const EpochReport& e : r.bench.epochs) {
        epochs.push_back({{"epoch", e.epoch},
                          {"samples", e.samples},
                          {"seconds", e.seconds},
                          {"samples_per_s", e.samples_per_s()},
                          {"mb_per_s", e.mb_per_s()},
                          {"cpu_s_per_gb", e.cpu_s_per_gb()}});
      }
      json j = {{"volume", args.volume.path},
                {"ranks", r.ranks},
                {"mode", args.shard_local ? "shard-local" : "local"},
                {"open", args.private_open ? "per rank" : "collective"},
                {"engine", r.bench.source},
                {"batch", args.source.loader.sampler.batch_size},
                {"samples", r.bench.total.samples},
                {"seconds", r.bench.total.seconds},
                {"samples_per_s", r.bench.total.samples_per_s()},
                {"open_seconds_max", r.open_seconds_max},
                {"metadata_bytes_read", r.metadata_bytes_read},
                {"directory_window_bytes", r.directory_window_bytes},
                {"directory_bytes", r.directory_bytes},
                {"open_pss_bytes", r.open_pss_bytes},
                {"mpi_bytes_received", r.shard.bytes_received},
                {"remote_samples", r.shard.remote_samples},
                {"shard_io_seconds_max", r.shard_io_seconds_max},
                {"shard_exchange_seconds_max", r.shard_exchange_seconds_max},
                {"epochs", epochs}};
      std::cout << j.dump(2) << '\n';
      return kExitOk;
    }
    // Direct: every rank reads any target itself, from local devices or
    // from storage servers (NBD URIs: the disaggregated mode).
    std::printf("job          %d ranks, %s reading, %s open\n", r.ranks,
                args.shard_local ? "shard-local" : "direct (every rank reads every target)",
                args.private_open ? "per-rank" : "collective");
    std::printf("engine       %s\n", r.bench.source.c_str());
    std::printf("samples/s    %.0f (all ranks)\n", r.bench.total.samples_per_s());
    std::printf("open         %.3f s (slowest rank); %llu metadata bytes read from storage\n",
                r.open_seconds_max, static_cast<unsigned long long>(r.metadata_bytes_read));
    std::printf(
        "memory       %.1f MB more proportional set size over all ranks after the open "
        "(directory %.1f MB)\n",
        r.open_pss_bytes / 1e6, r.directory_bytes / 1e6);
    if (args.shard_local) {
      std::printf(
          "exchanged    %llu samples, %.1f MB over MPI; slowest rank: %.2f s in "
          "exchanges, of which %.2f s reading\n",
          static_cast<unsigned long long>(r.shard.remote_samples), r.shard.bytes_received / 1e6,
          r.shard_exchange_seconds_max, r.shard_io_seconds_max);
    }
    return kExitOk;
  });
}

}  // namespace dlfs::cli
