// Links dlfs::mpi and asks for the node topology (run without mpirun: one
// rank). Prints "ok ...".
#include <cstdio>

#include "dlfs/mpi.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 1;
  {
    auto topology = dlfs::NodeTopology::Create(MPI_COMM_WORLD);
    if (topology.ok()) {
      std::printf("ok dlfs::mpi: rank %d of %d, %d node(s)\n", topology->rank(), topology->size(),
                  topology->node_count());
      rc = 0;
    } else {
      std::fprintf(stderr, "consumer_mpi: %s\n", topology.status().message().c_str());
    }
  }
  MPI_Finalize();
  return rc;
}
