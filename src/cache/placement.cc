#include "cache/placement.h"

#include <algorithm>
#include <queue>
#include <utility>

namespace dlfs::cache_internal {

uint64_t CachedBytes(uint64_t length) { return (length + 63) / 64 * 64; }  // node_cache.cc's kAlign

std::vector<int32_t> PlaceSamples(const SampleDirectory& dir, std::span<const uint64_t> order,
                                  std::span<const int> rank_node,
                                  std::span<const uint64_t> capacity) {
  const uint64_t n = dir.size();
  std::vector<int32_t> owner(n, -1);
  const size_t nodes = capacity.size();
  if (nodes == 0 || rank_node.empty()) return owner;

  // The bytes to place: each sample of the order once.
  std::vector<bool> seen(n, false);
  uint64_t total = 0, largest = 0;
  for (uint64_t i : order) {
    if (i >= n || seen[i]) continue;
    seen[i] = true;
    const uint64_t b = CachedBytes(dir.sample(i).length);
    total += b;
    largest = std::max(largest, b);
  }
  long double sum_capacity = 0;
  for (uint64_t c : capacity) sum_capacity += static_cast<long double>(c);
  if (sum_capacity == 0) return owner;

  // A node's share: its part of the bytes by capacity, plus one sample so
  // rounding never leaves a sample without a home.
  std::vector<uint64_t> share(nodes), used(nodes, 0);
  for (size_t k = 0; k < nodes; ++k) {
    const long double part = static_cast<long double>(total) * capacity[k] / sum_capacity;
    share[k] = std::min<uint64_t>(capacity[k], static_cast<uint64_t>(part) + largest);
  }

  // The first reader's node, where it has room under its share.
  const size_t ranks = rank_node.size();
  std::vector<uint64_t> leftover;
  for (size_t p = 0; p < order.size(); ++p) {
    const uint64_t i = order[p];
    if (i >= n || owner[i] >= 0) continue;
    const int k = rank_node[p % ranks];
    const uint64_t b = CachedBytes(dir.sample(i).length);
    if (k >= 0 && static_cast<size_t>(k) < nodes && used[k] + b <= share[k]) {
      owner[i] = k;
      used[k] += b;
    } else {
      leftover.push_back(i);  // (twice if the order reads it twice: placed once below)
    }
  }

  // The rest, in reading order, to the node with the most room under its
  // share (ties: the lower node).
  using Room = std::pair<uint64_t, int>;  // room left, -node (so ties take the lower node)
  std::priority_queue<Room> rooms;
  for (size_t k = 0; k < nodes; ++k) rooms.push({share[k] - used[k], -static_cast<int>(k)});
  for (uint64_t i : leftover) {
    if (owner[i] >= 0) continue;
    const uint64_t b = CachedBytes(dir.sample(i).length);
    const auto [room, neg] = rooms.top();
    if (room < b) continue;  // fits nowhere: the node with most room has too little
    rooms.pop();
    owner[i] = -neg;
    rooms.push({room - b, neg});
  }
  return owner;
}

}  // namespace dlfs::cache_internal
