// Building blocks shared by the CPU op families: the OpenBLAS sgemm call,
// f16-rounded staging into f32, and bitmap expansion.
//
// The CPU backend keeps the GEMM semantics of the seeds (f16 operands, f32
// accumulation, power-of-two staging scale, output multiplier) while running
// OpenBLAS sgemm: operands are rounded to f16 *values* but stored as f32
// (every f16 is exact in f32), so sgemm multiplies exactly the numbers the
// f16 GEMM would. ±1 sign planes are exact in either type.
#pragma once

#include <bit>
#include <cstdint>

#include "bitrank/dtype.hpp"
#include "bitrank/tensor.hpp"
#include "bitrank/thread_pool.hpp"

namespace bitrank::cpu {

// Row-major C[m][n] (row stride ldc) = alpha·op(A)·op(B) + beta·C, where
// op(A) is m×k (A stored [m][k] with lda, or [k][m] when trans_a) and op(B)
// is k×n (B stored [k][n] with ldb, or [n][k] when trans_b). OpenBLAS threads.
void sgemm(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, float alpha, const float* a, index_t lda,
           const float* b, index_t ldb, float beta, float* c, index_t ldc);

// One row: dst[j] = staged_value(src[j], col[j], scale) for j < k (col may
// be null: round_f16(src[j]·scale)); uses the F16C conversion where the CPU
// has it (the same round-to-nearest-even value, checked against round_f16).
void stage_row(const float* src, const float* col, float scale, float* dst, index_t k);

// dst[t][j] = round_f16(f32(src[t][j]·col[j])·scale) for t < rows, j < k
// (col may be null), stored as f32. src row stride lds, dst row stride ldd.
void stage_rounded(const float* src, index_t lds, const float* col, float scale, index_t rows, index_t k, float* dst,
                   index_t ldd, ThreadPool& pool);

// The staging value of one element, identical on every backend.
inline float staged_value(float src, float col, float scale) { return round_f16((src * col) * scale); }

// Σ_{c<len} term(c) over 8 interleaved f32 partial sums: vectorisable, and
// a shorter rounding chain than one running sum.
template <class Term>
float sum_lanes(index_t len, Term term) {
  constexpr int lanes = 8;
  float part[lanes] = {};
  index_t c = 0;
  for (; c + lanes <= len; c += lanes)
    for (int l = 0; l < lanes; ++l) part[l] += term(c + l);
  for (; c < len; ++c) part[c % lanes] += term(c);
  float sum = 0;
  for (int l = 0; l < lanes; ++l) sum += part[l];
  return sum;
}

// Σ a_c·b_c in sum_lanes' order (the per-head reductions of the attention
// and q/k-norm kernels).
inline float dot_lanes(const float* a, const float* b, index_t len) {
  return sum_lanes(len, [&](index_t c) { return a[c] * b[c]; });
}

// dot_lanes(s, b, len) for the ±1 signs s of a bitmap row (bit c of word
// c/32 set: +1), the same sums in the same order: ±b_c is s_c·b_c exactly.
inline float signed_dot_lanes(const std::uint32_t* bits, const float* b, index_t len) {
  return sum_lanes(len, [&](index_t c) {
    const std::uint32_t flip = (~bits[c / 32] >> (c % 32) & 1u) << 31;
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(b[c]) ^ flip);
  });
}

// Σ_{j<n} term(j) in f64 over 8 interleaved partial sums: vectorisable
// without reassociating one long chain (the row sums of RMSNorm and KL).
template <class Term>
double sum_f64(index_t n, Term term) {
  double part[8] = {};
  index_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) part[l] += term(j + l);
  double s = 0;
  for (; j < n; ++j) s += term(j);
  for (double p : part) s += p;
  return s;
}

// ±1 plane [rows][r] and/or its transpose [r][rows] from a sign bitmap
// [rows][ceil(r/32)]; either output may be null. Out is float or f16.
template <class Out>
void expand_sign_planes(const std::uint32_t* bits, index_t rows, index_t r, Out* plane, Out* plane_t, ThreadPool& pool);

}  // namespace bitrank::cpu
