// CUDA RMSNorm (contract: include/bitrank/ops/norm.hpp).
//
// forward / backward: one 256-thread block per row. The row sum (Σx², or
// Σ dy·g·x) is taken in f64 — each thread over a strided share of the row,
// then warp shuffles and the warp totals in a fixed order — and the scalars
// inv and coef are formed in f64 with the CPU's formulas and rounded once.
// The elementwise parts are the CPU's f32 expressions with explicitly
// rounded products (no FMA contraction), so given the same row sum they
// match the CPU bit for bit; 1 + w is formed in f32 first, so zero_centred
// with w is exactly plain with 1 + w.
// gain grad: the shared f64 column sums of col_sum.cuh,
// dw[j] = f32(dw[j] + Σ_r dy·x·inv) in a fixed order.
#include <algorithm>

#include "cuda/block_reduce.cuh"
#include "cuda/col_sum.cuh"
#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

constexpr unsigned kRowThreads = 256;

template <bool kOnePlus>
__device__ float gain_of(float w) {
  if constexpr (kOnePlus) return __fadd_rn(1.0f, w);
  return w;
}

template <bool kOnePlus>
__global__ void rmsnorm_forward_kernel(const float* __restrict__ x, const float* __restrict__ w, index_t d, float eps,
                                       float* __restrict__ y, float* __restrict__ inv) {
  const index_t r = blockIdx.x;
  const float* xr = x + r * d;
  float* yr = y + r * d;
  double ss = 0.0;
  for (index_t j = threadIdx.x; j < d; j += blockDim.x) ss += static_cast<double>(xr[j]) * xr[j];
  ss = block_sum(ss);
  const float iv = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(d) + static_cast<double>(eps)));
  for (index_t j = threadIdx.x; j < d; j += blockDim.x) yr[j] = __fmul_rn(__fmul_rn(xr[j], iv), gain_of<kOnePlus>(w[j]));
  if (threadIdx.x == 0) inv[r] = iv;
}

template <bool kOnePlus>
__global__ void rmsnorm_backward_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                        const float* __restrict__ inv, const float* __restrict__ dy, index_t d,
                                        float* __restrict__ dx) {
  const index_t r = blockIdx.x;
  const float* xr = x + r * d;
  const float* dyr = dy + r * d;
  float* dxr = dx + r * d;
  double s = 0.0;
  for (index_t j = threadIdx.x; j < d; j += blockDim.x)
    s += static_cast<double>(dyr[j]) * static_cast<double>(gain_of<kOnePlus>(w[j])) * static_cast<double>(xr[j]);
  s = block_sum(s);
  const float ivf = inv[r];
  const double iv = ivf;
  const float coef = static_cast<float>(s / static_cast<double>(d) * iv * iv * iv);
  for (index_t j = threadIdx.x; j < d; j += blockDim.x)
    dxr[j] = __fsub_rn(__fmul_rn(__fmul_rn(ivf, gain_of<kOnePlus>(w[j])), dyr[j]), __fmul_rn(xr[j], coef));
}

class CudaNormOps final : public NormOps<float> {
 public:
  explicit CudaNormOps(Context& ctx) : ctx_(ctx) {}

 protected:
  void rmsnorm_forward_impl(CView<float> x, CView<float> w, GainStyle gain, float eps, View<float> y,
                            View<float> inv) override {
    const index_t n = x.dim(0), d = x.dim(1);
    if (n == 0 || d == 0) return;
    const auto kernel = gain == GainStyle::zero_centred ? rmsnorm_forward_kernel<true> : rmsnorm_forward_kernel<false>;
    kernel<<<static_cast<unsigned>(n), kRowThreads, 0, ctx_.stream.get()>>>(x.data, w.data, d, eps, y.data, inv.data);
    BR_CUDA_LAUNCHED();
  }

  void rmsnorm_backward_impl(CView<float> x, CView<float> w, CView<float> inv, CView<float> dy, GainStyle gain,
                             View<float> dx) override {
    const index_t n = x.dim(0), d = x.dim(1);
    if (n == 0 || d == 0) return;
    const auto kernel =
        gain == GainStyle::zero_centred ? rmsnorm_backward_kernel<true> : rmsnorm_backward_kernel<false>;
    kernel<<<static_cast<unsigned>(n), kRowThreads, 0, ctx_.stream.get()>>>(x.data, w.data, inv.data, dy.data, d,
                                                                            dx.data);
    BR_CUDA_LAUNCHED();
  }

  void rmsnorm_gain_grad_impl(CView<float> x, CView<float> inv, CView<float> dy, View<float> dw) override {
    const index_t n = x.dim(0), d = x.dim(1);
    if (n == 0 || d == 0) return;
    launch_col_sum(dy.data, x.data, inv.data, n, d, dw.data, ctx_.memory, ctx_.stream.get());
  }

 private:
  Context& ctx_;
};

}  // namespace

std::unique_ptr<NormOps<float>> make_norm_ops(Context& ctx) { return std::make_unique<CudaNormOps>(ctx); }

}  // namespace bitrank::cuda
