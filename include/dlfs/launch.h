// How this process was started: which launcher, and the rank, world size
// and node-local layout its variables give.
//
//   dlfs::Result<dlfs::LaunchInfo> job = dlfs::DetectLaunch();
//   if (job.ok() && job->mpi_launch) { /* MPI_Init will reach the peers */ }
//   else if (job.ok()) { /* shard by job->rank of job->world_size */ }
//
// A loader that reads only RANK and WORLD_SIZE does not split the epoch at
// all under srun or mpirun: every rank reads every sample. This reads the
// variables of every launcher dlfs knows, in a fixed order, and skips those
// that are known to lie (research: ../shared/research/launchers.md):
//
//   1. torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (GROUP_RANK
//      is the node). Read first: torchrun inside an srun task also sees
//      Slurm's variables, which then describe the srun task, not the rank.
//   2. Open MPI's mpirun: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK,
//      _LOCAL_SIZE. Read before Slurm's: under mpirun inside an allocation
//      every rank sees SLURM_PROCID=0.
//   3. An srun step (SLURM_STEP_ID set; SLURM_PROCID is a rank only there):
//      SLURM_PROCID, SLURM_STEP_NUM_TASKS (SLURM_NTASKS is the allocation's
//      in a batch script), SLURM_LOCALID, and the node's task count from
//      SLURM_STEP_TASKS_PER_NODE ("2(x3),1") at SLURM_NODEID. MPI can start
//      only when srun was given a PMIx plugin (PMIX_RANK set: `srun
//      --mpi=pmix`); Debian's Open MPI has no PMI-2 and aborts otherwise.
//   4. MPICH's Hydra / Intel MPI: PMI_RANK, PMI_SIZE, MPI_LOCALRANKID,
//      MPI_LOCALNRANKS; MVAPICH: MV2_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK,
//      _LOCAL_SIZE.
//   5. RANK and WORLD_SIZE alone (a hand-made job), LOCAL_RANK and
//      LOCAL_WORLD_SIZE if set.
//   6. Otherwise: one process.
//
// A pure function of the variables (`getenv` is a parameter for tests).
// Thread safety: as getenv.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "dlfs/enum_names.h"
#include "dlfs/status.h"

namespace dlfs {

enum class Launcher : uint8_t {
  kNone,      // one process
  kTorchrun,  // torch.distributed.run
  kOpenMpi,   // Open MPI's mpirun / mpiexec
  kSlurm,     // srun
  kHydra,     // MPICH / Intel MPI (mpiexec.hydra)
  kMvapich,   // MVAPICH's launchers
  kEnv,       // RANK and WORLD_SIZE set by hand
};
inline constexpr EnumName<Launcher> kLauncherNames[] = {
    {Launcher::kNone, "none"},      {Launcher::kTorchrun, "torchrun"},
    {Launcher::kOpenMpi, "mpirun"}, {Launcher::kSlurm, "srun"},
    {Launcher::kHydra, "hydra"},    {Launcher::kMvapich, "mvapich"},
    {Launcher::kEnv, "environment"}};

struct LaunchInfo {
  Launcher launcher = Launcher::kNone;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // among the processes of this node
  int local_world_size = 1;  // processes of this node
  int node = -1;             // this node's index when the launcher says (-1: not said)
  // Started by a launcher that Open MPI's MPI_Init connects to its peers:
  // Open MPI's mpirun, or any launcher providing PMIx (srun --mpi=pmix).
  bool mpi_launch = false;
  // Variables seen but not used, and why, e.g. "SLURM_PROCID=0 ignored:
  // mpirun inside a Slurm allocation sets it alike on every rank".
  std::vector<std::string> notes;
};

// Reads the launcher's variables (see above). InvalidArgument naming the
// variable for a value that is not a whole number or does not fit the
// others (a rank not below the world size, a local size above it).
Result<LaunchInfo> DetectLaunch(const std::function<const char*(const char*)>& getenv =
                                    [](const char* name) {
                                      return static_cast<const char*>(std::getenv(name));
                                    });

// "rank 3 of 8 (local 1 of 4, node 1) from srun" or "one process".
std::string DescribeLaunch(const LaunchInfo& info);

}  // namespace dlfs
