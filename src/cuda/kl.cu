// CUDA sliced KL objective (contract: include/bitrank/ops/kl.hpp).
//
// Both ops run one 256-thread block per row; each thread walks a strided
// share of the row's slice.
// kl_lse_merge: the row max in f32 (fmaxf, warp shuffles, then the warp
// maxima), the sum of expf(z − m') in f64 (warp shuffles, the warp totals in
// a fixed order); thread 0 merges with the old (m, s) in f64 and rounds s'
// once, the CPU's expressions.
// kl_slice_backward: lse of both rows, a, b and their exps in f64 per
// element, dz = f32(grad_mul)·f32(exp(b) − exp(a)) with explicitly rounded
// operations (the CPU's expressions); the KL terms in f64 into one partial
// per row, and one block adds the row partials in a fixed order. (f64 exp
// costs ~40 FP64 instructions: ~1 ms for 8192 tokens × 49152 entries on an
// H200, next to the head GEMMs of the same pass.) The result does not depend on scheduling. zs and dz are not
// __restrict__ (dz may be zs; each element is read and written by one thread).
#include <cmath>

#include "cuda/block_reduce.cuh"
#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

constexpr unsigned kThreads = 256;

// Max over the block; every thread gets it.
__device__ float block_max(float v) {
  __shared__ float warp_max_v[32];
  __shared__ float result;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  if (lane == 0) warp_max_v[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < warps ? warp_max_v[lane] : -INFINITY;
    t = warp_max(t);
    if (lane == 0) result = t;
  }
  __syncthreads();
  return result;
}

__global__ void kl_lse_merge_kernel(const float* __restrict__ z, index_t vs, bool first, float* __restrict__ run) {
  const index_t r = blockIdx.x;
  const float* zr = z + r * vs;
  const float old_m = first ? -INFINITY : run[2 * r], old_s = first ? 0.0f : run[2 * r + 1];
  float m = -INFINITY;
  for (index_t j = threadIdx.x; j < vs; j += blockDim.x) m = fmaxf(m, zr[j]);
  m = fmaxf(old_m, block_max(m));  // a NaN is not a max; the sum below carries it
  double s = 0.0;
  for (index_t j = threadIdx.x; j < vs; j += blockDim.x) s += static_cast<double>(expf(__fsub_rn(zr[j], m)));
  s = block_sum(s);
  if (threadIdx.x == 0) {
    const double old =
        first ? 0.0 : static_cast<double>(old_s) * exp(static_cast<double>(old_m) - static_cast<double>(m));
    run[2 * r] = m;
    run[2 * r + 1] = static_cast<float>(old + s);
  }
}

__global__ void kl_backward_kernel(const float* zs, const float* __restrict__ zt, const float* __restrict__ run_s,
                                   const float* __restrict__ run_t, float grad_mul, index_t vs, float* dz,
                                   double* __restrict__ partial) {
  const index_t r = blockIdx.x;
  const double ls = static_cast<double>(run_s[2 * r]) + log(static_cast<double>(run_s[2 * r + 1]));
  const double lt = static_cast<double>(run_t[2 * r]) + log(static_cast<double>(run_t[2 * r + 1]));
  const float* s = zs + r * vs;
  const float* t = zt + r * vs;
  float* g = dz + r * vs;
  double acc = 0.0;
  for (index_t j = threadIdx.x; j < vs; j += blockDim.x) {
    const double a = __dsub_rn(static_cast<double>(t[j]), lt), b = __dsub_rn(static_cast<double>(s[j]), ls);
    const double pa = exp(a);
    g[j] = __fmul_rn(grad_mul, static_cast<float>(__dsub_rn(exp(b), pa)));
    acc += pa * (a - b);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[r] = acc;
}

// *total = Σ partial[0..count), one block, fixed order.
__global__ void sum_partials_kernel(const double* __restrict__ partial, index_t count, double* __restrict__ total) {
  double sum = 0.0;
  for (index_t i = threadIdx.x; i < count; i += blockDim.x) sum += partial[i];
  sum = block_sum(sum);
  if (threadIdx.x == 0) *total = sum;
}

class CudaKlOps final : public KlOps<float> {
 public:
  explicit CudaKlOps(Context& ctx) : ctx_(ctx) {}

 protected:
  void kl_lse_merge_impl(CView<float> z, View<float> run, bool first) override {
    const index_t n = z.dim(0), vs = z.dim(1);
    kl_lse_merge_kernel<<<static_cast<unsigned>(n), kThreads, 0, ctx_.stream.get()>>>(z.data, vs, first, run.data);
    BR_CUDA_LAUNCHED();
  }

  double kl_slice_backward_impl(CView<float> zs, CView<float> zt, CView<float> run_s, CView<float> run_t,
                                double grad_mul, View<float> dz) override {
    const index_t n = zs.dim(0), vs = zs.dim(1);
    Buffer<double> scratch(ctx_.memory, static_cast<std::size_t>(n) + 1u);
    double* partial = scratch.data();
    double* total = partial + n;
    kl_backward_kernel<<<static_cast<unsigned>(n), kThreads, 0, ctx_.stream.get()>>>(
        zs.data, zt.data, run_s.data, run_t.data, static_cast<float>(grad_mul), vs, dz.data, partial);
    BR_CUDA_LAUNCHED();
    sum_partials_kernel<<<1, kThreads, 0, ctx_.stream.get()>>>(partial, n, total);
    BR_CUDA_LAUNCHED();
    double result = 0.0;
    ctx_.memory.download(&result, total, sizeof(double));  // waits for the stream
    return result;
  }

 private:
  Context& ctx_;
};

}  // namespace

std::unique_ptr<KlOps<float>> make_kl_ops(Context& ctx) { return std::make_unique<CudaKlOps>(ctx); }

}  // namespace bitrank::cuda
