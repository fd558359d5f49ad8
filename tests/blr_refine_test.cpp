// The exact alternating refinement of a BLR matrix (blr/refine.hpp): the
// error never rises from sweep to sweep and ends well below Dual-SVID's;
// the reported error is the stored matrix's; scales stay ≥ 0 and balanced;
// zero sweeps and W = 0 change nothing; padded ranks stay finite; the
// activation-weighted init refined has a lower output error; bad input.
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

TEST(BlrRefine, BadInputIsAnError) {
  const index_t m = 40, n = 48;
  const std::vector<float> w = gaussian(static_cast<std::size_t>(m * n), 9);
  HostBlrMatrix blr = dual_svid(w, m, n, {.rank = 32, .paths = 1});
  test::expect_error([&] { refine(blr, std::vector<float>(w.begin(), w.end() - 1), 1); }, "refine: W has 1919 values");
  test::expect_error([&] { refine(blr, w, -1); }, "refine: -1 sweeps");
  HostBlrMatrix broken = blr;
  broken.paths[0].h.pop_back();
  test::expect_error([&] { refine(broken, w, 1); }, "refine: path 0 h has 39 values");
}

}  // namespace
}  // namespace bitrank::blr
