// The CPU's f16 forward for few rows of x (dense_forward_f16 up to
// kDenseF16DotRows rows: decoding through a loaded model's f16 head; design
// in dense.cpp).
//
// The SIMD level is an argument so that the tests run every level this CPU
// has; the op itself runs best_simd_level().
#pragma once

#include "bitrank/dtype.hpp"
#include "bitrank/thread_pool.hpp"
#include "cpu/blr_infer.hpp"

namespace bitrank::cpu {

// Whether the dot kernels (this one and dense_q8_dot) run at `level` on this
// CPU (the AVX levels need F16C and FMA too), and the best level that does.
bool dot_level_runs(SimdLevel level);
SimdLevel best_dot_level();

// Rows of x up to which dense_forward_f16 (and dense_forward_q8) take this path.
inline constexpr index_t kDenseF16DotRows = 16;

// out[t][o] = Σ_{c<k} x[t][c]·w[o][c] (overwritten, or added to out with
// accumulate) for t < m, o < r: x [m][k] f32, w [r][k] f16, out [m][r].
// Rows of w are split over `pool`; each output is summed by one thread in
// an order fixed by k and the level (avx2 and avx512 give the same bits;
// scalar is the older 8-lane f32 sum without FMA). `level` must be supported.
void dense_f16_dot(const float* x, const f16* w, float* out, index_t m, index_t k, index_t r, bool accumulate,
                   SimdLevel level, ThreadPool& pool);

}  // namespace bitrank::cpu
