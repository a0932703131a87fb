// Placement of the cluster cache (ShardLoaderOptions::cluster_cache): which
// node's cache keeps each sample of a job's volume. A pure function of the
// layout (the positions of the first epoch's order, each rank's node, the
// nodes' capacities and the samples' sizes), so every rank computes the same
// placement with no communication; and a rule per position, O(log nodes),
// so nothing is stored per sample.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dlfs::cache_internal {

// Bytes a sample takes in a node cache (its stored length, aligned as
// NodeCache aligns it).
uint64_t CachedBytes(uint64_t length);

// The owner node of each position of an epoch's order, or -1 for none.
//
// Positions are read as the Sampler lays them out: position p by rank
// p % ranks, as its (p / ranks)-th sample; a row is the positions one step
// of every rank reads. Node k may keep share_k samples: its capacity's part
// of the positions (in proportion to the capacities), and no more than its
// capacity holds with near certainty (samples of `mean` bytes, spread
// `stddev`: the count c with c mean + 4 stddev sqrt(c) within it, the order
// being a random draw of the samples). A node keeps the positions its own
// ranks read, row by row, for as many rows as its share allows: the epoch
// that fills the caches reads those samples on their owner's node, and when
// the capacities hold only part of the volume the part kept is the part
// read first. The positions past those rows go, in reading order (by row;
// within a row by node, the nodes taken by how many rows they keep), to the
// nodes with room left under their shares, in node order; what exceeds every
// share is kept nowhere. Balanced by count, so by bytes within the spread of
// the samples' sizes.
class Placement {
 public:
  Placement() = default;  // nothing kept
  // `rank_node[r]`: rank r's node (below capacity.size()); `capacity[k]`:
  // node k's cache bytes; `mean`, `stddev`: of the samples' CachedBytes.
  Placement(uint64_t positions, std::span<const int> rank_node, std::span<const uint64_t> capacity,
            double mean, double stddev);

  // The node that keeps the sample at `position`, or -1.
  int Owner(uint64_t position) const;

 private:
  uint64_t n_ = 0;
  uint64_t ranks_ = 0;
  std::vector<int> rank_node_;
  std::vector<uint64_t> local_;   // rank r's index among its node's ranks
  std::vector<uint64_t> rows_;    // per node: rows whose own positions it keeps
  std::vector<uint64_t> kept_;    // per node: positions it keeps that way
  std::vector<uint64_t> before_;  // per node: ranks of the nodes before it in a row's leftovers
  // Leftover slots of rows below a row: nodes sorted by rows kept, with
  // prefix sums of ranks and ranks x rows.
  std::vector<uint64_t> by_rows_, ranks_prefix_, weighted_prefix_;
  std::vector<uint64_t> spare_end_;  // cumulative room left, in node order
};

}  // namespace dlfs::cache_internal
