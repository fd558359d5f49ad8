// CUDA staging and the f16 tensor-core GEMM (contract: include/bitrank/ops/gemm.hpp),
// and the launchers other families build on (cuda/gemm_kernels.hpp).
//
// Staging computes f16(f32(f32(src·col)·scale)) with __fmul_rn and
// __float2half_rn — the same two f32 products and the same
// round-to-nearest-even as the CPU and reference backends, so staged
// operands are bit-identical everywhere. The plain form runs one thread per
// 4 columns (16-byte loads, 8-byte stores; 1 column where widths or
// alignment do not allow it) over a grid of row steps sized to fill the
// device; the transposed form stages through a 32×33 shared tile so reads
// and writes both coalesce.
//
// GEMM: cuBLASLt, f16 A/B, f32 C, f32 compute, alpha = oscale. Row-major
// out[m][n] = act[m][k]·plane[n][k]ᵀ is column-major outᵀ (n×m, ld = ldo) =
// plane (op T of the k×n column-major view) · actᵀ (the k×m view); the
// output may be a column slice of a wider matrix. The token-sum form
// out[m][n] = lhs[ntok][m]ᵀ·rhs[ntok][n] is outᵀ = rhs (the n×ntok view) ·
// lhs (op T of the m×ntok view). Layouts, descriptors and the chosen
// algorithm are cached per shape; the algorithm is chosen for the inputs'
// actual alignment and a dense output, so it never depends on where the
// output lives (see LtGemm in gemm_kernels.hpp).
#include <cuda_fp16.h>

#include <algorithm>

#include "cuda/gemm_kernels.hpp"
#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

constexpr unsigned kStageThreads = 256;

// Thread j stages columns V·j … V·j + V − 1 (V | k) of rows t = blockIdx.y,
// + gridDim.y, … < rows_out (zero rows from `rows` on).
template <int V>
__global__ void stage_kernel(const float* __restrict__ src, index_t lds, index_t col0, const float* __restrict__ col,
                             float scale, index_t rows, index_t rows_out, index_t k, __half* __restrict__ dst) {
  const index_t j = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (j >= k) return;
  Floats<V> c;
  if (col) {
    c = load_floats<V>(col + j);
  } else {
    for (int v = 0; v < V; ++v) c.v[v] = 1.0f;
  }
  for (index_t t = blockIdx.y; t < rows_out; t += gridDim.y) {
    Floats<V> x;
    if (t < rows) {
      x = load_floats<V>(src + t * lds + col0 + j);
      // without a factor: f32(s·scale), the same number as f32(f32(s·1)·scale)
      for (int v = 0; v < V; ++v) x.v[v] = col ? stage_product(x.v[v], c.v[v], scale) : __fmul_rn(x.v[v], scale);
    } else {
      for (int v = 0; v < V; ++v) x.v[v] = 0.0f;
    }
    store_halves<V>(dst + t * k + j, x);
  }
}

// dst[rows_out][tok_out] = transpose of the staged src[ntok][k]. Block
// (32, 8), grid (tok_out / 32, rows_out / 32).
__global__ void stage_transposed_kernel(const float* __restrict__ src, const float* __restrict__ col, float scale,
                                        index_t ntok, index_t k, index_t tok_out, __half* __restrict__ dst) {
  __shared__ float tile[32][33];
  const index_t t0 = static_cast<index_t>(blockIdx.x) * 32, r0 = static_cast<index_t>(blockIdx.y) * 32;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int j = ty; j < 32; j += 8) {
    const index_t t = t0 + j, row = r0 + tx;
    float v = 0.0f;
    if (t < ntok && row < k) {
      const float x = src[t * k + row];
      v = col ? stage_product(x, col[row], scale) : __fmul_rn(x, scale);
    }
    tile[j][tx] = v;
  }
  __syncthreads();
  for (int j = ty; j < 32; j += 8) {
    const index_t row = r0 + j, t = t0 + tx;
    dst[row * tok_out + t] = __float2half_rn(tile[tx][j]);
  }
}

// Largest power of two ≤ 256 dividing the address.
unsigned alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t low = a & (~a + 1);
  return a == 0 || low >= 256 ? 256u : static_cast<unsigned>(low);
}

class CudaGemmOps final : public GemmOps<float> {
 public:
  explicit CudaGemmOps(Context& ctx) : ctx_(ctx), gemm_(ctx) {}

 protected:
  void stage_impl(CView<float> src, CView<float> col, float scale, View<f16> dst) override {
    launch_stage(src.data, src.dim(1), 0, col.data, scale, src.dim(0), dst.dim(0), src.dim(1), as_half(dst),
                 ctx_.stream.get());
  }
  void stage_cols_impl(CView<float> src, index_t col0, float scale, View<f16> dst) override {
    launch_stage(src.data, src.dim(1), col0, nullptr, scale, src.dim(0), dst.dim(0), dst.dim(1), as_half(dst),
                 ctx_.stream.get());
  }
  void stage_transposed_impl(CView<float> src, CView<float> col, float scale, View<f16> dst) override {
    launch_stage_transposed(src.data, col.data, scale, src.dim(0), src.dim(1), dst.dim(0), dst.dim(1), as_half(dst),
                            ctx_.stream.get());
  }
  void gemm_impl(CView<f16> act, CView<f16> plane, float oscale, View<float> out) override {
    gemm_.run(reinterpret_cast<const __half*>(act.data), reinterpret_cast<const __half*>(plane.data), oscale,
              out.data, out.dim(0), out.dim(1), act.dim(1), out.ld());
  }

 private:
  static __half* as_half(View<f16> v) { return reinterpret_cast<__half*>(v.data); }

  Context& ctx_;
  LtGemm gemm_;
};

}  // namespace

void launch_stage(const float* src, index_t lds, index_t col0, const float* col, float scale, index_t rows,
                  index_t rows_out, index_t k, __half* dst, cudaStream_t stream) {
  if (rows_out == 0 || k == 0) return;
  const bool wide = lds % 4 == 0 && col0 % 4 == 0 && vector_width(k, {src + col0, col, dst}) == 4;
  const int v = wide ? 4 : 1;
  const unsigned col_blocks = blocks_for(static_cast<std::size_t>(k / v), kStageThreads);
  const dim3 grid(col_blocks, row_steps(rows_out, col_blocks));
  if (wide) {
    stage_kernel<4><<<grid, kStageThreads, 0, stream>>>(src, lds, col0, col, scale, rows, rows_out, k, dst);
  } else {
    stage_kernel<1><<<grid, kStageThreads, 0, stream>>>(src, lds, col0, col, scale, rows, rows_out, k, dst);
  }
  BR_CUDA_LAUNCHED();
}

void launch_stage_transposed(const float* src, const float* col, float scale, index_t ntok, index_t k,
                             index_t rows_out, index_t tok_out, __half* dst, cudaStream_t stream) {
  if (rows_out == 0 || tok_out == 0) return;
  const dim3 grid(static_cast<unsigned>(tok_out / 32), static_cast<unsigned>(rows_out / 32));
  stage_transposed_kernel<<<grid, dim3(32, 8), 0, stream>>>(src, col, scale, ntok, k, tok_out, dst);
  BR_CUDA_LAUNCHED();
}

LtGemm::~LtGemm() {
  for (auto& [key, plan] : plans_) {
    cublasLtMatmulDescDestroy(plan.op);
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
  }
}

void LtGemm::run(const __half* act, const __half* plane, float oscale, float* out, index_t m, index_t n, index_t k,
                 index_t ldo) {
  if (m == 0 || n == 0) return;
  const Key key{Form::act_plane_t, false, m, n, k, ldo, alignment_of(plane), alignment_of(act), alignment_of(out) >= 16,
                false};
  matmul(key, plane, act, &oscale, 0.0f, out);
}

void LtGemm::run_device_alpha(const __half* act, const __half* plane, const float* alpha, bool accumulate,
                              float* out, index_t m, index_t n, index_t k, index_t ldo) {
  if (m == 0 || n == 0) return;
  const Key key{Form::act_plane_t, false, m, n, k, ldo, alignment_of(plane), alignment_of(act), alignment_of(out) >= 16,
                true};
  matmul(key, plane, act, alpha, accumulate ? 1.0f : 0.0f, out);
}

void LtGemm::run_plain_device_alpha(const __half* act, const __half* plane, const float* alpha, bool accumulate,
                                    float* out, index_t m, index_t n, index_t k, index_t ldo) {
  if (m == 0 || n == 0) return;
  const Key key{Form::plain, false, m, n, k, ldo, alignment_of(plane), alignment_of(act), alignment_of(out) >= 16, true};
  matmul(key, plane, act, alpha, accumulate ? 1.0f : 0.0f, out);
}

void LtGemm::run_tokens(const __half* lhs, const __half* rhs, float oscale, float* out, index_t m, index_t n,
                        index_t ntok, index_t ldo) {
  if (m == 0 || n == 0) return;
  const Key key{Form::tokens, false, m, n, ntok, ldo, alignment_of(rhs), alignment_of(lhs), alignment_of(out) >= 16,
                false};
  matmul(key, rhs, lhs, &oscale, 0.0f, out);
}

void LtGemm::run_f32(const float* x, const float* w, float* out, index_t m, index_t n, index_t k, bool accumulate) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: out = 0, or unchanged
    if (!accumulate)
      BR_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<std::size_t>(m * n) * sizeof(float), ctx_.stream.get()));
    return;
  }
  const Key key{Form::act_plane_t, true, m, n, k, n, alignment_of(w), alignment_of(x), alignment_of(out) >= 16, false};
  const float one = 1.0f;
  matmul(key, w, x, &one, accumulate ? 1.0f : 0.0f, out);
}

void LtGemm::run_f32_plain_add(const float* a, const float* b, float* out, index_t m, index_t n, index_t k) {
  if (m == 0 || n == 0 || k == 0) return;
  const Key key{Form::plain, true, m, n, k, n, alignment_of(b), alignment_of(a), alignment_of(out) >= 16, false};
  const float one = 1.0f;
  matmul(key, b, a, &one, 1.0f, out);
}

// D = A·B in cuBLASLt's column-major terms, D = outᵀ (n×m, ld ldo).
void LtGemm::matmul(const Key& key, const void* a, const void* b, const void* alpha, float beta, float* out) {
  const Plan& p = plan(key);
  const auto [form, f32, m, n, k, ldo, align_a, align_b, out16, device_scalars] = key;
  const cudaStream_t s = ctx_.stream.get();
  const float* beta_ptr = &beta;
  if (device_scalars) {
    if (consts_.size() == 0) {
      static const float host_consts[2] = {0.0f, 1.0f};
      consts_ = Buffer<float>(ctx_.memory, 2);
      BR_CUDA_CHECK(cudaMemcpyAsync(consts_.data(), host_consts, sizeof(host_consts), cudaMemcpyHostToDevice, s));
    }
    beta_ptr = consts_.data() + (beta != 0.0f ? 1 : 0);
  }
  const std::size_t row_bytes = static_cast<std::size_t>(n) * sizeof(float), ld_bytes = static_cast<std::size_t>(ldo) * sizeof(float);
  float* d = out;
  if (!p.direct) {
    const std::size_t need = static_cast<std::size_t>(m * n);
    if (scratch_.size() < need) scratch_ = Buffer<float>(ctx_.memory, need);
    d = scratch_.data();
    if (beta != 0.0f)  // accumulating: the scratch starts as the output
      BR_CUDA_CHECK(cudaMemcpy2DAsync(d, row_bytes, out, ld_bytes, row_bytes, static_cast<std::size_t>(m),
                                      cudaMemcpyDeviceToDevice, s));
  }
  BR_CUBLAS_CHECK(cublasLtMatmul(ctx_.blas.get(), p.op, alpha, a, p.a, b, p.b, beta_ptr, d, p.c, d, p.c,
                                 p.has_algo ? &p.algo : nullptr, ctx_.workspace, ctx_.workspace_bytes, s));
  if (!p.direct)
    BR_CUDA_CHECK(cudaMemcpy2DAsync(out, ld_bytes, d, row_bytes, row_bytes, static_cast<std::size_t>(m),
                                    cudaMemcpyDeviceToDevice, s));
}

const LtGemm::Plan& LtGemm::plan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  const auto [form, f32, m, n, k, ldo, align_a, align_b, out16, device_scalars] = key;
  const auto u64 = [](index_t v) { return static_cast<std::uint64_t>(v); };
  const cudaDataType_t type = f32 ? CUDA_R_32F : CUDA_R_16F;
  Plan p;
  BR_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = form == Form::act_plane_t ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = form == Form::tokens ? CUBLAS_OP_T : CUBLAS_OP_N;
  BR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  BR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (device_scalars) {  // alpha and beta read from the device when the GEMM runs
    const cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_DEVICE;
    BR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof(mode)));
  }
  switch (form) {
    case Form::tokens:
      // A: rhs [k][n] row-major = column-major n×k (ld n), used as is.
      BR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, type, u64(n), u64(k), n));
      // B: lhs [k][m] row-major = column-major m×k (ld m), used transposed → k×m.
      BR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, type, u64(m), u64(k), m));
      break;
    case Form::act_plane_t:
      // A: plane as column-major k×n (ld k), used transposed → n×k.
      BR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, type, u64(k), u64(n), k));
      // B: act as column-major k×m (ld k).
      BR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, type, u64(k), u64(m), k));
      break;
    case Form::plain:
      // A: b [k][n] row-major = column-major n×k (ld n), used as is.
      BR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, type, u64(n), u64(k), n));
      // B: a [m][k] row-major = column-major k×m (ld k), used as is.
      BR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, type, u64(k), u64(m), k));
      break;
  }
  // The algorithm is chosen for a dense output: outᵀ column-major n×m, ld n.
  cublasLtMatrixLayout_t dense = nullptr;
  BR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&dense, CUDA_R_32F, u64(n), u64(m), n));
  const std::uint32_t align_out = n % 4 == 0 ? 16u : 4u;
  cublasLtMatmulPreference_t pref = nullptr;
  BR_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, const void* v, std::size_t bytes) {
    const cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, attr, v, bytes);
    if (st != CUBLAS_STATUS_SUCCESS) {
      cublasLtMatmulPreferenceDestroy(pref);
      BR_CUBLAS_CHECK(st);
    }
  };
  set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx_.workspace_bytes, sizeof(ctx_.workspace_bytes));
  const std::uint32_t aa = align_a, ab = align_b;
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof(ab));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_out, sizeof(align_out));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_out, sizeof(align_out));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(ctx_.blas.get(), p.op, p.a, p.b, dense, dense, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    p.algo = res.algo;
    p.has_algo = true;
  }
  // Write in place when the output meets the alignment the algorithm was
  // chosen for (pointer and row stride) and the algorithm accepts its stride.
  p.direct = align_out == 4 || (out16 && ldo % 4 == 0);
  if (p.direct && ldo != n) {
    BR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, u64(n), u64(m), ldo));
    if (p.has_algo) {
      cublasLtMatmulHeuristicResult_t check{};
      if (cublasLtMatmulAlgoCheck(ctx_.blas.get(), p.op, p.a, p.b, p.c, p.c, &p.algo, &check) != CUBLAS_STATUS_SUCCESS) {
        cublasLtMatrixLayoutDestroy(p.c);
        p.c = nullptr;
        p.direct = false;
      }
    }
  }
  if (p.c) {
    cublasLtMatrixLayoutDestroy(dense);
  } else {
    p.c = dense;
  }
  return plans_.emplace(key, p).first->second;
}

std::unique_ptr<GemmOps<float>> make_gemm_ops(Context& ctx) { return std::make_unique<CudaGemmOps>(ctx); }

}  // namespace bitrank::cuda
