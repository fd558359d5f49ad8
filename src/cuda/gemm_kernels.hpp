// Building blocks of the f16 GEMMs shared by the CUDA op families: staging
// (f32 → f16 operands), the ±1 sign planes and the cuBLASLt call. The op
// families (gemm.cu, bitmap.cu, blr.cu) launch these on the context's
// stream; none of them synchronises.
//
// Staging value of element (t, j): f16(f32(f32(src·col)·scale)), rounded to
// nearest even — bit-identical to the CPU and reference backends (see
// include/bitrank/ops/gemm.hpp). Without a column factor: f16(f32(src·scale)).
//
// The GEMM computes out[m][n] (row stride ldo) = act[m][k] · plane[n][k]ᵀ ·
// oscale with f16 operands, f32 accumulation and f32 output; act and plane
// rows are k contiguous halves.
#pragma once

#include <cublasLt.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <tuple>

#include "bitrank/tensor.hpp"
#include "cuda/runtime.hpp"

namespace bitrank::cuda {

// ---- device helpers of the elementwise passes -------------------------------

// The f32 product that staging rounds to f16: f32(f32(s·col)·scale), no FMA.
__device__ __forceinline__ float stage_product(float s, float col, float scale) {
  return __fmul_rn(__fmul_rn(s, col), scale);
}

// V consecutive values (V = 1 or 4) moved as one access: 16-byte float
// loads/stores and 8-byte f16 stores when V = 4 (the caller checks the
// alignment; see vector_width).
template <int V>
struct Floats {
  float v[V];
};

template <int V>
__device__ __forceinline__ Floats<V> load_floats(const float* p) {
  Floats<V> f;
  if constexpr (V == 4) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    f.v[0] = t.x, f.v[1] = t.y, f.v[2] = t.z, f.v[3] = t.w;
  } else {
    f.v[0] = *p;
  }
  return f;
}

template <int V>
__device__ __forceinline__ void store_floats(float* p, const Floats<V>& f) {
  if constexpr (V == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(f.v[0], f.v[1], f.v[2], f.v[3]);
  } else {
    *p = f.v[0];
  }
}

// Each value rounded by __float2half_rn (round to nearest even).
template <int V>
__device__ __forceinline__ void store_halves(__half* p, const Floats<V>& f) {
  if constexpr (V == 4) {
    const __half2 lo = __halves2half2(__float2half_rn(f.v[0]), __float2half_rn(f.v[1]));
    const __half2 hi = __halves2half2(__float2half_rn(f.v[2]), __float2half_rn(f.v[3]));
    uint2 packed;
    packed.x = *reinterpret_cast<const unsigned*>(&lo);
    packed.y = *reinterpret_cast<const unsigned*>(&hi);
    *reinterpret_cast<uint2*>(p) = packed;
  } else {
    *p = __float2half_rn(f.v[0]);
  }
}

// 4 when every row of width k starts 16-byte aligned for each base pointer
// given (null pointers are ignored), else 1.
inline int vector_width(index_t k, std::initializer_list<const void*> bases) {
  if (k % 4 != 0) return 1;
  for (const void* b : bases)
    if (b && reinterpret_cast<std::uintptr_t>(b) % 16 != 0) return 1;
  return 4;
}

// Grid rows of an elementwise pass over `rows` rows whose columns take
// `col_blocks` blocks: enough blocks to fill the device a few times over,
// each thread walking rows blockIdx.y, + gridDim.y, ….
inline unsigned row_steps(index_t rows, unsigned col_blocks) {
  constexpr index_t kTargetBlocks = 4096, kMaxGridY = 65535;
  const index_t want = (kTargetBlocks + col_blocks - 1) / col_blocks;
  return static_cast<unsigned>(std::max<index_t>(1, std::min({want, rows, kMaxGridY})));
}

// ---- launchers --------------------------------------------------------------

// dst[rows_out][k] = staged src[t][col0 + j] (row stride lds) for t < rows,
// 0 for rows ≤ t < rows_out. `col` (k factors) may be null.
void launch_stage(const float* src, index_t lds, index_t col0, const float* col, float scale, index_t rows,
                  index_t rows_out, index_t k, __half* dst, cudaStream_t stream);

// dst[rows_out][tok_out] = the transpose of the staged src[ntok][k] (col may
// be null); zero where t ≥ ntok or row ≥ k. rows_out ≥ k and tok_out ≥ ntok
// are multiples of 32.
void launch_stage_transposed(const float* src, const float* col, float scale, index_t ntok, index_t k,
                             index_t rows_out, index_t tok_out, __half* dst, cudaStream_t stream);

// ±1 plane [rows][r] and its transpose [r][rows] from a sign bitmap
// [rows][words] (bit j of word w = rank 32w + j, 1 = +1); either may be
// null. With `rowscale` (device [rows]) and `inv` (a device scalar), row i
// holds ±f16(rowscale[i]·inv) instead of ±1 (the BLR layer's GEMM planes).
void launch_expand_signs(const std::uint32_t* bits, index_t rows, index_t r, index_t words, const float* rowscale,
                         const float* inv, __half* plane, __half* plane_t, cudaStream_t stream);

// cuBLASLt GEMMs with their per-shape plans (layouts, descriptor, chosen
// algorithm) cached: f16 operands (the BLR layer) or f32 operands (the dense
// op: CUBLAS_COMPUTE_32F, no TF32, so as accurate as the CPU's sgemm),
// always f32 accumulation and output. The algorithm depends on the problem
// (form, operand type, m, n, k) and the alignment of the inputs only, never
// on where the output lives: it is chosen for a dense output [m][n] (16-byte
// aligned rows where n is a multiple of 4), so a GEMM into a column slice
// gives the same bits as the same GEMM into its own matrix. An output whose
// pointer or row stride that algorithm cannot write (a slice at an odd
// offset) is written through a dense scratch and copied into place. One
// object serves one stream at a time.
class LtGemm {
 public:
  explicit LtGemm(Context& ctx) : ctx_(ctx) {}
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // out[m][n] (row stride ldo ≥ n) = act[m][k] · plane[n][k]ᵀ · oscale.
  void run(const __half* act, const __half* plane, float oscale, float* out, index_t m, index_t n, index_t k,
           index_t ldo);
  // out[m][n] (row stride ldo ≥ n) = act[m][k] · plane[n][k]ᵀ · *alpha (+ out
  // when accumulate), alpha a device scalar (cuBLASLt's device pointer mode:
  // a factor computed on the device, read when the GEMM runs).
  void run_device_alpha(const __half* act, const __half* plane, const float* alpha, bool accumulate, float* out,
                        index_t m, index_t n, index_t k, index_t ldo);
  // out[m][n] (row stride ldo ≥ n) = act[m][k] · plane[k][n] · *alpha (+ out
  // when accumulate): the plane used as it is stored (alpha a device scalar).
  void run_plain_device_alpha(const __half* act, const __half* plane, const float* alpha, bool accumulate, float* out,
                              index_t m, index_t n, index_t k, index_t ldo);
  // out[m][n] (row stride ldo ≥ n) = lhs[ntok][m]ᵀ · rhs[ntok][n] · oscale:
  // a sum over tokens of row-major operands (the sign gradients).
  void run_tokens(const __half* lhs, const __half* rhs, float oscale, float* out, index_t m, index_t n, index_t ntok,
                  index_t ldo);
  // f32: out[m][n] = x[m][k] · w[n][k]ᵀ, or out += that with `accumulate`.
  void run_f32(const float* x, const float* w, float* out, index_t m, index_t n, index_t k, bool accumulate);
  // f32: out[m][n] += a[m][k] · b[k][n] (all dense row-major).
  void run_f32_plain_add(const float* a, const float* b, float* out, index_t m, index_t n, index_t k);

 private:
  // How the row-major operands map onto cuBLASLt's column-major D = A·B
  // (D = outᵀ, n×m): act·planeᵀ, lhsᵀ·rhs, a·b.
  enum class Form : unsigned char { act_plane_t, tokens, plain };
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool has_algo = false;
    bool direct = true;  // false: through the dense scratch (c has ld n)
  };
  // Form, f32 operands (else f16), m, n, k, the output's row stride, the
  // alignment (bytes, ≤ 256) of A and B, whether the output pointer is
  // 16-byte aligned, and whether alpha and beta are device scalars.
  using Key = std::tuple<Form, bool, index_t, index_t, index_t, index_t, unsigned, unsigned, bool, bool>;
  const Plan& plan(const Key& key);
  // D = A·B·alpha + beta·D; beta is 0 or 1; alpha is a host float, or a
  // device float when the key says so (beta then read from consts_).
  void matmul(const Key& key, const void* a, const void* b, const void* alpha, float beta, float* out);

  Context& ctx_;
  std::map<Key, Plan> plans_;
  Buffer<float> scratch_;  // dense [m][n] outputs of plans that are not direct
  Buffer<float> consts_;   // {0, 1} on the device: beta in device pointer mode
};

}  // namespace bitrank::cuda
