// Q8_0: 8-bit blocks of 32 values with one f16 scale, ggml's block_q8_0
// (34 bytes: the scale d, then 32 int8 q; value i = d·q[i]). bitrank keeps a
// dense weight matrix in this form when, and only when, it holds the matrix
// exactly: a GGUF teacher's Q8_0 tensors (SmolLM2's tied token embedding and
// head) dequantised to f32 come back to their own blocks bit for bit, where
// f16 rounds them (the head's logits move by ~2e-4 relative) and takes twice
// the bytes (56.6 MB against 30.1 MB for SmolLM2's 49,152 × 576 table).
//
// Exactness: a block of f32 values v is a Q8_0 block when d = f16(max|v| /
// 127) gives every v[i] = d·q[i] exactly with q[i] an integer in
// [−127, 127]; an all-zero block is d = 0. That is the scale ggml's
// quantize_row_q8_0 stores (amax/127 rounded to f16, and |q| of the largest
// value 127), and d·q is exact in f32 (an 11-bit by 8-bit product), so its
// dequantised blocks always pass. Any other matrix fails the test somewhere
// and stays in its f32 or f16 form: bitrank never quantises to Q8_0.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "bitrank/dtype.hpp"

namespace bitrank {

inline constexpr std::int64_t kQ8Block = 32;

struct q8_0 {
  f16 d;
  std::int8_t q[kQ8Block];
};
static_assert(sizeof(q8_0) == 34, "q8_0 is ggml's 34-byte block");

// The blocks of `values` (rows of `cols` values, cols % 32 == 0), row by row,
// when they hold every value exactly (above); nullopt when any value is not so
// held, or cols is not a multiple of 32, or values is not whole rows.
std::optional<std::vector<q8_0>> exact_q8_0(std::span<const float> values, std::int64_t cols);

// values[i] = d·q of block i / 32, exactly.
void dequantize_q8_0(std::span<const q8_0> blocks, std::span<float> values);

}  // namespace bitrank
