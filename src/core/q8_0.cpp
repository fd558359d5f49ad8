// Q8_0 blocks held exactly (include/bitrank/q8_0.hpp).
#include "bitrank/q8_0.hpp"

#include <cmath>

namespace bitrank {
namespace {

// The block of v[0..31], when d = f16(max|v|/127) holds each value as d·q.
bool exact_block(const float* v, q8_0& b) {
  float amax = 0;
  for (std::int64_t i = 0; i < kQ8Block; ++i) amax = std::max(amax, std::fabs(v[i]));
  if (!std::isfinite(amax)) return false;
  b.d = to_f16(amax / 127.0f);
  const float d = to_f32(b.d);
  for (std::int64_t i = 0; i < kQ8Block; ++i) {
    if (d == 0) {
      if (v[i] != 0) return false;
      b.q[i] = 0;
      continue;
    }
    const float q = std::nearbyint(v[i] / d);
    if (!(std::fabs(q) <= 127.0f) || d * q != v[i]) return false;
    b.q[i] = static_cast<std::int8_t>(q);
  }
  return true;
}

}  // namespace

std::optional<std::vector<q8_0>> exact_q8_0(std::span<const float> values, std::int64_t cols) {
  if (cols <= 0 || cols % kQ8Block != 0 || values.size() % static_cast<std::size_t>(cols) != 0) return std::nullopt;
  std::vector<q8_0> blocks(values.size() / kQ8Block);
  for (std::size_t i = 0; i < blocks.size(); ++i)
    if (!exact_block(values.data() + i * kQ8Block, blocks[i])) return std::nullopt;
  return blocks;
}

void dequantize_q8_0(std::span<const q8_0> blocks, std::span<float> values) {
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const float d = to_f32(blocks[i].d);
    for (std::int64_t j = 0; j < kQ8Block; ++j) values[i * kQ8Block + j] = d * blocks[i].q[j];
  }
}

}  // namespace bitrank
