#include "cpu/kernels.hpp"

#include <cblas.h>

#include <algorithm>

namespace bitrank::cpu {

void sgemm(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, float alpha, const float* a, index_t lda,
           const float* b, index_t ldb, float beta, float* c, index_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void stage_rounded(const float* src, index_t lds, const float* col, float scale, index_t rows, index_t k, float* dst,
                   index_t ldd, ThreadPool& pool) {
  pool.parallel_for(
      rows,
      [&](index_t r0, index_t r1) {
        for (index_t t = r0; t < r1; ++t) {
          const float* s = src + t * lds;
          float* d = dst + t * ldd;
          if (col) {
            for (index_t j = 0; j < k; ++j) d[j] = staged_value(s[j], col[j], scale);
          } else {
            for (index_t j = 0; j < k; ++j) d[j] = round_f16(s[j] * scale);
          }
        }
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
  const index_t words = (r + 31) / 32;
  if (plane) {
    pool.parallel_for(rows, [&](index_t i0, index_t i1) {
      for (index_t i = i0; i < i1; ++i)
        for (index_t j = 0; j < r; ++j) plane[i * r + j] = sign_value<Out>((bits[i * words + j / 32] >> (j % 32)) & 1u);
    });
  }
  if (plane_t) {
    // Transposed output walks columns of the bitmap; tile rows for locality.
    pool.parallel_for(r, [&](index_t j0, index_t j1) {
      for (index_t j = j0; j < j1; ++j) {
        const index_t w = j / 32;
        const unsigned b = static_cast<unsigned>(j % 32);
        Out* out = plane_t + j * rows;
        for (index_t i = 0; i < rows; ++i) out[i] = sign_value<Out>((bits[i * words + w] >> b) & 1u);
      }
    });
  }
}

template void expand_sign_planes<float>(const std::uint32_t*, index_t, index_t, float*, float*, ThreadPool&);
template void expand_sign_planes<f16>(const std::uint32_t*, index_t, index_t, f16*, f16*, ThreadPool&);

}  // namespace bitrank::cpu
