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
// a shorter rounding chain than one running sum. Always inlined, so that a
// caller compiled for a wider target (attention's decode_row clones) runs
// it at its own width instead of calling the baseline copy per use.
template <class Term>
[[gnu::always_inline]] inline float sum_lanes(index_t len, Term term) {
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
[[gnu::always_inline]] inline float dot_lanes(const float* a, const float* b, index_t len) {
  return sum_lanes(len, [&](index_t c) { return a[c] * b[c]; });
}

// Bit q of a bitmap word, q < 32, read as `word & kBitOf[q]`: a mask from a
// table, not a shift by q, so that loops over q vectorise (SSE2 has no
// per-lane variable shift).
inline constexpr std::uint32_t kBitOf[32] = {
    1u << 0,  1u << 1,  1u << 2,  1u << 3,  1u << 4,  1u << 5,  1u << 6,  1u << 7,  1u << 8,  1u << 9,  1u << 10,
    1u << 11, 1u << 12, 1u << 13, 1u << 14, 1u << 15, 1u << 16, 1u << 17, 1u << 18, 1u << 19, 1u << 20, 1u << 21,
    1u << 22, 1u << 23, 1u << 24, 1u << 25, 1u << 26, 1u << 27, 1u << 28, 1u << 29, 1u << 30, 1u << 31};

// The sign bit of an f32 flipped where bit q of `word` is clear: s·x for the ±1 sign s (set: +1), exactly.
inline std::uint32_t sign_flip(std::uint32_t word, index_t q) { return (word & kBitOf[q]) ? 0u : 0x80000000u; }

// dot_lanes(s, b, len) for the ±1 signs s of a bitmap row (bit c of word
// c/32 set: +1), the same sums in the same order: ±b_c is s_c·b_c exactly.
inline float signed_dot_lanes(const std::uint32_t* bits, const float* b, index_t len) {
  return sum_lanes(len, [&](index_t c) {
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(b[c]) ^ sign_flip(bits[c / 32], c % 32));
  });
}

// out[c] = ±v for c < len, + where bit c of the bitmap row is set: v's sign
// bit flipped for a clear bit (v the bits of an f32), which is s_c·v exactly.
inline void signed_row(const std::uint32_t* bits, std::uint32_t v, index_t len, float* out) {
  index_t k0 = 0;
  for (; k0 + 32 <= len; k0 += 32) {
    const std::uint32_t word = bits[k0 / 32];
    for (index_t q = 0; q < 32; ++q) out[k0 + q] = std::bit_cast<float>(v ^ sign_flip(word, q));
  }
  for (index_t q = 0; k0 + q < len; ++q) out[k0 + q] = std::bit_cast<float>(v ^ sign_flip(bits[k0 / 32], q));
}

// dst[i] = to_f16(src[i]) and dst[i] = to_f32(src[i]) for i < count, with
// the F16C conversions where the CPU has them: the same bits (round to
// nearest even; a NaN keeps its top payload bits and is made quiet; to_f32
// of an f16 that is not a signalling NaN, which to_f16 never writes).
void f16_from_f32(const float* src, index_t count, f16* dst);
void f32_from_f16(const f16* src, index_t count, float* dst);

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
