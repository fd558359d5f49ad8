// CUDA column reductions and scalings (contract: include/bitrank/ops/reduce.hpp).
//
// col_sum_prod: blocks of 32 columns × 8 row lanes walk a fixed chunk of rows
// each, summing a·b in f64 (the product of two f32 values is exact in f64);
// the 8 lanes are added in a fixed order into one partial per (chunk,
// column), and a second pass adds the chunks in order and rounds once into
// out[j] = f32(out[j] + Σ). The chunking depends only on the shape, so the
// result does not depend on scheduling.
// scale_cols: a grid-stride loop, one element per step, product rounded
// before the add exactly as the CPU does (no FMA); in place is safe because
// every element is read and written by the same thread.
// sum_squares: a fixed grid (a function of n only) of 256-thread blocks sums
// x² in f64 with warp shuffles into one partial per block; one block adds the
// partials in a fixed order. Nothing filters non-finite values: inf² = inf,
// NaN stays NaN, inf + NaN = NaN. The f64 total comes back to the host.
// squared_error: the same grid and sums over d = y − target (f32, rounded
// like the CPU: no FMA), writing dy = grad_mul·d in the same pass; y, target
// and dy are not __restrict__ (dy may be y).
#include <algorithm>

#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

constexpr int kColTile = 32;      // columns per block
constexpr int kRowLanes = 8;      // row lanes per block
constexpr index_t kChunkRows = 128;
constexpr index_t kMaxChunks = 4096;
constexpr unsigned kThreads = 256;
constexpr unsigned kMaxSquareBlocks = 1024;

__device__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

// Sum over a block of blockDim.x (a multiple of 32, ≤ 1024) threads in a fixed
// order; the total is valid in thread 0.
__device__ double block_sum(double v) {
  __shared__ double warp_totals[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  if (lane == 0) warp_totals[warp] = v;
  __syncthreads();
  double t = 0.0;
  if (warp == 0) {
    t = lane < warps ? warp_totals[lane] : 0.0;
    t = warp_sum(t);
  }
  return t;
}

// partial[chunk][j] = Σ_{t in chunk} a[t][j]·b[t][j] (f64). Block (32, 8);
// grid (column tiles, chunks).
__global__ void col_sum_prod_partial_kernel(const float* __restrict__ a, const float* __restrict__ b, index_t rows,
                                            index_t cols, index_t chunk_rows, double* __restrict__ partial) {
  __shared__ double lanes[kRowLanes][kColTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const index_t j = static_cast<index_t>(blockIdx.x) * kColTile + tx;
  const index_t chunk = blockIdx.y;
  const index_t t0 = chunk * chunk_rows, t1 = t0 + chunk_rows < rows ? t0 + chunk_rows : rows;
  double sum = 0.0;
  if (j < cols)
    for (index_t t = t0 + ty; t < t1; t += kRowLanes) sum += static_cast<double>(a[t * cols + j]) * b[t * cols + j];
  lanes[ty][tx] = sum;
  __syncthreads();
  if (ty == 0 && j < cols) {
    double s = 0.0;
    for (int l = 0; l < kRowLanes; ++l) s += lanes[l][tx];
    partial[chunk * cols + j] = s;
  }
}

// out[j] = f32(out[j] + Σ_chunk partial[chunk][j]), chunks in order.
__global__ void col_sum_finish_kernel(const double* __restrict__ partial, index_t chunks, index_t cols,
                                      float* __restrict__ out) {
  const index_t j = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  double s = 0.0;
  for (index_t c = 0; c < chunks; ++c) s += partial[c * cols + j];
  out[j] = static_cast<float>(static_cast<double>(out[j]) + s);
}

// No __restrict__: out may be a (in place).
__global__ void scale_cols_kernel(const float* a, const float* col, index_t total, index_t cols, bool accumulate,
                                  float* out) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const float p = __fmul_rn(a[i], col[i % cols]);
    out[i] = accumulate ? __fadd_rn(out[i], p) : p;
  }
}

// partial[block] = Σ x² over this block's grid-stride share (f64).
__global__ void sum_squares_partial_kernel(const float* __restrict__ a, index_t n, double* __restrict__ partial) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  double sum = 0.0;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double x = a[i];
    sum += x * x;
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// partial[block] = Σ d² with d = y − target, and dy = grad_mul·d, over this
// block's grid-stride share.
__global__ void squared_error_partial_kernel(const float* y, const float* target, float grad_mul, index_t n,
                                             float* dy, double* __restrict__ partial) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  double sum = 0.0;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float d = __fsub_rn(y[i], target[i]);
    dy[i] = __fmul_rn(grad_mul, d);
    const double dd = d;
    sum += dd * dd;
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// *total = Σ partial[0..count), one block, fixed order.
__global__ void sum_partials_kernel(const double* __restrict__ partial, index_t count, double* __restrict__ total) {
  double sum = 0.0;
  for (index_t i = threadIdx.x; i < count; i += blockDim.x) sum += partial[i];
  sum = block_sum(sum);
  if (threadIdx.x == 0) *total = sum;
}

class CudaReduceOps final : public ReduceOps<float> {
 public:
  explicit CudaReduceOps(Context& ctx) : ctx_(ctx) {}

 protected:
  void col_sum_prod_impl(CView<float> a, CView<float> b, View<float> out) override {
    const index_t rows = a.dim(0), cols = a.dim(1);
    if (rows == 0 || cols == 0) return;
    const index_t chunk_rows = std::max(kChunkRows, (rows + kMaxChunks - 1) / kMaxChunks);
    const index_t chunks = (rows + chunk_rows - 1) / chunk_rows;
    Buffer<double> partial(ctx_.memory, static_cast<std::size_t>(chunks * cols));
    const dim3 grid(static_cast<unsigned>((cols + kColTile - 1) / kColTile), static_cast<unsigned>(chunks));
    col_sum_prod_partial_kernel<<<grid, dim3(kColTile, kRowLanes), 0, ctx_.stream.get()>>>(a.data, b.data, rows, cols,
                                                                                           chunk_rows, partial.data());
    BR_CUDA_LAUNCHED();
    col_sum_finish_kernel<<<blocks_for(static_cast<std::size_t>(cols), kThreads), kThreads, 0, ctx_.stream.get()>>>(
        partial.data(), chunks, cols, out.data);
    BR_CUDA_LAUNCHED();
  }

  void scale_cols_impl(CView<float> a, CView<float> col, View<float> out, bool accumulate) override {
    const index_t total = a.numel(), cols = a.dim(1);
    if (total == 0) return;
    scale_cols_kernel<<<grid_for(total), kThreads, 0, ctx_.stream.get()>>>(a.data, col.data, total, cols, accumulate,
                                                                          out.data);
    BR_CUDA_LAUNCHED();
  }

  double sum_squares_impl(CView<float> a) override {
    return blocked_sum(a.numel(), [&](unsigned blocks, double* partial) {
      sum_squares_partial_kernel<<<blocks, kThreads, 0, ctx_.stream.get()>>>(a.data, a.numel(), partial);
    });
  }

  double squared_error_impl(CView<float> y, CView<float> target, double grad_mul, View<float> dy) override {
    return blocked_sum(y.numel(), [&](unsigned blocks, double* partial) {
      squared_error_partial_kernel<<<blocks, kThreads, 0, ctx_.stream.get()>>>(y.data, target.data, static_cast<float>(grad_mul),
                                                                                y.numel(), dy.data, partial);
    });
  }

 private:
  // Launches partial(blocks, partial) — one f64 partial per block of
  // kThreads — on a grid that depends on n only, adds the partials in a
  // fixed order and returns the total on the host.
  template <class Partial>
  double blocked_sum(index_t n, const Partial& launch_partial) {
    if (n == 0) return 0.0;
    // 8 elements per thread at least.
    const unsigned blocks = std::min<unsigned>(kMaxSquareBlocks, blocks_for(static_cast<std::size_t>(n), kThreads * 8));
    Buffer<double> scratch(ctx_.memory, blocks + 1u);
    double* partial = scratch.data();
    double* total = partial + blocks;
    launch_partial(blocks, partial);
    BR_CUDA_LAUNCHED();
    sum_partials_kernel<<<1, kThreads, 0, ctx_.stream.get()>>>(partial, blocks, total);
    BR_CUDA_LAUNCHED();
    double result = 0.0;
    ctx_.memory.download(&result, total, sizeof(double));  // waits for the stream
    return result;
  }

  static unsigned grid_for(index_t total) {
    return std::min<unsigned>(65535u, blocks_for(static_cast<std::size_t>(total), kThreads));
  }

  Context& ctx_;
};

}  // namespace

std::unique_ptr<ReduceOps<float>> make_reduce_ops(Context& ctx) { return std::make_unique<CudaReduceOps>(ctx); }

}  // namespace bitrank::cuda
