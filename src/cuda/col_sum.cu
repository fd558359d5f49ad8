// The shared f64 column sums (design: col_sum.cuh).
#include <algorithm>

#include "cuda/check.hpp"
#include "cuda/col_sum.cuh"

namespace bitrank::cuda {
namespace {

constexpr index_t kChunkRows = 128;   // rows per partial block, at least
constexpr index_t kMaxChunks = 4096;  // partial blocks per column tile, at most

// partial[chunk][j] = Σ_{t in chunk} a[t][j]·b[t][j](·row[t]) (f64). Block
// (32, 8); grid (column tiles, chunks).
template <bool kRow>
__global__ void col_sum_partial_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                       const float* __restrict__ row, index_t rows, index_t cols, index_t chunk_rows,
                                       double* __restrict__ partial) {
  __shared__ double lanes[kColSumRowLanes][kColSumTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const index_t j = static_cast<index_t>(blockIdx.x) * kColSumTile + tx;
  const index_t chunk = blockIdx.y;
  const index_t t0 = chunk * chunk_rows, t1 = t0 + chunk_rows < rows ? t0 + chunk_rows : rows;
  double sum = 0.0;
  if (j < cols)
    for (index_t t = t0 + ty; t < t1; t += kColSumRowLanes) {
      const double p = static_cast<double>(a[t * cols + j]) * static_cast<double>(b[t * cols + j]);
      sum += kRow ? p * static_cast<double>(row[t]) : p;
    }
  lanes[ty][tx] = sum;
  __syncthreads();
  if (ty == 0 && j < cols) {
    double s = 0.0;
    for (int l = 0; l < kColSumRowLanes; ++l) s += lanes[l][tx];
    partial[chunk * cols + j] = s;
  }
}

}  // namespace

void launch_col_sum_partial(const float* a, const float* b, const float* row, index_t rows, index_t cols,
                            index_t chunk_rows, double* partial, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const index_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  const dim3 grid(static_cast<unsigned>((cols + kColSumTile - 1) / kColSumTile), static_cast<unsigned>(chunks));
  const dim3 block(kColSumTile, kColSumRowLanes);
  if (row)
    col_sum_partial_kernel<true><<<grid, block, 0, stream>>>(a, b, row, rows, cols, chunk_rows, partial);
  else
    col_sum_partial_kernel<false><<<grid, block, 0, stream>>>(a, b, row, rows, cols, chunk_rows, partial);
  BR_CUDA_LAUNCHED();
}

void launch_col_sum(const float* a, const float* b, const float* row, index_t rows, index_t cols, float* out,
                    Memory& memory, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const index_t chunk_rows = std::max(kChunkRows, (rows + kMaxChunks - 1) / kMaxChunks);
  const index_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  Buffer<double> partial(memory, static_cast<std::size_t>(chunks * cols));
  launch_col_sum_partial(a, b, row, rows, cols, chunk_rows, partial.data(), stream);
  launch_col_sum_finish(partial.data(), chunks, cols, out, stream);
}

ColSumChunks col_sum_chunks(index_t rows, index_t tiles) {
  const index_t want =
      std::clamp<index_t>((kColSumTargetBlocks + tiles - 1) / tiles, 1, (rows + kColSumRowLanes - 1) / kColSumRowLanes);
  const index_t per = (rows + want - 1) / want;
  return {per, (rows + per - 1) / per};
}

namespace {
struct AddInto {  // out[j] = f32(out[j] + t)
  float* out;
  __device__ void operator()(index_t j, double t) const { out[j] = static_cast<float>(static_cast<double>(out[j]) + t); }
};
}  // namespace

void launch_col_sum_finish(const double* partial, index_t chunks, index_t cols, float* out, cudaStream_t stream) {
  launch_col_sum_finish(partial, chunks, cols, AddInto{out}, stream);
}

}  // namespace bitrank::cuda
