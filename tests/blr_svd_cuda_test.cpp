// The GPU engine of the truncated SVD (bitrank/svd_engine.hpp, src/cuda/svd.cu)
// against the CPU engine (LAPACK) in f64, and Dual-SVID with either engine.
// Every test is skipped (GTEST_SKIP, with the reason) in a build without the
// CUDA backend or where no GPU is visible.
//
// Tolerances and why:
//   exact vs LAPACK        both are backward-stable f64 SVDs of the same f64
//                          matrix; on spectra with ≥ 7 % gaps the singular
//                          values agree to ~1e-15·σ₁ and the vectors to
//                          angles ~1e-12: held to 1e-10 relative (σ, the
//                          reconstruction error) and 1 − cos ≤ 1e-10 (the
//                          signs follow the one shared convention, so cos,
//                          not |cos|).
//   randomized vs CPU      the same algorithm from the same Ω, GPU in f64,
//                          CPU's passes in f32: a numpy emulation of the two
//                          agreed to 2.5e-8 (σ), 4e-9 (1 − |cos|) and 1e-10
//                          (reconstruction error, relative) on
//                          low-rank+noise, power-law and Gaussian matrices;
//                          held to 1e-6, 1e-6 and 1e-8.
//   randomized vs LAPACK   the sketch's own error: the CPU test's bounds
//                          (blr_svd_test.cpp), σ 2e-6, 1 − |cos| 1e-5.
//                          (Vectors of close singular values move more:
//                          1 − cos = 2e-9 is an angle of 6e-5.)
//   Dual-SVID              exact: the signs come from f64 factors that
//                          agree to ~1e-12, so they may differ only where
//                          |U'| (|V'|) is ≤ 1e-6 of its column's largest;
//                          h, ℓ, g agree to 1e-5, the relative
//                          reconstruction errors to 1e-6. Randomized: the
//                          CPU's f32 passes move U' by up to 1.5e-5 of the
//                          column max (numpy emulation on Gaussian 384×256),
//                          so "near zero" is ≤ 1e-3 of it, scales 1e-4, the
//                          error 1e-5. Differing signs are counted and
//                          printed (0 expected in practice).
#include <gtest/gtest.h>

#include <cblas.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "bitrank/backend.hpp"
#include "bitrank/blr/blr_matrix.hpp"
#include "bitrank/blr/init.hpp"
#include "bitrank/blr/svd.hpp"
#include "bitrank/rng.hpp"
#include "support/expect.hpp"
#include "support/matrices.hpp"

namespace bitrank::blr {
namespace {

std::size_t sz(index_t v) { return static_cast<std::size_t>(v); }

// The GPU engine, made once; null with `why` set where it cannot run.
const SvdEngine* gpu_engine(std::string& why) {
#ifdef BITRANK_HAS_CUDA
  if (cuda_device_count() == 0) {
    why = "no GPU visible: the CUDA SVD engine is not tested here";
    return nullptr;
  }
  static const SvdEngine engine = make_cuda_svd_engine(0);
  return &engine;
#else
  why = "built without the CUDA backend (-DBITRANK_CUDA=ON builds the CUDA SVD engine)";
  return nullptr;
#endif
}

#define REQUIRE_GPU_ENGINE(var)                  \
  std::string skip_why_;                         \
  const SvdEngine* var##_ptr = gpu_engine(skip_why_); \
  if (!var##_ptr) GTEST_SKIP() << skip_why_;     \
  const SvdEngine& var = *var##_ptr

// ‖W − U·diag(S)·Vᵀ‖_F / ‖W‖_F in f64 (dgemm).
double rel_error(const std::vector<float>& w, const SvdF64& f) {
  std::vector<double> us(f.u), rec(sz(f.m * f.n));
  for (index_t i = 0; i < f.m; ++i)
    for (index_t c = 0; c < f.k; ++c) us[sz(i * f.k + c)] *= f.s[sz(c)];
  if (f.k > 0)
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(f.m), static_cast<blasint>(f.n),
                static_cast<blasint>(f.k), 1.0, us.data(), static_cast<blasint>(f.k), f.v.data(),
                static_cast<blasint>(f.k), 0.0, rec.data(), static_cast<blasint>(f.n));
  double num = 0, den = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    num += (double(w[i]) - rec[i]) * (double(w[i]) - rec[i]);
    den += double(w[i]) * w[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// max |XᵀX − I| of X [rows][k] (f64).
double orthonormality_error(const std::vector<double>& x, index_t rows, index_t k) {
  std::vector<double> g(sz(k * k));
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<blasint>(k), static_cast<blasint>(k),
              static_cast<blasint>(rows), 1.0, x.data(), static_cast<blasint>(k), x.data(), static_cast<blasint>(k), 0.0,
              g.data(), static_cast<blasint>(k));
  double worst = 0;
  for (index_t a = 0; a < k; ++a)
    for (index_t b = 0; b < k; ++b) worst = std::max(worst, std::abs(g[sz(a * k + b)] - (a == b ? 1.0 : 0.0)));
  return worst;
}

// Column c of x [rows][k] · column c of y, for c < upto: the smallest (signed, or its |·|).
double min_cos(const std::vector<double>& x, const std::vector<double>& y, index_t rows, index_t k, index_t upto,
               bool absolute) {
  double worst = 1;
  for (index_t c = 0; c < upto; ++c) {
    double d = 0;
    for (index_t i = 0; i < rows; ++i) d += x[sz(i * k + c)] * y[sz(i * k + c)];
    worst = std::min(worst, absolute ? std::abs(d) : d);
  }
  return worst;
}

double max_rel_sigma(const SvdF64& a, const SvdF64& b, index_t upto) {
  double worst = 0;
  for (index_t c = 0; c < upto; ++c)
    worst = std::max(worst, std::abs(a.s[sz(c)] - b.s[sz(c)]) / std::max(b.s[sz(c)], 1e-300));
  return worst;
}

struct Agreement {
  double sigma, cos_u, cos_v, err_gpu, err_cpu;
};

// GPU vs CPU figures over the first `upto` triplets (signed cos when `signed_cos`).
Agreement agreement(const std::vector<float>& w, const SvdF64& g, const SvdF64& c, index_t upto, bool signed_cos) {
  EXPECT_EQ(g.m, c.m);
  EXPECT_EQ(g.n, c.n);
  EXPECT_EQ(g.k, c.k);
  EXPECT_EQ(g.method, c.method);
  return {max_rel_sigma(g, c, upto), min_cos(g.u, c.u, g.m, g.k, upto, !signed_cos),
          min_cos(g.v, c.v, g.n, g.k, upto, !signed_cos), rel_error(w, g), rel_error(w, c)};
}

std::vector<double> geometric(index_t k, double first, double ratio) {
  std::vector<double> s(sz(k));
  for (index_t i = 0; i < k; ++i) s[sz(i)] = first * std::pow(ratio, double(i));
  return s;
}

// Exact: tall, wide, square, a single row / column (both orientations, with
// and without the QR-first detour), r = 1, r = min(m, n)/2, r = min(m, n)
// and r past it (padding) against LAPACK (tolerances in the file comment).
TEST(BlrSvdCuda, ExactMatchesLapack) {
  REQUIRE_GPU_ENGINE(gpu);
  const std::pair<index_t, index_t> shapes[] = {{120, 80}, {80, 120}, {40, 200}, {200, 40}, {64, 64}, {1, 50}, {50, 1}};
  for (const auto& [m, n] : shapes) {
    const index_t mn = std::min(m, n);
    const auto w = test::matrix_with_spectrum(m, n, geometric(mn, 2.0, 0.93), 7);
    for (const index_t r : {index_t{1}, std::max<index_t>(mn / 2, 1), mn, mn + 7}) {
      SCOPED_TRACE(::testing::Message() << m << "×" << n << " r=" << r);
      const SvdOptions o{.method = SvdMethod::exact};
      const SvdF64 g = gpu(w, m, n, r, o, "W"), c = truncated_svd_f64(w, m, n, r, o, "W");
      ASSERT_EQ(g.k, std::min(r, mn));
      ASSERT_EQ(g.u.size(), sz(m * g.k));
      ASSERT_EQ(g.v.size(), sz(n * g.k));
      ASSERT_EQ(g.s.size(), sz(g.k));
      const Agreement a = agreement(w, g, c, g.k, true);
      EXPECT_LE(a.sigma, 1e-10);
      EXPECT_GE(a.cos_u, 1 - 1e-10);
      EXPECT_GE(a.cos_v, 1 - 1e-10);
      EXPECT_NEAR(a.err_gpu, a.err_cpu, 1e-10 * a.err_cpu + 1e-13);
      EXPECT_LE(orthonormality_error(g.u, m, g.k), 1e-12);
      EXPECT_LE(orthonormality_error(g.v, n, g.k), 1e-12);
      EXPECT_GT(g.device_bytes, 0u);
      // The f32 result through truncated_svd: padded like the CPU's.
      const Svd f = truncated_svd(w, m, n, r, o, "W", gpu);
      ASSERT_EQ(f.s.size(), sz(r));
      for (index_t k = g.k; k < r; ++k) EXPECT_EQ(f.s[sz(k)], 0.0f) << k;
      for (index_t k = 0; k < g.k; ++k) EXPECT_EQ(f.s[sz(k)], static_cast<float>(g.s[sz(k)])) << k;
    }
  }
}

// Rank-deficient input: an integer rank-2 matrix (exact in f32), and zero.
// The zero singular values come out as (near) zeros on both engines, the
// top two agree with LAPACK, and the rank-2 reconstruction is exact.
TEST(BlrSvdCuda, RankDeficient) {
  REQUIRE_GPU_ENGINE(gpu);
  for (const auto& [m, n] : {std::pair<index_t, index_t>{60, 90}, {90, 60}, {40, 120}, {120, 40}}) {  // 2 with QR first
    SCOPED_TRACE(::testing::Message() << m << "×" << n);
    std::vector<float> w(sz(m * n));
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j)
        w[sz(i * n + j)] = static_cast<float>(((i % 5) - 2) * ((j % 7) - 3) + 2 * ((i % 3) - 1) * ((j % 4) - 1));
    const SvdOptions o{.method = SvdMethod::exact};
    for (const index_t r : {index_t{10}, std::min(m, n)}) {
      const SvdF64 g = gpu(w, m, n, r, o, "W"), c = truncated_svd_f64(w, m, n, r, o, "W");
      ASSERT_LT(c.s[1], 0.99 * c.s[0]);  // distinct: the top vectors are determined
      const Agreement a = agreement(w, g, c, 2, true);
      EXPECT_LE(a.sigma, 1e-10);
      EXPECT_GE(a.cos_u, 1 - 1e-10);
      EXPECT_GE(a.cos_v, 1 - 1e-10);
      for (index_t k = 2; k < g.k; ++k) {
        EXPECT_LE(g.s[sz(k)], 1e-12 * g.s[0]) << k;
        EXPECT_LE(c.s[sz(k)], 1e-12 * c.s[0]) << k;
      }
      EXPECT_LE(a.err_gpu, 1e-12);
      EXPECT_LE(a.err_cpu, 1e-12);
      EXPECT_LE(orthonormality_error(g.u, m, g.k), 1e-12);
    }
  }
  const index_t m = 30, n = 20;
  const std::vector<float> zero(sz(m * n), 0.0f);
  const SvdF64 g = gpu(zero, m, n, 8, {.method = SvdMethod::exact}, "zero");
  for (double s : g.s) EXPECT_EQ(s, 0.0);
  EXPECT_EQ(rel_error(zero, g), 0.0);
}

// Randomized: the CPU's algorithm from the same Ω, so the two engines agree
// far below the sketch's own error (tolerances in the file comment): a
// rank-24 signal plus noise (forced, also against LAPACK), a power-law
// spectrum of 1100×1300 (automatic picks randomized on both), and a tall one
// without power iterations.
TEST(BlrSvdCuda, RandomizedMatchesCpu) {
  REQUIRE_GPU_ENGINE(gpu);
  {
    const index_t m = 400, n = 300, r = 24;
    auto w = test::matrix_with_spectrum(m, n, geometric(r, 10.0, 0.85), 11);
    const auto noise = gaussian(w.size(), 12);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] += 1e-3f * noise[i];
    const SvdOptions o{.method = SvdMethod::randomized, .oversampling = 8, .power_iters = 2, .seed = 5};
    const SvdF64 g = gpu(w, m, n, r, o, "W"), c = truncated_svd_f64(w, m, n, r, o, "W");
    const SvdF64 ex = truncated_svd_f64(w, m, n, r, {.method = SvdMethod::exact}, "W");
    EXPECT_EQ(g.method, SvdMethod::randomized);
    const Agreement a = agreement(w, g, c, r, false);
    EXPECT_LE(a.sigma, 1e-6);
    EXPECT_GE(a.cos_u, 1 - 1e-6);
    EXPECT_GE(a.cos_v, 1 - 1e-6);
    EXPECT_NEAR(a.err_gpu, a.err_cpu, 1e-8 * a.err_cpu);
    EXPECT_LE(max_rel_sigma(g, ex, r), 2e-6);
    EXPECT_GE(min_cos(g.u, ex.u, m, r, r, true), 1 - 1e-5);
    EXPECT_GE(min_cos(g.v, ex.v, n, r, r, true), 1 - 1e-5);
    std::printf("[svd cuda] randomized %lldx%lld r=%lld vs CPU randomized: max rel |Δσ| %.2e, min |cos| u %.12f v %.12f, "
                "rel err %.10e vs %.10e\n",
                static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(r), a.sigma, a.cos_u, a.cos_v,
                a.err_gpu, a.err_cpu);
  }
  std::vector<double> power_law(1100);
  for (std::size_t i = 0; i < power_law.size(); ++i) power_law[i] = 1.0 / std::sqrt(double(i + 1));
  for (const auto& [m, n, q] : {std::tuple<index_t, index_t, int>{1100, 1300, 2}, {1300, 1100, 0}}) {
    SCOPED_TRACE(::testing::Message() << m << "×" << n << " q=" << q);
    const index_t r = 64;
    const auto w = test::matrix_with_spectrum(m, n, power_law, 13);
    const SvdOptions o{.power_iters = q, .seed = 3};  // automatic, oversampling 32
    const SvdF64 g = gpu(w, m, n, r, o, "W"), c = truncated_svd_f64(w, m, n, r, o, "W");
    EXPECT_EQ(g.method, SvdMethod::randomized);
    const Agreement a = agreement(w, g, c, r, false);
    EXPECT_LE(a.sigma, 1e-6);
    EXPECT_GE(a.cos_u, 1 - 1e-6);
    EXPECT_GE(a.cos_v, 1 - 1e-6);
    EXPECT_NEAR(a.err_gpu, a.err_cpu, 1e-8 * a.err_cpu);
    EXPECT_LE(orthonormality_error(g.u, m, r), 1e-12);
    EXPECT_LE(orthonormality_error(g.v, n, r), 1e-12);
    std::printf("[svd cuda] randomized %lldx%lld r=%lld q=%d vs CPU randomized: max rel |Δσ| %.2e, min |cos| u %.12f "
                "v %.12f, rel err %.10e vs %.10e\n",
                static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(r), q, a.sigma, a.cos_u,
                a.cos_v, a.err_gpu, a.err_cpu);
  }
}

// Same input, same bits (compress --resume checks the init's fingerprint).
TEST(BlrSvdCuda, Deterministic) {
  REQUIRE_GPU_ENGINE(gpu);
  const index_t m = 300, n = 200;
  const auto w = gaussian(sz(m * n), 31);
  for (const SvdMethod method : {SvdMethod::exact, SvdMethod::randomized}) {
    const SvdOptions o{.method = method, .oversampling = 8, .power_iters = 1, .seed = 9};
    const SvdF64 a = gpu(w, m, n, 40, o, "W"), b = gpu(w, m, n, 40, o, "W");
    EXPECT_EQ(a.u, b.u);
    EXPECT_EQ(a.s, b.s);
    EXPECT_EQ(a.v, b.v);
  }
}

// Bad input: the CPU engine's errors, word for word. r past min(m, n) is
// not an error (the contract pads; ExactMatchesLapack checks it).
TEST(BlrSvdCuda, BadInputIsAnError) {
  REQUIRE_GPU_ENGINE(gpu);
  std::vector<float> w(6 * 5, 1.0f);
  w[2 * 5 + 3] = std::numeric_limits<float>::quiet_NaN();
  test::expect_error([&] { gpu(w, 6, 5, 2, {}, "blk.0.attn_q.weight"); },
                     "blk.0.attn_q.weight [6×5] has a non-finite value nan at row 2, column 3");
  w[2 * 5 + 3] = std::numeric_limits<float>::infinity();
  test::expect_error([&] { gpu(w, 6, 5, 2, {}, "matrix"); }, "matrix [6×5] has a non-finite value inf at row 2, column 3");
  w[2 * 5 + 3] = 1.0f;
  test::expect_error([&] { gpu(w, 6, 5, 0, {}, "matrix"); }, "rank 0 for matrix must be at least 1");
  test::expect_error([&] { gpu(w, 6, 5, -3, {}, "matrix"); }, "rank -3 for matrix must be at least 1");
  test::expect_error([&] { gpu(w, 5, 5, 2, {}, "matrix"); }, "has 30 values, shape 5×5 needs 25");
  test::expect_error([&] { gpu(w, 6, 5, 2, {.oversampling = -1}, "matrix"); }, "oversampling -1");
  test::expect_error([&] { gpu(w, 6, 5, 2, {.power_iters = -2}, "matrix"); }, "-2 power iterations");
  test::expect_error([&] { gpu({}, 0, 5, 2, {}, "matrix"); }, "empty shape 0×5");
  // Through Dual-SVID: the error names the matrix.
  w[7] = std::numeric_limits<float>::quiet_NaN();
  test::expect_error([&] { dual_svid(w, 6, 5, InitOptions{.rank = 32, .engine = gpu, .name = "blk.3.ffn_up"}); },
                     "blk.3.ffn_up [6×5] has a non-finite value nan at row 1, column 2");
  // The engine is still usable after errors.
  w[7] = 1.0f;
  EXPECT_EQ(gpu(w, 6, 5, 2, {}, "matrix").k, 2);
}

// Dual-SVID (2 paths) with the CPU and the GPU engine: the same signs except
// at near-zero entries of U', V' (counted), scales and reconstruction error
// agreeing; exact (256×384) and randomized (384×256) SVDs.
TEST(BlrSvdCuda, DualSvidMatchesCpu) {
  REQUIRE_GPU_ENGINE(gpu);
  // near: |U'| below this fraction of its column's largest counts as near zero;
  // tol: h, ℓ, g (relative L2) and the reconstruction error (relative).
  struct Case {
    index_t m, n;
    SvdMethod method;
    float near;
    double scales_tol, error_tol;
  };
  for (const Case& cs : {Case{256, 384, SvdMethod::exact, 1e-6f, 1e-5, 1e-6},
                         Case{384, 256, SvdMethod::randomized, 1e-3f, 1e-4, 1e-5}}) {
    const index_t m = cs.m, n = cs.n, r = 64;
    SCOPED_TRACE(::testing::Message() << m << "×" << n << (cs.method == SvdMethod::exact ? " exact" : " randomized"));
    const auto w = gaussian(sz(m * n), 41);
    InitOptions o{.rank = r, .paths = 2, .svd = {.method = cs.method, .oversampling = 16, .power_iters = 2, .seed = 4}};
    std::vector<SignMagnitudes> mags_c, mags_g;
    const HostBlrMatrix c = dual_svid(w, m, n, o, &mags_c);
    o.engine = gpu;
    const HostBlrMatrix g = dual_svid(w, m, n, o, &mags_g);
    ASSERT_EQ(g.paths.size(), 2u);
    const index_t words = sign_words(r);
    for (std::size_t p = 0; p < 2; ++p) {
      std::int64_t differ = 0, near_zero = 0;
      const auto compare = [&](const std::vector<std::uint32_t>& bc, const std::vector<std::uint32_t>& bg,
                               const std::vector<float>& mag, index_t rows) {
        std::vector<float> col_max(sz(r), 0.0f);
        for (index_t i = 0; i < rows; ++i)
          for (index_t k = 0; k < r; ++k) col_max[sz(k)] = std::max(col_max[sz(k)], mag[sz(i * r + k)]);
        for (index_t i = 0; i < rows; ++i)
          for (index_t k = 0; k < r; ++k) {
            const std::size_t word = sz(i * words + k / 32);
            if (((bc[word] ^ bg[word]) >> (k % 32)) & 1u) {
              ++differ;
              if (mag[sz(i * r + k)] <= cs.near * col_max[sz(k)]) ++near_zero;
            }
          }
      };
      compare(c.paths[p].sign_u, g.paths[p].sign_u, mags_c[p].u, m);
      compare(c.paths[p].sign_v, g.paths[p].sign_v, mags_c[p].v, n);
      EXPECT_EQ(differ, near_zero) << "path " << p << ": signs differ away from zero";
      const auto rel = [](const std::vector<float>& x, const std::vector<float>& y) {
        return test::rel_diff(std::vector<double>(x.begin(), x.end()), std::vector<double>(y.begin(), y.end()));
      };
      EXPECT_LE(rel(g.paths[p].h, c.paths[p].h), cs.scales_tol) << "path " << p;
      EXPECT_LE(rel(g.paths[p].l, c.paths[p].l), cs.scales_tol) << "path " << p;
      EXPECT_LE(rel(g.paths[p].g, c.paths[p].g), cs.scales_tol) << "path " << p;
      std::printf("[svd cuda] Dual-SVID %lldx%lld r=%lld path %zu: %lld of %lld signs differ (%lld at |U'|, |V'| ≤ %g of "
                  "the column max)\n",
                  static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(r), p,
                  static_cast<long long>(differ), static_cast<long long>((m + n) * r), static_cast<long long>(near_zero),
                  double(cs.near));
    }
    const double ec = relative_error(w, c), eg = relative_error(w, g);
    EXPECT_NEAR(eg, ec, cs.error_tol * ec);
    std::printf("[svd cuda] Dual-SVID %lldx%lld r=%lld: relative error GPU %.10f, CPU %.10f\n", static_cast<long long>(m),
                static_cast<long long>(n), static_cast<long long>(r), eg, ec);
  }
}

// Timing: GPU vs CPU for the exact SVD of a SmolLM2 MLP shape (576×1536,
// r = 1024 → all 576 triplets) and the automatic (randomized) one of
// 5120×5120 at r = 1024, plus the GPU's exact 5120×5120; each checked
// against the CPU where both ran. The GPU is warmed up first (handles,
// kernels); times are wall clock including the transfers.
TEST(BlrSvdCuda, TimingAgainstCpu) {
  REQUIRE_GPU_ENGINE(gpu);
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](auto&& f) {
    const auto t0 = Clock::now();
    f();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  {
    const auto warm = gaussian(64 * 48, 1);
    gpu(warm, 64, 48, 8, {}, "warm-up");
  }
  {
    const index_t m = 576, n = 1536, r = 1024;
    const auto w = gaussian(sz(m * n), 51);
    SvdF64 g, c;
    const double tg = seconds([&] { g = gpu(w, m, n, r, {}, "W"); });
    const double tc = seconds([&] { c = truncated_svd_f64(w, m, n, r, {}, "W"); });
    EXPECT_EQ(g.method, SvdMethod::exact);
    EXPECT_LE(max_rel_sigma(g, c, g.k), 1e-10);
    std::printf("[svd cuda] %lldx%lld r=%lld exact: GPU %.3f s (peak %.1f MiB), CPU %.3f s\n", static_cast<long long>(m),
                static_cast<long long>(n), static_cast<long long>(r), tg, double(g.device_bytes) / (1 << 20), tc);
  }
  {
    const index_t m = 5120, n = 5120, r = 1024;
    const auto w = gaussian(sz(m * n), 52);
    SvdF64 g, c, e;
    const double tg = seconds([&] { g = gpu(w, m, n, r, {}, "W"); });
    const double tc = seconds([&] { c = truncated_svd_f64(w, m, n, r, {}, "W"); });
    const double te = seconds([&] { e = gpu(w, m, n, r, {.method = SvdMethod::exact}, "W"); });
    EXPECT_EQ(g.method, SvdMethod::randomized);
    EXPECT_LE(max_rel_sigma(g, c, r), 1e-6);
    std::printf("[svd cuda] %lldx%lld r=%lld randomized (l=%lld, q=2): GPU %.3f s (peak %.1f MiB), CPU %.3f s; "
                "GPU exact %.3f s (peak %.1f MiB); relative error randomized %.6f, exact %.6f\n",
                static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(r),
                static_cast<long long>(r + SvdOptions{}.oversampling), tg, double(g.device_bytes) / (1 << 20), tc, te,
                double(e.device_bytes) / (1 << 20), rel_error(w, g), rel_error(w, e));
  }
}

}  // namespace
}  // namespace bitrank::blr
