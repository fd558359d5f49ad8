// CUDA backend of the sign optimizer (contract: include/bitrank/ops/sign.hpp).
//
// One step is a few launches on the context's stream and one wait, for the
// flip count the API returns:
//   factored_adam  row pass (one warp per row: R_i from Σ_k G², f64)
//                  column sums of G² (col_sum.cuh's partial and finish
//                  passes, f64; the finish blends them into C_k)
//                  one block: mean(R), 1/(mean(R)·(1−β2^t)) into a device scalar
//   every step     update: one warp per (row, bitmap word); lane k updates
//                  m, v, z of entry 32w + k, a ballot of the flip tests is
//                  the word's flip mask (lane 0 rewrites the word), and the
//                  block's flips are added to one device counter.
// The latent update is the CPU backend's f32 arithmetic operation for
// operation, every product and sum rounded on its own (no FMA contraction);
// the sums of G² are f64 like the CPU's, in another but fixed order
// (deterministic, independent of scheduling).
//
// The stochastic flips use hash_counter / hash_uniform of bitrank/rng.hpp:
// the stream of (seed, step, matrix id) is computed on the host with rng.hpp
// itself; per entry, device_hash_uniform below mirrors rng.hpp line for line
// (its functions are host-only inline functions).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "bitrank/rng.hpp"
#include "cuda/col_sum.cuh"
#include "cuda/gemm_kernels.hpp"
#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr unsigned kFinishThreads = 1024;
constexpr unsigned kMaxStepBlocks = 4096;

// ---- rng.hpp on the device --------------------------------------------------

// Mirror of bitrank::hash_counter (rng.hpp).
__device__ __forceinline__ std::uint64_t device_hash_counter(std::uint64_t seed, std::uint64_t counter) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (counter + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// Mirror of bitrank::hash_uniform (rng.hpp).
__device__ __forceinline__ float device_hash_uniform(std::uint64_t seed, std::uint64_t counter) {
  return static_cast<float>(device_hash_counter(seed, counter) >> 40) * (1.0f / 16777216.0f);
}

// std::clamp(v, lo, hi) of the CPU backend (NaN passes through).
__device__ __forceinline__ float clamp_f32(float v, float lo, float hi) {
  const float t = v < lo ? lo : v;
  return hi < t ? hi : t;
}

__device__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

// ---- init -------------------------------------------------------------------

// z[i][k] = ±τ from bit k of row i. One thread per column, rows by grid y.
__global__ void init_kernel(const std::uint32_t* __restrict__ bits, index_t rows, index_t r, index_t words, float tau,
                            float* __restrict__ z) {
  const index_t k = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= r) return;
  for (index_t i = blockIdx.y; i < rows; i += gridDim.y)
    z[i * r + k] = (bits[i * words + k / 32] >> (k % 32)) & 1u ? tau : -tau;
}

// ---- factored second moment -------------------------------------------------

// R_i = f32(β2·R_i + (1−β2)·Σ_k G_ik² / r). One warp per row.
__global__ void second_row_kernel(const float* __restrict__ g, index_t rows, index_t r, double beta2,
                                  float* __restrict__ row) {
  const index_t i = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (i >= rows) return;  // uniform over the warp
  double s = 0.0;
  for (index_t k = lane; k < r; k += 32) {
    const double v = g[i * r + k];
    s += v * v;
  }
  s = warp_sum(s);
  if (lane == 0)
    row[i] = static_cast<float>(__dadd_rn(__dmul_rn(beta2, row[i]), __dmul_rn(1.0 - beta2, s) / static_cast<double>(r)));
}

// C_k = f32(β2·C_k + (1−β2)·Σ_i G_ik² / rows): the finish of col_sum.cuh's
// column sums of G·G.
struct SecondColFinish {
  float* col;
  double beta2;
  index_t rows;
  __device__ void operator()(index_t k, double t) const {
    col[k] = static_cast<float>(
        __dadd_rn(__dmul_rn(beta2, col[k]), __dmul_rn(1.0 - beta2, t) / static_cast<double>(rows)));
  }
};

// One block: *inv_norm = 1/(mean(R)·bc2), 0 where mean(R) ≤ 0.
__global__ void inv_norm_kernel(const float* __restrict__ row, index_t rows, double bc2, float* __restrict__ inv_norm) {
  __shared__ double warp_totals[32];
  double s = 0.0;
  for (index_t i = threadIdx.x; i < rows; i += blockDim.x) s += row[i];
  s = warp_sum(s);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_totals[warp] = s;
  __syncthreads();
  if (warp == 0) {
    double t = lane < static_cast<int>(blockDim.x / 32) ? warp_totals[lane] : 0.0;
    t = warp_sum(t);
    if (lane == 0) {
      const double mean = t / static_cast<double>(rows);
      *inv_norm = mean > 0 ? static_cast<float>(1.0 / (mean * bc2)) : 0.0f;
    }
  }
}

// ---- the step -------------------------------------------------------------

struct StepArgs {
  const float* grad;
  float* z;
  float* m;            // first moment (adam, factored_adam)
  float* v;            // second moment (adam)
  const float* row;    // R (factored_adam)
  const float* col;    // C (factored_adam)
  const float* inv_norm;  // device scalar (factored_adam)
  std::uint32_t* bits;
  index_t rows, r, words;
  float beta1, beta2, lr, eps, clamp, delta;
  float ibc1, ibc2;  // 1/(1 − β^t)
  bool stochastic;
  std::uint64_t stream;
  unsigned long long* flips;
};

// One warp per (row, word) at a time, walking the words of the matrix with
// a stride of all warps of the grid: lane k handles entry 32w + k of row i.
template <SignOptimizer kOpt>
__global__ void step_kernel(StepArgs a) {
  __shared__ unsigned counts[kWarpsPerBlock];
  const index_t warps = static_cast<index_t>(gridDim.x) * (blockDim.x / 32);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  unsigned flipped = 0;
  for (index_t warp_id = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
       warp_id < a.rows * a.words; warp_id += warps) {
    const index_t i = warp_id / a.words, w = warp_id % a.words, k = w * 32 + lane;
    const std::uint32_t word = a.bits[warp_id];
    bool flip = false;
    if (k < a.r) {
      const index_t e = i * a.r + k;
      const float g = a.grad[e];
      float z = a.z[e];
      if constexpr (kOpt == SignOptimizer::sgd) {
        z = __fsub_rn(z, __fmul_rn(a.lr, g));
      } else {
        const float m = __fadd_rn(__fmul_rn(a.beta1, a.m[e]), __fmul_rn(__fsub_rn(1.0f, a.beta1), g));
        a.m[e] = m;
        float denom;
        if constexpr (kOpt == SignOptimizer::adam) {
          const float v = __fadd_rn(__fmul_rn(a.beta2, a.v[e]), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, a.beta2), g), g));
          a.v[e] = v;
          denom = __fadd_rn(__fsqrt_rn(__fmul_rn(v, a.ibc2)), a.eps);
        } else {
          const float row = __fmul_rn(a.row[i], *a.inv_norm);
          denom = __fadd_rn(__fsqrt_rn(__fmul_rn(row, a.col[k])), a.eps);
        }
        z = __fsub_rn(z, __fdiv_rn(__fmul_rn(a.lr, __fmul_rn(m, a.ibc1)), denom));
      }
      z = clamp_f32(z, -a.clamp, a.clamp);
      a.z[e] = z;
      // Flips: s·z < −δ, or inside the band by the seeded coin.
      const float sz = (word >> lane) & 1u ? z : -z;
      flip = sz < -a.delta;
      if (!flip && a.stochastic && sz < 0)
        flip = device_hash_uniform(a.stream, static_cast<std::uint64_t>(e)) < __fdiv_rn(-sz, a.delta);
    }
    const unsigned mask = __ballot_sync(0xffffffffu, flip);
    if (lane == 0 && mask) a.bits[warp_id] = word ^ mask;
    flipped += __popc(mask);
  }
  if (lane == 0) counts[warp] = flipped;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned total = 0;
    for (int q = 0; q < kWarpsPerBlock; ++q) total += counts[q];
    if (total) atomicAdd(a.flips, static_cast<unsigned long long>(total));
  }
}

__global__ void add_kernel(const float* __restrict__ g, index_t n, float* __restrict__ kept) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride)
    kept[e] = __fadd_rn(kept[e], g[e]);
}

class CudaSignOps final : public SignOps<float> {
 public:
  explicit CudaSignOps(Context& ctx) : ctx_(ctx), flips_host_(1) {
    scalars_ = Buffer<unsigned long long>(ctx.memory, 2);  // [0] flip counter, [1] inv_norm (as f32)
  }

 protected:
  void sign_init_impl(const SignMatrix<float>& mat, const SignOptions& opt, float tau) override {
    const index_t rows = mat.latent.dim(0), r = mat.latent.dim(1);
    const cudaStream_t s = ctx_.stream.get();
    const unsigned col_blocks = blocks_for(static_cast<std::size_t>(r), kThreads);
    const dim3 grid(col_blocks, row_steps(rows, col_blocks));
    init_kernel<<<grid, kThreads, 0, s>>>(mat.bits.data, rows, r, mat.bits.dim(1), tau, mat.latent.data);
    BR_CUDA_LAUNCHED();
    const std::size_t entries = static_cast<std::size_t>(rows * r) * sizeof(float);
    if (opt.optimizer != SignOptimizer::sgd) BR_CUDA_CHECK(cudaMemsetAsync(mat.moment.data, 0, entries, s));
    if (opt.optimizer == SignOptimizer::adam) BR_CUDA_CHECK(cudaMemsetAsync(mat.second.data, 0, entries, s));
    if (opt.optimizer == SignOptimizer::factored_adam) {
      BR_CUDA_CHECK(cudaMemsetAsync(mat.second_row.data, 0, static_cast<std::size_t>(rows) * sizeof(float), s));
      BR_CUDA_CHECK(cudaMemsetAsync(mat.second_col.data, 0, static_cast<std::size_t>(r) * sizeof(float), s));
    }
  }

  std::int64_t sign_step_impl(const SignMatrix<float>& mat, CView<float> grad, const SignOptions& opt,
                              std::int64_t step) override {
    const index_t rows = mat.latent.dim(0), r = mat.latent.dim(1), words = mat.bits.dim(1);
    const cudaStream_t s = ctx_.stream.get();
    unsigned long long* counter = scalars_.data();
    float* inv_norm = reinterpret_cast<float*>(scalars_.data() + 1);
    BR_CUDA_CHECK(cudaMemsetAsync(counter, 0, sizeof(unsigned long long), s));

    StepArgs a{};
    a.grad = grad.data;
    a.z = mat.latent.data;
    a.m = mat.moment.data;
    a.v = mat.second.data;
    a.row = mat.second_row.data;
    a.col = mat.second_col.data;
    a.inv_norm = inv_norm;
    a.bits = mat.bits.data;
    a.rows = rows;
    a.r = r;
    a.words = words;
    a.beta1 = opt.beta1;
    a.beta2 = opt.beta2;
    a.lr = opt.lr;
    a.eps = opt.eps;
    a.clamp = opt.clamp;
    a.delta = opt.hysteresis;
    a.stochastic = opt.stochastic && opt.hysteresis > 0;
    a.stream = hash_counter(opt.seed, static_cast<std::uint64_t>(step) * kSignMatrixIds + mat.id);
    a.flips = counter;
    const double t = static_cast<double>(step);
    a.ibc1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(opt.beta1), t)));
    if (opt.optimizer == SignOptimizer::adam)
      a.ibc2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(opt.beta2), t)));
    if (opt.optimizer == SignOptimizer::factored_adam)
      factored_second_moment(mat, grad, opt.beta2, 1.0 - std::pow(static_cast<double>(opt.beta2), t), inv_norm);

    const std::size_t threads = static_cast<std::size_t>(rows * words) * 32;
    const unsigned blocks = std::min(blocks_for(threads, kThreads), kMaxStepBlocks);
    switch (opt.optimizer) {
      case SignOptimizer::factored_adam:
        step_kernel<SignOptimizer::factored_adam><<<blocks, kThreads, 0, s>>>(a);
        break;
      case SignOptimizer::adam:
        step_kernel<SignOptimizer::adam><<<blocks, kThreads, 0, s>>>(a);
        break;
      case SignOptimizer::sgd:
        step_kernel<SignOptimizer::sgd><<<blocks, kThreads, 0, s>>>(a);
        break;
    }
    BR_CUDA_LAUNCHED();
    BR_CUDA_CHECK(cudaMemcpyAsync(flips_host_.data(), counter, sizeof(unsigned long long), cudaMemcpyDeviceToHost, s));
    BR_CUDA_CHECK(cudaStreamSynchronize(s));
    return static_cast<std::int64_t>(*flips_host_.data());
  }

  void sign_defer_impl(CView<float> grad, View<float> kept) override {
    const index_t n = grad.numel();
    const unsigned blocks = std::min<unsigned>(blocks_for(static_cast<std::size_t>(n), kThreads), 65535u);
    add_kernel<<<blocks, kThreads, 0, ctx_.stream.get()>>>(grad.data, n, kept.data);
    BR_CUDA_LAUNCHED();
  }

  void sign_zero_impl(View<float> v) override {
    BR_CUDA_CHECK(cudaMemsetAsync(v.data, 0, static_cast<std::size_t>(v.numel()) * sizeof(float), ctx_.stream.get()));
  }

 private:
  // Updates R and C from G² and writes 1/(mean(R)·bc2) (or 0) to *inv_norm.
  void factored_second_moment(const SignMatrix<float>& mat, CView<float> grad, float beta2, double bc2,
                              float* inv_norm) {
    const index_t rows = mat.latent.dim(0), r = mat.latent.dim(1);
    const cudaStream_t s = ctx_.stream.get();
    const double b2 = beta2;
    second_row_kernel<<<blocks_for(static_cast<std::size_t>(rows) * 32, kThreads), kThreads, 0, s>>>(
        grad.data, rows, r, b2, mat.second_row.data);
    BR_CUDA_LAUNCHED();
    const ColSumChunks ch = col_sum_chunks(rows, (r + kColSumTile - 1) / kColSumTile);
    if (partial_.size() < static_cast<std::size_t>(ch.chunks * r))
      partial_ = Buffer<double>(ctx_.memory, static_cast<std::size_t>(ch.chunks * r));
    launch_col_sum_partial(grad.data, grad.data, nullptr, rows, r, ch.rows, partial_.data(), s);
    launch_col_sum_finish(partial_.data(), ch.chunks, r, SecondColFinish{mat.second_col.data, b2, rows}, s);
    inv_norm_kernel<<<1, kFinishThreads, 0, s>>>(mat.second_row.data, rows, bc2, inv_norm);
    BR_CUDA_LAUNCHED();
  }

  Context& ctx_;
  Buffer<unsigned long long> scalars_;
  PinnedBuffer<unsigned long long> flips_host_;
  Buffer<double> partial_;  // column sums of G² per row block [blocks][r]
};

}  // namespace

std::unique_ptr<SignOps<float>> make_sign_ops(Context& ctx) { return std::make_unique<CudaSignOps>(ctx); }

}  // namespace bitrank::cuda
