// Q8_0 blocks held exactly (bitrank/q8_0.hpp): ggml's quantisation of
// random rows dequantised to f32 comes back to the same blocks; a value that
// no Q8_0 block holds, a ragged row or a non-finite value gives none.
#include "bitrank/q8_0.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "bitrank/rng.hpp"
#include "support/ggml_q8_0.hpp"

namespace bitrank {
namespace {

using test::ggml_q8_0;

TEST(Q8_0, GgmlBlocksComeBackExactly) {
  const std::int64_t rows = 64, cols = 96;
  std::vector<float> v = rnd(static_cast<std::size_t>(rows * cols), 5, 0.02f);
  for (std::int64_t i = 0; i < kQ8Block; ++i) v[static_cast<std::size_t>(i)] = 0.0f;  // an all-zero block: d = 0
  v[40] *= 3000.0f;                                                                     // an outlier in block 1
  const std::vector<q8_0> blocks = ggml_q8_0(v);
  std::vector<float> values(v.size());
  dequantize_q8_0(blocks, values);
  const auto back = exact_q8_0(values, cols);
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->size(), blocks.size());
  EXPECT_EQ(0, std::memcmp(back->data(), blocks.data(), blocks.size() * sizeof(q8_0)));
  std::vector<float> again(values.size());
  dequantize_q8_0(*back, again);
  EXPECT_EQ(0, std::memcmp(again.data(), values.data(), values.size() * sizeof(float)));
}

TEST(Q8_0, ValuesNoBlockHoldsGiveNone) {
  const std::int64_t cols = 64;
  std::vector<float> values(static_cast<std::size_t>(2 * cols));
  dequantize_q8_0(ggml_q8_0(rnd(values.size(), 6, 1.0f)), values);
  ASSERT_TRUE(exact_q8_0(values, cols).has_value());
  auto off = values;
  off[77] = std::nextafter(off[77], 10.0f);  // one ulp away from d·q
  EXPECT_FALSE(exact_q8_0(off, cols).has_value());
  EXPECT_FALSE(exact_q8_0(rnd(values.size(), 7, 1.0f), cols).has_value());  // f32 values: no block holds them
  EXPECT_FALSE(exact_q8_0(values, 48).has_value());                       // rows not of whole blocks
  EXPECT_FALSE(exact_q8_0(std::span<const float>(values).first(100), cols).has_value());  // not whole rows
  off = values;
  off[3] = INFINITY;
  EXPECT_FALSE(exact_q8_0(off, cols).has_value());
}

}  // namespace
}  // namespace bitrank
