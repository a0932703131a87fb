// `dlfs epoch` and `dlfs bench` when launched by mpirun: rank and world come
// from MPI, the volume is opened collectively (one directory copy per node),
// and rank 0 reports for the whole job.
#include <fcntl.h>
#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/clock.h"
#include "dlfs/distributed.h"

namespace dlfs::cli {

namespace {

using json = nlohmann::json;

// Errors are collective (the same on every rank); rank 0 prints them.
int FailOnRank0(int rank, const Status& st) {
  if (rank == 0) std::fprintf(stderr, "dlfs: %s\n", st.message().c_str());
  return kExitError;
}

// Opens the volume for the job; with `shard_local`, each node opens only its
// own targets (and target 0).
Result<std::shared_ptr<Volume>> OpenForJob(const std::string& path, const std::string& target_map,
                                           bool private_open, bool shard_local,
                                           SharedOpenStats* stats) {
  VolumeOpenOptions o;
  if (!target_map.empty()) {
    DLFS_ASSIGN_OR_RETURN(o.target_map, ParseTargetMap(target_map));
  }
  if (shard_local) {
    DLFS_ASSIGN_OR_RETURN(NodeTopology topo, NodeTopology::Create(MPI_COMM_WORLD));
    o.open_only = ShardTargetsOfNode(topo.node_index(), topo.node_count());
  }
  if (!private_open) return OpenShared(MPI_COMM_WORLD, path, o, stats);
  const double start = Now();
  auto v = Volume::Open(path, o);
  stats->seconds = Now() - start;
  DLFS_RETURN_IF_ERROR(AgreeOnStatus(MPI_COMM_WORLD, v.ok() ? Status::Ok() : v.status()));
  stats->metadata_bytes_read = (*v)->info().directory_bytes;
  return v;
}

// This process's proportional set size (shared pages divided among the
// processes mapping them), from /proc/self/smaps_rollup; 0 if unavailable.
// Summed over ranks it is what the job's memory really costs.
uint64_t PssBytes() {
  std::FILE* f = std::fopen("/proc/self/smaps_rollup", "re");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "Pss: %lu kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb * 1024;
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
    SharedOpenStats stats;
    auto vol = OpenForJob(args.volume, args.target_map, false, false, &stats);
    if (!vol.ok()) return FailOnRank0(rank, vol.status());
    LoaderOptions o;
    o.shuffle = !args.no_shuffle;
    o.seed = args.seed;
    o.batch_size = args.batch;
    o.drop_last = args.drop_last;
    auto loader = CreateLoader(MPI_COMM_WORLD, *vol, o);
    if (!loader.ok()) return FailOnRank0(rank, loader.status());
    // Rank 0 prints "rank<TAB>index" lines, rank by rank, in reading order.
    const std::vector<uint64_t> mine = (*loader)->RankIndices(args.epoch);
    const int n = static_cast<int>(mine.size());
    std::vector<uint64_t> all(rank == 0 ? size_t(n) * world : 0);
    MPI_Gather(mine.data(), n, MPI_UINT64_T, all.data(), n, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      std::string out;
      for (int r = 0; r < world; ++r) {
        for (int i = 0; i < n; ++i) {
          out += std::to_string(r) + '\t' + std::to_string(all[size_t(r) * n + i]) + '\n';
        }
      }
      std::fwrite(out.data(), 1, out.size(), stdout);
    }
    return kExitOk;
  });
}

int RunBenchMpi(const BenchArgs& args) {
  return RunWithMpi([&](int rank, int world) {
    SharedOpenStats open;
    MPI_Barrier(MPI_COMM_WORLD);
    const uint64_t pss_before = PssBytes();
    auto vol = OpenForJob(args.volume, args.target_map, args.private_open, args.shard_local, &open);
    if (!vol.ok()) return FailOnRank0(rank, vol.status());
    MPI_Barrier(MPI_COMM_WORLD);  // every rank has touched the shared copy
    const double pss_open = static_cast<double>(PssBytes()) - static_cast<double>(pss_before);
    auto options = BenchLoaderOptions(args);
    if (!options.ok()) return FailOnRank0(rank, options.status());
    const LoaderOptions& o = *options;

    std::unique_ptr<Loader> loader;
    std::unique_ptr<ShardLoader> shard;
    if (args.shard_local) {
      ShardLoaderOptions so;
      so.loader = o;
      so.window_batches = args.window;
      so.read_ahead = args.read_ahead;
      auto s = ShardLoader::Create(MPI_COMM_WORLD, *vol, so);
      if (!s.ok()) return FailOnRank0(rank, s.status());
      shard = std::move(*s);
    } else {
      auto l = CreateLoader(MPI_COMM_WORLD, *vol, o);
      if (!l.ok()) return FailOnRank0(rank, l.status());
      loader = std::move(*l);
    }

    json epochs = json::array();
    double total_seconds = 0;
    uint64_t total_samples = 0;
    for (uint32_t e = 0; e < args.epochs; ++e) {
      if (args.drop_cache && rank == 0 && !DropPageCache()) {
        std::fprintf(stderr, "dlfs: warning: could not drop the page cache (needs root)\n");
      }
      MPI_Barrier(MPI_COMM_WORLD);
      const double cpu0 = CpuSeconds(), t0 = Now();
      uint64_t samples = 0, bytes = 0;
      Status failed;
      if (shard) shard->SetEpoch(e);
      if (loader) loader->SetEpoch(e);
      Batch batch;
      while (true) {
        // A failed batch is remembered, not returned: the shard loader's
        // exchanges are collective, so every rank reads to the epoch's end.
        auto more = shard ? shard->Next(&batch) : loader->Next(&batch);
        if (!more.ok()) {
          if (failed.ok()) failed = more.status();
          continue;
        }
        if (!*more) break;
        samples += batch.size();
        bytes += batch.payload_bytes();
      }
      const double secs = Now() - t0, cpu = CpuSeconds() - cpu0;
      const Status st = AgreeOnStatus(MPI_COMM_WORLD, failed);
      if (!st.ok()) return FailOnRank0(rank, st);
      double mine[4] = {static_cast<double>(samples), static_cast<double>(bytes), secs, cpu};
      double sum[4], max[4];
      MPI_Reduce(mine, sum, 4, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
      MPI_Reduce(mine, max, 4, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      if (rank == 0) {
        // The job's epoch lasts as long as its slowest rank.
        epochs.push_back({{"epoch", e},
                          {"samples", sum[0]},
                          {"seconds", max[2]},
                          {"samples_per_s", sum[0] / max[2]},
                          {"mb_per_s", sum[1] / max[2] / 1e6},
                          {"cpu_s_per_gb", sum[1] > 0 ? sum[3] / (sum[1] / 1e9) : 0.0}});
        if (!args.json) {
          std::printf("epoch %u: %.0f samples in %.2f s: %.0f samples/s, %.1f MB/s (%d ranks)\n", e,
                      sum[0], max[2], sum[0] / max[2], sum[1] / max[2] / 1e6, world);
        }
        total_seconds += max[2];
        total_samples += static_cast<uint64_t>(sum[0]);
      }
    }

    // Job-wide: open cost and what moved between nodes.
    ShardLoaderStats ss = shard ? shard->stats() : ShardLoaderStats{};
    double mine[8] = {open.seconds,
                      static_cast<double>(open.metadata_bytes_read),
                      static_cast<double>(open.window_bytes),
                      static_cast<double>(ss.bytes_received),
                      static_cast<double>(ss.remote_samples),
                      pss_open,
                      ss.io_seconds,
                      ss.exchange_seconds};
    double sum[8], max[8];
    MPI_Reduce(mine, sum, 8, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(mine, max, 8, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank != 0) return kExitOk;
    const std::string description =
        shard ? shard->engine_description() : loader->engine_description();
    json j = {{"volume", args.volume},
              {"ranks", world},
              {"mode", args.shard_local ? "shard-local" : "local"},
              {"open", args.private_open ? "per rank" : "collective"},
              {"engine", description},
              {"batch", args.batch},
              {"samples", total_samples},
              {"seconds", total_seconds},
              {"samples_per_s", total_seconds > 0 ? total_samples / total_seconds : 0.0},
              {"open_seconds_max", max[0]},
              {"metadata_bytes_read", sum[1]},
              {"directory_window_bytes", sum[2]},
              {"directory_bytes", (*vol)->info().directory_bytes},
              {"open_pss_bytes", sum[5]},
              {"mpi_bytes_received", sum[3]},
              {"remote_samples", sum[4]},
              {"shard_io_seconds_max", max[6]},
              {"shard_exchange_seconds_max", max[7]},
              {"epochs", epochs}};
    if (args.json) {
      std::cout << j.dump(2) << '\n';
      return kExitOk;
    }
    std::printf("job          %d ranks, %s reading, %s open\n", world,
                args.shard_local ? "shard-local" : "local",
                args.private_open ? "per-rank" : "collective");
    std::printf("engine       %s\n", description.c_str());
    std::printf("samples/s    %.0f (all ranks)\n", j["samples_per_s"].get<double>());
    std::printf("open         %.3f s (slowest rank); %.0f metadata bytes read from storage\n",
                max[0], sum[1]);
    std::printf(
        "memory       %.1f MB more proportional set size over all ranks after the open "
        "(directory %.1f MB)\n",
        sum[5] / 1e6, (*vol)->info().directory_bytes / 1e6);
    if (args.shard_local) {
      std::printf(
          "exchanged    %.0f samples, %.1f MB over MPI; slowest rank: %.2f s in "
          "exchanges, of which %.2f s reading\n",
          sum[4], sum[3] / 1e6, max[7], max[6]);
    }
    return kExitOk;
  });
}

}  // namespace dlfs::cli
