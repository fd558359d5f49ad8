// Column sums in f64 shared by the CUDA op families: norm's gain gradient
// (Σ_t dy·x·inv), reduce's col_sum_prod (Σ_t a·b) and the BLR layer's scale
// gradients (its row passes write the partials themselves, fused with
// staging, and call the finishing pass here).
//
//   partial pass  blocks of 32 columns × 8 row lanes; block (x, chunk) walks
//                 the rows of its chunk, each lane summing a·b (·row) in f64
//                 (the product of two f32 values is exact in f64); the 8
//                 lanes are added in a fixed order into
//                 partial[chunk][j].
//   finish pass   one column per tx; lane ty adds chunks ty, ty + 16, … in
//                 order, then lane 0 adds the 16 lanes in order and rounds
//                 once: out[j] = f32(out[j] + Σ).
// The chunking is a function of the shape only, so the result never depends
// on scheduling (a resumed run stays bit-identical).
#pragma once

#include <cuda_runtime.h>

#include "bitrank/tensor.hpp"
#include "cuda/runtime.hpp"

namespace bitrank::cuda {

inline constexpr int kColSumTile = 32;         // columns per block
inline constexpr int kColSumRowLanes = 8;      // row lanes per partial block
inline constexpr int kColSumFinishLanes = 16;  // partial lanes per finishing block

// out[j] = f32(out[j] + Σ_t a[t][j]·b[t][j]·row[t]) over a, b [rows][cols]
// (row may be null: a factor of 1). The partials live in a buffer of
// `memory`, released when the call returns (stream-ordered by the pool).
void launch_col_sum(const float* a, const float* b, const float* row, index_t rows, index_t cols, float* out,
                    Memory& memory, cudaStream_t stream);

// out[j] = f32(out[j] + Σ_c partial[c][j]) for c < chunks, the finish pass.
void launch_col_sum_finish(const double* partial, index_t chunks, index_t cols, float* out, cudaStream_t stream);

}  // namespace bitrank::cuda
