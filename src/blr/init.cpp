// Dual-SVID initialisation (algorithm, scale convention and numerics in
// include/bitrank/blr/init.hpp).
#include "bitrank/blr/init.hpp"

#include <cblas.h>
#include <lapacke.h>

#include <cmath>
#include <limits>

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

blasint bi(index_t v) { return static_cast<blasint>(v); }

// y [rows][r] = x·R, x [rows][r] and R [r][r] row-major f64.
void times_rotation(const std::vector<double>& x, index_t rows, index_t r, const std::vector<double>& rot,
                    std::vector<double>& y) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(rows), bi(r), bi(r), 1.0, x.data(), bi(r), rot.data(), bi(r),
              0.0, y.data(), bi(r));
}

// One factor of itq_rotation: x [rows][r], y = x·R, b = sign(y), l1 = ‖y‖₁.
struct ItqSide {
  std::vector<double> x, y, b;
  index_t rows = 0;
  double norm2 = 0, l1 = 0;

  ItqSide(std::span<const float> xf, index_t rows_)
      : x(xf.begin(), xf.end()), y(x.size()), b(x.size()), rows(rows_),
        norm2(cblas_ddot(bi(std::ssize(x)), x.data(), 1, x.data(), 1)) {}
  void rotate(const std::vector<double>& rot, index_t r) {
    times_rotation(x, rows, r, rot, y);
    l1 = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      l1 += std::abs(y[i]);
      b[i] = y[i] >= 0 ? 1.0 : -1.0;  // sign(0) = +1, as pack_signs
    }
  }
  double weight() const { return l1 / (double(rows) * norm2); }    // a (or b) of M
  double fit() const { return l1 * l1 / (double(rows) * norm2); }  // this factor's term of J
};

// x [rows][r] (f32) ← x·R.
void apply_rotation(std::vector<float>& x, index_t rows, index_t r, const std::vector<double>& rot) {
  const std::vector<double> xd(x.begin(), x.end());
  std::vector<double> y(xd.size());
  times_rotation(xd, rows, r, rot, y);
  x.assign(y.begin(), y.end());
}

// One Dual-SVID path of w [m][n] at rank r.
HostBlrPath one_path(std::span<const float> w, index_t m, index_t n, index_t r, const SvdOptions& svd_opts,
                     const SvdEngine& engine, const std::string& name, int rotation_iterations, SignMagnitudes* mags) {
  const Svd svd = truncated_svd(w, m, n, r, svd_opts, name, engine);
  // U' = U·√Σ, V' = V·√Σ.
  std::vector<float> up(svd.u.size()), vp(svd.v.size());
  for (index_t k = 0; k < r; ++k) {
    const float root = std::sqrt(svd.s[static_cast<std::size_t>(k)]);
    for (index_t i = 0; i < m; ++i) up[static_cast<std::size_t>(i * r + k)] = svd.u[static_cast<std::size_t>(i * r + k)] * root;
    for (index_t j = 0; j < n; ++j) vp[static_cast<std::size_t>(j * r + k)] = svd.v[static_cast<std::size_t>(j * r + k)] * root;
  }
  if (rotation_iterations > 0) {  // U' ← U'·R, V' ← V'·R: the same product, closer to scaled signs
    const LatentRotation rot = itq_rotation(up, m, vp, n, r, rotation_iterations);
    apply_rotation(up, m, r, rot.r);
    apply_rotation(vp, n, r, rot.r);
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

LatentRotation itq_rotation(std::span<const float> u, index_t m, std::span<const float> v, index_t n, index_t r,
                            int iterations) {
  if (r < 1 || m < 1 || n < 1 || u.size() != static_cast<std::size_t>(m * r) || v.size() != static_cast<std::size_t>(n * r))
    fail("itq_rotation: factors of {} and {} values for shapes {}×{} and {}×{}", u.size(), v.size(), m, r, n, r);
  if (iterations < 0) fail("itq_rotation: {} iterations, expected ≥ 0", iterations);
  const auto rr = static_cast<std::size_t>(r * r);
  LatentRotation out;
  out.r.assign(rr, 0.0);
  for (index_t k = 0; k < r; ++k) out.r[static_cast<std::size_t>(k * r + k)] = 1.0;
  ItqSide su(u, m), sv(v, n);
  if (su.norm2 == 0 || sv.norm2 == 0) return out;
  std::vector<double> rot = out.r, mat(rr), p(rr), s(static_cast<std::size_t>(r)), qt(rr);
  double best = std::numeric_limits<double>::infinity();
  for (int it = 0;; ++it) {
    su.rotate(rot, r);
    sv.rotate(rot, r);
    const double e = 1.0 - (su.fit() + sv.fit()) / (2.0 * double(r));
    out.error.push_back(e);
    if (e < best) {
      best = e;
      out.r = rot;
    }
    if (it == iterations) break;
    // M = a·uᵀ·B_u + b·vᵀ·B_v, then R = P·Qᵀ.
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(r), bi(r), bi(m), su.weight(), su.x.data(), bi(r),
                su.b.data(), bi(r), 0.0, mat.data(), bi(r));
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(r), bi(r), bi(n), sv.weight(), sv.x.data(), bi(r),
                sv.b.data(), bi(r), 1.0, mat.data(), bi(r));
    const auto lr = static_cast<lapack_int>(r);
    const lapack_int info = LAPACKE_dgesdd(LAPACK_ROW_MAJOR, 'A', lr, lr, mat.data(), lr, s.data(), p.data(), lr, qt.data(), lr);
    if (info != 0) fail("itq_rotation: dgesdd of the {}×{} Procrustes matrix failed (info {})", r, r, info);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(r), bi(r), bi(r), 1.0, p.data(), bi(r), qt.data(), bi(r),
                0.0, rot.data(), bi(r));
  }
  return out;
}

HostBlrMatrix dual_svid(std::span<const float> w, index_t m, index_t n, const InitOptions& opts,
                        std::vector<SignMagnitudes>* magnitudes) {
  if (m < 1 || n < 1) fail("dual_svid: {} has an empty shape {}×{}", opts.name, m, n);
  if (w.size() != static_cast<std::size_t>(m) * static_cast<std::size_t>(n))
    fail("dual_svid: {} has {} values, shape {}×{} needs {}", opts.name, w.size(), m, n, m * n);
  if (opts.rank < 32 || opts.rank % 32 != 0) fail("dual_svid: rank {} for {} is not a positive multiple of 32", opts.rank, opts.name);
  if (opts.paths != 1 && opts.paths != 2) fail("dual_svid: {} paths for {}, expected 1 or 2", opts.paths, opts.name);
  if (opts.rotation_iterations < 0)
    fail("dual_svid: rotation_iterations {} for {} is negative (0: no rotation)", opts.rotation_iterations, opts.name);
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
  blr.paths.push_back(one_path(w, m, n, opts.rank, opts.svd, opts.engine, opts.name, opts.rotation_iterations, mag(0)));
  if (opts.paths == 2) {
    const std::vector<double> w1 = reconstruct(blr);
    std::vector<float> residual(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) residual[i] = static_cast<float>(double(w[i]) - w1[i]);
    SvdOptions second = opts.svd;
    second.seed += 1;
    blr.paths.push_back(one_path(residual, m, n, opts.rank, second, opts.engine, opts.name + " (residual)",
                                  opts.rotation_iterations, mag(1)));
  }
  if (opts.refine_sweeps > 0) refine(blr, w, opts.refine_sweeps, opts.input_gram);
  return blr;
}

}  // namespace bitrank::blr
