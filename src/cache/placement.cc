#include "cache/placement.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dlfs::cache_internal {

uint64_t CachedBytes(uint64_t length) { return (length + 63) / 64 * 64; }  // node_cache.cc's kAlign

Placement::Placement(uint64_t positions, std::span<const int> rank_node,
                     std::span<const uint64_t> capacity, double mean, double stddev)
    : n_(positions), ranks_(rank_node.size()), rank_node_(rank_node.begin(), rank_node.end()) {
  const size_t nodes = capacity.size();
  if (nodes == 0 || ranks_ == 0 || n_ == 0) {
    n_ = 0;
    return;
  }
  std::vector<uint64_t> node_ranks(nodes, 0);
  local_.assign(ranks_, 0);
  for (uint64_t r = 0; r < ranks_; ++r) {
    const int k = rank_node_[r];
    if (k >= 0 && static_cast<size_t>(k) < nodes) local_[r] = node_ranks[k]++;
  }
  long double sum_capacity = 0;
  for (uint64_t c : capacity) sum_capacity += static_cast<long double>(c);
  mean = std::max(mean, 1.0);

  // Shares: the capacity's part of the positions (one more, so that
  // rounding never leaves a sample without a home), and what the capacity
  // holds with near certainty.
  rows_.assign(nodes, 0);
  std::vector<uint64_t> share(nodes, 0);
  for (size_t k = 0; k < nodes; ++k) {
    if (sum_capacity == 0 || node_ranks[k] == 0) continue;
    const double c = static_cast<double>(capacity[k]);
    const double root = (-4 * stddev + std::sqrt(16 * stddev * stddev + 4 * mean * c)) / (2 * mean);
    const double fits = std::max(0.0, std::floor(root * root));
    const long double part = static_cast<long double>(n_) * capacity[k] / sum_capacity;
    share[k] = std::min<uint64_t>(static_cast<uint64_t>(std::min<double>(fits, 1e19)),
                                  static_cast<uint64_t>(part) + 1);
    rows_[k] = share[k] / node_ranks[k];
  }
  // What each node keeps of its own ranks' positions: rank r has a
  // position in rows 0 .. count_r - 1.
  kept_.assign(nodes, 0);
  for (uint64_t r = 0; r < ranks_; ++r) {
    const int k = rank_node_[r];
    if (k < 0 || static_cast<size_t>(k) >= nodes) continue;
    const uint64_t count = r < n_ ? (n_ - r - 1) / ranks_ + 1 : 0;
    kept_[k] += std::min(rows_[k], count);
  }
  // Leftovers of a row: the ranks of the nodes whose rows are used up,
  // nodes in order of rows kept (then index): those of any row are the
  // first of that order, so a node's place among them is fixed.
  by_rows_.resize(nodes);
  std::iota(by_rows_.begin(), by_rows_.end(), uint64_t{0});
  std::stable_sort(by_rows_.begin(), by_rows_.end(),
                   [&](uint64_t a, uint64_t b) { return rows_[a] < rows_[b]; });
  before_.assign(nodes, 0);
  ranks_prefix_.assign(nodes + 1, 0);
  weighted_prefix_.assign(nodes + 1, 0);
  for (size_t i = 0; i < nodes; ++i) {
    const uint64_t k = by_rows_[i];
    before_[k] = ranks_prefix_[i];
    ranks_prefix_[i + 1] = ranks_prefix_[i] + node_ranks[k];
    weighted_prefix_[i + 1] = weighted_prefix_[i] + node_ranks[k] * rows_[k];
  }
  spare_end_.assign(nodes, 0);
  uint64_t room = 0;
  for (size_t k = 0; k < nodes; ++k) {
    room += share[k] - kept_[k];
    spare_end_[k] = room;
  }
}

int Placement::Owner(uint64_t position) const {
  if (position >= n_) return -1;
  const uint64_t row = position / ranks_, r = position % ranks_;
  const int k = rank_node_[r];
  if (k < 0 || static_cast<size_t>(k) >= rows_.size()) return -1;
  if (row < rows_[k]) return k;
  if (spare_end_.back() == 0) return -1;
  // Its place among the leftovers: those of the rows before (nodes with
  // rows_ < row left ranks x (row - rows_) each), then its node's and rank's.
  const size_t below = static_cast<size_t>(
      std::lower_bound(by_rows_.begin(), by_rows_.end(), row,
                       [&](uint64_t node, uint64_t value) { return rows_[node] < value; }) -
      by_rows_.begin());
  const uint64_t slot =
      row * ranks_prefix_[below] - weighted_prefix_[below] + before_[k] + local_[r];
  const auto it = std::upper_bound(spare_end_.begin(), spare_end_.end(), slot);
  if (it == spare_end_.end()) return -1;
  return static_cast<int>(it - spare_end_.begin());
}

}  // namespace dlfs::cache_internal
