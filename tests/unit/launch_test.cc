// DetectLaunch: the launchers' variables as each sets them, and the traps
// of ../shared/research/launchers.md (variables that lie under another
// launcher), from tables of variables.
#include "dlfs/launch.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "testutil.h"

namespace dlfs {
namespace launch_test {

using Env = std::map<std::string, std::string>;

Result<LaunchInfo> Detect(const Env& env) {
  return DetectLaunch([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(LaunchTest, NoLauncherIsOneProcess) {
  ASSERT_OK_AND_ASSIGN(LaunchInfo info, Detect({{"HOME", "/root"}}));
  EXPECT_EQ(info.launcher, Launcher::kNone);
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.world_size, 1);
  EXPECT_FALSE(info.mpi_launch);
  EXPECT_EQ(DescribeLaunch(info), "one process");
}

TEST(LaunchTest, Torchrun) {
  ASSERT_OK_AND_ASSIGN(LaunchInfo info, Detect({{"RANK", "5"},
                                                {"WORLD_SIZE", "8"},
                                                {"LOCAL_RANK", "1"},
                                                {"LOCAL_WORLD_SIZE", "4"},
                                                {"GROUP_RANK", "1"}}));
  EXPECT_EQ(info.launcher, Launcher::kTorchrun);
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 4);
  EXPECT_EQ(info.node, 1);
  EXPECT_FALSE(info.mpi_launch);
  EXPECT_EQ(DescribeLaunch(info), "rank 5 of 8 (local 1 of 4, node 1) from torchrun");
}

// torchrun started by one srun task per node: SLURM_PROCID counts the srun
// tasks (the nodes), RANK the training processes.
TEST(LaunchTest, TorchrunInsideSrunUsesTorchrunsRank) {
  ASSERT_OK_AND_ASSIGN(LaunchInfo info, Detect({{"RANK", "6"},
                                                {"WORLD_SIZE", "8"},
                                                {"LOCAL_RANK", "2"},
                                                {"LOCAL_WORLD_SIZE", "4"},
                                                {"SLURM_STEP_ID", "0"},
                                                {"SLURM_PROCID", "1"},
                                                {"SLURM_NTASKS", "2"}}));
  EXPECT_EQ(info.launcher, Launcher::kTorchrun);
  EXPECT_EQ(info.rank, 6);
  EXPECT_EQ(info.world_size, 8);
  ASSERT_EQ(info.notes.size(), 1u);
  EXPECT_NE(info.notes[0].find("SLURM_PROCID=1 ignored"), std::string::npos);
}

TEST(LaunchTest, OpenMpiMpirun) {
  ASSERT_OK_AND_ASSIGN(LaunchInfo info, Detect({{"OMPI_COMM_WORLD_RANK", "3"},
                                                {"OMPI_COMM_WORLD_SIZE", "4"},
                                                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                                {"PMIX_RANK", "3"}}));
  EXPECT_EQ(info.launcher, Launcher::kOpenMpi);
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 2);
  EXPECT_TRUE(info.mpi_launch);
}

// Under mpirun inside an sbatch allocation every rank sees SLURM_PROCID=0
// and the allocation's SLURM_NTASKS: the true rank is Open MPI's.
TEST(LaunchTest, MpirunInsideSlurmAllocationIgnoresSlurmsRank) {
  ASSERT_OK_AND_ASSIGN(LaunchInfo info, Detect({{"OMPI_COMM_WORLD_RANK", "2"},
                                                {"OMPI_COMM_WORLD_SIZE", "4"},
                                                {"SLURM_JOB_ID", "17"},
                                                {"SLURM_STEP_ID", "0"},
                                                {"SLURM_PROCID", "0"},
                                                {"SLURM_NTASKS", "4"}}));
  EXPECT_EQ(info.launcher, Launcher::kOpenMpi);
  EXPECT_EQ(info.rank, 2);
  ASSERT_EQ(info.notes.size(), 1u);
  EXPECT_NE(info.notes[0].find("SLURM_PROCID=0 ignored"), std::string::npos);
}

TEST(LaunchTest, SrunWithPmixCanStartMpi) {
  ASSERT_OK_AND_ASSIGN(LaunchInfo info, Detect({{"SLURM_STEP_ID", "0"},
                                                {"SLURM_PROCID", "3"},
                                                {"SLURM_STEP_NUM_TASKS", "4"},
                                                {"SLURM_NTASKS", "8"},
                                                {"SLURM_LOCALID", "1"},
                                                {"SLURM_NODEID", "1"},
                                                {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                                                {"PMIX_RANK", "3"}}));
  EXPECT_EQ(info.launcher, Launcher::kSlurm);
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world_size, 4);  // the step's tasks, not the allocation's
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 2);
  EXPECT_EQ(info.node, 1);
  EXPECT_TRUE(info.mpi_launch);
}

TEST(LaunchTest, SrunWithoutPmixShardsButSaysMpiCannotStart) {
  ASSERT_OK_AND_ASSIGN(LaunchInfo info, Detect({{"SLURM_STEP_ID", "4"},
                                                {"SLURM_PROCID", "2"},
                                                {"SLURM_NTASKS", "3"},
                                                {"SLURM_LOCALID", "0"},
                                                {"SLURM_NODEID", "2"},
                                                {"SLURM_TASKS_PER_NODE", "1(x3)"}}));
  EXPECT_EQ(info.launcher, Launcher::kSlurm);
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.world_size, 3);
  EXPECT_EQ(info.local_world_size, 1);
  EXPECT_FALSE(info.mpi_launch);
  ASSERT_FALSE(info.notes.empty());
  EXPECT_NE(info.notes.back().find("--mpi=pmix"), std::string::npos);
}

// Uneven allocations: the node's own count from the compressed list.
TEST(LaunchTest, SlurmUnevenTasksPerNode) {
  ASSERT_OK_AND_ASSIGN(LaunchInfo info, Detect({{"SLURM_STEP_ID", "0"},
                                                {"SLURM_PROCID", "6"},
                                                {"SLURM_STEP_NUM_TASKS", "7"},
                                                {"SLURM_LOCALID", "0"},
                                                {"SLURM_NODEID", "3"},
                                                {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"}}));
  EXPECT_EQ(info.local_world_size, 1);
  ASSERT_OK_AND_ASSIGN(LaunchInfo second, Detect({{"SLURM_STEP_ID", "0"},
                                                  {"SLURM_PROCID", "3"},
                                                  {"SLURM_STEP_NUM_TASKS", "7"},
                                                  {"SLURM_LOCALID", "1"},
                                                  {"SLURM_NODEID", "1"},
                                                  {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"}}));
  EXPECT_EQ(second.local_world_size, 2);
}

// In a batch script (no step) SLURM_PROCID is 0 and describes nothing.
TEST(LaunchTest, SlurmBatchScriptIsNotARank) {
  ASSERT_OK_AND_ASSIGN(
      LaunchInfo info,
      Detect({{"SLURM_JOB_ID", "9"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}}));
  EXPECT_EQ(info.launcher, Launcher::kNone);
  EXPECT_EQ(info.world_size, 1);
}

TEST(LaunchTest, HydraAndMvapich) {
  ASSERT_OK_AND_ASSIGN(LaunchInfo hydra, Detect({{"PMI_RANK", "1"},
                                                 {"PMI_SIZE", "2"},
                                                 {"MPI_LOCALRANKID", "1"},
                                                 {"MPI_LOCALNRANKS", "2"}}));
  EXPECT_EQ(hydra.launcher, Launcher::kHydra);
  EXPECT_EQ(hydra.rank, 1);
  EXPECT_EQ(hydra.local_world_size, 2);
  EXPECT_FALSE(hydra.mpi_launch);  // not Open MPI's runtime
  ASSERT_OK_AND_ASSIGN(LaunchInfo mv2, Detect({{"MV2_COMM_WORLD_RANK", "0"},
                                               {"MV2_COMM_WORLD_SIZE", "3"},
                                               {"MV2_COMM_WORLD_LOCAL_RANK", "0"},
                                               {"MV2_COMM_WORLD_LOCAL_SIZE", "3"}}));
  EXPECT_EQ(mv2.launcher, Launcher::kMvapich);
  EXPECT_EQ(mv2.world_size, 3);
}

TEST(LaunchTest, RankAndWorldSizeByHand) {
  ASSERT_OK_AND_ASSIGN(LaunchInfo info, Detect({{"RANK", "1"}, {"WORLD_SIZE", "2"}}));
  EXPECT_EQ(info.launcher, Launcher::kEnv);
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.world_size, 2);
  EXPECT_EQ(info.local_world_size, 2);  // assumed one node
  EXPECT_EQ(info.local_rank, 1);
}

TEST(LaunchTest, MalformedValuesNameTheVariable) {
  EXPECT_THAT(Detect({{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "4"}}),
              testing::StatusIs(StatusCode::kInvalidArgument, "OMPI_COMM_WORLD_RANK='x'"));
  EXPECT_THAT(
      Detect({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"}}),
      testing::StatusIs(StatusCode::kInvalidArgument, "RANK=4 is not below WORLD_SIZE=4"));
  EXPECT_THAT(
      Detect({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "3"}}),
      testing::StatusIs(StatusCode::kInvalidArgument, "LOCAL_WORLD_SIZE=3 does not fit"));
  EXPECT_THAT(Detect({{"RANK", "0"}, {"WORLD_SIZE", "0"}}),
              testing::StatusIs(StatusCode::kInvalidArgument, "WORLD_SIZE=0"));
}

}  // namespace launch_test
}  // namespace dlfs
