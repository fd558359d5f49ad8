// The checks, method choice and sign convention every truncated-SVD engine
// applies (contract: include/bitrank/svd_engine.hpp).
#include "bitrank/svd_engine.hpp"

#include <cmath>

#include "bitrank/error.hpp"

namespace bitrank {

SvdMethod svd_method_for(index_t m, index_t n, index_t r, const SvdOptions& opts) {
  if (opts.method != SvdMethod::automatic) return opts.method;
  const index_t mn = std::min(m, n);
  return mn <= kExactSvdMaxDim || std::min(r, mn) + opts.oversampling >= mn ? SvdMethod::exact : SvdMethod::randomized;
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

}  // namespace bitrank
