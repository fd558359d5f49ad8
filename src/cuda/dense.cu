// CUDA small dense layers and the [q | gate] split (contract:
// include/bitrank/ops/dense.hpp).
//
// These are few-output projections (k = 5120 inputs to r = 48 outputs), so
// plain kernels, correctness first:
//   forward   one warp per output out[t][q]: the lanes stride over k (both x
//             and w rows coalesced), summing x·w in f64 (exact products), a
//             fixed shuffle tree, one rounding: f32(Σ) or f32(out + Σ).
//   backward  one thread per dx[t][c] (consecutive threads, consecutive c,
//             so w rows read coalesced, dy broadcast): Σ_q dy[t][q]·w[q][c]
//             in f64, then dx = f32(dx + Σ) (accumulates).
//   split / merge  one thread per q element: a copy, exact.
// f64 sums are at least as accurate as the CPU's f32 sgemm, whatever k is.
#include <algorithm>

#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kMaxBlocks = 65535;

__global__ void dense_forward_kernel(const float* __restrict__ x, const float* __restrict__ w, index_t m, index_t k,
                                     index_t r, bool accumulate, float* __restrict__ out) {
  const index_t warps = static_cast<index_t>(gridDim.x) * blockDim.x / 32;
  const int lane = threadIdx.x % 32;
  const index_t total = m * r;
  for (index_t o = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; o < total; o += warps) {
    const index_t t = o / r, q = o % r;
    const float* xr = x + t * k;
    const float* wr = w + q * k;
    double sum = 0.0;
    for (index_t c = lane; c < k; c += 32) sum += static_cast<double>(xr[c]) * wr[c];
    for (int s = 16; s > 0; s >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, s);
    if (lane == 0) out[o] = static_cast<float>(accumulate ? static_cast<double>(out[o]) + sum : sum);
  }
}

__global__ void dense_backward_kernel(const float* __restrict__ dy, const float* __restrict__ w, index_t m, index_t k,
                                      index_t r, float* __restrict__ dx) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x, total = m * k;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const index_t t = i / k, c = i % k;
    const float* dyr = dy + t * r;
    double sum = 0.0;
    for (index_t q = 0; q < r; ++q) sum += static_cast<double>(dyr[q]) * w[q * k + c];
    dx[i] = static_cast<float>(static_cast<double>(dx[i]) + sum);
  }
}

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

unsigned grid_for(index_t threads) {
  return std::min<unsigned>(kMaxBlocks, blocks_for(static_cast<std::size_t>(threads), kThreads));
}

class CudaDenseOps final : public DenseOps<float> {
 public:
  explicit CudaDenseOps(Context& ctx) : ctx_(ctx) {}

 protected:
  void dense_forward_impl(CView<float> x, CView<float> w, View<float> out, bool accumulate) override {
    const index_t m = x.dim(0), k = x.dim(1), r = w.dim(0);
    if (m == 0 || r == 0) return;
    dense_forward_kernel<<<grid_for(m * r * 32), kThreads, 0, ctx_.stream.get()>>>(x.data, w.data, m, k, r,
                                                                                   accumulate, out.data);
    BR_CUDA_LAUNCHED();
  }

  void dense_backward_impl(CView<float> dy, CView<float> w, View<float> dx) override {
    const index_t m = dy.dim(0), r = dy.dim(1), k = w.dim(1);
    if (m == 0 || k == 0) return;
    dense_backward_kernel<<<grid_for(m * k), kThreads, 0, ctx_.stream.get()>>>(dy.data, w.data, m, k, r, dx.data);
    BR_CUDA_LAUNCHED();
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
};

}  // namespace

std::unique_ptr<DenseOps<float>> make_dense_ops(Context& ctx) { return std::make_unique<CudaDenseOps>(ctx); }

}  // namespace bitrank::cuda
