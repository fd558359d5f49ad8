// CUDA column reductions and scalings (contract: include/bitrank/ops/reduce.hpp).
//
// col_sum_prod: the shared f64 column sums of col_sum.cuh (fixed chunks of
// rows, fixed order, one rounding: out[j] = f32(out[j] + Σ a·b)).
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

#include "cuda/block_reduce.cuh"
#include "cuda/col_sum.cuh"
#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kMaxSquareBlocks = 1024;

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
    launch_col_sum(a.data, b.data, nullptr, rows, cols, out.data, ctx_.memory, ctx_.stream.get());
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
