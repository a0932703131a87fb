// Shared pieces of the MPI test programs (run under mpirun by CTest): every
// rank runs every test, tests are collective, and checks use EXPECT so a
// failure on one rank never leaves the others waiting in a collective.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "dlfs/mpi.h"

namespace dlfs::testing {

inline int Rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int Ranks() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// "rank 3" or "ranks 0-1": how AgreeOnValues names a range of ranks.
inline std::string RankRange(int lo, int hi) {
  return lo == hi ? "rank " + std::to_string(lo)
                  : "ranks " + std::to_string(lo) + "-" + std::to_string(hi);
}

// Sets DLFS_RANKS_PER_NODE=`value` on this rank for the scope ("": unset),
// so tests can give ranks different layouts.
class RanksPerNode {
 public:
  explicit RanksPerNode(const std::string& value) {
    if (!value.empty()) {
      ::setenv("DLFS_RANKS_PER_NODE", value.c_str(), 1);
    } else {
      ::unsetenv("DLFS_RANKS_PER_NODE");
    }
  }
  ~RanksPerNode() { ::unsetenv("DLFS_RANKS_PER_NODE"); }
  RanksPerNode(const RanksPerNode&) = delete;
  RanksPerNode& operator=(const RanksPerNode&) = delete;
};

// A directory made by rank 0, known to every rank, removed at the end.
class SharedTempDir {
 public:
  SharedTempDir() {
    char path[256] = {};
    if (Rank() == 0) {
      std::string tmpl = "/tmp/dlfs-mpi-test-XXXXXX";
      std::snprintf(path, sizeof path, "%s", ::mkdtemp(tmpl.data()));
    }
    MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = path;
  }
  ~SharedTempDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (Rank() == 0) std::filesystem::remove_all(path_);
  }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

// Prints failures only; ranks other than 0 use it instead of the progress
// printer, so a failure anywhere is seen without N copies of the log.
class FailurePrinter : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed()) {
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", Rank(),
                   r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
    }
  }
};

// The main() of an MPI test program: the job fails if any rank failed.
inline int RunMpiTests(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RunMpiProgram([](int rank, int) {
    if (rank != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new FailurePrinter);
    }
    return RUN_ALL_TESTS();
  });
}

}  // namespace dlfs::testing
