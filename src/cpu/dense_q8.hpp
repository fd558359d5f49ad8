// The CPU's Q8_0 forward for few rows of x (dense_forward_q8 up to
// kDenseF16DotRows rows: decoding through a loaded model's Q8_0 head; design
// in dense_q8.cpp).
//
// The SIMD level is an argument so that the tests run every level this CPU
// has (dot_level_runs, cpu/dense_f16.hpp); the op itself runs best_dot_level().
#pragma once

#include "bitrank/q8_0.hpp"
#include "bitrank/thread_pool.hpp"
#include "cpu/dense_f16.hpp"

namespace bitrank::cpu {

// out[t][o] = Σ_{c<32·kb} x[t][c]·w[o][c] (overwritten, or added to out with
// accumulate) for t < m, o < r: x [m][32·kb] f32, w [r][kb] Q8_0 blocks, out
// [m][r]. Rows of w are split over `pool`; each output is summed by one
// thread in one order (dense.hpp's numerics note), the same bits at every
// level. `level` must be supported.
void dense_q8_dot(const float* x, const q8_0* w, float* out, index_t m, index_t kb, index_t r, bool accumulate,
                  SimdLevel level, ThreadPool& pool);

}  // namespace bitrank::cpu
