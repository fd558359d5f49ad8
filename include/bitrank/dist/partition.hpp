// Which blocks each rank compresses: the layer-wise objective treats the
// blocks one after another, so each rank takes a contiguous run of them and
// the job lasts as long as the most expensive run.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "bitrank/tensor.hpp"

namespace bitrank::dist {

// For each of `ranks` ranks a half-open range [begin, end) of blocks; the
// ranges cover every block once, in order (rank r's end is rank r+1's begin),
// and the largest range cost (the sum of its blocks' costs) is the least
// possible. While there are at least as many blocks as ranks every range
// holds a block; with more ranks than blocks the extra ranks, the last ones,
// get empty ranges [n, n). ranks < 1, a negative cost or a total past
// int64: Error.
std::vector<std::pair<index_t, index_t>> partition_blocks(std::span<const std::int64_t> block_cost, int ranks);

}  // namespace bitrank::dist
