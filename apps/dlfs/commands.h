// The `dlfs` verbs. Each returns the process exit code:
//   0 success, 1 the volume was read but is damaged (verify), 2 bad input or
//   an error (message on stderr naming the file and the problem).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include <vector>

#include "dlfs/bench.h"
#include "dlfs/decode_stage.h"
#include "dlfs/lmdbio_options.h"
#include "dlfs/loader.h"
#include "dlfs/mount.h"
#include "dlfs/pack.h"
#include "dlfs/shard_options.h"
#include "dlfs/volume.h"

namespace dlfs::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitDamaged = 1;
inline constexpr int kExitError = 2;

// The volume a verb opens, and where its targets are on this node.
struct VolumeArgs {
  std::string path;
  std::string target_map;  // --target-map "1=PATH,2=PATH"
};
// Opens args.path with args.target_map.
Result<std::shared_ptr<Volume>> OpenVolume(const VolumeArgs& args);

struct PackArgs {
  std::string source;
  std::string output;
  PackOptions options;
  std::string class_names;          // "a,b,c" or "@file" (one name per line)
  std::optional<uint32_t> targets;  // --targets N (else implied by --target-path)
  std::string fields;               // --fields jpg,cls
  std::string compress;             // --compress zstd[:LEVEL]
  bool dict = false;                // --dict: train a zstd dictionary
  bool quiet = false;
};
int RunPack(PackArgs args);

struct InfoArgs {
  VolumeArgs volume;
  bool json = false;
};
int RunInfo(const InfoArgs& args);

struct LsArgs {
  VolumeArgs volume;
  std::string dir;
  bool json = false;
  bool recursive = false;
};
int RunLs(const LsArgs& args);

struct CatArgs {
  VolumeArgs volume;
  std::string path;
  std::optional<uint64_t> index;
  std::optional<std::string> field;  // --field json: one field, decoded
  bool verify = true;
  std::string output;  // -o FILE instead of stdout
  // --decode: write what the decode pipeline makes of the sample (a PNG when
  // the output ends in .png, else its raw HWC bytes). Without --size the
  // whole image is decoded; with it, the transforms of sample `index` in
  // `epoch` (uint8 output; --dtype/--layout/--mean/--std do not apply).
  bool decode = false;
  bool transform = false;  // --size given
  uint64_t epoch = 0;
  ImageOptions image;
};
int RunCat(const CatArgs& args);
// The --decode part of RunCat (apps/dlfs/decode_commands.cc).
int RunCatDecoded(const CatArgs& args, const Volume& volume, uint64_t index);
// Writes `data` to `path` ("" or "-": stdout).
int WriteOutput(const std::string& path, std::span<const std::byte> data);

struct VerifyArgs {
  VolumeArgs volume;
  bool quiet = false;
  bool json = false;
};
int RunVerify(const VerifyArgs& args);

struct EpochArgs {
  VolumeArgs volume;
  SamplerOptions sampler;
  uint64_t epoch = 0;
};
int RunEpoch(const EpochArgs& args);

struct BenchArgs {
  VolumeArgs volume;
  // Further volumes: with them, a weighted mixture (dlfs/mixture.h).
  std::vector<std::string> mixture;
  std::vector<double> weights;
  uint64_t epoch_samples = 0;
  bool cycle = false;
  ShardLoaderOptions source;  // .loader: the loader; the rest: --shard-local exchanges
  BenchOptions bench;
  bool json = false;
  // Under mpirun only:
  bool shard_local = false;   // read own node's target, fetch the rest over MPI
  bool private_open = false;  // every rank reads the directory (no shared window)
  // --decode: batches go through a DecodeStage; images/s and CPU per image.
  bool decode = false;
  DecodeStageOptions decode_stage;
};
int RunBench(const BenchArgs& args);
// `dlfs bench --decode` (apps/dlfs/decode_commands.cc).
int RunBenchDecoded(const BenchArgs& args, std::shared_ptr<Volume> volume);

struct MountArgs {
  VolumeArgs volume;
  std::string mountpoint;
  MountOptions options;
};
int RunMount(const MountArgs& args);

// Launched by mpirun (OpenMPI, MPICH or PMIx variables are set)? Then
// `dlfs epoch` and `dlfs bench` run as one MPI job (apps/dlfs/mpi_commands.cc).
bool LaunchedByMpirun();
// Runs body(rank, world) between MPI_Init and MPI_Finalize (MPI builds
// only); every rank exits with the worst exit code of the job.
int RunWithMpi(const std::function<int(int rank, int world)>& body);
int RunEpochMpi(const EpochArgs& args);
int RunBenchMpi(const BenchArgs& args);

// Prints "dlfs: MESSAGE" to stderr; returns kExitError.
int Fail(const Status& st);
// "54.9 MB": decimal units, for reports.
std::string HumanBytes(double bytes);

struct LmdbInfoArgs {
  std::string db;
  bool json = false;
};
int RunLmdbInfo(const LmdbInfoArgs& args);

// `dlfs lmdb read`: the LMDBIO reader under mpirun (apps/dlfs/lmdb_read.cc;
// only in builds with MPI).
struct LmdbReadArgs {
  std::string db;
  LmdbReadOptions options;
  bool drop_cache = false;
  bool json = false;
};
int RunLmdbRead(const LmdbReadArgs& args);

}  // namespace dlfs::cli
