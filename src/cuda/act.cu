// CUDA elementwise activations (contract: include/bitrank/ops/act.hpp).
//
// Grid-stride loops, one element per step: every input of element i is
// loaded before any output of i is stored, and element i belongs to one
// thread only, so an output that is exactly one of the inputs (in place) is
// safe. For the same reason no pointer here is __restrict__.
// The formulas are the CPU backend's, in f32 with explicitly rounded products
// and sums (no FMA contraction): σ from one e^−|v| ≤ 1 (never overflows),
// 1 − σ(v) taken as σ(−v); min / clamp written as std::min / std::clamp
// evaluate them, so a NaN gate or up passes through (fminf would hide it).
// expf is CUDA's (≤ 2 ulp), so values differ from the CPU by an ulp or so.
// The routed backward runs one block per row of `width`: the route weight's
// gradient Σ_row d_out·s·silu·clamp is summed in f64 with warp shuffles and
// the warp totals in a fixed order, and rounded once.
#include <algorithm>
#include <cmath>

#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kMaxBlocks = 65535;
constexpr unsigned kRowThreads = 128;

struct Sigmoids {
  float pos, neg;  // σ(v), σ(−v)
};
__device__ Sigmoids sigmoids(float v) {
  const float e = expf(-fabsf(v));
  const float r = __fdiv_rn(1.0f, __fadd_rn(1.0f, e));
  const float er = __fmul_rn(e, r);
  return v >= 0.0f ? Sigmoids{r, er} : Sigmoids{er, r};
}
__device__ float silu(float v) { return __fmul_rn(v, sigmoids(v).pos); }

struct Silu {
  float value, grad;  // silu(v), silu'(v) = σ(v)·(1 + v·σ(−v))
};
__device__ Silu silu_and_grad(float v) {
  const Sigmoids s = sigmoids(v);
  return {__fmul_rn(v, s.pos), __fmul_rn(s.pos, __fadd_rn(1.0f, __fmul_rn(v, s.neg)))};
}

// std::min(v, hi) and std::clamp(v, lo, hi) as the CPU evaluates them.
__device__ float min_as_std(float v, float hi) { return hi < v ? hi : v; }
__device__ float clamp_as_std(float v, float lo, float hi) { return v < lo ? lo : (hi < v ? hi : v); }

// Clamped SwiGLU parameters; limit = +inf when the limit is off.
struct Limit {
  float limit, scale;
};
Limit limit_of(SwigluLimit lim) { return {lim.limit > 0.0f ? lim.limit : INFINITY, lim.scale}; }

#define BR_GRID_STRIDE(i, n)                                                                     \
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);         \
       i += static_cast<index_t>(gridDim.x) * blockDim.x)

__global__ void swiglu_forward_kernel(const float* gate, const float* up, index_t n, float* out) {
  BR_GRID_STRIDE(i, n) {
    const float g = gate[i], u = up[i];
    out[i] = __fmul_rn(silu(g), u);
  }
}

__global__ void swiglu_backward_kernel(const float* gate, const float* up, const float* d_out, index_t n,
                                       float* d_gate, float* d_up) {
  BR_GRID_STRIDE(i, n) {
    const float g = gate[i], u = up[i], dc = d_out[i];
    const Silu s = silu_and_grad(g);
    d_gate[i] = __fmul_rn(__fmul_rn(dc, u), s.grad);
    d_up[i] = __fmul_rn(dc, s.value);
  }
}

// clamp: the limit is on (L > 0); otherwise out = s·silu(gate)·up.
__global__ void swiglu_limit_forward_kernel(const float* gate, const float* up, index_t n, float limit, float scale,
                                            bool clamp, float* out) {
  BR_GRID_STRIDE(i, n) {
    const float g = gate[i], u = up[i];
    out[i] = clamp ? __fmul_rn(__fmul_rn(scale, silu(min_as_std(g, limit))), clamp_as_std(u, -limit, limit))
                   : __fmul_rn(__fmul_rn(scale, silu(g)), u);
  }
}

__global__ void swiglu_limit_backward_kernel(const float* gate, const float* up, const float* d_out, index_t n,
                                             Limit lim, float* d_gate, float* d_up) {
  const float L = lim.limit;
  BR_GRID_STRIDE(i, n) {
    const float g = gate[i], u = up[i], dc = __fmul_rn(d_out[i], lim.scale);
    const float gc = min_as_std(g, L), uc = clamp_as_std(u, -L, L);
    const Silu s = silu_and_grad(gc);
    d_gate[i] = !(g > L) ? __fmul_rn(__fmul_rn(dc, uc), s.grad) : 0.0f;
    d_up[i] = !(u < -L || u > L) ? __fmul_rn(dc, s.value) : 0.0f;
  }
}

__global__ void swiglu_limit_routed_forward_kernel(const float* gate, const float* up, const float* route_weight,
                                                   index_t n, index_t width, Limit lim, float* out) {
  const float L = lim.limit;
  BR_GRID_STRIDE(i, n) {
    const float rs = __fmul_rn(lim.scale, route_weight[i / width]);
    const float g = gate[i], u = up[i];
    out[i] = __fmul_rn(__fmul_rn(rs, silu(min_as_std(g, L))), clamp_as_std(u, -L, L));
  }
}

// One block per row r of `width` elements.
__global__ void swiglu_limit_routed_backward_kernel(const float* gate, const float* up, const float* route_weight,
                                                    const float* d_out, index_t width, Limit lim, float* d_gate,
                                                    float* d_up, float* d_route_weight) {
  __shared__ double warp_totals[32];
  const float L = lim.limit;
  const index_t r = blockIdx.x;
  const float rw = route_weight[r];
  double drw = 0.0;
  for (index_t i = r * width + threadIdx.x; i < (r + 1) * width; i += blockDim.x) {
    const float g = gate[i], u = up[i], dc = __fmul_rn(d_out[i], lim.scale);
    const float gc = min_as_std(g, L), uc = clamp_as_std(u, -L, L);
    const Silu s = silu_and_grad(gc);
    drw += static_cast<double>(__fmul_rn(dc, s.value)) * static_cast<double>(uc);
    const float dcr = __fmul_rn(dc, rw);
    d_gate[i] = !(g > L) ? __fmul_rn(__fmul_rn(dcr, uc), s.grad) : 0.0f;
    d_up[i] = !(u < -L || u > L) ? __fmul_rn(dcr, s.value) : 0.0f;
  }
  if (!d_route_weight) return;  // uniform over the block
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int o = 16; o > 0; o >>= 1) drw += __shfl_down_sync(0xffffffffu, drw, o);
  if (lane == 0) warp_totals[warp] = drw;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0.0;
    for (int k = 0; k < warps; ++k) t += warp_totals[k];
    d_route_weight[r] = static_cast<float>(t);
  }
}

__global__ void swiglu_col_gate_forward_kernel(const float* gate, const float* up, const float* col_gate, index_t n,
                                               index_t width, float* out) {
  BR_GRID_STRIDE(i, n) {
    const float g = gate[i], u = up[i];
    out[i] = __fmul_rn(__fmul_rn(silu(g), u), col_gate[i % width]);
  }
}

__global__ void swiglu_col_gate_backward_kernel(const float* gate, const float* up, const float* col_gate,
                                                const float* d_out, index_t n, index_t width, float* d_gate,
                                                float* d_up) {
  BR_GRID_STRIDE(i, n) {
    const float g = gate[i], u = up[i], dc = __fmul_rn(d_out[i], col_gate[i % width]);
    const Silu s = silu_and_grad(g);
    d_gate[i] = __fmul_rn(__fmul_rn(dc, u), s.grad);
    d_up[i] = __fmul_rn(dc, s.value);
  }
}

__global__ void sigmoid_gate_forward_kernel(const float* x, const float* gate, index_t n, float* out) {
  BR_GRID_STRIDE(i, n) {
    const float xv = x[i], g = gate[i];
    out[i] = __fmul_rn(xv, sigmoids(g).pos);
  }
}

__global__ void sigmoid_gate_backward_kernel(const float* x, const float* gate, const float* d_out, index_t n,
                                             float* d_x, float* d_gate) {
  BR_GRID_STRIDE(i, n) {
    const float xv = x[i], dc = d_out[i];
    const Sigmoids s = sigmoids(gate[i]);
    d_x[i] = __fmul_rn(dc, s.pos);
    d_gate[i] = __fmul_rn(__fmul_rn(__fmul_rn(dc, xv), s.pos), s.neg);
  }
}

__global__ void add_kernel(const float* a, const float* b, index_t n, float* out) {
  BR_GRID_STRIDE(i, n) {
    const float av = a[i], bv = b[i];
    out[i] = __fadd_rn(av, bv);
  }
}

#undef BR_GRID_STRIDE

unsigned grid_for(index_t n) { return std::min<unsigned>(kMaxBlocks, blocks_for(static_cast<std::size_t>(n), kThreads)); }

class CudaActOps final : public ActOps<float> {
 public:
  explicit CudaActOps(Context& ctx) : ctx_(ctx) {}

 protected:
  void swiglu_forward_impl(CView<float> gate, CView<float> up, View<float> out) override {
    const index_t n = gate.numel();
    if (n == 0) return;
    swiglu_forward_kernel<<<grid_for(n), kThreads, 0, stream()>>>(gate.data, up.data, n, out.data);
    BR_CUDA_LAUNCHED();
  }

  void swiglu_backward_impl(CView<float> gate, CView<float> up, CView<float> d_out, View<float> d_gate,
                            View<float> d_up) override {
    const index_t n = gate.numel();
    if (n == 0) return;
    swiglu_backward_kernel<<<grid_for(n), kThreads, 0, stream()>>>(gate.data, up.data, d_out.data, n, d_gate.data,
                                                                   d_up.data);
    BR_CUDA_LAUNCHED();
  }

  void swiglu_limit_forward_impl(CView<float> gate, CView<float> up, SwigluLimit lim, View<float> out) override {
    const index_t n = gate.numel();
    if (n == 0) return;
    swiglu_limit_forward_kernel<<<grid_for(n), kThreads, 0, stream()>>>(gate.data, up.data, n, lim.limit, lim.scale,
                                                                        lim.limit > 0.0f, out.data);
    BR_CUDA_LAUNCHED();
  }

  void swiglu_limit_backward_impl(CView<float> gate, CView<float> up, CView<float> d_out, SwigluLimit lim,
                                  View<float> d_gate, View<float> d_up) override {
    const index_t n = gate.numel();
    if (n == 0) return;
    swiglu_limit_backward_kernel<<<grid_for(n), kThreads, 0, stream()>>>(gate.data, up.data, d_out.data, n,
                                                                         limit_of(lim), d_gate.data, d_up.data);
    BR_CUDA_LAUNCHED();
  }

  void swiglu_limit_routed_forward_impl(CView<float> gate, CView<float> up, CView<float> route_weight,
                                        index_t width, SwigluLimit lim, View<float> out) override {
    const index_t n = gate.numel();
    if (n == 0) return;
    swiglu_limit_routed_forward_kernel<<<grid_for(n), kThreads, 0, stream()>>>(gate.data, up.data, route_weight.data,
                                                                               n, width, limit_of(lim), out.data);
    BR_CUDA_LAUNCHED();
  }

  void swiglu_limit_routed_backward_impl(CView<float> gate, CView<float> up, CView<float> route_weight,
                                         CView<float> d_out, index_t width, SwigluLimit lim, View<float> d_gate,
                                         View<float> d_up, View<float> d_route_weight) override {
    const index_t rows = gate.numel() / width;
    if (rows == 0) return;
    swiglu_limit_routed_backward_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream()>>>(
        gate.data, up.data, route_weight.data, d_out.data, width, limit_of(lim), d_gate.data, d_up.data,
        d_route_weight.data);
    BR_CUDA_LAUNCHED();
  }

  void swiglu_col_gate_forward_impl(CView<float> gate, CView<float> up, CView<float> col_gate,
                                    View<float> out) override {
    const index_t n = gate.numel();
    if (n == 0) return;
    swiglu_col_gate_forward_kernel<<<grid_for(n), kThreads, 0, stream()>>>(gate.data, up.data, col_gate.data, n,
                                                                           col_gate.numel(), out.data);
    BR_CUDA_LAUNCHED();
  }

  void swiglu_col_gate_backward_impl(CView<float> gate, CView<float> up, CView<float> col_gate, CView<float> d_out,
                                     View<float> d_gate, View<float> d_up) override {
    const index_t n = gate.numel();
    if (n == 0) return;
    swiglu_col_gate_backward_kernel<<<grid_for(n), kThreads, 0, stream()>>>(
        gate.data, up.data, col_gate.data, d_out.data, n, col_gate.numel(), d_gate.data, d_up.data);
    BR_CUDA_LAUNCHED();
  }

  void sigmoid_gate_forward_impl(CView<float> x, CView<float> gate, View<float> out) override {
    const index_t n = x.numel();
    if (n == 0) return;
    sigmoid_gate_forward_kernel<<<grid_for(n), kThreads, 0, stream()>>>(x.data, gate.data, n, out.data);
    BR_CUDA_LAUNCHED();
  }

  void sigmoid_gate_backward_impl(CView<float> x, CView<float> gate, CView<float> d_out, View<float> d_x,
                                  View<float> d_gate) override {
    const index_t n = x.numel();
    if (n == 0) return;
    sigmoid_gate_backward_kernel<<<grid_for(n), kThreads, 0, stream()>>>(x.data, gate.data, d_out.data, n, d_x.data,
                                                                         d_gate.data);
    BR_CUDA_LAUNCHED();
  }

  void add_impl(CView<float> a, CView<float> b, View<float> out) override {
    const index_t n = a.numel();
    if (n == 0) return;
    add_kernel<<<grid_for(n), kThreads, 0, stream()>>>(a.data, b.data, n, out.data);
    BR_CUDA_LAUNCHED();
  }

 private:
  cudaStream_t stream() const { return ctx_.stream.get(); }

  Context& ctx_;
};

}  // namespace

std::unique_ptr<ActOps<float>> make_act_ops(Context& ctx) { return std::make_unique<CudaActOps>(ctx); }

}  // namespace bitrank::cuda
