// Placement of the cluster cache (ShardLoaderOptions::cluster_cache): which
// node's cache keeps each sample of a job's volume. A pure function of the
// epoch's order, the node layout and the nodes' capacities, so every rank
// computes the same placement with no communication.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dlfs/directory.h"

namespace dlfs::cache_internal {

// Bytes a sample takes in a node cache (its stored length, aligned as
// NodeCache aligns it).
uint64_t CachedBytes(uint64_t length);

// Owner node of each sample of `dir` (size dir.size()), or -1 for a sample no
// node keeps (the budgets are full, or the epoch does not read it).
//
// `order` is the epoch's samples in the job's reading order: position p is
// read by rank p % rank_node.size() as its (p / ranks)-th sample (the
// Sampler's layout). `rank_node[r]` is rank r's node, `capacity[n]` node n's
// cache bytes.
//
// Balanced by bytes: node n owns at most its share of the samples' bytes
// (in proportion to its capacity) and never more than its capacity. Where
// that leaves room, a sample belongs to the node of the rank that reads it
// first in `order`, so the epoch that fills the caches reads most samples
// on their owner's node; earlier positions are placed first, so when the
// capacities hold only part of the volume the part kept is the one read
// first. Samples left over go to the node with the most room left under its
// share. O(samples x log nodes).
std::vector<int32_t> PlaceSamples(const SampleDirectory& dir, std::span<const uint64_t> order,
                                  std::span<const int> rank_node,
                                  std::span<const uint64_t> capacity);

}  // namespace dlfs::cache_internal
