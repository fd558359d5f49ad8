// CUDA Adam (contract: include/bitrank/ops/adam.hpp).
//
// One thread per entry (grid-stride). The arithmetic is the CPU backend's,
// operation for operation in f32: every product, quotient, square root and
// sum is an explicitly rounded intrinsic (__fmul_rn, __fdiv_rn, …), so nvcc
// cannot contract a product and a sum into an FMA, and the bias corrections
// 1 − β^t are formed on the host with the same std::pow in f32. Given the
// same inputs, w, m and v match the CPU backend bit for bit.
// A masked entry (mask == 0) is not touched; w, m, v are updated in place.
#include <algorithm>
#include <cmath>

#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

constexpr unsigned kThreads = 256;

struct AdamStep {
  float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, grad_scale;
  float correction1, correction2;  // 1 − β1^t, 1 − β2^t
  float floor;                     // relative_floor
  bool relative;
};

// std::max(a, b) as the CPU evaluates it: (a < b) ? b : a (a NaN |w| stays NaN).
__device__ float max_as_std(float a, float b) { return a < b ? b : a; }

__global__ void adam_kernel(float* w, const float* grad, float* m, float* v, const float* mask, index_t n,
                            AdamStep s) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if (mask && mask[i] == 0.0f) continue;
    const float g = __fmul_rn(grad[i], s.grad_scale);
    const float m1 = __fadd_rn(__fmul_rn(s.beta1, m[i]), __fmul_rn(s.one_minus_beta1, g));
    const float m2 = __fadd_rn(__fmul_rn(s.beta2, v[i]), __fmul_rn(__fmul_rn(s.one_minus_beta2, g), g));
    m[i] = m1;
    v[i] = m2;
    const float step = __fdiv_rn(__fmul_rn(s.lr, __fdiv_rn(m1, s.correction1)),
                                 __fadd_rn(__fsqrt_rn(__fdiv_rn(m2, s.correction2)), s.eps));
    const float wi = w[i];
    w[i] = __fsub_rn(wi, s.relative ? __fmul_rn(step, max_as_std(fabsf(wi), s.floor)) : step);
  }
}

class CudaAdamOps final : public AdamOps<float> {
 public:
  explicit CudaAdamOps(Context& ctx) : ctx_(ctx) {}

 protected:
  void adam_update_impl(View<float> w, CView<float> grad, View<float> m, View<float> v, CView<float> mask,
                        const AdamOptions& opt) override {
    const index_t n = w.numel();
    if (n == 0) return;
    AdamStep s{};
    s.lr = opt.lr;
    s.beta1 = opt.beta1;
    s.beta2 = opt.beta2;
    s.one_minus_beta1 = 1.0f - opt.beta1;
    s.one_minus_beta2 = 1.0f - opt.beta2;
    s.eps = opt.eps;
    s.grad_scale = opt.grad_scale;
    const float t = static_cast<float>(opt.step);
    s.correction1 = 1.0f - std::pow(opt.beta1, t);
    s.correction2 = 1.0f - std::pow(opt.beta2, t);
    s.floor = opt.relative_floor;
    s.relative = opt.relative_floor > 0;
    const unsigned blocks = std::min<unsigned>(65535u, blocks_for(static_cast<std::size_t>(n), kThreads));
    adam_kernel<<<blocks, kThreads, 0, ctx_.stream.get()>>>(w.data, grad.data, m.data, v.data,
                                                            has_mask(mask) ? mask.data : nullptr, n, s);
    BR_CUDA_LAUNCHED();
  }

 private:
  Context& ctx_;
};

}  // namespace

std::unique_ptr<AdamOps<float>> make_adam_ops(Context& ctx) { return std::make_unique<CudaAdamOps>(ctx); }

}  // namespace bitrank::cuda
