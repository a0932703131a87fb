// Node topology for MPI jobs: which ranks share a node (and its memory).
//
// Ranks are grouped with MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), so ranks
// in one group can share an MPI-3 window (MPI_Win_allocate_shared). To test
// multi-node behaviour on one host, the environment variable
//
//   DLFS_RANKS_PER_NODE=K
//
// splits each host's group further into "fake nodes" of K consecutive local
// ranks. Fake nodes still share physical memory, but dlfs treats them as
// separate nodes: each has its own leader, its own shared windows and its own
// readers. Unset or 0 means one node per host.
//
// Only built when MPI is found (CMake target dlfs_mpi); the core library
// never depends on MPI.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "dlfs/status.h"

namespace dlfs {

// The communicators of one rank. Owns `node` and `leaders` (freed by the
// destructor); `world` is borrowed from the caller and must outlive this.
class NodeTopology {
 public:
  // Collective over `world`. The ranks first agree on DLFS_RANKS_PER_NODE
  // (AgreeOnValues): when it differs between ranks (e.g. mpirun's -x reached
  // only some of them), every rank gets InvalidArgument naming the ranks
  // and their values, never a hang. InvalidArgument on every rank for a
  // malformed value.
  static Result<NodeTopology> Create(MPI_Comm world);

  NodeTopology(NodeTopology&& other) noexcept;
  NodeTopology& operator=(NodeTopology&& other) noexcept;
  NodeTopology(const NodeTopology&) = delete;
  NodeTopology& operator=(const NodeTopology&) = delete;
  ~NodeTopology();

  MPI_Comm world() const { return world_; }
  // The ranks of this node, ordered by world rank.
  MPI_Comm node() const { return node_; }
  // Local rank 0 of every node, ordered by node index; MPI_COMM_NULL on
  // ranks that are not a node leader.
  MPI_Comm leaders() const { return leaders_; }

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int node_index() const { return node_index_; }  // 0 .. node_count()-1
  int node_count() const { return node_count_; }
  // World rank of this node's local rank 0.
  int node_first_rank() const { return node_first_rank_; }
  // True when every node's ranks are consecutive world ranks (mpirun's
  // default by-slot mapping; always true for fake nodes on one host).
  bool contiguous() const { return contiguous_; }
  // What tells this node's shared regions from other fake nodes' of the
  // same host (VolumeOpenOptions::node_name): "-node<index>" under
  // DLFS_RANKS_PER_NODE, "" with one node per host.
  std::string node_name() const;

 private:
  NodeTopology() = default;
  void Release();

  MPI_Comm world_ = MPI_COMM_NULL;
  MPI_Comm node_ = MPI_COMM_NULL;
  MPI_Comm leaders_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  int node_index_ = 0, node_count_ = 1, node_first_rank_ = 0;
  bool contiguous_ = true;
  bool fake_nodes_ = false;
};

// Completes `request` without spinning a core: MPI_Test in a loop that backs
// off from busy polling to short sleeps (up to 200 us). MPI's own blocking
// waits poll without sleeping; on a node with more ranks than cores the
// waiting ranks then take CPU from the ones doing I/O.
void WaitPolitely(MPI_Request* request, MPI_Status* status = MPI_STATUS_IGNORE);

// A barrier over `comm` that waits with WaitPolitely.
void BarrierPolitely(MPI_Comm comm);

// Collective over `comm`: the status of the lowest-ranked rank R whose
// `local` status is not OK (code and errno), its message prefixed with
// "rank R: " on every rank (R's included), or OK on every rank. Lets every rank return the same
// error without a hang.
Status AgreeOnStatus(MPI_Comm comm, const Status& local);

// One setting that every rank of a job must hold the same, for
// AgreeOnValues: its name and this rank's value, as text (both appear in the
// error message).
struct NamedValue {
  std::string name;
  std::string value;
};

// Collective over `comm`: OK when every rank passed the same values
// (compared as text, in order); otherwise InvalidArgument on every rank,
// with the same message, naming each value the ranks disagree on and which
// ranks hold which, e.g.
//   "ranks disagree on DLFS_RANKS_PER_NODE (2 on ranks 0-1; unset or 0 on ranks 2-3)"
// A rank that passes fewer values shows "(none)" for the missing ones. One
// small allreduce when the ranks agree. Call it before any collective whose
// shape depends on the values: ranks that disagree there would hang.
Status AgreeOnValues(MPI_Comm comm, const std::vector<NamedValue>& values);

// The whole MPI part of a program: MPI_Init_thread (MPI_THREAD_FUNNELED: only
// the thread that calls `body` calls MPI), body(rank, world) on
// MPI_COMM_WORLD, MPI_Finalize. Returns the largest value any rank's body
// returned, on every rank, so a job whose ranks exit with it fails as a
// whole when one rank failed. Whatever `body` creates that uses MPI must be
// destroyed before it returns.
int RunMpiProgram(const std::function<int(int rank, int world)>& body);

// "MPI_ERR_...: message" for an MPI return code, prefixed with `what`.
Status MpiError(int code, const std::string& what);

}  // namespace dlfs
