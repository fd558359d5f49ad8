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

#include <cstdint>
#include <map>
#include <tuple>

#include "bitrank/tensor.hpp"
#include "cuda/runtime.hpp"

namespace bitrank::cuda {

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
// [rows][words] (bit j of word w = rank 32w + j, 1 = +1). With `cached`
// (a [rows][words] copy of the bits the planes were last expanded from),
// each 32×32 tile whose words are unchanged is skipped and changed words
// are copied into `cached`; `force` expands every tile (a fresh cache).
void launch_expand_signs(const std::uint32_t* bits, index_t rows, index_t r, index_t words, __half* plane,
                         __half* plane_t, std::uint32_t* cached, bool force, cudaStream_t stream);

// cuBLASLt f16 GEMM with its per-shape plans (layouts, descriptor, chosen
// algorithm) cached. One object serves one stream at a time.
class LtGemm {
 public:
  explicit LtGemm(Context& ctx) : ctx_(ctx) {}
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // out[m][n] (row stride ldo ≥ n) = act[m][k] · plane[n][k]ᵀ · oscale.
  void run(const __half* act, const __half* plane, float oscale, float* out, index_t m, index_t n, index_t k,
           index_t ldo);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool has_algo = false;
  };
  // Shape, output stride and the alignment (bytes, ≤ 256) of each pointer:
  // the algorithm is chosen for the alignment it will be run with.
  using Key = std::tuple<index_t, index_t, index_t, index_t, unsigned, unsigned, unsigned>;
  const Plan& plan(const Key& key);

  Context& ctx_;
  std::map<Key, Plan> plans_;
};

}  // namespace bitrank::cuda
