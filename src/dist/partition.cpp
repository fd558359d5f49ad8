// partition_blocks: binary search on the largest range cost. A bound is
// reachable iff greedy ranges (each as long as the bound allows) need no
// more than `ranks` of them; the least such bound is the optimum. The final
// split is greedy too, but leaves at least one block to each later rank:
// splitting a range never raises the largest cost, so the bound still holds.
#include "bitrank/dist/partition.hpp"

#include <algorithm>
#include <limits>

#include "bitrank/error.hpp"

namespace bitrank::dist {
namespace {

// Greedy ranges under `bound`, each leaving at least `reserve(r)` blocks
// after rank r's range; returns the ends, or fewer than n blocks covered
// when the bound is too small.
template <class Reserve>
std::vector<index_t> greedy_ends(std::span<const std::int64_t> cost, int ranks, std::int64_t bound,
                                 Reserve reserve) {
  const auto n = static_cast<index_t>(cost.size());
  std::vector<index_t> ends;
  index_t b = 0;
  for (int r = 0; r < ranks; ++r) {
    std::int64_t sum = 0;
    while (b < n && n - b > reserve(r) && sum + cost[static_cast<std::size_t>(b)] <= bound)
      sum += cost[static_cast<std::size_t>(b++)];
    ends.push_back(b);
  }
  return ends;
}

bool reachable(std::span<const std::int64_t> cost, int ranks, std::int64_t bound) {
  const auto ends = greedy_ends(cost, ranks, bound, [](int) { return index_t{0}; });
  return ends.back() == static_cast<index_t>(cost.size());
}

}  // namespace

std::vector<std::pair<index_t, index_t>> partition_blocks(std::span<const std::int64_t> block_cost, int ranks) {
  if (ranks < 1) fail("partition_blocks: need at least 1 rank, got {}", ranks);
  std::int64_t lo = 0, hi = 0;  // the optimum lies in [largest cost, total]
  for (std::size_t i = 0; i < block_cost.size(); ++i) {
    const std::int64_t c = block_cost[i];
    if (c < 0) fail("partition_blocks: block {} has negative cost {}", i, c);
    if (hi > std::numeric_limits<std::int64_t>::max() - c)
      fail("partition_blocks: the total cost of {} blocks exceeds int64", block_cost.size());
    hi += c;
    lo = std::max(lo, c);
  }
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (reachable(block_cost, ranks, mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  const auto n = static_cast<index_t>(block_cost.size());
  // One block for each later rank while blocks last; the last ranks go empty.
  const index_t filled = std::min<index_t>(ranks, n);
  const auto ends = greedy_ends(block_cost, ranks, lo,
                                [&](int r) { return std::max<index_t>(0, filled - 1 - r); });
  BR_ASSERT(ends.back() == n, "partition_blocks: bound {} left blocks uncovered", lo);
  std::vector<std::pair<index_t, index_t>> ranges;
  index_t begin = 0;
  for (const index_t end : ends) {
    ranges.emplace_back(begin, end);
    begin = end;
  }
  return ranges;
}

}  // namespace bitrank::dist
