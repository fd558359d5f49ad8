#include "support/matrices.hpp"

#include <cblas.h>
#include <lapacke.h>

#include <cmath>

#include "bitrank/error.hpp"
#include "bitrank/rng.hpp"

namespace bitrank::test {

std::vector<double> orthonormal_columns(index_t rows, index_t cols, std::uint64_t seed) {
  BR_ASSERT(rows >= cols && cols >= 1);
  const auto g = gaussian(static_cast<std::size_t>(rows * cols), seed);
  std::vector<double> q(g.begin(), g.end());
  std::vector<double> tau(static_cast<std::size_t>(cols));
  const auto r = static_cast<lapack_int>(rows), c = static_cast<lapack_int>(cols);
  BR_ASSERT(LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, r, c, q.data(), c, tau.data()) == 0);
  BR_ASSERT(LAPACKE_dorgqr(LAPACK_ROW_MAJOR, r, c, c, q.data(), c, tau.data()) == 0);
  return q;
}

std::vector<float> matrix_with_spectrum(index_t m, index_t n, const std::vector<double>& s, std::uint64_t seed) {
  const auto k = static_cast<index_t>(s.size());
  BR_ASSERT(k >= 1 && k <= std::min(m, n));
  auto q1 = orthonormal_columns(m, k, seed), q2 = orthonormal_columns(n, k, seed + 1000);
  for (index_t i = 0; i < m; ++i)
    for (index_t c = 0; c < k; ++c) q1[static_cast<std::size_t>(i * k + c)] *= s[static_cast<std::size_t>(c)];
  std::vector<double> w(static_cast<std::size_t>(m * n));
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), 1.0, q1.data(), static_cast<blasint>(k), q2.data(), static_cast<blasint>(k), 0.0,
              w.data(), static_cast<blasint>(n));
  return std::vector<float>(w.begin(), w.end());
}

std::vector<double> singular_values(const std::vector<float>& w, index_t m, index_t n) {
  BR_ASSERT(w.size() == static_cast<std::size_t>(m * n));
  std::vector<double> a(w.begin(), w.end()), s(static_cast<std::size_t>(std::min(m, n)));
  // No vectors are computed, but LAPACKE's row-major wrapper still checks ldvt ≥ n.
  std::vector<double> unused(static_cast<std::size_t>(std::max(m, n)));
  const lapack_int info = LAPACKE_dgesdd(LAPACK_ROW_MAJOR, 'N', static_cast<lapack_int>(m), static_cast<lapack_int>(n),
                                         a.data(), static_cast<lapack_int>(n), s.data(), unused.data(), 1, unused.data(),
                                         static_cast<lapack_int>(n));
  BR_ASSERT(info == 0, "dgesdd info {}", info);
  return s;
}

double rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  BR_ASSERT(a.size() == b.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace bitrank::test
