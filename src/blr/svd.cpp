// Truncated SVD on the CPU: exact (dgesdd, f64) and randomized (Halko et
// al., f32 GEMMs and QR), straight on LAPACKE / CBLAS; the checks, method
// choice and sign convention are the ones shared with the GPU engine
// (bitrank/svd_engine.hpp). Numerics in include/bitrank/blr/svd.hpp.
#include "bitrank/blr/svd.hpp"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "bitrank/rng.hpp"

namespace bitrank::blr {
namespace {

lapack_int lapack_dim(index_t v, std::string_view name) {
  if (v > INT_MAX) fail("truncated_svd: {} has a dimension {} beyond LAPACK's 32-bit sizes", name, v);
  return static_cast<lapack_int>(v);
}

// Thin SVD of a row-major f64 [m][n] by dgesdd, truncated to its first k ≤
// min(m, n) triplets: u [m][k], s [k], v [n][k] (f64).
struct Thin {
  std::vector<double> u, s, v;
};

Thin gesdd(std::vector<double> a, index_t m, index_t n, index_t k, std::string_view name) {
  const index_t mn = std::min(m, n);
  std::vector<double> u(static_cast<std::size_t>(m * mn)), s(static_cast<std::size_t>(mn)), vt(static_cast<std::size_t>(mn * n));
  const lapack_int info = LAPACKE_dgesdd(LAPACK_ROW_MAJOR, 'S', lapack_dim(m, name), lapack_dim(n, name), a.data(),
                                         lapack_dim(n, name), s.data(), u.data(), lapack_dim(mn, name), vt.data(),
                                         lapack_dim(n, name));
  if (info != 0) fail("truncated_svd: dgesdd on {} [{}×{}] failed (info {})", name, m, n, info);
  Thin out;
  out.u.resize(static_cast<std::size_t>(m * k));
  out.v.resize(static_cast<std::size_t>(n * k));
  out.s.assign(s.begin(), s.begin() + k);
  for (index_t i = 0; i < m; ++i)
    for (index_t c = 0; c < k; ++c) out.u[static_cast<std::size_t>(i * k + c)] = u[static_cast<std::size_t>(i * mn + c)];
  for (index_t c = 0; c < k; ++c)
    for (index_t j = 0; j < n; ++j) out.v[static_cast<std::size_t>(j * k + c)] = vt[static_cast<std::size_t>(c * n + j)];
  return out;
}

// Row-major y [rows][cols] (rows ≥ cols) ← the Q of its thin QR.
void orthonormalize(std::vector<float>& y, index_t rows, index_t cols, std::string_view name) {
  std::vector<float> tau(static_cast<std::size_t>(cols));
  const lapack_int r = lapack_dim(rows, name), c = lapack_dim(cols, name);
  lapack_int info = LAPACKE_sgeqrf(LAPACK_ROW_MAJOR, r, c, y.data(), c, tau.data());
  if (info == 0) info = LAPACKE_sorgqr(LAPACK_ROW_MAJOR, r, c, c, y.data(), c, tau.data());
  if (info != 0) fail("truncated_svd: QR of the sketch of {} [{}×{}] failed (info {})", name, rows, cols, info);
}

// Row-major C [rows][cols] = op(A)·B by OpenBLAS sgemm (A [rows][inner], or
// [inner][rows] when trans_a; B [inner][cols]), overwritten.
void sgemm(bool trans_a, index_t rows, index_t cols, index_t inner, const float* a, index_t lda, const float* b,
           float* c) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, CblasNoTrans, static_cast<blasint>(rows),
              static_cast<blasint>(cols), static_cast<blasint>(inner), 1.0f, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(cols), 0.0f, c, static_cast<blasint>(cols));
}

// Randomized range finder + small exact SVD (see the header): k triplets.
Thin randomized(std::span<const float> a, index_t m, index_t n, index_t k, const SvdOptions& opts, std::string_view name) {
  const index_t l = detail::sketch_columns(m, n, k, opts);
  const float* A = a.data();
  std::vector<float> omega = gaussian(static_cast<std::size_t>(n * l), opts.seed);
  std::vector<float> q(static_cast<std::size_t>(m * l)), z(static_cast<std::size_t>(n * l));
  sgemm(false, m, l, n, A, n, omega.data(), q.data());  // Y = A·Ω
  orthonormalize(q, m, l, name);
  for (int it = 0; it < opts.power_iters; ++it) {
    sgemm(true, n, l, m, A, n, q.data(), z.data());  // Z = Aᵀ·Q
    orthonormalize(z, n, l, name);
    sgemm(false, m, l, n, A, n, z.data(), q.data());  // Y = A·Z
    orthonormalize(q, m, l, name);
  }
  std::vector<float> b(static_cast<std::size_t>(l * n));
  sgemm(true, l, n, m, q.data(), l, A, b.data());  // B = Qᵀ·A
  Thin small = gesdd(std::vector<double>(b.begin(), b.end()), l, n, k, name);
  // U = Q·Ũ in f64 (Ũ [l][k] is small; Q is rounded to f32 already).
  std::vector<double> qd(q.begin(), q.end());
  Thin out;
  out.u.resize(static_cast<std::size_t>(m * k));
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(k),
              static_cast<blasint>(l), 1.0, qd.data(), static_cast<blasint>(l), small.u.data(), static_cast<blasint>(k), 0.0,
              out.u.data(), static_cast<blasint>(k));
  out.s = std::move(small.s);
  out.v = std::move(small.v);
  return out;
}

}  // namespace

SvdF64 truncated_svd_f64(std::span<const float> a, index_t m, index_t n, index_t r, const SvdOptions& opts,
                         std::string_view name) {
  detail::check_svd_input(a, m, n, r, opts, name);
  SvdF64 out = detail::svd_frame(m, n, r, opts);
  Thin t = out.method == SvdMethod::exact ? gesdd(std::vector<double>(a.begin(), a.end()), m, n, out.k, name)
                                          : randomized(a, m, n, out.k, opts, name);
  out.u = std::move(t.u);
  out.s = std::move(t.s);
  out.v = std::move(t.v);
  detail::normalize_signs(out);
  return out;
}

Svd to_svd(const SvdF64& f) {
  const index_t m = f.m, n = f.n, r = f.r, k = f.k;
  BR_ASSERT(k <= r && f.u.size() == static_cast<std::size_t>(m * k) && f.v.size() == static_cast<std::size_t>(n * k) &&
                f.s.size() == static_cast<std::size_t>(k),
            "to_svd: factors of {} triplets do not fit {}×{} at rank {}", k, m, n, r);
  Svd out;
  out.m = m;
  out.n = n;
  out.r = r;
  out.method = f.method;
  out.u.assign(static_cast<std::size_t>(m * r), 0.0f);
  out.v.assign(static_cast<std::size_t>(n * r), 0.0f);
  out.s.assign(static_cast<std::size_t>(r), 0.0f);
  for (index_t i = 0; i < m; ++i)
    for (index_t c = 0; c < k; ++c) out.u[static_cast<std::size_t>(i * r + c)] = static_cast<float>(f.u[static_cast<std::size_t>(i * k + c)]);
  for (index_t j = 0; j < n; ++j)
    for (index_t c = 0; c < k; ++c) out.v[static_cast<std::size_t>(j * r + c)] = static_cast<float>(f.v[static_cast<std::size_t>(j * k + c)]);
  for (index_t c = 0; c < k; ++c) out.s[static_cast<std::size_t>(c)] = static_cast<float>(f.s[static_cast<std::size_t>(c)]);
  return out;
}

Svd truncated_svd(std::span<const float> a, index_t m, index_t n, index_t r, const SvdOptions& opts, std::string_view name,
                  const SvdEngine& engine) {
  return to_svd(engine ? engine(a, m, n, r, opts, name) : truncated_svd_f64(a, m, n, r, opts, name));
}

SvdEngine route_by_size(SvdEngine large, index_t min_dim) {
  if (!large) fail("route_by_size: no engine for the large matrices");
  return [large = std::move(large), min_dim](std::span<const float> a, index_t m, index_t n, index_t r,
                                             const SvdOptions& opts, std::string_view name) {
    return std::min(m, n) >= min_dim ? large(a, m, n, r, opts, name) : truncated_svd_f64(a, m, n, r, opts, name);
  };
}

}  // namespace bitrank::blr
