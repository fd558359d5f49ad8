// Horizontal sums of SIMD registers in one fixed tree, shared by the CPU
// kernels whose results must not depend on the SIMD level (blr_infer,
// dense_f16_dot): lanes l + l+4, then + l+2, then + l+1 of an 8-lane
// register, and for 16 lanes first l + l+8. The scalar code of those
// kernels sums its lanes in the same tree, so every level agrees to the bit.
#pragma once

#include <immintrin.h>

namespace bitrank::cpu {

// Σ of the 8 lanes of v: (l + l+4), + l+2, + l+1.
__attribute__((target("avx"))) inline float tree_sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // l + l+4
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));                                          // l + l+2
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));                                      // 0 + 1
  return _mm_cvtss_f32(s);
}

// GCC 12's avx512fintrin.h casts through _mm512_undefined_*, which
// -Wmaybe-uninitialized reports at every inlined use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// Σ of the 16 lanes of v: l + l+8, then tree_sum8.
__attribute__((target("avx512f"))) inline float tree_sum16(__m512 v) {
  const __m256 upper = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return tree_sum8(_mm256_add_ps(_mm512_castps512_ps256(v), upper));
}

#pragma GCC diagnostic pop

}  // namespace bitrank::cpu
