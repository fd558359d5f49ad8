// Host BLR matrix: shape checks and the dense reconstruction Ŵ.
//
// reconstruct reads each path's signs from its bitmaps (ops/bitmap.hpp's
// layout), forms A = diag(h)·S_U·diag(ℓ) [m][r] and B = diag(g)·S_V [n][r]
// in f64 and adds A·Bᵀ by dgemm: an f64 oracle of what the stored f32
// scales and signs mean, for tests and error reports.
#include "bitrank/blr/blr_matrix.hpp"

#include <cblas.h>

#include <cmath>

#include "bitrank/ops/bitmap.hpp"

namespace bitrank::blr {
namespace {

void check_size(std::string_view what, std::size_t p, const char* field, std::size_t got, index_t want) {
  if (got != static_cast<std::size_t>(want))
    fail("{}: path {} {} has {} values, expected {}", what, p, field, got, want);
}

void check_finite(std::string_view what, std::size_t p, const char* field, const std::vector<float>& v) {
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) fail("{}: path {} {}[{}] is {}", what, p, field, i, v[i]);
}

}  // namespace

void check_blr(const HostBlrMatrix& blr, std::string_view what) {
  if (blr.m < 1 || blr.n < 1) fail("{}: shape {}×{} is empty", what, blr.m, blr.n);
  if (blr.r < 32 || blr.r % 32 != 0) fail("{}: rank {} is not a positive multiple of 32", what, blr.r);
  if (blr.paths.empty() || blr.paths.size() > 2) fail("{}: {} paths, expected 1 or 2", what, blr.paths.size());
  const index_t words = sign_words(blr.r);
  for (std::size_t p = 0; p < blr.paths.size(); ++p) {
    const HostBlrPath& path = blr.paths[p];
    check_size(what, p, "sign_u", path.sign_u.size(), blr.m * words);
    check_size(what, p, "sign_v", path.sign_v.size(), blr.n * words);
    check_size(what, p, "h", path.h.size(), blr.m);
    check_size(what, p, "l", path.l.size(), blr.r);
    check_size(what, p, "g", path.g.size(), blr.n);
    check_finite(what, p, "h", path.h);
    check_finite(what, p, "l", path.l);
    check_finite(what, p, "g", path.g);
  }
}

std::vector<double> reconstruct(const HostBlrMatrix& blr) {
  check_blr(blr, "reconstruct");
  const index_t m = blr.m, n = blr.n, r = blr.r;
  std::vector<double> w(static_cast<std::size_t>(m * n), 0.0);
  const index_t words = sign_words(r);
  std::vector<double> a(static_cast<std::size_t>(m * r)), b(static_cast<std::size_t>(n * r));
  const auto sign = [words](const std::vector<std::uint32_t>& bits, index_t row, index_t k) {
    return sign_bit(bits.data() + row * words, k) ? 1.0 : -1.0;
  };
  for (const HostBlrPath& path : blr.paths) {
    for (index_t i = 0; i < m; ++i)
      for (index_t k = 0; k < r; ++k)
        a[static_cast<std::size_t>(i * r + k)] =
            double(path.h[static_cast<std::size_t>(i)]) * sign(path.sign_u, i, k) * double(path.l[static_cast<std::size_t>(k)]);
    for (index_t j = 0; j < n; ++j)
      for (index_t k = 0; k < r; ++k)
        b[static_cast<std::size_t>(j * r + k)] = double(path.g[static_cast<std::size_t>(j)]) * sign(path.sign_v, j, k);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(r), 1.0, a.data(), static_cast<blasint>(r), b.data(), static_cast<blasint>(r), 1.0,
                w.data(), static_cast<blasint>(n));
  }
  return w;
}

double relative_error(std::span<const float> w, const HostBlrMatrix& blr, std::span<const float> column_weight) {
  const std::vector<double> what = reconstruct(blr);
  if (w.size() != what.size()) fail("relative_error: W has {} values, the BLR matrix {}×{} has {}", w.size(), blr.m, blr.n, what.size());
  if (!column_weight.empty() && std::ssize(column_weight) != blr.n)
    fail("relative_error: {} column weights for a matrix of {} columns", column_weight.size(), blr.n);
  double num = 0, den = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double c = column_weight.empty() ? 1.0 : double(column_weight[i % static_cast<std::size_t>(blr.n)]);
    const double d = (double(w[i]) - what[i]) * c;
    num += d * d;
    den += double(w[i]) * c * double(w[i]) * c;
  }
  if (den == 0) fail("relative_error: W is zero");
  return std::sqrt(num / den);
}

void check_gram(std::span<const float> gram, index_t n, std::string_view what) {
  if (gram.empty()) return;
  const auto un = static_cast<std::size_t>(n);
  if (gram.size() != un * un) fail("{}: the input Gram has {} values, {}×{} needs {}", what, gram.size(), n, n, un * un);
  for (std::size_t i = 0; i < un; ++i) {
    if (!(gram[i * un + i] >= 0)) fail("{}: the input Gram's diagonal entry {} is {}, expected ≥ 0", what, i, gram[i * un + i]);
    for (std::size_t j = 0; j < i; ++j)
      if (!std::isfinite(gram[i * un + j]) || gram[i * un + j] != gram[j * un + i])
        fail("{}: the input Gram is not symmetric and finite at ({}, {})", what, i, j);
  }
}

double relative_output_error(std::span<const float> w, const HostBlrMatrix& blr, std::span<const float> gram) {
  check_gram(gram, blr.n, "relative_output_error");
  if (gram.empty()) fail("relative_output_error: no input Gram");
  const std::vector<double> what = reconstruct(blr);
  if (w.size() != what.size()) fail("relative_output_error: W has {} values, the BLR matrix {}×{} has {}", w.size(), blr.m, blr.n, what.size());
  // tr(D·C·Dᵀ) and tr(W·C·Wᵀ): the products in f32 (sgemm), the sums in f64.
  const auto m = static_cast<blasint>(blr.m), n = static_cast<blasint>(blr.n);
  std::vector<float> d(w.size()), dc(w.size()), wc(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) d[i] = static_cast<float>(double(w[i]) - what[i]);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, n, 1.0f, d.data(), n, gram.data(), n, 0.0f, dc.data(), n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, n, 1.0f, w.data(), n, gram.data(), n, 0.0f, wc.data(), n);
  double num = 0, den = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    num += double(d[i]) * double(dc[i]);
    den += double(w[i]) * double(wc[i]);
  }
  if (!(den > 0)) fail("relative_output_error: W·C·Wᵀ is {}", den);
  return std::sqrt(std::max(num, 0.0) / den);
}

}  // namespace bitrank::blr
