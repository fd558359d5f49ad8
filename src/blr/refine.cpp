// Exact alternating refinement of a BLR matrix (algorithm and guarantees in
// include/bitrank/blr/refine.hpp).
//
// Working form: the K = P·r components side by side, S_U as ±1 floats
// su [m][K] and S_V as sv [n][K] (column k = p·r + j), the scales in f64,
// and the factors A = [h_p ⊙ S_U,p] [m][K], B = [g_p ⊙ S_V,p] [n][K] in f32
// for the GEMMs, so that Ŵ = A·diag(ℓ)·Bᵀ. The residual R = W − Ŵ is
// recomputed from the factors at the start of each sign pass (no drift).
// Under an input Gram C the error is tr(R·C·Rᵀ); the products that read B
// then read C·B (formed per pass), and W·C is formed once.
#include "bitrank/blr/refine.hpp"

#include <cblas.h>
#include <lapacke.h>

#include <cmath>
#include <functional>

#include "bitrank/backend.hpp"
#include "bitrank/ops/bitmap.hpp"
#include "blr/balance.hpp"

namespace bitrank::blr {
namespace {

constexpr index_t kBlock = 32;  // components per sign-pass block (one GEMM pair)
constexpr int kMaxFlipPasses = 4;  // coordinate passes over one S_V column (weighted), at most
constexpr int kGramCgSteps = 32;   // conjugate-gradient steps of the coupled g fit, at most

using std::size_t;
inline size_t at(index_t row, index_t ld, index_t col) { return static_cast<size_t>(row * ld + col); }
inline blasint bi(index_t x) { return static_cast<blasint>(x); }

struct Factors {
  index_t m = 0, n = 0, r = 0, paths = 0, k = 0;
  const float* w = nullptr;     // W [m][n]
  std::vector<float> su, sv;    // ±1 [m][K], [n][K]
  std::vector<double> h, l, g;  // [P·m], [K], [P·n]
  std::vector<float> a, b;      // A [m][K], B [n][K]
  std::vector<float> c;         // the input Gram C [n][n], or empty: C = I
  std::vector<float> wc;        // W·C [m][n] when C is given

  bool weighted() const { return !c.empty(); }
  // C·X for X [n][cols] with row stride ld (row-major, [n][cols] out); only when weighted.
  std::vector<float> times_c(const float* x, index_t ld, index_t cols) const {
    std::vector<float> out(size_t(n * cols));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(n), bi(cols), bi(n), 1.0f, c.data(), bi(n), x, bi(ld), 0.0f, out.data(),
                bi(cols));
    return out;
  }
  // tr(X·C·Xᵀ) for X [m][n]: the squared (weighted) norm.
  double sq_norm(const float* x) const {
    double s = 0;
    if (!weighted()) {
      for (index_t i = 0; i < m * n; ++i) s += double(x[i]) * double(x[i]);
      return s;
    }
    std::vector<float> xc(size_t(m * n));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(m), bi(n), bi(n), 1.0f, x, bi(n), c.data(), bi(n), 0.0f, xc.data(), bi(n));
    for (index_t i = 0; i < m * n; ++i) s += double(xc[size_t(i)]) * double(x[i]);
    return s;
  }

  index_t path_of(index_t c) const { return c / r; }
  void build_a() {
    for (index_t i = 0; i < m; ++i)
      for (index_t c = 0; c < k; ++c) a[at(i, k, c)] = float(h[size_t(path_of(c) * m + i)]) * su[at(i, k, c)];
  }
  void build_b() {
    for (index_t j = 0; j < n; ++j)
      for (index_t c = 0; c < k; ++c) b[at(j, k, c)] = float(g[size_t(path_of(c) * n + j)]) * sv[at(j, k, c)];
  }
  // R = W − A·diag(ℓ)·Bᵀ.
  std::vector<float> residual() const {
    std::vector<float> al(a.size()), res(w, w + m * n);
    for (index_t i = 0; i < m; ++i)
      for (index_t c = 0; c < k; ++c) al[at(i, k, c)] = a[at(i, k, c)] * float(l[size_t(c)]);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(m), bi(n), bi(k), -1.0f, al.data(), bi(k), b.data(), bi(k), 1.0f,
                res.data(), bi(n));
    return res;
  }
};

Factors unpack(const HostBlrMatrix& blr, std::span<const float> w, std::span<const float> gram) {
  Factors f;
  f.m = blr.m, f.n = blr.n, f.r = blr.r, f.paths = std::ssize(blr.paths), f.k = f.paths * f.r;
  f.w = w.data();
  if (!gram.empty()) {
    f.c.assign(gram.begin(), gram.end());
    f.wc.resize(size_t(f.m * f.n));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(f.m), bi(f.n), bi(f.n), 1.0f, f.w, bi(f.n), f.c.data(), bi(f.n), 0.0f,
                f.wc.data(), bi(f.n));
  }
  f.su.resize(size_t(f.m * f.k));
  f.sv.resize(size_t(f.n * f.k));
  const index_t words = sign_words(f.r);
  for (index_t p = 0; p < f.paths; ++p) {
    const HostBlrPath& path = blr.paths[size_t(p)];
    for (index_t i = 0; i < f.m; ++i)
      for (index_t j = 0; j < f.r; ++j) f.su[at(i, f.k, p * f.r + j)] = sign_bit(path.sign_u.data() + i * words, j) ? 1.0f : -1.0f;
    for (index_t i = 0; i < f.n; ++i)
      for (index_t j = 0; j < f.r; ++j) f.sv[at(i, f.k, p * f.r + j)] = sign_bit(path.sign_v.data() + i * words, j) ? 1.0f : -1.0f;
    f.h.insert(f.h.end(), path.h.begin(), path.h.end());
    f.l.insert(f.l.end(), path.l.begin(), path.l.end());
    f.g.insert(f.g.end(), path.g.begin(), path.g.end());
  }
  f.a.resize(f.su.size());
  f.b.resize(f.sv.size());
  f.build_a();
  f.build_b();
  return f;
}

void pack(const Factors& f, HostBlrMatrix& blr) {
  const index_t words = sign_words(f.r);
  const auto cpu = make_cpu_backend();
  for (index_t p = 0; p < f.paths; ++p) {
    HostBlrPath& path = blr.paths[size_t(p)];
    std::vector<double> h(f.h.begin() + p * f.m, f.h.begin() + (p + 1) * f.m), l(f.l.begin() + p * f.r, f.l.begin() + (p + 1) * f.r),
        g(f.g.begin() + p * f.n, f.g.begin() + (p + 1) * f.n);
    balance(h, l, g);
    path.h.assign(h.begin(), h.end());
    path.l.assign(l.begin(), l.end());
    path.g.assign(g.begin(), g.end());
    // Path p's ±1 columns, packed by the CPU backend's pack (host memory), as Dual-SVID packs them.
    const auto put = [&](const std::vector<float>& s, index_t rows, std::vector<std::uint32_t>& bits) {
      std::vector<float> plane(size_t(rows * f.r));
      for (index_t i = 0; i < rows; ++i)
        for (index_t j = 0; j < f.r; ++j) plane[at(i, f.r, j)] = s[at(i, f.k, p * f.r + j)];
      cpu->bitmap().pack_signs(CView<float>(plane.data(), Shape{rows, f.r}), View<std::uint32_t>(bits.data(), Shape{rows, words}));
    };
    put(f.su, f.m, path.sign_u);
    put(f.sv, f.n, path.sign_v);
  }
}

// ℓ by least squares over all components, then negative ones made positive
// by flipping S_U's column. `weighted_b` is C·B under a Gram (else empty).
void solve_l(Factors& f, const std::vector<float>& weighted_b) {
  const index_t m = f.m, n = f.n, k = f.k;
  std::vector<float> ga(size_t(k * k)), gb(size_t(k * k)), wb(size_t(m * k));
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(k), bi(k), bi(m), 1.0f, f.a.data(), bi(k), f.a.data(), bi(k), 0.0f,
              ga.data(), bi(k));
  // With C: (Bᵀ·C·B) and W·C·B in place of BᵀB and W·B.
  const float* cb = f.weighted() ? weighted_b.data() : f.b.data();
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(k), bi(k), bi(n), 1.0f, f.b.data(), bi(k), cb, bi(k), 0.0f,
              gb.data(), bi(k));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(m), bi(k), bi(n), 1.0f, f.w, bi(n), cb, bi(k), 0.0f, wb.data(),
              bi(k));
  std::vector<double> normal(size_t(k * k)), rhs(size_t(k), 0.0);
  double trace = 0;
  for (size_t i = 0; i < normal.size(); ++i) normal[i] = double(ga[i]) * double(gb[i]);
  for (index_t c = 0; c < k; ++c) trace += normal[at(c, k, c)];
  if (!(trace > 0)) return;
  // A ridge far below any real component's weight: duplicate components
  // (padded ranks) share their part instead of making the system singular.
  for (index_t c = 0; c < k; ++c) normal[at(c, k, c)] += 1e-9 * trace / double(k);
  for (index_t i = 0; i < m; ++i)
    for (index_t c = 0; c < k; ++c) rhs[size_t(c)] += double(f.a[at(i, k, c)]) * double(wb[at(i, k, c)]);
  if (LAPACKE_dposv(LAPACK_ROW_MAJOR, 'U', bi(k), 1, normal.data(), bi(k), rhs.data(), 1) != 0) return;
  for (index_t c = 0; c < k; ++c) {
    if (!std::isfinite(rhs[size_t(c)])) return;
  }
  for (index_t c = 0; c < k; ++c) {
    f.l[size_t(c)] = std::abs(rhs[size_t(c)]);
    if (rhs[size_t(c)] < 0)
      for (index_t i = 0; i < m; ++i) f.su[at(i, k, c)] = -f.su[at(i, k, c)];
  }
  f.build_a();
}

// Jacobi-preconditioned conjugate gradients for H·x = b from x, at most
// kGramCgSteps (or until ‖b − H·x‖² < 1e-14·‖b‖²): each step lowers the
// quadratic ½xᵀHx − bᵀx. `apply` forms H·v; x in f32 (the GEMV's operand),
// the residual and the step sizes in f64.
void conjugate_gradients(const std::function<void(const std::vector<float>&, std::vector<float>&)>& apply,
                         const std::vector<double>& b, const std::vector<double>& precond, double bnorm,
                         std::vector<float>& x) {
  const size_t len = b.size();
  std::vector<float> hx(len), dir(len), hd(len);
  std::vector<double> res(len), z(len);
  apply(x, hx);
  double rz = 0;
  for (size_t e = 0; e < len; ++e) {
    res[e] = b[e] - double(hx[e]);
    z[e] = precond[e] * res[e];
    dir[e] = float(z[e]);
    rz += res[e] * z[e];
  }
  for (int step = 0; step < kGramCgSteps; ++step) {
    apply(dir, hd);
    double dhd = 0, rr = 0;
    for (size_t e = 0; e < len; ++e) dhd += double(dir[e]) * double(hd[e]);
    if (!(dhd > 0)) break;
    const double alpha = rz / dhd;
    for (size_t e = 0; e < len; ++e) {
      x[e] = float(double(x[e]) + alpha * double(dir[e]));
      res[e] -= alpha * double(hd[e]);
      rr += res[e] * res[e];
    }
    if (rr < 1e-14 * bnorm) break;
    double rz_next = 0;
    for (size_t e = 0; e < len; ++e) {
      z[e] = precond[e] * res[e];
      rz_next += res[e] * z[e];
    }
    const double beta = rz_next / rz;
    rz = rz_next;
    for (size_t e = 0; e < len; ++e) dir[e] = float(z[e] + beta * double(dir[e]));
  }
}

// g under the input Gram C: the columns are coupled through C, so all P·n
// values move at once. With Q_p = A_p·diag(ℓ_p)·S_V,pᵀ, Ŵ = Σ_p
// Q_p·diag(g_p) and the error tr((W − Ŵ)·C·(W − Ŵ)ᵀ) is the quadratic of
// H·g = b with H_pq = (Q_pᵀQ_q) ⊙ C and b_p = diag(Q_pᵀ·W·C). Both are
// formed through the rank, never through an m×n Q: Q_pᵀQ_q = S_V,p·(L_pᵀL_q)·
// S_V,qᵀ with L_p = A_p·diag(ℓ_p), and b_p[j] = Σ_t S_V,p[j][t]·(L_pᵀ·W·C)[t][j]
// (2n²r flops a block instead of 2n²m). Solved by Jacobi-preconditioned
// conjugate gradients from the current g (each iterate lowers the
// quadratic, so the error never rises): kGramCgSteps at most, against a
// P·n Cholesky that costs (P·n)³/3 — most of a sweep at n = 1536. A
// non-finite iterate keeps g.
void solve_g_coupled(Factors& f) {
  const index_t m = f.m, n = f.n, r = f.r, k = f.k, paths = f.paths, size = paths * n;
  std::vector<float> al(size_t(m * k));  // L = A·diag(ℓ) [m][K]
  for (index_t i = 0; i < m; ++i)
    for (index_t c = 0; c < k; ++c) al[at(i, k, c)] = f.a[at(i, k, c)] * float(f.l[size_t(c)]);
  std::vector<float> lwc(size_t(k * n));  // Lᵀ·W·C [K][n]
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(k), bi(n), bi(m), 1.0f, al.data(), bi(k), f.wc.data(), bi(n), 0.0f,
              lwc.data(), bi(n));
  std::vector<float> ll(size_t(k * k));  // LᵀL [K][K]: block (p, q) is L_pᵀL_q
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(k), bi(k), bi(m), 1.0f, al.data(), bi(k), al.data(), bi(k), 0.0f,
              ll.data(), bi(k));
  std::vector<std::vector<float>> blocks(size_t(paths * paths));  // H_pq for q ≥ p, [n][n]
  std::vector<float> svl(size_t(n * r));                          // S_V,p·(L_pᵀL_q) [n][r]
  for (index_t p = 0; p < paths; ++p)
    for (index_t q = p; q < paths; ++q) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(n), bi(r), bi(r), 1.0f, f.sv.data() + p * r, bi(k),
                  ll.data() + at(p * r, k, q * r), bi(k), 0.0f, svl.data(), bi(r));
      std::vector<float>& hpq = blocks[size_t(p * paths + q)];
      hpq.resize(size_t(n * n));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(n), bi(n), bi(r), 1.0f, svl.data(), bi(r), f.sv.data() + q * r, bi(k),
                  0.0f, hpq.data(), bi(n));
      for (size_t e = 0; e < hpq.size(); ++e) hpq[e] *= f.c[e];
    }
  const auto apply = [&](const std::vector<float>& x, std::vector<float>& y) {  // y = H·x
    for (index_t p = 0; p < paths; ++p) {
      float* yp = y.data() + p * n;
      for (index_t q = 0; q < paths; ++q) {
        const bool upper = q >= p;
        const std::vector<float>& h = blocks[size_t(upper ? p * paths + q : q * paths + p)];
        cblas_sgemv(CblasRowMajor, upper ? CblasNoTrans : CblasTrans, bi(n), bi(n), 1.0f, h.data(), bi(n), x.data() + q * n, 1,
                    q == 0 ? 0.0f : 1.0f, yp, 1);
      }
    }
  };
  std::vector<double> b(static_cast<size_t>(size), 0.0);
  for (index_t p = 0; p < paths; ++p)
    for (index_t j = 0; j < n; ++j)
      for (index_t t = 0; t < r; ++t)
        b[size_t(p * n + j)] += double(f.sv[at(j, k, p * r + t)]) * double(lwc[at(p * r + t, n, j)]);
  const auto len = static_cast<size_t>(size);
  std::vector<float> x(len);
  std::vector<double> precond(len);
  double bnorm = 0;
  for (index_t p = 0; p < paths; ++p)
    for (index_t j = 0; j < n; ++j) {
      const size_t e = size_t(p * n + j);
      x[e] = float(f.g[e]);
      const double d = blocks[size_t(p * paths + p)][at(j, n, j)];
      precond[e] = d > 0 ? 1.0 / d : 1.0;
      bnorm += b[e] * b[e];
    }
  if (!(bnorm > 0)) return;
  conjugate_gradients(apply, b, precond, bnorm, x);
  for (float v : x)
    if (!std::isfinite(v)) return;
  for (index_t p = 0; p < paths; ++p)
    for (index_t j = 0; j < n; ++j) {
      const double v = x[size_t(p * n + j)];
      f.g[size_t(p * n + j)] = std::abs(v);
      if (v < 0)
        for (index_t t = 0; t < r; ++t) f.sv[at(j, k, p * r + t)] = -f.sv[at(j, k, p * r + t)];
    }
  f.build_b();
}

// The per-row (side U: h) or per-column (side V: g) P×P least-squares fit.
// Path p's matrix is M_p = S_U,p·diag(ℓ_p)·B_pᵀ for h (so that Ŵ row i is
// Σ_p h_pi·M_p,i) and A_p·diag(ℓ_p)·S_V,pᵀ for g (column j: Σ_p g_pj·M_p,·j).
// Under the input Gram C only side U comes here (g is solve_g_coupled), with
// `weighted_b` = C·B: row i's fit weighs by C, ⟨M_p,i, M_q,i⟩_C = (M_p·C)_i ·
// M_q,i, and M_p·C = S_U,p·diag(ℓ_p)·(C·B_p)ᵀ (C is symmetric), a product
// through the rank like M_p itself.
void solve_outer(Factors& f, bool side_u, const std::vector<float>& weighted_b) {
  const index_t m = f.m, n = f.n, r = f.r, k = f.k, paths = f.paths;
  const index_t count = side_u ? m : n;
  std::vector<std::vector<float>> mats(size_t(paths), std::vector<float>(size_t(m * n)));
  std::vector<std::vector<float>> weighted_mats(f.weighted() ? size_t(paths) : 0, std::vector<float>(size_t(m * n)));
  std::vector<float> left(size_t(m * r));
  for (index_t p = 0; p < paths; ++p) {
    const std::vector<float>& src = side_u ? f.su : f.a;  // [m][K]
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < r; ++j) left[at(i, r, j)] = src[at(i, k, p * r + j)] * float(f.l[size_t(p * r + j)]);
    const float* right = (side_u ? f.b.data() : f.sv.data()) + p * r;  // [n][K], columns of path p
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(m), bi(n), bi(r), 1.0f, left.data(), bi(r), right, bi(k), 0.0f,
                mats[size_t(p)].data(), bi(n));
    if (f.weighted())
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(m), bi(n), bi(r), 1.0f, left.data(), bi(r), weighted_b.data() + p * r,
                  bi(k), 0.0f, weighted_mats[size_t(p)].data(), bi(n));
  }
  const std::vector<std::vector<float>>& left_mats = f.weighted() ? weighted_mats : mats;
  // gram[x][p][q] = ⟨M_p, M_q⟩ and rhs[x][p] = ⟨M_p, W⟩ over row (or column) x.
  std::vector<double> gram(size_t(count * paths * paths), 0.0), rhs(size_t(count * paths), 0.0);
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      const index_t x = side_u ? i : j;
      const double wij = f.w[at(i, n, j)];
      for (index_t p = 0; p < paths; ++p) {
        const double mp = left_mats[size_t(p)][at(i, n, j)];
        rhs[size_t(x * paths + p)] += mp * wij;
        for (index_t q = 0; q < paths; ++q) gram[size_t((x * paths + p) * paths + q)] += mp * double(mats[size_t(q)][at(i, n, j)]);
      }
    }
  std::vector<double>& scale = side_u ? f.h : f.g;
  std::vector<float>& signs = side_u ? f.su : f.sv;
  for (index_t x = 0; x < count; ++x) {
    const double* gx = gram.data() + x * paths * paths;
    const double* bx = rhs.data() + x * paths;
    double sol[2];
    if (paths == 1) {
      if (!(gx[0] > 0)) continue;
      sol[0] = bx[0] / gx[0];
    } else {
      const double det = gx[0] * gx[3] - gx[1] * gx[2];
      if (!(det > 1e-10 * gx[0] * gx[3])) continue;  // the paths' rows are (nearly) parallel: keep h
      sol[0] = (bx[0] * gx[3] - bx[1] * gx[1]) / det;
      sol[1] = (bx[1] * gx[0] - bx[0] * gx[2]) / det;
    }
    for (index_t p = 0; p < paths; ++p) {
      scale[size_t(p * count + x)] = std::abs(sol[p]);
      if (sol[p] < 0)
        for (index_t j = 0; j < r; ++j) signs[at(x, k, p * r + j)] = -signs[at(x, k, p * r + j)];
    }
  }
  f.build_a();
  f.build_b();
}

// One pass over the sign columns of S_U (side U) or S_V, block by block.
// For side U the residual is used as R, for side V as Rᵀ; `mine` is the
// factor whose signs change (A or B), `other` the fixed one.
void sign_pass(Factors& f, std::vector<float>& res, bool side_u) {
  const index_t m = f.m, n = f.n, k = f.k;
  const index_t rows = side_u ? m : n, len = side_u ? n : m;
  std::vector<float>& signs = side_u ? f.su : f.sv;
  std::vector<float>& mine = side_u ? f.a : f.b;
  const std::vector<float>& other = side_u ? f.b : f.a;
  const std::vector<double>& scale = side_u ? f.h : f.g;
  // Under the input Gram C (side U only; side V is sign_pass_v_weighted) B
  // is read through C·B: q = R·C·B_J, gram = B_Jᵀ·C·B_J.
  const std::vector<float> weighted_other = side_u && f.weighted() ? f.times_c(f.b.data(), k, k) : std::vector<float>{};
  const float* q_other = weighted_other.empty() ? other.data() : weighted_other.data();
  std::vector<float> q(size_t(rows * kBlock)), gram(size_t(kBlock * kBlock)), d(size_t(rows * kBlock));
  for (index_t c0 = 0; c0 < k; c0 += kBlock) {
    const index_t nb = std::min(kBlock, k - c0);
    // q = R·B_J (side U) or Rᵀ·A_J (side V); gram = other_Jᵀ·other_J.
    cblas_sgemm(CblasRowMajor, side_u ? CblasNoTrans : CblasTrans, CblasNoTrans, bi(rows), bi(nb), bi(len), 1.0f, res.data(), bi(n),
                q_other + c0, bi(k), 0.0f, q.data(), bi(kBlock));
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(nb), bi(nb), bi(len), 1.0f, other.data() + c0, bi(k), q_other + c0,
                bi(k), 0.0f, gram.data(), bi(kBlock));
    std::ranges::fill(d, 0.0f);
    for (index_t t = 0; t < nb; ++t) {
      const index_t c = c0 + t;
      const double lc = f.l[size_t(c)];
      if (lc == 0) continue;
      const index_t p = f.path_of(c);
      for (index_t i = 0; i < rows; ++i) {
        const double s = scale[size_t(p * rows + i)];
        if (s == 0) continue;
        // The residual with component c removed, projected on its other factor.
        double v = double(q[at(i, kBlock, t)]) + lc * double(mine[at(i, k, c)]) * double(gram[at(t, kBlock, t)]);
        for (index_t u = 0; u < t; ++u) v -= double(d[at(i, kBlock, u)]) * double(gram[at(u, kBlock, t)]);
        const float old = signs[at(i, k, c)];
        const float best = v > 0 ? 1.0f : v < 0 ? -1.0f : old;
        if (best == old) continue;
        const float updated = float(s) * best;
        d[at(i, kBlock, t)] = float(lc * (double(updated) - double(mine[at(i, k, c)])));
        signs[at(i, k, c)] = best;
        mine[at(i, k, c)] = updated;
      }
    }
    // R −= D·B_Jᵀ (side U) or A_J·Dᵀ (side V).
    if (side_u)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(m), bi(n), bi(nb), -1.0f, d.data(), bi(kBlock), other.data() + c0, bi(k),
                  1.0f, res.data(), bi(n));
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(m), bi(n), bi(nb), -1.0f, other.data() + c0, bi(k), d.data(), bi(kBlock),
                  1.0f, res.data(), bi(n));
  }
}

// The S_V pass under the input Gram C. A column's quadratic term
// ℓ²‖a‖²·bᵀC·b now depends on its signs (C couples the inputs), so the
// column is not the sign of a projection; it is improved by exact single
// flips instead: with γ = ∂/∂b of tr(R·C·Rᵀ) = −2ℓ·C·Rᵀa, flipping entry i
// (δ = −2b_i) changes the error by γ_i·δ + ℓ²‖a‖²·C_ii·δ², so a flip is
// taken only when that is negative (the error never rises), and γ follows
// each flip (n values). Passes over the column until none flips. Blocked
// as sign_pass: C·Rᵀ·A_J is one GEMM a block, and the earlier components'
// changes d_u enter through C·d_u. C·d_u is kept component-major ([u][n])
// so that a flip's two updates (γ and C·d_t, each one row of C) run over
// contiguous memory.
void sign_pass_v_weighted(Factors& f, std::vector<float>& res) {
  const index_t m = f.m, n = f.n, k = f.k;
  std::vector<float> q(size_t(n * kBlock)), cq(size_t(n * kBlock)), gram(size_t(kBlock * kBlock)), d(size_t(n * kBlock));
  std::vector<double> cd(size_t(kBlock * n)), grad(static_cast<size_t>(n));
  for (index_t c0 = 0; c0 < k; c0 += kBlock) {
    const index_t nb = std::min(kBlock, k - c0);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(n), bi(nb), bi(m), 1.0f, res.data(), bi(n), f.a.data() + c0, bi(k), 0.0f,
                q.data(), bi(kBlock));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(n), bi(nb), bi(n), 1.0f, f.c.data(), bi(n), q.data(), bi(kBlock), 0.0f,
                cq.data(), bi(kBlock));
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(nb), bi(nb), bi(m), 1.0f, f.a.data() + c0, bi(k), f.a.data() + c0, bi(k),
                0.0f, gram.data(), bi(kBlock));
    std::ranges::fill(d, 0.0f);
    std::ranges::fill(cd, 0.0);
    for (index_t t = 0; t < nb; ++t) {
      const index_t c = c0 + t;
      const double lc = f.l[size_t(c)], alpha = lc * lc * double(gram[at(t, kBlock, t)]);
      if (lc == 0 || alpha == 0) continue;
      // γ = −2ℓ·C·(Rᵀa) with R as the earlier components of the block left it
      // (for each j the earlier components subtracted in order u = 0, 1, …).
      for (index_t j = 0; j < n; ++j) grad[size_t(j)] = cq[at(j, kBlock, t)];
      for (index_t u = 0; u < t; ++u) {
        const double gu = gram[at(u, kBlock, t)];
        const double* cdu = cd.data() + u * n;
        for (index_t j = 0; j < n; ++j) grad[size_t(j)] -= cdu[j] * gu;
      }
      for (index_t j = 0; j < n; ++j) grad[size_t(j)] = -2.0 * lc * grad[size_t(j)];
      for (int pass = 0; pass < kMaxFlipPasses; ++pass) {
        bool flipped = false;
        for (index_t i = 0; i < n; ++i) {
          const double bi_old = f.b[at(i, k, c)], delta = -2.0 * bi_old;
          if (delta == 0) continue;  // g_i = 0: the sign does not matter
          if (grad[size_t(i)] * delta + alpha * double(f.c[at(i, n, i)]) * delta * delta >= 0) continue;
          flipped = true;
          f.sv[at(i, k, c)] = -f.sv[at(i, k, c)];
          f.b[at(i, k, c)] = float(-bi_old);
          d[at(i, kBlock, t)] = float(double(d[at(i, kBlock, t)]) + lc * delta);
          const float* ci = f.c.data() + i * n;  // C's row i = column i
          const double to_grad = 2.0 * alpha * delta, to_cd = lc * delta;
          double* cdt = cd.data() + t * n;
          for (index_t j = 0; j < n; ++j) grad[size_t(j)] += to_grad * double(ci[j]);
          for (index_t j = 0; j < n; ++j) cdt[j] += to_cd * double(ci[j]);
        }
        if (!flipped) break;
      }
    }
    // R −= A_J·Dᵀ.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(m), bi(n), bi(nb), -1.0f, f.a.data() + c0, bi(k), d.data(), bi(kBlock), 1.0f,
                res.data(), bi(n));
  }
}

double norm(const float* x, size_t len) {
  double s = 0;
  for (size_t i = 0; i < len; ++i) s += double(x[i]) * double(x[i]);
  return std::sqrt(s);
}

}  // namespace

std::vector<double> refine(HostBlrMatrix& blr, std::span<const float> w, int sweeps, std::span<const float> input_gram) {
  check_blr(blr, "refine");
  if (w.size() != static_cast<size_t>(blr.m * blr.n))
    fail("refine: W has {} values, the BLR matrix {}×{} needs {}", w.size(), blr.m, blr.n, blr.m * blr.n);
  if (sweeps < 0) fail("refine: {} sweeps, expected ≥ 0", sweeps);
  check_gram(input_gram, blr.n, "refine");
  std::vector<double> errors;
  if (sweeps == 0 || norm(w.data(), w.size()) == 0) return errors;  // W = 0: nothing to fit
  Factors f = unpack(blr, w, input_gram);
  const double wnorm = std::sqrt(f.sq_norm(w.data()));
  const auto scales = [&f] {
    // Neither ℓ's fit nor h's changes B: one C·B serves both.
    const std::vector<float> cb = f.weighted() ? f.times_c(f.b.data(), f.k, f.k) : std::vector<float>{};
    solve_l(f, cb);
    solve_outer(f, true, cb);
    if (f.weighted())
      solve_g_coupled(f);
    else
      solve_outer(f, false, cb);
  };
  for (int s = 0; s < sweeps; ++s) {
    scales();
    std::vector<float> res = f.residual();
    sign_pass(f, res, true);
    if (f.weighted())
      sign_pass_v_weighted(f, res);
    else
      sign_pass(f, res, false);
    if (s + 1 == sweeps) {  // the scales moved: the residual anew
      scales();
      res = f.residual();
    }  // else the sign passes kept `res` current
    errors.push_back(std::sqrt(f.sq_norm(res.data())) / wnorm);
  }
  pack(f, blr);
  return errors;
}

}  // namespace bitrank::blr
