// The CPU's bit-reading BLR inference kernel (blr_infer for few tokens;
// numerics in include/bitrank/ops/blr.hpp, design in blr_infer.cpp).
//
// The SIMD level is an argument so that the tests run every level this CPU
// has against the others; the op itself runs best_simd_level().
#pragma once

#include "bitrank/ops/blr.hpp"
#include "bitrank/thread_pool.hpp"

namespace bitrank::cpu {

enum class SimdLevel { scalar, avx2, avx512 };

// The widest level this CPU runs (__builtin_cpu_supports), and whether it runs `level`.
SimdLevel best_simd_level();
bool simd_level_supported(SimdLevel level);
const char* simd_level_name(SimdLevel level);

// The most tokens blr_infer reads the bits for; above, it runs blr_forward's GEMMs.
inline constexpr index_t kBlrInferBitTokens = 8;

// y[ntok][m] (overwritten) = the layer applied to x[ntok][n], reading the
// sign bitmaps; c: scratch of blr_infer_scratch floats. Threads from `pool` once the
// layer is large enough to pay for them. `level` must be supported.
inline index_t blr_infer_scratch(index_t paths, index_t ntok, index_t r) { return paths * ntok * r; }  // c
void blr_infer_bits(const BlrLayer<float>& layer, const float* x, index_t ntok, float* y, float* c, SimdLevel level,
                    ThreadPool& pool);

}  // namespace bitrank::cpu
