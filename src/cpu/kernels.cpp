#include "cpu/kernels.hpp"

#include <cblas.h>
#include <immintrin.h>

#include <algorithm>

namespace bitrank::cpu {

void sgemm(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, float alpha, const float* a, index_t lda,
           const float* b, index_t ldb, float beta, float* c, index_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

namespace {

bool cpu_has_f16c() {
  static const bool has = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return has;
}

__attribute__((target("avx,f16c"))) void stage_row_f16c(const float* src, const float* col, float scale, float* dst,
                                                          index_t k) {
  const __m256 vs = _mm256_set1_ps(scale);
  index_t j = 0;
  if (col) {
    for (; j + 8 <= k; j += 8) {
      const __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(src + j), _mm256_loadu_ps(col + j)), vs);
      _mm256_storeu_ps(dst + j, _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)));
    }
    for (; j < k; ++j) dst[j] = staged_value(src[j], col[j], scale);
  } else {
    for (; j + 8 <= k; j += 8) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(src + j), vs);
      _mm256_storeu_ps(dst + j, _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)));
    }
    for (; j < k; ++j) dst[j] = round_f16(src[j] * scale);
  }
}

__attribute__((target("avx,f16c"))) void f16_from_f32_f16c(const float* src, index_t count, f16* dst) {
  index_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < count; ++i) dst[i] = to_f16(src[i]);
}

__attribute__((target("avx,f16c"))) void f32_from_f16_f16c(const f16* src, index_t count, float* dst) {
  index_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < count; ++i) dst[i] = to_f32(src[i]);
}

}  // namespace

static_assert(sizeof(f16) == 2, "f16 is its 16 bits");

void f16_from_f32(const float* src, index_t count, f16* dst) {
  if (cpu_has_f16c()) return f16_from_f32_f16c(src, count, dst);
  for (index_t i = 0; i < count; ++i) dst[i] = to_f16(src[i]);
}

void f32_from_f16(const f16* src, index_t count, float* dst) {
  if (cpu_has_f16c()) return f32_from_f16_f16c(src, count, dst);
  for (index_t i = 0; i < count; ++i) dst[i] = to_f32(src[i]);
}

void stage_row(const float* src, const float* col, float scale, float* dst, index_t k) {
  if (cpu_has_f16c()) return stage_row_f16c(src, col, scale, dst, k);
  if (col) {
    for (index_t j = 0; j < k; ++j) dst[j] = staged_value(src[j], col[j], scale);
  } else {
    for (index_t j = 0; j < k; ++j) dst[j] = round_f16(src[j] * scale);
  }
}

void stage_rounded(const float* src, index_t lds, const float* col, float scale, index_t rows, index_t k, float* dst,
                   index_t ldd, ThreadPool& pool) {
  // One captured pointer keeps the std::function inline: no allocation per call.
  struct Job {
    const float *src, *col;
    float scale;
    index_t lds, k, ldd;
    float* dst;
  } job{src, col, scale, lds, k, ldd, dst};
  pool.parallel_for(
      rows,
      [&job](index_t r0, index_t r1) {
        for (index_t t = r0; t < r1; ++t) stage_row(job.src + t * job.lds, job.col, job.scale, job.dst + t * job.ldd, job.k);
      },
      std::max<index_t>(1, 16384 / std::max<index_t>(k, 1)));
}

namespace {
template <class Out>
Out sign_value(bool plus);
template <>
float sign_value<float>(bool plus) {
  return plus ? 1.0f : -1.0f;
}
template <>
f16 sign_value<f16>(bool plus) {
  return f16{static_cast<std::uint16_t>(plus ? 0x3c00u : 0xbc00u)};
}
}  // namespace

template <class Out>
void expand_sign_planes(const std::uint32_t* bits, index_t rows, index_t r, Out* plane, Out* plane_t, ThreadPool& pool) {
  struct Job {
    const std::uint32_t* bits;
    index_t rows, r, words;
    Out *plane, *plane_t;
  } job{bits, rows, r, (r + 31) / 32, plane, plane_t};
  if (plane) {
    pool.parallel_for(rows, [&job](index_t i0, index_t i1) {
      for (index_t i = i0; i < i1; ++i) {
        const std::uint32_t* row = job.bits + i * job.words;
        Out* out = job.plane + i * job.r;
        for (index_t j = 0; j < job.r; ++j) out[j] = sign_value<Out>((row[j / 32] >> (j % 32)) & 1u);
      }
    });
  }
  if (plane_t) {
    // The transpose walks a column of the bitmap per output row.
    pool.parallel_for(r, [&job](index_t j0, index_t j1) {
      for (index_t j = j0; j < j1; ++j) {
        const index_t w = j / 32;
        const unsigned b = static_cast<unsigned>(j % 32);
        Out* out = job.plane_t + j * job.rows;
        for (index_t i = 0; i < job.rows; ++i) out[i] = sign_value<Out>((job.bits[i * job.words + w] >> b) & 1u);
      }
    });
  }
}

template void expand_sign_planes<float>(const std::uint32_t*, index_t, index_t, float*, float*, ThreadPool&);
template void expand_sign_planes<f16>(const std::uint32_t*, index_t, index_t, f16*, f16*, ThreadPool&);

}  // namespace bitrank::cpu
