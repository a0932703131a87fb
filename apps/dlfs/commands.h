// The `dlfs` verbs. Each returns the process exit code:
//   0 success, 1 the volume was read but is damaged (verify), 2 bad input or
//   an error (message on stderr naming the file and the problem).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <vector>
#include "dlfs/loader.h"

namespace dlfs::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitDamaged = 1;
inline constexpr int kExitError = 2;

struct PackArgs {
  std::string source;
  std::string output;
  std::string from = "auto";
  uint32_t align = 1;
  bool force = false;
  bool skip_unreadable = false;
  std::string class_names;  // "a,b,c" or "@file" (one name per line)
  bool datum_payload = false;
  bool quiet = false;
  std::optional<uint32_t> targets;        // --targets N
  std::vector<std::string> target_paths;  // --target-path P (repeatable)
};
int RunPack(const PackArgs& args);

struct InfoArgs {
  std::string volume;
  std::string target_map;  // --target-map "1=PATH,2=PATH"
  bool json = false;
};
int RunInfo(const InfoArgs& args);

struct LsArgs {
  std::string volume;
  std::string target_map;  // --target-map "1=PATH,2=PATH"
  std::string dir;
  bool json = false;
  bool recursive = false;
};
int RunLs(const LsArgs& args);

struct CatArgs {
  std::string volume;
  std::string target_map;  // --target-map "1=PATH,2=PATH"
  std::string path;
  std::optional<uint64_t> index;
  bool no_verify = false;
};
int RunCat(const CatArgs& args);

struct VerifyArgs {
  std::string volume;
  std::string target_map;  // --target-map "1=PATH,2=PATH"
  bool quiet = false;
};
int RunVerify(const VerifyArgs& args);

}  // namespace dlfs::cli

namespace dlfs::cli {

struct EpochArgs {
  std::string volume;
  std::string target_map;  // --target-map "1=PATH,2=PATH"
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint32_t rank = 0;
  uint32_t world = 1;
  uint32_t batch = 1;
  bool drop_last = false;
  bool no_shuffle = false;
};
int RunEpoch(const EpochArgs& args);

struct BenchArgs {
  std::string volume;
  std::string target_map;  // --target-map "1=PATH,2=PATH"
  std::string engine = "auto";
  uint32_t queue_depth = 64;
  uint32_t batch = 256;
  uint32_t epochs = 1;
  uint32_t io_threads = 1;
  uint32_t prefetch = 4;
  uint64_t seed = 0;
  uint64_t coalesce_gap = 0;
  bool no_coalesce = false;
  bool no_verify = false;
  bool buffered = false;
  bool sqpoll = false;
  bool drop_cache = false;
  bool json = false;
  // Under mpirun only:
  bool shard_local = false;   // read own node's target, fetch the rest over MPI
  uint32_t window = 8;        // batches per shard exchange
  bool read_ahead = false;    // shard-local: read the next window on a thread
  bool private_open = false;  // every rank reads the directory (no shared window)
};
int RunBench(const BenchArgs& args);

// Shared by the commands (commands.cc):
// sync, then drop the whole page cache; false when not allowed (not root).
bool DropPageCache();
// The loader options `dlfs bench` asks for.
Result<LoaderOptions> BenchLoaderOptions(const BenchArgs& args);

// Launched by mpirun (OpenMPI, MPICH or PMIx variables are set)? Then
// `dlfs epoch` and `dlfs bench` run as one MPI job (apps/dlfs/mpi_commands.cc).
bool LaunchedByMpirun();
// Runs body(rank, world) between MPI_Init and MPI_Finalize (MPI builds
// only); every rank exits with the worst exit code of the job.
int RunWithMpi(const std::function<int(int rank, int world)>& body);
int RunEpochMpi(const EpochArgs& args);
int RunBenchMpi(const BenchArgs& args);

}  // namespace dlfs::cli

namespace dlfs::cli {

struct MountArgs {
  std::string volume;
  std::string target_map;  // --target-map "1=PATH,2=PATH"
  std::string mountpoint;
  bool foreground = false;
  bool debug = false;
  bool allow_other = false;
};
int RunMount(const MountArgs& args);

}  // namespace dlfs::cli

namespace dlfs::cli {

struct LmdbInfoArgs {
  std::string db;
  bool json = false;
};
int RunLmdbInfo(const LmdbInfoArgs& args);

// `dlfs lmdb read`: the LMDBIO reader under mpirun (apps/dlfs/lmdb_read.cc;
// only in builds with MPI).
struct LmdbReadArgs {
  std::string db;
  std::string mode = "lmm-dio-prov-coal-stag";
  uint32_t batch = 64;
  uint64_t iters = 100;
  uint32_t readers_per_node = 1;
  std::string engine = "pread";
  bool direct = false;
  bool no_prefetch = false;
  uint64_t coalesce_bytes = uint64_t{4} << 20;
  uint32_t max_coalesce_iters = 64;
  uint32_t stagger = 1;
  bool check = false;
  bool drop_cache = false;
  bool json = false;
};
int RunLmdbRead(const LmdbReadArgs& args);

}  // namespace dlfs::cli
