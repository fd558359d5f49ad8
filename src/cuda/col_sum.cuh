// Column sums in f64 shared by the CUDA op families: norm's gain gradient
// (Σ_t dy·x·inv), reduce's col_sum_prod (Σ_t a·b), the sign optimizer's
// column second moment (Σ_i G², finished by its own blend) and the BLR
// layer's scale gradients (its row passes write the partials themselves,
// fused with staging, in col_sum_chunks' chunks, and call the finishing
// pass here).
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
#include "cuda/check.hpp"
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

// The partial pass alone: partial[c][j] = Σ_{t in chunk c} a[t][j]·b[t][j]
// (·row[t]) for chunks of chunk_rows rows; partial holds chunks × cols.
void launch_col_sum_partial(const float* a, const float* b, const float* row, index_t rows, index_t cols,
                            index_t chunk_rows, double* partial, cudaStream_t stream);

// The row chunks of a partial pass fused into a row pass (the BLR layer's,
// the sign optimizer's): about kColSumTargetBlocks blocks over the `tiles`
// column tiles, each block at least kColSumRowLanes rows.
inline constexpr index_t kColSumTargetBlocks = 2048;
struct ColSumChunks {
  index_t rows;    // per chunk
  index_t chunks;
};
ColSumChunks col_sum_chunks(index_t rows, index_t tiles);

// out[j] = f32(out[j] + Σ_c partial[c][j]) for c < chunks, the finish pass.
void launch_col_sum_finish(const double* partial, index_t chunks, index_t cols, float* out, cudaStream_t stream);

// The finish pass with the caller's last step: finish(j, Σ_c partial[c][j])
// (the sum in the fixed order above), one thread per column.
template <class Finish>
__global__ void col_sum_finish_kernel(const double* __restrict__ partial, index_t chunks, index_t cols,
                                      Finish finish) {
  __shared__ double lanes[kColSumFinishLanes][kColSumTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const index_t j = static_cast<index_t>(blockIdx.x) * kColSumTile + tx;
  double s = 0.0;
  if (j < cols)
    for (index_t c = ty; c < chunks; c += kColSumFinishLanes) s += partial[c * cols + j];
  lanes[ty][tx] = s;
  __syncthreads();
  if (ty == 0 && j < cols) {
    double t = 0.0;
    for (int l = 0; l < kColSumFinishLanes; ++l) t += lanes[l][tx];
    finish(j, t);
  }
}
template <class Finish>
void launch_col_sum_finish(const double* partial, index_t chunks, index_t cols, Finish finish, cudaStream_t stream) {
  if (cols == 0) return;
  col_sum_finish_kernel<<<static_cast<unsigned>((cols + kColSumTile - 1) / kColSumTile),
                          dim3(kColSumTile, kColSumFinishLanes), 0, stream>>>(partial, chunks, cols, finish);
  BR_CUDA_LAUNCHED();
}

}  // namespace bitrank::cuda
