// CUDA staging and the f16 tensor-core GEMM (contract: include/bitrank/ops/gemm.hpp).
//
// Staging computes f16(f32(f32(src·col)·scale)) with __float2half_rn — the
// same two f32 products and the same round-to-nearest-even as the CPU and
// reference backends, so staged operands are bit-identical everywhere (two
// multiplies cannot contract into an FMA). The transposed form stages
// through a 32×33 shared tile so reads and writes both coalesce.
//
// GEMM: cuBLASLt, f16 A/B, f32 C, f32 compute, alpha = oscale. Row-major
// out[m][n] = act[m][k]·plane[n][k]ᵀ is column-major outᵀ (n×m, ld = ldo) =
// plane (op T of the k×n column-major view) · actᵀ (the k×m view); the
// output may be a column slice of a wider matrix. Layouts, descriptors and
// the chosen algorithm are cached per shape.
#include <cuda_fp16.h>

#include <map>
#include <tuple>

#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

__global__ void stage_kernel(const float* __restrict__ src, const float* __restrict__ col, float scale, index_t m,
                             index_t k, index_t lds, index_t col0, index_t total, __half* __restrict__ dst) {
  const index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const index_t row = i / k, j = i % k;
  float v = 0.0f;
  if (row < m) {
    const float s = src[row * lds + col0 + j];
    v = col ? __fmul_rn(__fmul_rn(s, col[j]), scale) : __fmul_rn(s, scale);
  }
  dst[i] = __float2half_rn(v);
}

// dst[rows_pad][tok_pad] = transpose of the staged src[ntok][k].
__global__ void stage_transposed_kernel(const float* __restrict__ src, const float* __restrict__ col, float scale,
                                        index_t ntok, index_t k, index_t tok_pad, __half* __restrict__ dst) {
  __shared__ float tile[32][33];
  const index_t t0 = static_cast<index_t>(blockIdx.x) * 32, r0 = static_cast<index_t>(blockIdx.y) * 32;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int j = ty; j < 32; j += 8) {
    const index_t t = t0 + j, row = r0 + tx;
    float v = 0.0f;
    if (t < ntok && row < k) {
      const float s = src[t * k + row];
      v = col ? __fmul_rn(__fmul_rn(s, col[row]), scale) : __fmul_rn(s, scale);
    }
    tile[j][tx] = v;
  }
  __syncthreads();
  for (int j = ty; j < 32; j += 8) {
    const index_t row = r0 + j, t = t0 + tx;
    dst[row * tok_pad + t] = __float2half_rn(tile[tx][j]);
  }
}

class CudaGemmOps final : public GemmOps<float> {
 public:
  explicit CudaGemmOps(Context& ctx) : ctx_(ctx) {}
  ~CudaGemmOps() override {
    for (auto& [key, plan] : plans_) {
      cublasLtMatmulDescDestroy(plan.op);
      cublasLtMatrixLayoutDestroy(plan.a);
      cublasLtMatrixLayoutDestroy(plan.b);
      cublasLtMatrixLayoutDestroy(plan.c);
    }
  }

 protected:
  void stage_impl(CView<float> src, CView<float> col, float scale, View<f16> dst) override {
    launch_stage(src.data, src.dim(0), src.dim(1), src.dim(1), 0, col.empty() ? nullptr : col.data, scale, dst);
  }
  void stage_cols_impl(CView<float> src, index_t col0, float scale, View<f16> dst) override {
    launch_stage(src.data, src.dim(0), dst.dim(1), src.dim(1), col0, nullptr, scale, dst);
  }
  void stage_transposed_impl(CView<float> src, CView<float> col, float scale, View<f16> dst) override {
    const index_t ntok = src.dim(0), k = src.dim(1);
    const dim3 grid(static_cast<unsigned>(dst.dim(1) / 32), static_cast<unsigned>(dst.dim(0) / 32));
    stage_transposed_kernel<<<grid, dim3(32, 8), 0, ctx_.stream.get()>>>(
        src.data, col.empty() ? nullptr : col.data, scale, ntok, k, dst.dim(1), reinterpret_cast<__half*>(dst.data));
    BR_CUDA_LAUNCHED();
  }

  void gemm_impl(CView<f16> act, CView<f16> plane, float oscale, View<float> out) override {
    const index_t m = out.dim(0), n = out.dim(1), k = act.dim(1), ldo = out.ld();
    const Plan& p = plan(m, n, k, ldo);
    const float beta = 0.0f;
    BR_CUBLAS_CHECK(cublasLtMatmul(ctx_.blas.get(), p.op, &oscale, plane.data, p.a, act.data, p.b, &beta, out.data,
                                   p.c, out.data, p.c, p.has_algo ? &p.algo : nullptr, ctx_.workspace,
                                   ctx_.workspace_bytes, ctx_.stream.get()));
  }

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool has_algo = false;
  };

  void launch_stage(const float* src, index_t m, index_t k, index_t lds, index_t col0, const float* col, float scale,
                    View<f16> dst) {
    const index_t total = dst.dim(0) * k;
    stage_kernel<<<blocks_for(static_cast<std::size_t>(total), 256), 256, 0, ctx_.stream.get()>>>(
        src, col, scale, m, k, lds, col0, total, reinterpret_cast<__half*>(dst.data));
    BR_CUDA_LAUNCHED();
  }

  const Plan& plan(index_t m, index_t n, index_t k, index_t ldo) {
    const auto key = std::make_tuple(m, n, k, ldo);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    Plan p;
    BR_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    BR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    BR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    // A: plane as column-major k×n (ld k), used transposed → n×k.
    BR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16F, static_cast<std::uint64_t>(k),
                                               static_cast<std::uint64_t>(n), k));
    // B: act as column-major k×m (ld k).
    BR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16F, static_cast<std::uint64_t>(k),
                                               static_cast<std::uint64_t>(m), k));
    // C: outᵀ, column-major n×m (ld ldo).
    BR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, static_cast<std::uint64_t>(n),
                                               static_cast<std::uint64_t>(m), ldo));
    cublasLtMatmulPreference_t pref = nullptr;
    BR_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    BR_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &ctx_.workspace_bytes, sizeof(ctx_.workspace_bytes)));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(ctx_.blas.get(), p.op, p.a, p.b, p.c, p.c, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
      p.algo = res.algo;
      p.has_algo = true;
    }
    return plans_.emplace(key, p).first->second;
  }

  Context& ctx_;
  std::map<std::tuple<index_t, index_t, index_t, index_t>, Plan> plans_;
};

}  // namespace

std::unique_ptr<GemmOps<float>> make_gemm_ops(Context& ctx) { return std::make_unique<CudaGemmOps>(ctx); }

}  // namespace bitrank::cuda
