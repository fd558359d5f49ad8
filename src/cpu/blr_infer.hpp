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

// kBlrInferBitTokens (ops/blr.hpp), the most tokens blr_infer reads the bits
// for, is 16 from this measurement on the 2-core EPYC (2 threads, shared machine): the bits
// beat the forward at 16 tokens at every shape tried (576×576 r128: 0.16 ms
// against ≥ 0.20 ms; 576×192 r64, 1536×576 r192, 4096×4096 r992 by more)
// and at 32 on all but 576×576 (0.25 against 0.20–0.59 ms, noisy); the
// kernel's cost grows with the tokens, the forward's (planes written from
// the bitmaps, then GEMMs) hardly does.

// y[ntok][m] (overwritten) = the layer applied to x[ntok][n] for 1 ≤ ntok ≤
// kBlrInferBitTokens, reading every path's sign blocks (BlrPath::
// sign_u_blocks, sign_vt_blocks: required here); scratch: blr_infer_scratch
// floats (the lookup tables). Threads from `pool` once the layer is large
// enough to pay for them. `level` must be supported.
index_t blr_infer_scratch(index_t paths, index_t ntok, index_t n, index_t r);
void blr_infer_bits(const BlrLayer<float>& layer, const float* x, index_t ntok, float* y, float* scratch,
                    SimdLevel level, ThreadPool& pool);

}  // namespace bitrank::cpu
