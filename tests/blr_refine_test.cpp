// The exact alternating refinement of a BLR matrix (blr/refine.hpp): the
// error never rises from sweep to sweep and ends well below Dual-SVID's;
// the reported error is the stored matrix's; scales stay ≥ 0 and balanced;
// zero sweeps and W = 0 change nothing; padded ranks stay finite; the
// activation-weighted init refined has a lower output error; under an input
// Gram the output error falls further than the diagonal weighting takes it;
// bad input.
#include <gtest/gtest.h>

#include <cmath>

#include "bitrank/blr/init.hpp"
#include "bitrank/blr/refine.hpp"
#include "bitrank/rng.hpp"
#include "support/expect.hpp"
#include "support/matrices.hpp"

namespace bitrank::blr {
namespace {

std::vector<double> power_law(index_t k, double exponent) {
  std::vector<double> s(static_cast<std::size_t>(k));
  for (index_t i = 0; i < k; ++i) s[static_cast<std::size_t>(i)] = std::pow(double(i + 1), -exponent);
  return s;
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s / double(v.size()));
}

TEST(BlrRefine, ErrorNeverRisesAndEndsBelowDualSvid) {
  const index_t m = 160, n = 224;
  const std::vector<float> w = test::matrix_with_spectrum(m, n, power_law(m, 0.5), 17);
  for (index_t r : {32, 64}) {
    for (int paths : {1, 2}) {
      HostBlrMatrix blr = dual_svid(w, m, n, {.rank = r, .paths = paths});
      const double start = relative_error(w, blr);
      const std::vector<double> errors = refine(blr, w, 4);
      ASSERT_EQ(errors.size(), 4u);
      std::printf("[refine] %lldx%lld r=%lld paths=%d: Dual-SVID %.4f, sweeps %.4f %.4f %.4f %.4f\n",
                  static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(r), paths, start, errors[0],
                  errors[1], errors[2], errors[3]);
      EXPECT_LT(errors[0], start) << "r=" << r << " paths=" << paths;
      for (std::size_t s = 1; s < errors.size(); ++s) EXPECT_LE(errors[s], errors[s - 1] + 1e-6) << "sweep " << s;
      EXPECT_LT(errors.back(), 0.95 * start) << "r=" << r << " paths=" << paths;
      // The stored (f32, rebalanced) matrix has the error reported.
      EXPECT_NEAR(relative_error(w, blr), errors.back(), 1e-5);
      check_blr(blr, "refined");
      for (const HostBlrPath& p : blr.paths) {
        for (const auto* v : {&p.h, &p.l, &p.g})
          for (float x : *v) EXPECT_GE(x, 0.0f);
        EXPECT_NEAR(rms(p.h), rms(p.l), 1e-4 * rms(p.l));
        EXPECT_NEAR(rms(p.g), rms(p.l), 1e-4 * rms(p.l));
      }
    }
  }
}

TEST(BlrRefine, ZeroSweepsZeroMatrixAndPaddedRanks) {
  const index_t m = 48, n = 40;
  const std::vector<float> w = gaussian(static_cast<std::size_t>(m * n), 5);
  HostBlrMatrix blr = dual_svid(w, m, n, {.rank = 32, .paths = 2});
  const HostBlrMatrix before = blr;
  EXPECT_TRUE(refine(blr, w, 0).empty());
  EXPECT_EQ(blr.paths[1].sign_v, before.paths[1].sign_v);
  EXPECT_EQ(blr.paths[0].h, before.paths[0].h);
  // W = 0: nothing to fit, the matrix is left as it is.
  const std::vector<float> zero(w.size(), 0.0f);
  HostBlrMatrix z = dual_svid(zero, m, n, {.rank = 32, .paths = 1});
  const HostBlrMatrix z0 = z;
  EXPECT_TRUE(refine(z, zero, 3).empty());
  EXPECT_EQ(z.paths[0].l, z0.paths[0].l);
  // r = 64 > min(m, n) = 40: padded ranks (ℓ = 0, identical sign columns) keep the system solvable.
  HostBlrMatrix padded = dual_svid(w, m, n, {.rank = 64, .paths = 2});
  const double start = relative_error(w, padded);
  const std::vector<double> errors = refine(padded, w, 3);
  for (double e : errors) EXPECT_TRUE(std::isfinite(e));
  EXPECT_LE(errors.back(), start + 1e-6);
  check_blr(padded, "padded");
}

TEST(BlrRefine, RefinedActivationWeightedInitLowersTheOutputError) {
  const index_t m = 128, n = 192;
  const std::vector<float> w = test::matrix_with_spectrum(m, n, power_law(m, 0.5), 41);
  std::vector<float> rms_in(static_cast<std::size_t>(n), 1.0f);
  for (index_t j : {5, 60, 111, 170}) rms_in[static_cast<std::size_t>(j)] = 30.0f;
  const HostBlrMatrix act = dual_svid(w, m, n, {.rank = 32, .paths = 2, .column_scale = rms_in});
  const HostBlrMatrix refined = dual_svid(w, m, n, {.rank = 32, .paths = 2, .column_scale = rms_in, .refine_sweeps = 3});
  const double e_act = relative_error(w, act, rms_in), e_refined = relative_error(w, refined, rms_in);
  std::printf("[refine] outliers: output error weighted %.4f, refined %.4f\n", e_act, e_refined);
  EXPECT_LT(e_refined, 0.95 * e_act);
}

// Inputs X [N][n] with correlated columns (a few shared factors) and outlier
// columns, and their Gram C = XᵀX/N in f32.
std::vector<float> correlated_gram(index_t n, index_t samples, std::uint64_t seed) {
  const index_t factors = 6;
  const std::vector<float> z = gaussian(static_cast<std::size_t>(samples * (n + factors)), seed);
  const std::vector<float> mix = gaussian(static_cast<std::size_t>(n * factors), seed + 1);
  std::vector<double> x(static_cast<std::size_t>(samples * n));
  for (index_t t = 0; t < samples; ++t)
    for (index_t j = 0; j < n; ++j) {
      double v = 0.3 * z[static_cast<std::size_t>(t * (n + factors) + j)];
      for (index_t f = 0; f < factors; ++f)
        v += double(mix[static_cast<std::size_t>(j * factors + f)]) * z[static_cast<std::size_t>(t * (n + factors) + n + f)];
      x[static_cast<std::size_t>(t * n + j)] = (j % 37 == 5 ? 20.0 : 1.0) * v;
    }
  std::vector<float> gram(static_cast<std::size_t>(n * n));
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j <= i; ++j) {
      double s = 0;
      for (index_t t = 0; t < samples; ++t) s += x[static_cast<std::size_t>(t * n + i)] * x[static_cast<std::size_t>(t * n + j)];
      gram[static_cast<std::size_t>(i * n + j)] = gram[static_cast<std::size_t>(j * n + i)] = static_cast<float>(s / double(samples));
    }
  return gram;
}

std::vector<float> sqrt_diagonal(const std::vector<float>& gram, index_t n) {
  std::vector<float> c(static_cast<std::size_t>(n));
  for (index_t j = 0; j < n; ++j) c[static_cast<std::size_t>(j)] = std::sqrt(gram[static_cast<std::size_t>(j * n + j)]);
  return c;
}

// Under an input Gram: the output error never rises, is the stored matrix's,
// and ends below what the diagonal weighting (W·diag(c), refined as much)
// reaches, since it sees the inputs' correlations; C = I is the unweighted
// refinement.
TEST(BlrRefine, UnderTheInputGramTheOutputErrorFallsBelowTheDiagonalOnes) {
  const index_t m = 96, n = 148;
  const std::vector<float> w = test::matrix_with_spectrum(m, n, power_law(m, 0.5), 23);
  const std::vector<float> gram = correlated_gram(n, 400, 77);
  const std::vector<float> c = sqrt_diagonal(gram, n);
  for (int paths : {1, 2}) {
    const InitOptions diag_opts{.rank = 32, .paths = paths, .column_scale = c, .refine_sweeps = 4};
    const HostBlrMatrix diag = dual_svid(w, m, n, diag_opts);
    InitOptions plain = diag_opts;
    plain.refine_sweeps = 0;
    HostBlrMatrix full = dual_svid(w, m, n, plain);
    const double start = relative_output_error(w, full, gram);
    const std::vector<double> errors = refine(full, w, 4, gram);
    ASSERT_EQ(errors.size(), 4u);
    const double e_diag = relative_output_error(w, diag, gram);
    std::printf("[refine] correlated inputs, %d path(s): output error Dual-SVID (weighted) %.4f, refined diagonally %.4f, "
                "under the Gram %.4f %.4f %.4f %.4f\n",
                paths, start, e_diag, errors[0], errors[1], errors[2], errors[3]);
    EXPECT_LT(errors[0], start);
    for (std::size_t s = 1; s < errors.size(); ++s) EXPECT_LE(errors[s], errors[s - 1] + 1e-6) << "sweep " << s;
    EXPECT_NEAR(relative_output_error(w, full, gram), errors.back(), 1e-5);
    EXPECT_LT(errors.back(), 0.9 * e_diag) << paths << " path(s)";
    check_blr(full, "refined under the Gram");
    for (const HostBlrPath& p : full.paths)
      for (const auto* v : {&p.h, &p.l, &p.g})
        for (float x : *v) EXPECT_GE(x, 0.0f);
    // InitOptions.input_gram does the same inside dual_svid.
    InitOptions with_gram = diag_opts;
    with_gram.input_gram = gram;
    EXPECT_NEAR(relative_output_error(w, dual_svid(w, m, n, with_gram), gram), errors.back(), 1e-6);
  }
  // C = I: the unweighted refinement's error (the joint g solve and the flips reach the same fit).
  std::vector<float> identity(static_cast<std::size_t>(n * n), 0.0f);
  for (index_t j = 0; j < n; ++j) identity[static_cast<std::size_t>(j * n + j)] = 1.0f;
  HostBlrMatrix a = dual_svid(w, m, n, {.rank = 32, .paths = 2});
  HostBlrMatrix b = a;
  const std::vector<double> ea = refine(a, w, 3), eb = refine(b, w, 3, identity);
  std::printf("[refine] C = I: %.6f, unweighted %.6f\n", eb.back(), ea.back());
  EXPECT_NEAR(eb.back(), ea.back(), 2e-3 * ea.back());
}

TEST(BlrRefine, BadInputIsAnError) {
  const index_t m = 40, n = 48;
  const std::vector<float> w = gaussian(static_cast<std::size_t>(m * n), 9);
  HostBlrMatrix blr = dual_svid(w, m, n, {.rank = 32, .paths = 1});
  test::expect_error([&] { refine(blr, std::vector<float>(w.begin(), w.end() - 1), 1); }, "refine: W has 1919 values");
  test::expect_error([&] { refine(blr, w, -1); }, "refine: -1 sweeps");
  HostBlrMatrix broken = blr;
  broken.paths[0].h.pop_back();
  test::expect_error([&] { refine(broken, w, 1); }, "refine: path 0 h has 39 values");
  std::vector<float> gram(static_cast<std::size_t>(n * n), 0.0f);
  test::expect_error([&] { refine(blr, w, 1, std::vector<float>(gram.begin(), gram.end() - 1)); },
                     "refine: the input Gram has 2303 values, 48×48 needs 2304");
  gram[1] = 1.0f;  // (0, 1) set, (1, 0) not
  test::expect_error([&] { refine(blr, w, 1, gram); }, "refine: the input Gram is not symmetric and finite at (1, 0)");
  gram[1] = 0.0f;
  gram[0] = -1.0f;
  test::expect_error([&] { refine(blr, w, 1, gram); }, "refine: the input Gram's diagonal entry 0 is -1");
}

}  // namespace
}  // namespace bitrank::blr
