// Truncated SVD on the CPU: exact (dgesdd, f64) and randomized (Halko et
// al., f32 GEMMs and QR); the checks, sign convention and rounding shared
// with the GPU engine (svd_internal.hpp). Contract, method choice and
// numerics in include/bitrank/blr/svd.hpp.
#include "bitrank/blr/svd.hpp"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "bitrank/rng.hpp"
#include "blr/svd_internal.hpp"
#include "cpu/kernels.hpp"

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

// Randomized range finder + small exact SVD (see the header): k triplets.
Thin randomized(std::span<const float> a, index_t m, index_t n, index_t k, const SvdOptions& opts, std::string_view name) {
  const index_t l = detail::sketch_columns(m, n, k, opts);
  const float* A = a.data();
  std::vector<float> omega = gaussian(static_cast<std::size_t>(n * l), opts.seed);
  std::vector<float> q(static_cast<std::size_t>(m * l)), z(static_cast<std::size_t>(n * l));
  cpu::sgemm(false, false, m, l, n, 1.0f, A, n, omega.data(), l, 0.0f, q.data(), l);  // Y = A·Ω
  orthonormalize(q, m, l, name);
  for (int it = 0; it < opts.power_iters; ++it) {
    cpu::sgemm(true, false, n, l, m, 1.0f, A, n, q.data(), l, 0.0f, z.data(), l);  // Z = Aᵀ·Q
    orthonormalize(z, n, l, name);
    cpu::sgemm(false, false, m, l, n, 1.0f, A, n, z.data(), l, 0.0f, q.data(), l);  // Y = A·Z
    orthonormalize(q, m, l, name);
  }
  std::vector<float> b(static_cast<std::size_t>(l * n));
  cpu::sgemm(true, false, l, n, m, 1.0f, q.data(), l, A, n, 0.0f, b.data(), n);  // B = Qᵀ·A
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

SvdMethod svd_method_for(index_t m, index_t n, index_t r, const SvdOptions& opts) {
  if (opts.method != SvdMethod::automatic) return opts.method;
  const index_t mn = std::min(m, n);
  return mn <= kExactSvdMaxDim || std::min(r, mn) + opts.oversampling >= mn ? SvdMethod::exact : SvdMethod::randomized;
}

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

namespace detail {

void check_svd_input(std::span<const float> a, index_t m, index_t n, index_t r, const SvdOptions& opts,
                     std::string_view name) {
  if (m < 1 || n < 1) fail("truncated_svd: {} has an empty shape {}×{}", name, m, n);
  if (a.size() != static_cast<std::size_t>(m) * static_cast<std::size_t>(n))
    fail("truncated_svd: {} has {} values, shape {}×{} needs {}", name, a.size(), m, n, m * n);
  if (r < 1) fail("truncated_svd: rank {} for {} must be at least 1", r, name);
  if (opts.oversampling < 0) fail("truncated_svd: oversampling {} for {} is negative", opts.oversampling, name);
  if (opts.power_iters < 0) fail("truncated_svd: {} power iterations for {}", opts.power_iters, name);
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!std::isfinite(a[i]))
      fail("truncated_svd: {} [{}×{}] has a non-finite value {} at row {}, column {}", name, m, n, a[i],
           static_cast<index_t>(i) / n, static_cast<index_t>(i) % n);
}

void normalize_signs(SvdF64& f) {
  // Entries within kTie (relative) of the largest count as tied, so that two
  // engines whose vectors differ by rounding pick the same entry: the first.
  constexpr double kTie = 1e-9;
  const index_t m = f.m, n = f.n, k = f.k;
  const auto at = [k](index_t i, index_t c) { return static_cast<std::size_t>(i * k + c); };
  for (index_t c = 0; c < k; ++c) {
    double big = 0;
    for (index_t i = 0; i < m; ++i) big = std::max(big, std::abs(f.u[at(i, c)]));
    index_t arg = 0;
    while (arg < m - 1 && std::abs(f.u[at(arg, c)]) < (1 - kTie) * big) ++arg;
    if (f.u[at(arg, c)] >= 0) continue;
    for (index_t i = 0; i < m; ++i) f.u[at(i, c)] = -f.u[at(i, c)];
    for (index_t j = 0; j < n; ++j) f.v[static_cast<std::size_t>(j * k + c)] = -f.v[static_cast<std::size_t>(j * k + c)];
  }
}

}  // namespace detail

SvdEngine route_by_size(SvdEngine large, index_t min_dim) {
  if (!large) fail("route_by_size: no engine for the large matrices");
  return [large = std::move(large), min_dim](std::span<const float> a, index_t m, index_t n, index_t r,
                                             const SvdOptions& opts, std::string_view name) {
    return std::min(m, n) >= min_dim ? large(a, m, n, r, opts, name) : truncated_svd_f64(a, m, n, r, opts, name);
  };
}

}  // namespace bitrank::blr
