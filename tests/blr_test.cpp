// BLR layer: gradient checks of the reference backward, sign gradients
// against an independent f64 formula, the exact sign-flip identity, and bad
// input — on the reference and on every f32 backend.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "bitrank/rng.hpp"
#include "support/backends.hpp"
#include "support/gradcheck.hpp"
#include "support/expect.hpp"

namespace bitrank {
namespace {

using test::rnd64;

// Host data of a layer (every value exact in f32): signs as ±1 and packed.
struct HostPath {
  std::vector<float> su, sv;  // [m][r], [n][r] ±1
  std::vector<std::uint32_t> bits_u, bits_v;
  std::vector<float> h, l, g;
};

std::vector<std::uint32_t> pack(const std::vector<float>& s, index_t rows, index_t r) {
  const index_t words = sign_words(r);
  std::vector<std::uint32_t> b(static_cast<std::size_t>(rows * words), 0);
  for (index_t i = 0; i < rows; ++i)
    for (index_t k = 0; k < r; ++k)
      if (s[static_cast<std::size_t>(i * r + k)] > 0) b[static_cast<std::size_t>(i * words + k / 32)] |= 1u << (k % 32);
  return b;
}

// The seed's layer: signs from rnd, h = 0.02 + 0.05|v|; with `exact_grid`
// ℓ ∈ {½, 1, 2} and g ∈ {1, ½} (powers of two: every f16 operand of the
// forward stays exact), else ℓ = 0.5 + |v|, g = 0.1 + 0.2|v|.
std::vector<HostPath> seed_layer(index_t m, index_t n, index_t r, int paths, bool exact_grid) {
  const auto sgn = [](float v) { return v >= 0 ? 1.0f : -1.0f; };
  std::vector<HostPath> out;
  for (int p = 0; p < paths; ++p) {
    HostPath hp;
    for (float v : rnd(static_cast<std::size_t>(m * r), 10 + p, 1.0f)) hp.su.push_back(sgn(v));
    for (float v : rnd(static_cast<std::size_t>(n * r), 20 + p, 1.0f)) hp.sv.push_back(sgn(v));
    hp.bits_u = pack(hp.su, m, r);
    hp.bits_v = pack(hp.sv, n, r);
    for (float v : rnd(static_cast<std::size_t>(m), 30 + p, 0.5f)) hp.h.push_back(0.02f + std::fabs(v) * 0.05f);
    if (exact_grid) {
      const float grid[3] = {0.5f, 1.0f, 2.0f};
      for (float v : rnd(static_cast<std::size_t>(r), 40 + p, 1.0f)) hp.l.push_back(grid[std::min(2, static_cast<int>(std::fabs(v) * 2.999f))]);
      for (float v : rnd(static_cast<std::size_t>(n), 50 + p, 1.0f)) hp.g.push_back(v >= 0 ? 1.0f : 0.5f);
    } else {
      for (float v : rnd(static_cast<std::size_t>(r), 40 + p, 0.5f)) hp.l.push_back(0.5f + std::fabs(v));
      for (float v : rnd(static_cast<std::size_t>(n), 50 + p, 0.5f)) hp.g.push_back(0.1f + std::fabs(v) * 0.2f);
    }
    out.push_back(std::move(hp));
  }
  return out;
}

template <class T>
Buffer<T> upload(Memory& mem, const std::vector<float>& v) {
  Buffer<T> b(mem, v.size());
  std::vector<T> t(v.begin(), v.end());
  b.upload(t);
  return b;
}

template <class T>
std::vector<double> download(const Buffer<T>& b) {
  const auto v = b.download();
  return std::vector<double>(v.begin(), v.end());
}

// A layer living in one backend's memory.
template <class T>
struct BackendLayer {
  index_t m, n, r;
  std::vector<Buffer<std::uint32_t>> bits_u, bits_v;
  std::vector<Buffer<T>> h, l, g, dh, dl, dg;
  std::vector<BlrPath<T>> paths;

  BackendLayer(Memory& mem, const std::vector<HostPath>& host, index_t m_, index_t n_, index_t r_) : m(m_), n(n_), r(r_) {
    const index_t words = sign_words(r);
    for (const HostPath& hp : host) {
      bits_u.emplace_back(mem, hp.bits_u.size());
      bits_u.back().upload(hp.bits_u);
      bits_v.emplace_back(mem, hp.bits_v.size());
      bits_v.back().upload(hp.bits_v);
      h.push_back(upload<T>(mem, hp.h));
      l.push_back(upload<T>(mem, hp.l));
      g.push_back(upload<T>(mem, hp.g));
      dh.push_back(upload<T>(mem, std::vector<float>(static_cast<std::size_t>(m), 0.0f)));
      dl.push_back(upload<T>(mem, std::vector<float>(static_cast<std::size_t>(r), 0.0f)));
      dg.push_back(upload<T>(mem, std::vector<float>(static_cast<std::size_t>(n), 0.0f)));
    }
    for (std::size_t p = 0; p < host.size(); ++p)
      paths.push_back({bits_u[p].view({m, words}), bits_v[p].view({n, words}), h[p].view({m}), l[p].view({r}), g[p].view({n}),
                       dh[p].view({m}), dl[p].view({r}), dg[p].view({n})});
  }
  BlrLayer<T> layer() const { return {m, n, r, paths}; }
};

// Per path (G_U [m][r], G_V [n][r], a [ntok][r]) in f64 straight from the
// definitions: a = (x⊙g)·S_V, b = (dy⊙h)·S_U, G_U = diag(h)·dyᵀ·a·diag(ℓ),
// G_V = diag(g)·xᵀ·b·diag(ℓ).
struct HostSignGrads {
  std::vector<double> g_u, g_v, a;
};
std::vector<HostSignGrads> host_sign_grads(const std::vector<HostPath>& host, const std::vector<double>& x,
                                           const std::vector<double>& dy, index_t m, index_t n, index_t r, index_t ntok) {
  std::vector<HostSignGrads> out;
  const auto at = [](const std::vector<double>& v, index_t i) { return v[static_cast<std::size_t>(i)]; };
  for (const HostPath& hp : host) {
    const auto f = [](const std::vector<float>& v, index_t i) { return static_cast<double>(v[static_cast<std::size_t>(i)]); };
    std::vector<double> a(static_cast<std::size_t>(ntok * r)), b(static_cast<std::size_t>(ntok * r));
    for (index_t t = 0; t < ntok; ++t)
      for (index_t k = 0; k < r; ++k) {
        double sa = 0, sb = 0;
        for (index_t j = 0; j < n; ++j) sa += at(x, t * n + j) * f(hp.g, j) * f(hp.sv, j * r + k);
        for (index_t i = 0; i < m; ++i) sb += at(dy, t * m + i) * f(hp.h, i) * f(hp.su, i * r + k);
        a[static_cast<std::size_t>(t * r + k)] = sa;
        b[static_cast<std::size_t>(t * r + k)] = sb;
      }
    HostSignGrads gr{std::vector<double>(static_cast<std::size_t>(m * r)), std::vector<double>(static_cast<std::size_t>(n * r)), a};
    for (index_t k = 0; k < r; ++k) {
      for (index_t i = 0; i < m; ++i) {
        double s = 0;
        for (index_t t = 0; t < ntok; ++t) s += at(dy, t * m + i) * a[static_cast<std::size_t>(t * r + k)];
        gr.g_u[static_cast<std::size_t>(i * r + k)] = f(hp.h, i) * f(hp.l, k) * s;
      }
      for (index_t j = 0; j < n; ++j) {
        double s = 0;
        for (index_t t = 0; t < ntok; ++t) s += at(x, t * n + j) * b[static_cast<std::size_t>(t * r + k)];
        gr.g_v[static_cast<std::size_t>(j * r + k)] = f(hp.g, j) * f(hp.l, k) * s;
      }
    }
    out.push_back(std::move(gr));
  }
  return out;
}

double rel_err(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// ---- gradient checks of the reference backward -------------------------

TEST(Blr, ReferenceBackwardMatchesFiniteDifferences) {
  auto& ops = test::ref_backend().blr();
  const index_t m = 12, n = 10, r = 32, ntok = 3;
  const int paths = 2;
  const index_t words = sign_words(r);
  std::vector<std::vector<std::uint32_t>> bits_u, bits_v;
  std::vector<std::vector<double>> h, l, g, dh, dl, dg;
  for (int p = 0; p < paths; ++p) {
    XorShift bits(100 + p);
    bits_u.emplace_back(static_cast<std::size_t>(m * words));
    bits_v.emplace_back(static_cast<std::size_t>(n * words));
    for (auto& w : bits_u.back()) w = static_cast<std::uint32_t>(bits.next_u64() >> 7);
    for (auto& w : bits_v.back()) w = static_cast<std::uint32_t>(bits.next_u64() >> 7);
    h.push_back(rnd64(static_cast<std::size_t>(m), 110 + p, 0.5, 1.0));
    l.push_back(rnd64(static_cast<std::size_t>(r), 120 + p, 0.5, 1.0));
    g.push_back(rnd64(static_cast<std::size_t>(n), 130 + p, 0.5, 1.0));
    dh.emplace_back(static_cast<std::size_t>(m), 0.0);
    dl.emplace_back(static_cast<std::size_t>(r), 0.0);
    dg.emplace_back(static_cast<std::size_t>(n), 0.0);
  }
  std::vector<BlrPath<double>> path_views;
  for (int p = 0; p < paths; ++p)
    path_views.push_back({CView<std::uint32_t>(bits_u[p].data(), Shape{m, words}), CView<std::uint32_t>(bits_v[p].data(), Shape{n, words}),
                          CView<double>(h[p].data(), Shape{m}), CView<double>(l[p].data(), Shape{r}), CView<double>(g[p].data(), Shape{n}),
                          View<double>(dh[p].data(), Shape{m}), View<double>(dl[p].data(), Shape{r}), View<double>(dg[p].data(), Shape{n})});
  const BlrLayer<double> layer{m, n, r, path_views};
  auto x = rnd64(static_cast<std::size_t>(ntok * n), 140, 1.0);
  const auto dy = rnd64(static_cast<std::size_t>(ntok * m), 141, 1.0);
  std::vector<double> y(static_cast<std::size_t>(ntok * m)), a(static_cast<std::size_t>(paths * ntok * r)),
      dx(static_cast<std::size_t>(ntok * n));
  const BlrSaved<double> saved{View<double>(a.data(), Shape{paths, ntok, r})};
  const CView<double> xv(x.data(), Shape{ntok, n});
  const auto loss = [&] {
    ops.blr_forward(layer, xv, View<double>(y.data(), Shape{ntok, m}), saved);
    return test::dot(y, dy);
  };
  loss();
  ops.blr_backward(layer, xv, CView<double>(dy.data(), Shape{ntok, m}), saved, View<double>(dx.data(), Shape{ntok, n}), 1.0f);
  test::grad_check("blr dx", x, dx, loss);
  for (int p = 0; p < paths; ++p) {
    test::grad_check("blr dh path " + std::to_string(p), h[p], dh[p], loss);
    test::grad_check("blr dl path " + std::to_string(p), l[p], dl[p], loss);
    test::grad_check("blr dg path " + std::to_string(p), g[p], dg[p], loss);
  }
}

// ---- sign gradients against the f64 formula (seed blr_sign_grad_matches_host)

template <class T>
void sign_grads_match_host(Backend<T>& be, double tol) {
  const index_t m = 256, n = 384, r = 128, ntok = 70;
  const int paths = 2;
  const auto host = seed_layer(m, n, r, paths, false);
  BackendLayer<T> bl(*be.memory, host, m, n, r);
  const auto xf = rnd(static_cast<std::size_t>(ntok * n), 60, 2.0f);
  const auto dyf = rnd(static_cast<std::size_t>(ntok * m), 61, 1e-3f);
  auto x = upload<T>(*be.memory, xf);
  auto dy = upload<T>(*be.memory, dyf);
  Buffer<T> y(*be.memory, static_cast<std::size_t>(ntok * m)), a(*be.memory, static_cast<std::size_t>(paths * ntok * r)),
      dx(*be.memory, static_cast<std::size_t>(ntok * n)),
      b(*be.memory, static_cast<std::size_t>(paths * ntok * r)), g_u(*be.memory, static_cast<std::size_t>(paths * m * r)),
      g_v(*be.memory, static_cast<std::size_t>(paths * n * r));
  const BlrSaved<T> saved{a.view({paths, ntok, r})};
  be.blr().blr_forward(bl.layer(), x.view({ntok, n}), y.view({ntok, m}), saved);
  be.blr().blr_backward(bl.layer(), x.view({ntok, n}), dy.view({ntok, m}), saved, dx.view({ntok, n}), 1024.0f, b.view({paths, ntok, r}));
  be.blr().blr_sign_grad(bl.layer(), x.view({ntok, n}), dy.view({ntok, m}), a.view({paths, ntok, r}), b.view({paths, ntok, r}),
                         1024.0f, g_u.view({paths, m, r}), g_v.view({paths, n, r}));
  const auto want = host_sign_grads(host, std::vector<double>(xf.begin(), xf.end()), std::vector<double>(dyf.begin(), dyf.end()), m, n, r, ntok);
  const auto gu = download(g_u), gv = download(g_v);
  for (int p = 0; p < paths; ++p) {
    const auto slice = [p](const std::vector<double>& v, std::size_t len) {
      return std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(p * len), v.begin() + static_cast<std::ptrdiff_t>((p + 1) * len));
    };
    const double eu = rel_err(slice(gu, static_cast<std::size_t>(m * r)), want[static_cast<std::size_t>(p)].g_u);
    const double ev = rel_err(slice(gv, static_cast<std::size_t>(n * r)), want[static_cast<std::size_t>(p)].g_v);
    std::printf("  [sign grad] %-4s path %d  G_U rel %.3e  G_V rel %.3e  tol %.1e\n", be.name.c_str(), p, eu, ev, tol);
    EXPECT_LE(eu, tol) << be.name << " G_U path " << p;
    EXPECT_LE(ev, tol) << be.name << " G_V path " << p;
  }
}

TEST(Blr, SignGradsMatchHostFormula) {
  sign_grads_match_host(test::ref_backend(), 1e-12);  // f64 against f64: summation order only
  // f16 operands (2^-11 relative per operand) with f32 sums, as DESIGN §4
  for (const auto& name : test::available_backends()) sign_grads_match_host(test::backend(name), 3e-3);
}

// ---- the fused backward + sign gradients equal the two calls -------------

template <class T>
void fused_equals_two_calls(Backend<T>& be) {
  const index_t m = 256, n = 384, r = 128, ntok = 70;
  const int paths = 2;
  const auto host = seed_layer(m, n, r, paths, false);
  const auto xf = rnd(static_cast<std::size_t>(ntok * n), 80, 2.0f);
  const auto x = upload<T>(*be.memory, xf);
  const auto dy = upload<T>(*be.memory, rnd(static_cast<std::size_t>(ntok * m), 81, 1e-3f));
  struct Run {
    std::vector<T> dx, b, g_u, g_v, dh, dl, dg;
  };
  enum Mode { two_calls, fused, fused_saved_xs };
  const auto run = [&](Mode mode) {
    BackendLayer<T> bl(*be.memory, host, m, n, r);  // fresh (zero) scale gradients
    Buffer<T> y(*be.memory, static_cast<std::size_t>(ntok * m)), a(*be.memory, static_cast<std::size_t>(paths * ntok * r)),
        dx(*be.memory, static_cast<std::size_t>(ntok * n)),
        b(*be.memory, static_cast<std::size_t>(paths * ntok * r)), g_u(*be.memory, static_cast<std::size_t>(paths * m * r)),
        g_v(*be.memory, static_cast<std::size_t>(paths * n * r));
    const bool keep = mode == fused_saved_xs;
    Buffer<f16> xs(*be.memory, static_cast<std::size_t>(keep ? ntok * n : 0)),
        planes(*be.memory, static_cast<std::size_t>(keep ? paths * (m + n) * r : 0));
    const BlrSaved<T> saved{a.view({paths, ntok, r}), keep ? xs.view({ntok, n}) : View<f16>{},
                            keep ? planes.view({paths, (m + n) * r}) : View<f16>{}};
    const CView<T> xv = x.view({ntok, n}), dyv = dy.view({ntok, m});
    be.blr().blr_forward(bl.layer(), xv, y.view({ntok, m}), saved);
    if (mode == fused_saved_xs) {  // the forward's f16(x), round to nearest even
      const auto got = xs.download();
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < got.size(); ++i) wrong += got[i].bits != to_f16(xf[i]).bits;
      EXPECT_EQ(wrong, 0u) << be.name << ": saved xs differs from f16(x)";
    }
    if (mode != two_calls) {
      be.blr().blr_backward_sign_grad(bl.layer(), xv, dyv, saved, dx.view({ntok, n}), 1024.0f, b.view({paths, ntok, r}),
                                      g_u.view({paths, m, r}), g_v.view({paths, n, r}));
    } else {
      be.blr().blr_backward(bl.layer(), xv, dyv, saved, dx.view({ntok, n}), 1024.0f, b.view({paths, ntok, r}));
      be.blr().blr_sign_grad(bl.layer(), xv, dyv, a.view({paths, ntok, r}), b.view({paths, ntok, r}), 1024.0f,
                             g_u.view({paths, m, r}), g_v.view({paths, n, r}));
    }
    Run out{dx.download(), b.download(), g_u.download(), g_v.download(), {}, {}, {}};
    for (int p = 0; p < paths; ++p) {
      for (const auto& [to, from] : {std::pair{&out.dh, &bl.dh}, std::pair{&out.dl, &bl.dl}, std::pair{&out.dg, &bl.dg}}) {
        const auto v = (*from)[static_cast<std::size_t>(p)].download();
        to->insert(to->end(), v.begin(), v.end());
      }
    }
    return out;
  };
  const Run two = run(two_calls), one = run(fused), kept = run(fused_saved_xs);
  // The same staged operands through the same GEMMs and sums: equal to the bit.
  EXPECT_EQ(one.dx, two.dx) << be.name;
  EXPECT_EQ(one.b, two.b) << be.name;
  EXPECT_EQ(one.g_u, two.g_u) << be.name;
  EXPECT_EQ(one.g_v, two.g_v) << be.name;
  EXPECT_EQ(one.dh, two.dh) << be.name;
  EXPECT_EQ(one.dl, two.dl) << be.name;
  EXPECT_EQ(one.dg, two.dg) << be.name;
  // With the forward's xs and planes: the same f16 operands (x, the planes)
  // and sums, but a backend may run the backward's two GEMMs on the planes
  // in another orientation (cuda: untransposed, another cuBLASLt kernel),
  // so only the f32 accumulation order may differ: ~1e-7 relative.
  const auto close = [&](const std::vector<T>& got, const std::vector<T>& want, const char* what) {
    const double e = rel_err(std::vector<double>(got.begin(), got.end()), std::vector<double>(want.begin(), want.end()));
    EXPECT_LE(e, 1e-6) << be.name << ": " << what << " with the forward's saved xs and planes";
  };
  close(kept.dx, two.dx, "dx");
  close(kept.b, two.b, "b");
  close(kept.g_u, two.g_u, "G_U");
  close(kept.g_v, two.g_v, "G_V");
  close(kept.dh, two.dh, "dh");
  close(kept.dl, two.dl, "dl");
  close(kept.dg, two.dg, "dg");
  double norm = 0;
  for (T v : one.g_u) norm += std::fabs(static_cast<double>(v));
  EXPECT_GT(norm, 0.0) << be.name << ": the sign gradients are not all zero";
}

// Also: with BlrSaved::xs and ::planes the forward writes f16(x) and its
// GEMM planes and the backward reads them, with the same results to the bit.
TEST(Blr, BackwardSignGradEqualsTheTwoCalls) {
  fused_equals_two_calls(test::ref_backend());
  for (const auto& name : test::available_backends()) fused_equals_two_calls(test::backend(name));
}

// ---- the exact sign-flip identity (seed blr_sign_flip_exact; DESIGN §5) ---
//
// With L = ½‖y − y*‖², L is quadratic in each sign: flipping S_U[i,k] of a
// path changes L by −2s·G_U[i,k] + 2h_i²ℓ_k²·Σ_t a_tk², flipping S_V[j,k]
// by −2s·G_V[j,k] + 2g_j²ℓ_k²·(Σ_t x_tj²)(Σ_i h_i²) (that path's own h, ℓ,
// g, a). Each flip rewrites one bit of the bitmap and reruns the forward,
// which also checks the bit ↔ (row, rank) mapping of every backend.
struct FlipErrors {
  double backend_g = 0;  // prediction from the backend's own G
  double host_g = 0;     // prediction from the f64 formula's G
};

template <class T>
FlipErrors sign_flip_identity(Backend<T>& be) {
  const index_t m = 256, n = 384, r = 128, ntok = 70, words = sign_words(r);
  const int paths = 2;
  const auto host = seed_layer(m, n, r, paths, true);
  BackendLayer<T> bl(*be.memory, host, m, n, r);
  std::vector<float> xf;
  for (float v : rnd(static_cast<std::size_t>(ntok * n), 70, 1.0f)) xf.push_back(std::round(v * 4.0f) / 8.0f);  // a 1/8 grid
  auto x = upload<T>(*be.memory, xf);
  Buffer<T> y(*be.memory, static_cast<std::size_t>(ntok * m)), a(*be.memory, static_cast<std::size_t>(paths * ntok * r)),
      dx(*be.memory, static_cast<std::size_t>(ntok * n)),
      b(*be.memory, static_cast<std::size_t>(paths * ntok * r)), g_u(*be.memory, static_cast<std::size_t>(paths * m * r)),
      g_v(*be.memory, static_cast<std::size_t>(paths * n * r));
  const BlrSaved<T> saved{a.view({paths, ntok, r})};
  const auto forward = [&] {
    be.blr().blr_forward(bl.layer(), x.view({ntok, n}), y.view({ntok, m}), saved);
    return y.download();
  };
  const auto y0 = forward();
  double ms = 0;
  for (T v : y0) ms += static_cast<double>(v) * static_cast<double>(v);
  const T rms = static_cast<T>(std::sqrt(ms / static_cast<double>(y0.size())));
  const auto z = rnd(y0.size(), 71, 1.0f);
  std::vector<T> ystar(y0.size()), dyv(y0.size());
  for (std::size_t i = 0; i < y0.size(); ++i) {
    ystar[i] = y0[i] + static_cast<T>(0.7) * rms * static_cast<T>(z[i]);
    dyv[i] = y0[i] - ystar[i];
  }
  const auto loss = [&](const std::vector<T>& yv) {
    double s = 0;
    for (std::size_t i = 0; i < yv.size(); ++i) s += 0.5 * std::pow(static_cast<double>(yv[i]) - static_cast<double>(ystar[i]), 2);
    return s;
  };
  const double l0 = loss(y0);
  Buffer<T> dy(*be.memory, dyv.size());
  dy.upload(dyv);
  be.blr().blr_backward(bl.layer(), x.view({ntok, n}), dy.view({ntok, m}), saved, dx.view({ntok, n}), 1024.0f, b.view({paths, ntok, r}));
  be.blr().blr_sign_grad(bl.layer(), x.view({ntok, n}), dy.view({ntok, m}), a.view({paths, ntok, r}), b.view({paths, ntok, r}),
                         1024.0f, g_u.view({paths, m, r}), g_v.view({paths, n, r}));
  const auto gu_be = download(g_u), gv_be = download(g_v);
  const auto want = host_sign_grads(host, std::vector<double>(xf.begin(), xf.end()), std::vector<double>(dyv.begin(), dyv.end()), m, n, r, ntok);

  FlipErrors worst;
  const std::pair<index_t, index_t> picks[] = {{0, 0}, {1, 31}, {2, 32}, {255, 127}, {17, 63}, {100, 64}, {200, 95}, {5, 96}};
  for (int p = 0; p < paths; ++p) {
    const HostPath& hp = host[static_cast<std::size_t>(p)];
    const HostSignGrads& hg = want[static_cast<std::size_t>(p)];
    double sum_h2 = 0;
    for (float v : hp.h) sum_h2 += static_cast<double>(v) * v;
    for (int side = 0; side < 2; ++side) {
      const index_t rows = side == 0 ? m : n;
      Buffer<std::uint32_t>& bits = side == 0 ? bl.bits_u[static_cast<std::size_t>(p)] : bl.bits_v[static_cast<std::size_t>(p)];
      const std::vector<std::uint32_t>& base = side == 0 ? hp.bits_u : hp.bits_v;
      const std::vector<float>& signs = side == 0 ? hp.su : hp.sv;
      for (std::size_t q = 0; q < std::size(picks); ++q) {
        const index_t i = (picks[q].first + 37 * static_cast<index_t>(q) * side) % rows;
        const index_t k = (picks[q].second + 11 * p) % r;
        const std::size_t ik = static_cast<std::size_t>(i * r + k);
        const double s = signs[ik];
        double g_be, g_host, quad;
        if (side == 0) {
          double sa = 0;
          for (index_t t = 0; t < ntok; ++t) sa += std::pow(hg.a[static_cast<std::size_t>(t * r + k)], 2);
          g_be = gu_be[static_cast<std::size_t>(p) * static_cast<std::size_t>(m * r) + ik];
          g_host = hg.g_u[ik];
          quad = 2 * std::pow(hp.h[static_cast<std::size_t>(i)], 2) * std::pow(hp.l[static_cast<std::size_t>(k)], 2) * sa;
        } else {
          double sx = 0;
          for (index_t t = 0; t < ntok; ++t) sx += std::pow(xf[static_cast<std::size_t>(t * n + i)], 2);
          g_be = gv_be[static_cast<std::size_t>(p) * static_cast<std::size_t>(n * r) + ik];
          g_host = hg.g_v[ik];
          quad = 2 * std::pow(hp.g[static_cast<std::size_t>(i)], 2) * std::pow(hp.l[static_cast<std::size_t>(k)], 2) * sx * sum_h2;
        }
        auto flipped = base;
        flipped[static_cast<std::size_t>(i * words + k / 32)] ^= 1u << (k % 32);
        bits.upload(flipped);
        const double measured = loss(forward()) - l0;
        bits.upload(base);
        const double scale = 2 * std::fabs(g_host) + quad;
        const double e_be = std::fabs(measured - (-2 * s * g_be + quad)) / scale;
        const double e_host = std::fabs(measured - (-2 * s * g_host + quad)) / scale;
        worst.backend_g = std::max(worst.backend_g, e_be);
        worst.host_g = std::max(worst.host_g, e_host);
        if (q < 2)
          std::printf("  [flip] %-4s path %d %s[%lld,%lld]: dL %.6e  predicted %.6e (backend G)  %.6e (f64 G)\n", be.name.c_str(), p,
                      side == 0 ? "U" : "V", static_cast<long long>(i), static_cast<long long>(k), measured, -2 * s * g_be + quad,
                      -2 * s * g_host + quad);
      }
    }
  }
  std::printf("  [flip] %-4s worst |dL - prediction| / (2|G| + quad): %.3e (backend G), %.3e (f64 G)\n", be.name.c_str(),
              worst.backend_g, worst.host_g);
  return worst;
}

TEST(Blr, SignFlipChangesLossExactly) {
  // f64 throughout: only rounding of sums of 17920 squares remains.
  const FlipErrors ref = sign_flip_identity(test::ref_backend());
  EXPECT_LT(ref.backend_g, 5e-4);
  EXPECT_LT(ref.host_g, 5e-4);
  for (const auto& name : test::available_backends()) {
    // f32 rounding of the two-path sum over 17920 outputs leaves ~1e-4 of
    // the term scale; the forward's planes carry h and g as f16 values
    // (relative ≤ 2^-11 each, so ≤ ~1e-3 on the flip's linear and quadratic
    // terms: 1.4e-3 measured on the cpu backend, 1.1e-4 when h and g were
    // applied in f32), and the backend's G also carries its f16 operands. A
    // wrong bit index or formula is off by O(1).
    const FlipErrors e = sign_flip_identity(test::backend(name));
    EXPECT_LT(e.host_g, 3e-3) << name << ": identity / bit mapping";
    EXPECT_LT(e.backend_g, 3e-3) << name << ": backend G";
  }
}

// ---- bad input ------------------------------------------------------------

struct SmallLayer {
  index_t m = 8, n = 6, r = 32, ntok = 4;
  std::vector<std::uint32_t> bits_u = std::vector<std::uint32_t>(8, 0x5555u), bits_v = std::vector<std::uint32_t>(6, 0x3333u);
  std::vector<float> h = std::vector<float>(8, 1.0f), l = std::vector<float>(64, 1.0f), g = std::vector<float>(6, 1.0f);
  std::vector<float> dh = std::vector<float>(8), dl = std::vector<float>(64), dg = std::vector<float>(6);
  std::vector<float> x = std::vector<float>(4 * 6, 1.0f), y = std::vector<float>(4 * 8), dy = std::vector<float>(4 * 8, 1.0f),
                     dx = std::vector<float>(4 * 6), a = std::vector<float>(4 * 64),
                     g_u = std::vector<float>(8 * 64), g_v = std::vector<float>(6 * 64);
  std::vector<BlrPath<float>> paths;
  SmallLayer() {
    paths.push_back({CView<std::uint32_t>(bits_u.data(), Shape{m, 1}), CView<std::uint32_t>(bits_v.data(), Shape{n, 1}),
                     CView<float>(h.data(), Shape{m}), CView<float>(l.data(), Shape{r}), CView<float>(g.data(), Shape{n}),
                     View<float>(dh.data(), Shape{m}), View<float>(dl.data(), Shape{r}), View<float>(dg.data(), Shape{n})});
  }
  BlrLayer<float> layer() const { return {m, n, r, paths}; }
  BlrSaved<float> saved() { return {View<float>(a.data(), Shape{1, ntok, r})}; }
  CView<float> xv() { return CView<float>(x.data(), Shape{ntok, n}); }
  View<float> yv() { return View<float>(y.data(), Shape{ntok, m}); }
};

TEST(Blr, BadInputIsAnError) {
  auto& ops = test::cpu_backend().blr();
  SmallLayer s;
  ops.blr_forward(s.layer(), s.xv(), s.yv(), s.saved());  // the valid call works
  // y of the wrong shape
  test::expect_error([&] { ops.blr_forward(s.layer(), s.xv(), View<float>(s.y.data(), Shape{s.ntok, s.m - 1}), s.saved()); },
               "blr_forward: y has shape [4, 7], expected [4, 8]");
  // x with the wrong width, and empty x
  test::expect_error([&] { ops.blr_forward(s.layer(), CView<float>(s.x.data(), Shape{3, 8}), s.yv(), s.saved()); }, "blr_forward: x has shape [3, 8], expected [3, 6]");
  test::expect_error([&] { ops.blr_forward(s.layer(), CView<float>(s.x.data(), Shape{0, 6}), s.yv(), s.saved()); }, "blr_forward: x is empty");
  // rank not a multiple of 32
  {
    SmallLayer t;
    t.r = 48;
    t.paths[0].l = CView<float>(t.l.data(), Shape{48});
    t.paths[0].sign_u = CView<std::uint32_t>(t.bits_u.data(), Shape{4, 2});
    test::expect_error([&] { ops.blr_forward(t.layer(), t.xv(), t.yv(), t.saved()); }, "blr_forward: rank 48 is not a multiple of 32");
  }
  // bitmap words do not match the rank
  {
    SmallLayer t;
    t.paths[0].sign_v = CView<std::uint32_t>(t.bits_v.data(), Shape{3, 2});
    test::expect_error([&] { ops.blr_forward(t.layer(), t.xv(), t.yv(), t.saved()); }, "blr_forward: path 0 sign_v has shape [3, 2], expected [6, 1]");
  }
  // no paths
  test::expect_error([&] { ops.blr_forward(BlrLayer<float>{8, 6, 32, {}}, s.xv(), s.yv(), s.saved()); }, "blr_forward: layer has no paths");
  // blr_infer checks as the forward does
  ops.blr_infer(s.layer(), s.xv(), s.yv());
  test::expect_error([&] { ops.blr_infer(s.layer(), s.xv(), View<float>(s.y.data(), Shape{s.ntok, s.m - 1})); },
                     "blr_infer: y has shape [4, 7], expected [4, 8]");
  test::expect_error([&] { ops.blr_infer(s.layer(), CView<float>(s.x.data(), Shape{3, 8}), s.yv()); },
                     "blr_infer: x has shape [3, 8], expected [3, 6]");
  test::expect_error([&] { ops.blr_infer(BlrLayer<float>{8, 6, 32, {}}, s.xv(), s.yv()); }, "blr_infer: layer has no paths");
  // saved tensors for the wrong number of paths
  test::expect_error([&] { ops.blr_forward(s.layer(), s.xv(), s.yv(), {View<float>(s.a.data(), Shape{2, 4, 32})}); },
               "blr_forward: saved a has shape [2, 4, 32], expected [1, 4, 32]");
  // a saved xs of the wrong shape (forward and backward)
  {
    std::vector<f16> xs(static_cast<std::size_t>(s.ntok * s.n));
    const BlrSaved<float> bad{View<float>(s.a.data(), Shape{1, 4, 32}), View<f16>(xs.data(), Shape{s.ntok, s.n - 1})};
    test::expect_error([&] { ops.blr_forward(s.layer(), s.xv(), s.yv(), bad); },
                       "blr_forward: saved xs has shape [4, 5], expected [4, 6]");
    test::expect_error([&] {
      ops.blr_backward(s.layer(), s.xv(), CView<float>(s.dy.data(), Shape{s.ntok, s.m}),
                       bad, View<float>(s.dx.data(), Shape{s.ntok, s.n}), 1024.0f);
    }, "blr_backward: saved xs has shape [4, 5], expected [4, 6]");
    std::vector<f16> planes(static_cast<std::size_t>((s.m + s.n) * s.r));
    const BlrSaved<float> bad_planes{View<float>(s.a.data(), Shape{1, 4, 32}), {},
                                     View<f16>(planes.data(), Shape{1, (s.m + s.n) * s.r - 1})};
    test::expect_error([&] { ops.blr_forward(s.layer(), s.xv(), s.yv(), bad_planes); },
                       "blr_forward: saved planes has shape [1, 447], expected [1, 448]");
  }
  // backward: grad_scale not a power of two, non-finite, missing gradients, wrong b
  const CView<float> dyv(s.dy.data(), Shape{s.ntok, s.m});
  const View<float> dxv(s.dx.data(), Shape{s.ntok, s.n});
  ops.blr_backward(s.layer(), s.xv(), dyv, s.saved(), dxv, 1024.0f);
  test::expect_error([&] { ops.blr_backward(s.layer(), s.xv(), dyv, s.saved(), dxv, 1000.0f); }, "blr_backward: grad_scale must be a positive power of two");
  test::expect_error([&] { ops.blr_backward(s.layer(), s.xv(), dyv, s.saved(), dxv, -2.0f); }, "blr_backward: grad_scale must be a positive power of two");
  test::expect_error([&] { ops.blr_backward(s.layer(), s.xv(), dyv, s.saved(), dxv, INFINITY); }, "blr_backward: grad_scale must be finite");
  {
    SmallLayer t;
    t.paths[0].dl = View<float>();
    test::expect_error([&] { ops.blr_backward(t.layer(), t.xv(), CView<float>(t.dy.data(), Shape{t.ntok, t.m}), t.saved(),
                                        View<float>(t.dx.data(), Shape{t.ntok, t.n}), 1.0f); },
                 "blr_backward: path 0 dl has shape [], expected [32]");
  }
  test::expect_error([&] { ops.blr_backward(s.layer(), s.xv(), dyv, s.saved(), dxv, 1.0f, View<float>(s.a.data(), Shape{4, 32})); },
               "blr_backward: b has shape [4, 32], expected [1, 4, 32]");
  // sign gradients of the wrong shape
  test::expect_error([&] { ops.blr_sign_grad(s.layer(), s.xv(), dyv, s.saved().a, s.saved().a, 1.0f, View<float>(s.g_u.data(), Shape{1, 6, 32}),
                                       View<float>(s.g_v.data(), Shape{1, 6, 32})); },
               "blr_sign_grad: g_u has shape [1, 6, 32], expected [1, 8, 32]");
  // the fused call: b is required, the gradients checked as in the two calls
  const View<float> gu(s.g_u.data(), Shape{1, 8, 32}), gv(s.g_v.data(), Shape{1, 6, 32});
  test::expect_error([&] { ops.blr_backward_sign_grad(s.layer(), s.xv(), dyv, s.saved(), dxv, 1.0f, View<float>(), gu, gv); },
                     "blr_backward_sign_grad: b has shape [], expected [1, 4, 32]");
  test::expect_error([&] { ops.blr_backward_sign_grad(s.layer(), s.xv(), dyv, s.saved(), dxv, 1.0f, s.saved().a, gv, gv); },
                     "blr_backward_sign_grad: g_u has shape [1, 6, 32], expected [1, 8, 32]");
  test::expect_error([&] { ops.blr_backward_sign_grad(s.layer(), s.xv(), dyv, s.saved(), dxv, 3.0f, s.saved().a, gu, gv); },
                     "blr_backward_sign_grad: grad_scale must be a positive power of two");
}

}  // namespace
}  // namespace bitrank
