// Truncated SVD (blr/svd.hpp): the exact method against matrices of known
// spectrum built by QR (support/matrices.hpp), the randomized method
// against the exact one on low-rank-plus-noise, padding, determinism, the
// method choice and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bitrank/blr/svd.hpp"
#include "bitrank/rng.hpp"
#include "support/expect.hpp"
#include "support/matrices.hpp"

namespace bitrank::blr {
namespace {

using test::matrix_with_spectrum;

// U·diag(S)·Vᵀ in f64.
std::vector<double> product(const Svd& f) {
  std::vector<double> w(static_cast<std::size_t>(f.m * f.n), 0.0);
  for (index_t i = 0; i < f.m; ++i)
    for (index_t j = 0; j < f.n; ++j) {
      double acc = 0;
      for (index_t k = 0; k < f.r; ++k)
        acc += double(f.u[static_cast<std::size_t>(i * f.r + k)]) * f.s[static_cast<std::size_t>(k)] * f.v[static_cast<std::size_t>(j * f.r + k)];
      w[static_cast<std::size_t>(i * f.n + j)] = acc;
    }
  return w;
}

// max |XᵀX − I| over the first `cols` columns of X [rows][ld].
double orthonormality_error(const std::vector<float>& x, index_t rows, index_t ld, index_t cols) {
  double worst = 0;
  for (index_t a = 0; a < cols; ++a)
    for (index_t b = 0; b < cols; ++b) {
      double d = 0;
      for (index_t i = 0; i < rows; ++i) d += double(x[static_cast<std::size_t>(i * ld + a)]) * x[static_cast<std::size_t>(i * ld + b)];
      worst = std::max(worst, std::abs(d - (a == b ? 1.0 : 0.0)));
    }
  return worst;
}

std::vector<double> to64(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

std::vector<double> geometric(index_t k, double first, double ratio) {
  std::vector<double> s(static_cast<std::size_t>(k));
  for (index_t i = 0; i < k; ++i) s[static_cast<std::size_t>(i)] = first * std::pow(ratio, double(i));
  return s;
}

// Exact SVD, tall and wide: singular values equal the construction's, U and
// V orthonormal, full-rank product = W, and a truncation's error is the
// Eckart–Young tail. Tolerances: W is rounded to f32 (relative 6e-8 per
// entry), dgesdd works in f64 and its factors are rounded to f32, so every
// figure is a few f32 ulps: 1e-6 (1e-5 for the ratio of two small errors).
TEST(BlrSvd, ExactMatchesKnownSpectrum) {
  for (const auto& [m, n] : {std::pair<index_t, index_t>{120, 80}, {80, 120}}) {
    const index_t mn = std::min(m, n);
    const auto s_true = geometric(mn, 2.0, 0.93);
    const auto w = matrix_with_spectrum(m, n, s_true, 7);
    const Svd full = truncated_svd(w, m, n, mn, {.method = SvdMethod::exact});
    EXPECT_EQ(full.method, SvdMethod::exact);
    double worst_s = 0;
    for (index_t k = 0; k < mn; ++k) worst_s = std::max(worst_s, std::abs(full.s[static_cast<std::size_t>(k)] - s_true[static_cast<std::size_t>(k)]));
    EXPECT_LE(worst_s, 1e-6 * s_true[0]) << m << "×" << n;
    EXPECT_LE(orthonormality_error(full.u, m, mn, mn), 1e-6);
    EXPECT_LE(orthonormality_error(full.v, n, mn, mn), 1e-6);
    EXPECT_LE(test::rel_diff(product(full), to64(w)), 1e-6);

    const index_t r = 20;
    const Svd part = truncated_svd(w, m, n, r, {.method = SvdMethod::exact});
    double tail = 0, all = 0;
    for (index_t k = 0; k < mn; ++k) {
      const double s2 = s_true[static_cast<std::size_t>(k)] * s_true[static_cast<std::size_t>(k)];
      all += s2;
      tail += k >= r ? s2 : 0;
    }
    const double eckart_young = std::sqrt(tail / all);
    EXPECT_NEAR(test::rel_diff(product(part), to64(w)) / eckart_young, 1.0, 1e-5);
    // Sign convention: each u_k's largest-magnitude entry is positive.
    for (index_t k = 0; k < r; ++k) {
      float big = 0;
      for (index_t i = 0; i < m; ++i)
        if (std::abs(part.u[static_cast<std::size_t>(i * r + k)]) > std::abs(big)) big = part.u[static_cast<std::size_t>(i * r + k)];
      EXPECT_GT(big, 0.0f) << "column " << k;
    }
  }
}

// r > min(m, n): zero singular values and zero columns past min(m, n), the
// product still W.
TEST(BlrSvd, PadsPastTheSmallerDimension) {
  const index_t m = 40, n = 33, r = 64;
  const auto w = matrix_with_spectrum(m, n, geometric(n, 1.0, 0.9), 3);
  const Svd f = truncated_svd(w, m, n, r);
  ASSERT_EQ(f.u.size(), std::size_t(m * r));
  ASSERT_EQ(f.v.size(), std::size_t(n * r));
  ASSERT_EQ(f.s.size(), std::size_t(r));
  for (index_t k = 0; k < r; ++k) {
    double cu = 0, cv = 0;
    for (index_t i = 0; i < m; ++i) cu += std::abs(f.u[static_cast<std::size_t>(i * r + k)]);
    for (index_t j = 0; j < n; ++j) cv += std::abs(f.v[static_cast<std::size_t>(j * r + k)]);
    if (k < n) {
      EXPECT_GT(f.s[static_cast<std::size_t>(k)], 0.0f) << k;
      EXPECT_GT(cu, 0.0) << k;
    } else {
      EXPECT_EQ(f.s[static_cast<std::size_t>(k)], 0.0f) << k;
      EXPECT_EQ(cu, 0.0) << k;
      EXPECT_EQ(cv, 0.0) << k;
    }
  }
  EXPECT_LE(test::rel_diff(product(f), to64(w)), 1e-6);
}

// Randomized against exact on a rank-24 signal (σ = 10·0.85^k, smallest
// 0.24) plus Gaussian noise of 1e-3 per entry (spectral norm ≈ 0.04): with
// 8 extra columns and 2 power iterations the sketch's error on σ_k is
// ~(0.04/0.24)^10 of σ_k, far below f32 rounding, so singular values must
// agree to 2e-6 relative, singular vectors to |cos| ≥ 1 − 1e-5, and the
// reconstruction error to 1e-4 relative.
TEST(BlrSvd, RandomizedMatchesExactOnLowRankPlusNoise) {
  const index_t m = 400, n = 300, r = 24;
  auto w = matrix_with_spectrum(m, n, geometric(r, 10.0, 0.85), 11);
  const auto noise = gaussian(w.size(), 12);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] += 1e-3f * noise[i];
  const Svd ex = truncated_svd(w, m, n, r, {.method = SvdMethod::exact});
  const Svd rs = truncated_svd(w, m, n, r, {.method = SvdMethod::randomized, .oversampling = 8, .power_iters = 2, .seed = 5});
  EXPECT_EQ(rs.method, SvdMethod::randomized);
  double worst_s = 0, worst_cos = 0;
  for (index_t k = 0; k < r; ++k) {
    worst_s = std::max(worst_s, std::abs(double(rs.s[static_cast<std::size_t>(k)]) - ex.s[static_cast<std::size_t>(k)]) / ex.s[static_cast<std::size_t>(k)]);
    double cu = 0, cv = 0;
    for (index_t i = 0; i < m; ++i) cu += double(rs.u[static_cast<std::size_t>(i * r + k)]) * ex.u[static_cast<std::size_t>(i * r + k)];
    for (index_t j = 0; j < n; ++j) cv += double(rs.v[static_cast<std::size_t>(j * r + k)]) * ex.v[static_cast<std::size_t>(j * r + k)];
    worst_cos = std::max({worst_cos, 1.0 - std::abs(cu), 1.0 - std::abs(cv)});
  }
  EXPECT_LE(worst_s, 2e-6);
  EXPECT_LE(worst_cos, 1e-5);
  EXPECT_LE(orthonormality_error(rs.u, m, r, r), 1e-5);
  const double e_ex = test::rel_diff(product(ex), to64(w)), e_rs = test::rel_diff(product(rs), to64(w));
  EXPECT_NEAR(e_rs / e_ex, 1.0, 1e-4);
  std::printf("[svd] randomized vs exact %lldx%lld r=%lld: max rel |Δσ| %.2e, max 1-|cos| %.2e, rel err %.6e vs %.6e\n",
              static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(r), worst_s, worst_cos, e_rs, e_ex);
}

// Same seed, same bits; another seed, another sketch (different bits, same
// spectrum to the tolerance above).
TEST(BlrSvd, RandomizedIsDeterministicGivenSeed) {
  const index_t m = 200, n = 150, r = 16;
  const auto w = gaussian(static_cast<std::size_t>(m * n), 21);
  const SvdOptions o{.method = SvdMethod::randomized, .oversampling = 8, .power_iters = 1, .seed = 9};
  const Svd a = truncated_svd(w, m, n, r, o), b = truncated_svd(w, m, n, r, o);
  EXPECT_EQ(a.u, b.u);
  EXPECT_EQ(a.s, b.s);
  EXPECT_EQ(a.v, b.v);
  SvdOptions o2 = o;
  o2.seed = 10;
  const Svd c = truncated_svd(w, m, n, r, o2);
  EXPECT_NE(a.u, c.u);
}

TEST(BlrSvd, AutomaticMethodChoice) {
  const SvdOptions o;  // automatic, oversampling 32
  EXPECT_EQ(svd_method_for(576, 1536, 384, o), SvdMethod::exact);    // small: exact
  EXPECT_EQ(svd_method_for(5120, 17408, 1024, o), SvdMethod::randomized);
  EXPECT_EQ(svd_method_for(2048, 4096, 2016, o), SvdMethod::exact);  // sketch as wide as min(m, n)
  EXPECT_EQ(svd_method_for(5120, 17408, 64, {.method = SvdMethod::exact}), SvdMethod::exact);
}

// Sign rule on ties: u_0 has two entries of equal largest magnitude and
// opposite signs (exact in f32); whichever the SVD's rounding makes a hair
// larger, the pair is signed by the first of them, so u_0[0] > 0 always.
TEST(BlrSvd, SignRuleBreaksTiesByTheFirstEntry) {
  const index_t m = 6, n = 9;
  int checked = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    const auto v = gaussian(static_cast<std::size_t>(n), seed);
    const float u[m] = {2.0f, -2.0f, 1.0f, 0.5f, -0.25f, 0.125f};
    std::vector<float> w(static_cast<std::size_t>(m * n));
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) w[static_cast<std::size_t>(i * n + j)] = u[i] * v[static_cast<std::size_t>(j)];
    const SvdF64 f = truncated_svd_f64(w, m, n, 1, {.method = SvdMethod::exact});
    ASSERT_NEAR(std::abs(f.u[0]), std::abs(f.u[1]), 1e-12);  // the tie is there
    EXPECT_GT(f.u[0], 0) << "seed " << seed;
    EXPECT_LT(f.u[1], 0) << "seed " << seed;
    ++checked;
  }
  EXPECT_EQ(checked, 20);
}

// route_by_size: the large engine from min(m, n) ≥ min_dim, the CPU's below.
TEST(BlrSvd, RouteBySizeSendsOnlyLargeMatricesToTheLargeEngine) {
  std::vector<std::pair<index_t, index_t>> large_calls;
  const SvdEngine large = [&](std::span<const float> a, index_t m, index_t n, index_t r, const SvdOptions& o,
                              std::string_view name) {
    large_calls.emplace_back(m, n);
    return truncated_svd_f64(a, m, n, r, o, name);
  };
  const SvdEngine routed = route_by_size(large, 40);
  const auto w = gaussian(static_cast<std::size_t>(50 * 60), 3);
  const SvdOptions o{.method = SvdMethod::exact};
  const SvdF64 small = routed(std::span<const float>(w).first(39 * 60), 39, 60, 4, o, "small");
  EXPECT_TRUE(large_calls.empty());
  const SvdF64 big = routed(w, 50, 60, 4, o, "big");
  ASSERT_EQ(large_calls.size(), 1u);
  EXPECT_EQ(large_calls[0], (std::pair<index_t, index_t>{50, 60}));
  EXPECT_EQ(small.s, truncated_svd_f64(std::span<const float>(w).first(39 * 60), 39, 60, 4, o).s);
  EXPECT_EQ(big.s, truncated_svd_f64(w, 50, 60, 4, o).s);
  EXPECT_THROW(route_by_size(SvdEngine{}, 40), Error);
}

TEST(BlrSvd, BadInputIsAnError) {
  std::vector<float> w(6 * 5, 1.0f);
  w[2 * 5 + 3] = std::numeric_limits<float>::quiet_NaN();
  test::expect_error([&] { truncated_svd(w, 6, 5, 2, {}, "blk.0.attn_q.weight"); },
                     "blk.0.attn_q.weight [6×5] has a non-finite value nan at row 2, column 3");
  w[2 * 5 + 3] = std::numeric_limits<float>::infinity();
  test::expect_error([&] { truncated_svd(w, 6, 5, 2); }, "matrix [6×5] has a non-finite value inf at row 2, column 3");
  w[2 * 5 + 3] = 1.0f;
  test::expect_error([&] { truncated_svd(w, 6, 5, 0); }, "rank 0 for matrix must be at least 1");
  test::expect_error([&] { truncated_svd(w, 5, 5, 2); }, "has 30 values, shape 5×5 needs 25");
  test::expect_error([&] { truncated_svd(w, 6, 5, 2, {.oversampling = -1}); }, "oversampling -1");
  test::expect_error([&] { truncated_svd(w, 6, 5, 2, {.power_iters = -2}); }, "-2 power iterations");
  test::expect_error([&] { truncated_svd({}, 0, 5, 2); }, "empty shape 0×5");
}

}  // namespace
}  // namespace bitrank::blr
