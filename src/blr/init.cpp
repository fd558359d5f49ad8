// Dual-SVID initialisation (algorithm, scale convention and numerics in
// include/bitrank/blr/init.hpp).
#include "bitrank/blr/init.hpp"

#include <cblas.h>

#include <cmath>

#include "bitrank/backend.hpp"
#include "bitrank/blr/refine.hpp"
#include "blr/balance.hpp"

namespace bitrank::blr {
namespace {

struct Rank1 {
  std::vector<double> a, b;  // M ≈ a·bᵀ, both ≥ 0
};

double norm2(const std::vector<double>& x) { return cblas_dnrm2(static_cast<blasint>(x.size()), x.data(), 1); }

// Top singular pair of a non-negative M [rows][cols] (f32), split so that
// ‖a‖ = ‖b‖ = √σ₁. Power iteration on f64 from v = 1/√cols.
Rank1 rank1_nonneg(const std::vector<float>& mf, index_t rows, index_t cols) {
  const std::vector<double> mat(mf.begin(), mf.end());
  const auto mv = [&](const std::vector<double>& v, std::vector<double>& u) {
    cblas_dgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(rows), static_cast<blasint>(cols), 1.0, mat.data(),
                static_cast<blasint>(cols), v.data(), 1, 0.0, u.data(), 1);
  };
  std::vector<double> v(static_cast<std::size_t>(cols), 1.0 / std::sqrt(double(cols))), u(static_cast<std::size_t>(rows)),
      vn(static_cast<std::size_t>(cols));
  Rank1 out{std::vector<double>(static_cast<std::size_t>(rows), 0.0), std::vector<double>(static_cast<std::size_t>(cols), 0.0)};
  for (int it = 0; it < 1000; ++it) {
    mv(v, u);
    const double nu = norm2(u);
    if (nu == 0) return out;  // M = 0 (a non-negative M with M·1 = 0 is zero)
    for (double& x : u) x /= nu;
    cblas_dgemv(CblasRowMajor, CblasTrans, static_cast<blasint>(rows), static_cast<blasint>(cols), 1.0, mat.data(),
                static_cast<blasint>(cols), u.data(), 1, 0.0, vn.data(), 1);
    const double nv = norm2(vn);
    double moved = 0;
    for (std::size_t k = 0; k < vn.size(); ++k) {
      vn[k] /= nv;
      moved += (vn[k] - v[k]) * (vn[k] - v[k]);
    }
    v.swap(vn);
    if (std::sqrt(moved) < 1e-10) break;
  }
  // a·bᵀ = (M·v)·vᵀ: the least-squares left factor for the final v.
  mv(v, u);
  const double sigma = norm2(u);
  if (sigma == 0) return out;
  const double root = std::sqrt(sigma);
  for (std::size_t i = 0; i < u.size(); ++i) out.a[i] = u[i] / sigma * root;
  for (std::size_t k = 0; k < v.size(); ++k) out.b[k] = v[k] * root;
  return out;
}

// g /= c on every path of the BLR matrix of W·diag(c), then rebalanced: the matrix of W.
void unweight_columns(HostBlrMatrix& blr, std::span<const float> c) {
  for (HostBlrPath& p : blr.paths) {
    std::vector<double> h(p.h.begin(), p.h.end()), l(p.l.begin(), p.l.end()), g(p.g.size());
    for (std::size_t j = 0; j < g.size(); ++j) g[j] = double(p.g[j]) / double(c[j]);
    balance(h, l, g);
    p.h.assign(h.begin(), h.end());
    p.l.assign(l.begin(), l.end());
    p.g.assign(g.begin(), g.end());
  }
}

// One Dual-SVID path of w [m][n] at rank r.
HostBlrPath one_path(std::span<const float> w, index_t m, index_t n, index_t r, const SvdOptions& svd_opts,
                     const SvdEngine& engine, const std::string& name, SignMagnitudes* mags) {
  const Svd svd = truncated_svd(w, m, n, r, svd_opts, name, engine);
  // U' = U·√Σ, V' = V·√Σ.
  std::vector<float> up(svd.u.size()), vp(svd.v.size());
  for (index_t k = 0; k < r; ++k) {
    const float root = std::sqrt(svd.s[static_cast<std::size_t>(k)]);
    for (index_t i = 0; i < m; ++i) up[static_cast<std::size_t>(i * r + k)] = svd.u[static_cast<std::size_t>(i * r + k)] * root;
    for (index_t j = 0; j < n; ++j) vp[static_cast<std::size_t>(j * r + k)] = svd.v[static_cast<std::size_t>(j * r + k)] * root;
  }
  HostBlrPath path;
  const index_t words = sign_words(r);
  path.sign_u.resize(static_cast<std::size_t>(m * words));
  path.sign_v.resize(static_cast<std::size_t>(n * words));
  {
    // The CPU backend's pack (host memory): bit = (x ≥ 0), sign(0) = +1.
    const auto cpu = make_cpu_backend();
    cpu->bitmap().pack_signs(CView<float>(up.data(), Shape{m, r}), View<std::uint32_t>(path.sign_u.data(), Shape{m, words}));
    cpu->bitmap().pack_signs(CView<float>(vp.data(), Shape{n, r}), View<std::uint32_t>(path.sign_v.data(), Shape{n, words}));
  }
  for (float& x : up) x = std::abs(x);
  for (float& x : vp) x = std::abs(x);
  Rank1 hu = rank1_nonneg(up, m, r), gv = rank1_nonneg(vp, n, r);
  std::vector<double> l(static_cast<std::size_t>(r));
  for (std::size_t k = 0; k < l.size(); ++k) l[k] = hu.b[k] * gv.b[k];
  balance(hu.a, l, gv.a);
  path.h.assign(hu.a.begin(), hu.a.end());
  path.l.assign(l.begin(), l.end());
  path.g.assign(gv.a.begin(), gv.a.end());
  if (mags) {
    mags->u = std::move(up);
    mags->v = std::move(vp);
  }
  return path;
}

}  // namespace

HostBlrMatrix dual_svid(std::span<const float> w, index_t m, index_t n, const InitOptions& opts,
                        std::vector<SignMagnitudes>* magnitudes) {
  if (m < 1 || n < 1) fail("dual_svid: {} has an empty shape {}×{}", opts.name, m, n);
  if (w.size() != static_cast<std::size_t>(m) * static_cast<std::size_t>(n))
    fail("dual_svid: {} has {} values, shape {}×{} needs {}", opts.name, w.size(), m, n, m * n);
  if (opts.rank < 32 || opts.rank % 32 != 0) fail("dual_svid: rank {} for {} is not a positive multiple of 32", opts.rank, opts.name);
  if (opts.paths != 1 && opts.paths != 2) fail("dual_svid: {} paths for {}, expected 1 or 2", opts.paths, opts.name);
  if (!opts.column_scale.empty()) {
    const std::vector<float>& c = opts.column_scale;
    if (std::ssize(c) != n) fail("dual_svid: {} column scales for {}, which has {} columns", c.size(), opts.name, n);
    for (std::size_t j = 0; j < c.size(); ++j)
      if (!(std::isfinite(c[j]) && c[j] > 0))
        fail("dual_svid: column scale {} of {} is {}, expected finite and > 0", j, opts.name, c[j]);
    std::vector<float> weighted(w.begin(), w.end());
    for (std::size_t i = 0; i < weighted.size(); ++i) weighted[i] *= c[i % c.size()];
    InitOptions plain = opts;
    plain.column_scale = {};
    if (!opts.input_gram.empty()) plain.refine_sweeps = 0;  // refined on W under the Gram below
    HostBlrMatrix blr = dual_svid(weighted, m, n, plain, magnitudes);
    unweight_columns(blr, c);
    if (!opts.input_gram.empty() && opts.refine_sweeps > 0) refine(blr, w, opts.refine_sweeps, opts.input_gram);
    return blr;
  }

  HostBlrMatrix blr;
  blr.m = m;
  blr.n = n;
  blr.r = opts.rank;
  if (magnitudes) magnitudes->assign(static_cast<std::size_t>(opts.paths), {});
  auto mag = [&](int p) { return magnitudes ? &(*magnitudes)[static_cast<std::size_t>(p)] : nullptr; };
  blr.paths.push_back(one_path(w, m, n, opts.rank, opts.svd, opts.engine, opts.name, mag(0)));
  if (opts.paths == 2) {
    const std::vector<double> w1 = reconstruct(blr);
    std::vector<float> residual(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) residual[i] = static_cast<float>(double(w[i]) - w1[i]);
    SvdOptions second = opts.svd;
    second.seed += 1;
    blr.paths.push_back(one_path(residual, m, n, opts.rank, second, opts.engine, opts.name + " (residual)", mag(1)));
  }
  if (opts.refine_sweeps > 0) refine(blr, w, opts.refine_sweeps, opts.input_gram);
  return blr;
}

}  // namespace bitrank::blr
