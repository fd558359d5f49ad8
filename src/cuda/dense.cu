// CUDA small dense layers and the [q | gate] split (contract:
// include/bitrank/ops/dense.hpp).
//
//   forward   out[m][r] = x·wᵀ (or out += x·wᵀ) and
//   backward  dx[m][k] += dy·w
// are cuBLASLt f32 GEMMs (f32 operands, CUBLAS_COMPUTE_32F: no TF32, so as
// accurate as the CPU backend's sgemm; the plans are cached per shape, so a
// shape gives the same bits every call). They carry the model's frozen dense
// projections and the logits head (49,152 × 576 for SmolLM2): tensor-core
// speed is not needed there, a GEMM library's blocking is.
//   forward with an f16 w (a loaded model's head and dense projections,
//             kept in f16): one warp per output, each lane summing every
//             32nd product in f32 with w widened as read, the lanes added
//             in a fixed tree (__shfl_down_sync) — no f32 copy of w.
//   forward with w in Q8_0 blocks (a loaded model's head when its file holds
//             it so): one warp per output, lane l summing x·(d·q) of column l
//             of every block (d·q exact in f32), the lanes in the same tree.
//   split / merge  one thread per q element: a copy, exact.
#include <cuda_fp16.h>

#include <algorithm>

#include "cuda/gemm_kernels.hpp"
#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kMaxBlocks = 65535;

// Element i of q / gate ([m][heads·hd]) is run i / hd, offset i % hd; its
// run starts at (i / hd)·2·hd in qg, the gate hd further.
__global__ void split_q_gate_kernel(const float* __restrict__ qg, index_t total, index_t hd, float* __restrict__ q,
                                    float* __restrict__ gate) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const index_t src = (i / hd) * 2 * hd + i % hd;
    q[i] = qg[src];
    gate[i] = qg[src + hd];
  }
}

__global__ void merge_q_gate_kernel(const float* __restrict__ q, const float* __restrict__ gate, index_t total,
                                    index_t hd, float* __restrict__ qg) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const index_t dst = (i / hd) * 2 * hd + i % hd;
    qg[dst] = q[i];
    qg[dst + hd] = gate[i];
  }
}

// Warp t·r + o writes out[t][o] (=, or += with accumulate): lane l sums the
// terms row(t, o, l) gives it, then the lanes are added in a fixed tree.
template <class Row>
__device__ void each_output_by_a_warp(index_t m, index_t r, bool accumulate, float* __restrict__ out, Row row) {
  const index_t warps = static_cast<index_t>(gridDim.x) * (blockDim.x / 32);
  const unsigned lane = threadIdx.x % 32;
  for (index_t i = static_cast<index_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; i < m * r; i += warps) {
    float sum = row(i / r, i % r, lane);
    for (int off = 16; off > 0; off /= 2) sum += __shfl_down_sync(0xffffffffu, sum, off);
    if (lane == 0) out[i] = accumulate ? out[i] + sum : sum;
  }
}

// out[t][o] = Σ_j x[t][j]·w[o][j]: lane l takes j ≡ l (mod 32).
__global__ void dense_f16_kernel(const float* __restrict__ x, const __half* __restrict__ w, index_t m, index_t k,
                                 index_t r, bool accumulate, float* __restrict__ out) {
  each_output_by_a_warp(m, r, accumulate, out, [=](index_t t, index_t o, unsigned lane) {
    float sum = 0;
    for (index_t j = lane; j < k; j += 32) sum += x[t * k + j] * __half2float(w[o * k + j]);
    return sum;
  });
}

// out[t][o] = Σ_b Σ_l x[t][32b+l]·d_b·q_b[l]: lane l takes column l of every block (d·q exact in f32).
__global__ void dense_q8_kernel(const float* __restrict__ x, const q8_0* __restrict__ w, index_t m, index_t kb,
                                index_t r, bool accumulate, float* __restrict__ out) {
  each_output_by_a_warp(m, r, accumulate, out, [=](index_t t, index_t o, unsigned lane) {
    const float* xt = x + t * kb * kQ8Block;
    const q8_0* wo = w + o * kb;
    float sum = 0;
    for (index_t b = 0; b < kb; ++b)
      sum += xt[b * kQ8Block + lane] * (__half2float(__ushort_as_half(wo[b].d.bits)) * static_cast<float>(wo[b].q[lane]));
    return sum;
  });
}

unsigned grid_for(index_t threads) {
  return std::min<unsigned>(kMaxBlocks, blocks_for(static_cast<std::size_t>(threads), kThreads));
}

class CudaDenseOps final : public DenseOps<float> {
 public:
  explicit CudaDenseOps(Context& ctx) : ctx_(ctx), gemm_(ctx) {}

 protected:
  void dense_forward_impl(CView<float> x, CView<float> w, View<float> out, bool accumulate) override {
    gemm_.run_f32(x.data, w.data, out.data, x.dim(0), w.dim(0), x.dim(1), accumulate);
  }

  void dense_forward_f16_impl(CView<float> x, CView<f16> w, View<float> out, bool accumulate) override {
    const index_t m = x.dim(0), k = x.dim(1), r = w.dim(0);
    dense_f16_kernel<<<grid_for(m * r * 32), kThreads, 0, ctx_.stream.get()>>>(
        x.data, reinterpret_cast<const __half*>(w.data), m, k, r, accumulate, out.data);
    BR_CUDA_LAUNCHED();
  }

  void dense_forward_q8_impl(CView<float> x, CView<q8_0> w, View<float> out, bool accumulate) override {
    const index_t m = x.dim(0), r = w.dim(0);
    dense_q8_kernel<<<grid_for(m * r * 32), kThreads, 0, ctx_.stream.get()>>>(x.data, w.data, m, w.dim(1), r,
                                                                               accumulate, out.data);
    BR_CUDA_LAUNCHED();
  }

  void dense_backward_impl(CView<float> dy, CView<float> w, View<float> dx) override {
    gemm_.run_f32_plain_add(dy.data, w.data, dx.data, dy.dim(0), w.dim(1), dy.dim(1));
  }

  void split_q_gate_impl(CView<float> qg, index_t heads, View<float> q, View<float> gate) override {
    const index_t total = q.numel(), hd = q.dim(1) / heads;
    if (total == 0) return;
    split_q_gate_kernel<<<grid_for(total), kThreads, 0, ctx_.stream.get()>>>(qg.data, total, hd, q.data, gate.data);
    BR_CUDA_LAUNCHED();
  }

  void merge_q_gate_impl(CView<float> q, CView<float> gate, index_t heads, View<float> qg) override {
    const index_t total = q.numel(), hd = q.dim(1) / heads;
    if (total == 0) return;
    merge_q_gate_kernel<<<grid_for(total), kThreads, 0, ctx_.stream.get()>>>(q.data, gate.data, total, hd, qg.data);
    BR_CUDA_LAUNCHED();
  }

 private:
  Context& ctx_;
  LtGemm gemm_;
};

}  // namespace

std::unique_ptr<DenseOps<float>> make_dense_ops(Context& ctx) { return std::make_unique<CudaDenseOps>(ctx); }

}  // namespace bitrank::cuda
