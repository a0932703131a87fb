#include <time.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <utility>

#include "dlfs/mpi.h"

namespace dlfs {

Status MpiError(int code, const std::string& what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  return Status::IOError(what + ": MPI error " + std::to_string(code) +
                         (len > 0 ? " (" + std::string(text, len) + ")" : ""));
}

void WaitPolitely(MPI_Request* request, MPI_Status* status) {
  int done = 0;
  for (int spin = 0; spin < 200; ++spin) {
    MPI_Test(request, &done, status);
    if (done) return;
  }
  timespec pause{0, 5'000};
  while (true) {
    MPI_Test(request, &done, status);
    if (done) return;
    nanosleep(&pause, nullptr);
    pause.tv_nsec = std::min<long>(pause.tv_nsec * 2, 200'000);
  }
}

Status AgreeOnStatus(MPI_Comm comm, const Status& local) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const int mine = local.ok() ? INT_MAX : rank;
  int first = INT_MAX;
  MPI_Request request;
  MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm, &request);
  WaitPolitely(&request);
  if (first == INT_MAX) return Status::Ok();
  int header[2] = {static_cast<int>(local.code()), static_cast<int>(local.message().size())};
  MPI_Bcast(header, 2, MPI_INT, first, comm);
  std::string message = local.message();
  message.resize(static_cast<size_t>(header[1]));
  MPI_Bcast(message.data(), header[1], MPI_CHAR, first, comm);
  if (rank == first) return local;
  return Status(static_cast<StatusCode>(header[0]),
                "rank " + std::to_string(first) + ": " + message);
}

void BarrierPolitely(MPI_Comm comm) {
  MPI_Request request;
  MPI_Ibarrier(comm, &request);
  WaitPolitely(&request);
}

namespace {

// Ranks per fake node from DLFS_RANKS_PER_NODE; 0 means "one node per host".
Result<int> FakeNodeSize() {
  const char* env = std::getenv("DLFS_RANKS_PER_NODE");
  if (env == nullptr || *env == '\0') return 0;
  char* end = nullptr;
  const long k = std::strtol(env, &end, 10);
  if (*end != '\0' || k < 0 || k > (1 << 20)) {
    return Status::InvalidArgument(std::string("DLFS_RANKS_PER_NODE='") + env +
                                   "' is not a rank count (a whole number >= 0)");
  }
  return static_cast<int>(k);
}

}  // namespace

#define DLFS_MPI(call)                                           \
  do {                                                           \
    const int mpi_rc_ = (call);                                  \
    if (mpi_rc_ != MPI_SUCCESS) return MpiError(mpi_rc_, #call); \
  } while (0)

Result<NodeTopology> NodeTopology::Create(MPI_Comm world) {
  DLFS_ASSIGN_OR_RETURN(const int fake, FakeNodeSize());
  NodeTopology t;
  t.world_ = world;
  DLFS_MPI(MPI_Comm_rank(world, &t.rank_));
  DLFS_MPI(MPI_Comm_size(world, &t.size_));
  MPI_Comm host = MPI_COMM_NULL;
  DLFS_MPI(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, t.rank_, MPI_INFO_NULL, &host));
  if (fake > 0) {
    int host_rank = 0;
    MPI_Comm_rank(host, &host_rank);
    const int rc = MPI_Comm_split(host, host_rank / fake, host_rank, &t.node_);
    MPI_Comm_free(&host);
    if (rc != MPI_SUCCESS) return MpiError(rc, "splitting fake nodes");
  } else {
    t.node_ = host;
  }
  MPI_Comm_rank(t.node_, &t.local_rank_);
  MPI_Comm_size(t.node_, &t.local_size_);

  t.node_first_rank_ = t.rank_;
  DLFS_MPI(MPI_Bcast(&t.node_first_rank_, 1, MPI_INT, 0, t.node_));
  // Leaders are ordered by world rank, so node indices follow rank order.
  DLFS_MPI(MPI_Comm_split(world, t.local_rank_ == 0 ? 0 : MPI_UNDEFINED, t.rank_, &t.leaders_));
  int index_and_count[2] = {0, 1};
  if (t.local_rank_ == 0) {
    MPI_Comm_rank(t.leaders_, &index_and_count[0]);
    MPI_Comm_size(t.leaders_, &index_and_count[1]);
  }
  DLFS_MPI(MPI_Bcast(index_and_count, 2, MPI_INT, 0, t.node_));
  t.node_index_ = index_and_count[0];
  t.node_count_ = index_and_count[1];

  int mine = t.rank_ == t.node_first_rank_ + t.local_rank_ ? 1 : 0, all = 0;
  DLFS_MPI(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, world));
  t.contiguous_ = all != 0;
  return t;
}

#undef DLFS_MPI

NodeTopology::NodeTopology(NodeTopology&& other) noexcept { *this = std::move(other); }

NodeTopology& NodeTopology::operator=(NodeTopology&& other) noexcept {
  if (this != &other) {
    Release();
    world_ = other.world_;
    node_ = std::exchange(other.node_, MPI_COMM_NULL);
    leaders_ = std::exchange(other.leaders_, MPI_COMM_NULL);
    rank_ = other.rank_;
    size_ = other.size_;
    local_rank_ = other.local_rank_;
    local_size_ = other.local_size_;
    node_index_ = other.node_index_;
    node_count_ = other.node_count_;
    node_first_rank_ = other.node_first_rank_;
    contiguous_ = other.contiguous_;
  }
  return *this;
}

NodeTopology::~NodeTopology() { Release(); }

void NodeTopology::Release() {
  // Freeing after MPI_Finalize is an error; a topology outliving MPI just
  // leaks its communicators.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
  if (leaders_ != MPI_COMM_NULL) MPI_Comm_free(&leaders_);
}

}  // namespace dlfs
