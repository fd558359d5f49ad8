// The latent rotation of Dual-SVID (blr/init.hpp, rotation_iterations;
// itq_rotation): it lowers the weight error of the start at 1 and 2 paths
// and ranks 32 and 64, its R is orthogonal and its joint error never rises,
// 0 rounds is the plain Dual-SVID bit for bit, and bad values are errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "bitrank/blr/init.hpp"
#include "bitrank/blr/svd.hpp"
#include "support/expect.hpp"
#include "support/matrices.hpp"

namespace bitrank::blr {
namespace {

constexpr index_t kM = 192, kN = 512;  // unequal sides: the factor weights of itq_rotation matter

std::vector<double> power_law(index_t k, double exponent) {
  std::vector<double> s(static_cast<std::size_t>(k));
  for (index_t i = 0; i < k; ++i) s[static_cast<std::size_t>(i)] = std::pow(double(i + 1), -exponent);
  return s;
}

std::vector<float> test_matrix() { return test::matrix_with_spectrum(kM, kN, power_law(kM, 0.5), 71); }

// U' = U·√Σ and V' = V·√Σ of w at rank r, as Dual-SVID forms them.
struct Latent {
  std::vector<float> u, v;
};

Latent latent(const std::vector<float>& w, index_t r) {
  const Svd svd = truncated_svd(w, kM, kN, r);
  Latent l{svd.u, svd.v};
  for (index_t k = 0; k < r; ++k) {
    const float root = std::sqrt(svd.s[static_cast<std::size_t>(k)]);
    for (index_t i = 0; i < kM; ++i) l.u[static_cast<std::size_t>(i * r + k)] *= root;
    for (index_t j = 0; j < kN; ++j) l.v[static_cast<std::size_t>(j * r + k)] *= root;
  }
  return l;
}

void expect_same(const HostBlrMatrix& a, const HostBlrMatrix& b) {
  ASSERT_EQ(a.paths.size(), b.paths.size());
  for (std::size_t p = 0; p < a.paths.size(); ++p) {
    EXPECT_EQ(a.paths[p].sign_u, b.paths[p].sign_u) << p;
    EXPECT_EQ(a.paths[p].sign_v, b.paths[p].sign_v) << p;
    EXPECT_EQ(a.paths[p].h, b.paths[p].h) << p;
    EXPECT_EQ(a.paths[p].l, b.paths[p].l) << p;
    EXPECT_EQ(a.paths[p].g, b.paths[p].g) << p;
  }
}

// The rotated start's relative weight error is below the plain one's at
// every path count and rank tested (20 rounds); also with a column scale
// (the activation-weighted form rotates the factors of W·diag(c)).
TEST(BlrRotate, LowersTheWeightError) {
  const std::vector<float> w = test_matrix();
  std::vector<float> c(static_cast<std::size_t>(kN));
  for (index_t j = 0; j < kN; ++j) c[static_cast<std::size_t>(j)] = j % 37 == 0 ? 20.0f : 0.5f + float(j % 7) / 7.0f;
  for (const bool weighted : {false, true})
    for (const int paths : {1, 2})
      for (const index_t r : {index_t{32}, index_t{64}}) {
        InitOptions plain{.rank = r, .paths = paths};
        plain.svd.seed = 5;
        if (weighted) plain.column_scale = c;
        InitOptions rotated = plain;
        rotated.rotation_iterations = 20;
        const std::span<const float> cw = weighted ? std::span<const float>(c) : std::span<const float>();
        const double e0 = relative_error(w, dual_svid(w, kM, kN, plain), cw);
        const double e1 = relative_error(w, dual_svid(w, kM, kN, rotated), cw);
        std::printf("[rotate] %lldx%lld %s paths=%d r=%lld: rel %s error plain %.4f, rotated (20 rounds) %.4f\n",
                    static_cast<long long>(kM), static_cast<long long>(kN), weighted ? "weighted" : "plain", paths,
                    static_cast<long long>(r), weighted ? "weighted" : "weight", e0, e1);
        EXPECT_LT(e1, e0) << "paths " << paths << " r " << r << " weighted " << weighted;
      }
}

// R is orthogonal to f64 rounding, the joint error never rises from one
// round to the next and falls overall, and R keeps the product U'·V'ᵀ.
TEST(BlrRotate, RotationIsOrthogonalAndItsErrorNeverRises) {
  const std::vector<float> w = test_matrix();
  for (const index_t r : {index_t{32}, index_t{64}}) {
    const Latent l = latent(w, r);
    const LatentRotation rot = itq_rotation(l.u, kM, l.v, kN, r, 30);
    ASSERT_EQ(rot.r.size(), static_cast<std::size_t>(r * r));
    ASSERT_EQ(rot.error.size(), 31u);
    double off = 0;
    for (index_t a = 0; a < r; ++a)
      for (index_t b = 0; b < r; ++b) {
        double dot = 0;
        for (index_t k = 0; k < r; ++k) dot += rot.r[static_cast<std::size_t>(k * r + a)] * rot.r[static_cast<std::size_t>(k * r + b)];
        off += (dot - (a == b ? 1.0 : 0.0)) * (dot - (a == b ? 1.0 : 0.0));
      }
    EXPECT_LT(std::sqrt(off), 1e-12) << "‖RᵀR − I‖ at r " << r;
    for (std::size_t i = 1; i < rot.error.size(); ++i)
      EXPECT_LE(rot.error[i], rot.error[i - 1] + 1e-12) << "round " << i << " at r " << r;
    EXPECT_LT(rot.error.back(), rot.error.front()) << r;
    std::printf("[rotate] r=%lld: joint ITQ error %.4f (R = I) -> %.4f after 30 rounds, |R^T R - I| %.1e\n",
                static_cast<long long>(r), rot.error.front(), rot.error.back(), std::sqrt(off));
  }
  // A zero factor: R = I, no rounds.
  const std::vector<float> zero(static_cast<std::size_t>(kM * 32), 0.0f);
  const Latent l = latent(w, 32);
  const LatentRotation id = itq_rotation(zero, kM, l.v, kN, 32, 5);
  EXPECT_TRUE(id.error.empty());
  for (index_t a = 0; a < 32; ++a) EXPECT_EQ(id.r[static_cast<std::size_t>(a * 32 + a)], 1.0);
}

// rotation_iterations = 0 is the plain Dual-SVID bit for bit (the default),
// at 1 and 2 paths, plain and weighted; any rounds change the result.
TEST(BlrRotate, ZeroRoundsIsThePlainDualSvid) {
  const std::vector<float> w = test_matrix();
  std::vector<float> c(static_cast<std::size_t>(kN), 1.5f);
  for (const int paths : {1, 2})
    for (const bool weighted : {false, true}) {
      InitOptions plain{.rank = 32, .paths = paths};
      if (weighted) plain.column_scale = c;
      InitOptions zero = plain;
      zero.rotation_iterations = 0;
      const HostBlrMatrix a = dual_svid(w, kM, kN, plain);
      expect_same(a, dual_svid(w, kM, kN, zero));
      InitOptions one = plain;
      one.rotation_iterations = 1;
      EXPECT_NE(a.paths[0].sign_u, dual_svid(w, kM, kN, one).paths[0].sign_u);
    }
}

TEST(BlrRotate, BadValuesAreErrors) {
  const std::vector<float> w = test_matrix();
  test::expect_error([&] { dual_svid(w, kM, kN, {.rank = 32, .name = "blk.2.attn_q.weight", .rotation_iterations = -1}); },
                     "rotation_iterations -1 for blk.2.attn_q.weight is negative");
  const Latent l = latent(w, 32);
  test::expect_error([&] { itq_rotation(l.u, kM, l.v, kN, 32, -2); }, "-2 iterations");
  test::expect_error([&] { itq_rotation(l.u, kM, l.v, kN - 1, 32, 2); }, "factors of");
}

}  // namespace
}  // namespace bitrank::blr
