// The CPU's Q8_0 forward for few rows of x (cpu/dense_q8.hpp).
//
// Decoding reads the whole head once a token (49,152 × 576 for SmolLM2:
// 30.1 MB as Q8_0 blocks against 56.6 MB in f16), so the kernel streams w
// once, one row at a time, and keeps x's few rows in cache. Per block of
// 32 values: two 16-wide halves of q sign-extended and converted to f32,
// multiplied with x's two halves (one multiply, one FMA), and the block's
// scale d FMA'd onto the 16 lane sums. Lane l of an output:
//
//   s_l = Σ over blocks b in order of fma(d_b, x[32b+l]·q_b[l] ⊕ x[32b+16+l]·q_b[16+l], s_l)
//
// (⊕: the second product FMA'd onto the first), then the lanes added
// l + l+8, + l+4, + l+2, + l+1 (simd_sum.hpp's tree). AVX-512 holds the 16
// lanes in one register, AVX2 in two halves, scalar code in an array with
// std::fma: the same bits at every level, thread count and split of rows.
// d·q is exact in f32, so the result is that of the exact weights up to the
// f32 sums (1e-7 relative at SmolLM2's head, dev/cpu/head_q8.cpp).
#include "cpu/dense_q8.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "bitrank/error.hpp"
#include "cpu/simd_sum.hpp"

namespace bitrank::cpu {
namespace {

struct Q8Args {
  const float* x;  // [m][32·kb]
  const q8_0* w;   // [r][kb]
  float* out;      // [m][r]
  index_t m, kb, r;
  bool accumulate;
};

void store(const Q8Args& a, index_t t, index_t o, float v) {
  float& dst = a.out[t * a.r + o];
  dst = a.accumulate ? dst + v : v;
}

float sum_row_scalar(const float* x, const q8_0* w, index_t kb) {
  float s[16] = {};
  for (index_t b = 0; b < kb; ++b, x += kQ8Block) {
    const float d = to_f32(w[b].d);
    for (int l = 0; l < 16; ++l) {
      const float p = std::fma(x[16 + l], static_cast<float>(w[b].q[16 + l]), x[l] * static_cast<float>(w[b].q[l]));
      s[l] = std::fma(d, p, s[l]);
    }
  }
  for (int half = 8; half > 0; half /= 2)  // l + l+8, + l+4, + l+2, + l+1
    for (int l = 0; l < half; ++l) s[l] += s[l + half];
  return s[0];
}

__attribute__((target("avx2,f16c,fma"))) float sum_row_avx2(const float* x, const q8_0* w, index_t kb) {
  __m256 s[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (index_t b = 0; b < kb; ++b, x += kQ8Block) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(w[b].d.bits));
    for (int h = 0; h < 2; ++h) {  // lanes 8h .. 8h+7
      const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w[b].q + 8 * h))));
      const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w[b].q + 16 + 8 * h))));
      const __m256 p = _mm256_fmadd_ps(_mm256_loadu_ps(x + 16 + 8 * h), hi, _mm256_mul_ps(_mm256_loadu_ps(x + 8 * h), lo));
      s[h] = _mm256_fmadd_ps(d, p, s[h]);
    }
  }
  return tree_sum8(_mm256_add_ps(s[0], s[1]));
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

__attribute__((target("avx512f,f16c,fma"))) float sum_row_avx512(const float* x, const q8_0* w, index_t kb) {
  __m512 s = _mm512_setzero_ps();
  for (index_t b = 0; b < kb; ++b, x += kQ8Block) {
    const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].q))));
    const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].q + 16))));
    const __m512 p = _mm512_fmadd_ps(_mm512_loadu_ps(x + 16), hi, _mm512_mul_ps(_mm512_loadu_ps(x), lo));
    s = _mm512_fmadd_ps(_mm512_set1_ps(_cvtsh_ss(w[b].d.bits)), p, s);
  }
  return tree_sum16(s);
}

#pragma GCC diagnostic pop

// Rows [o0, o1) of w, each against every row of x (from cache after the first).
template <float (*Sum)(const float*, const q8_0*, index_t)>
void rows(const Q8Args& a, index_t o0, index_t o1) {
  for (index_t o = o0; o < o1; ++o)
    for (index_t t = 0; t < a.m; ++t) store(a, t, o, Sum(a.x + t * a.kb * kQ8Block, a.w + o * a.kb, a.kb));
}

}  // namespace

void dense_q8_dot(const float* x, const q8_0* w, float* out, index_t m, index_t kb, index_t r, bool accumulate,
                  SimdLevel level, ThreadPool& pool) {
  BR_ASSERT(dot_level_runs(level), "dense_forward_q8: this CPU lacks {} (with FMA and F16C)",
            simd_level_name(level));
  const Q8Args a{x, w, out, m, kb, r, accumulate};
  // Chunks of ≥ 64 Ki multiply-adds, counting the conversion as one row of x.
  const index_t grain = std::max<index_t>(1, 65536 / (std::max<index_t>(kb * kQ8Block, 1) * (m + 1)));
  pool.parallel_for(r, [&a, level](index_t o0, index_t o1) {
    switch (level) {
      case SimdLevel::avx512: return rows<sum_row_avx512>(a, o0, o1);
      case SimdLevel::avx2: return rows<sum_row_avx2>(a, o0, o1);
      case SimdLevel::scalar: return rows<sum_row_scalar>(a, o0, o1);
    }
  }, grain);
}

}  // namespace bitrank::cpu
