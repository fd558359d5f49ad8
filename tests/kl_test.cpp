// The sliced KL objective: identical logits give exactly zero (value and
// gradient) on every backend; the reference against a direct full-row
// computation and, as a whole (merges and slice backwards), against central
// differences; non-finite logits reach the result; bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "bitrank/rng.hpp"
#include "support/backends.hpp"
#include "support/expect.hpp"
#include "support/gradcheck.hpp"

namespace bitrank {
namespace {

// Row-major [n][V] logits cut into column slices: slice k is [n][width_k].
struct Sliced {
  std::vector<index_t> widths;
  std::vector<std::vector<double>> parts;  // parts[k] [n][width_k]
};

Sliced slice_columns(const std::vector<double>& z, index_t n, index_t V, index_t width) {
  Sliced s;
  for (index_t v0 = 0; v0 < V; v0 += width) {
    const index_t w = std::min(width, V - v0);
    std::vector<double> part(static_cast<std::size_t>(n * w));
    for (index_t r = 0; r < n; ++r)
      for (index_t j = 0; j < w; ++j)
        part[static_cast<std::size_t>(r * w + j)] = z[static_cast<std::size_t>(r * V + v0 + j)];
    s.widths.push_back(w);
    s.parts.push_back(std::move(part));
  }
  return s;
}

// Both passes on backend `be` over slices of zs, zt; returns Σ_r KL_r and
// fills dz (same slicing) with grad_mul = 1/n.
template <class T>
double sliced_kl(Backend<T>& be, index_t n, const Sliced& zs, const Sliced& zt, Sliced* dz) {
  Memory& mem = *be.memory;
  std::vector<Buffer<T>> s, t, g;
  for (std::size_t k = 0; k < zs.widths.size(); ++k) {
    const std::vector<T> sv(zs.parts[k].begin(), zs.parts[k].end()), tv(zt.parts[k].begin(), zt.parts[k].end());
    s.emplace_back(mem, sv.size());
    s.back().upload(sv);
    t.emplace_back(mem, tv.size());
    t.back().upload(tv);
    g.emplace_back(mem, sv.size());
  }
  Buffer<T> run_s(mem, static_cast<std::size_t>(2 * n)), run_t(mem, static_cast<std::size_t>(2 * n));
  for (std::size_t k = 0; k < s.size(); ++k) {
    const Shape sh{n, zs.widths[k]};
    be.kl().kl_lse_merge(s[k].view(sh), run_s.view({n, 2}), k == 0);
    be.kl().kl_lse_merge(t[k].view(sh), run_t.view({n, 2}), k == 0);
  }
  double total = 0;
  for (std::size_t k = 0; k < s.size(); ++k) {
    const Shape sh{n, zs.widths[k]};
    total += be.kl().kl_slice_backward(s[k].view(sh), t[k].view(sh), run_s.view({n, 2}), run_t.view({n, 2}),
                                       1.0 / static_cast<double>(n), g[k].view(sh));
  }
  if (dz) {
    *dz = zs;
    for (std::size_t k = 0; k < g.size(); ++k) {
      const auto v = g[k].download();
      dz->parts[k].assign(v.begin(), v.end());
    }
  }
  return total;
}

std::vector<double> logits(index_t n, index_t V, std::uint64_t seed, float scale) {
  const auto v = rnd(static_cast<std::size_t>(n * V), seed, scale);
  return std::vector<double>(v.begin(), v.end());
}

// KL of identical logits is exactly 0 and so is every dz entry, on the
// reference and every f32 backend (a and b are formed the same way).
TEST(Kl, IdenticalLogitsGiveExactlyZero) {
  const index_t n = 19, V = 300;
  const auto z = logits(n, V, 1, 6.0f);
  const auto sl = slice_columns(z, n, V, 128);
  Sliced dz;
  EXPECT_EQ(sliced_kl(test::ref_backend(), n, sl, sl, &dz), 0.0);
  for (const auto& part : dz.parts)
    for (double v : part) ASSERT_EQ(v, 0.0);
  int backends = 0;
  for (const auto& name : test::available_backends()) {
    EXPECT_EQ(sliced_kl(test::backend(name), n, sl, sl, &dz), 0.0) << name;
    for (const auto& part : dz.parts)
      for (double v : part) ASSERT_EQ(v, 0.0) << name;
    ++backends;
  }
  EXPECT_GE(backends, 1);
  // And different logits give a positive KL.
  EXPECT_GT(sliced_kl(test::ref_backend(), n, slice_columns(logits(n, V, 2, 6.0f), n, V, 128), sl, nullptr), 1.0);
}

// The sliced result is the full-row KL: log-softmax of whole rows, directly.
TEST(Kl, ReferenceEqualsTheFullRowKl) {
  const index_t n = 7, V = 301;
  const auto zs = logits(n, V, 3, 5.0f), zt = logits(n, V, 4, 5.0f);
  double want = 0;
  for (index_t r = 0; r < n; ++r) {
    const auto lse = [&](const std::vector<double>& z) {
      double m = -std::numeric_limits<double>::infinity(), s = 0;
      for (index_t j = 0; j < V; ++j) m = std::max(m, z[static_cast<std::size_t>(r * V + j)]);
      for (index_t j = 0; j < V; ++j) s += std::exp(z[static_cast<std::size_t>(r * V + j)] - m);
      return m + std::log(s);
    };
    const double ls = lse(zs), lt = lse(zt);
    for (index_t j = 0; j < V; ++j) {
      const double a = zt[static_cast<std::size_t>(r * V + j)] - lt, b = zs[static_cast<std::size_t>(r * V + j)] - ls;
      want += std::exp(a) * (a - b);
    }
  }
  for (index_t width : {index_t{1000}, index_t{100}, index_t{7}}) {
    const double got =
        sliced_kl(test::ref_backend(), n, slice_columns(zs, n, V, width), slice_columns(zt, n, V, width), nullptr);
    EXPECT_NEAR(got, want, 1e-12 * want) << "slices of " << width;
  }
}

// L(zs) = mean_r KL_r through both passes over 3 slices: dz against central
// differences, entries of every slice.
TEST(Kl, GradCheckOfTheWholeKl) {
  const index_t n = 6, V = 300, width = 128;
  const auto zt = slice_columns(logits(n, V, 5, 4.0f), n, V, width);
  auto zs = slice_columns(logits(n, V, 6, 4.0f), n, V, width);
  Sliced dz;
  auto& ref = test::ref_backend();
  const double l0 = sliced_kl(ref, n, zs, zt, &dz) / static_cast<double>(n);
  ASSERT_GT(l0, 0.5);
  for (std::size_t k = 0; k < zs.parts.size(); ++k) {
    auto param = zs.parts[k];
    const auto loss = [&] {
      Sliced probe = zs;
      probe.parts[k] = param;
      return sliced_kl(ref, n, probe, zt, nullptr) / static_cast<double>(n);
    };
    // L sums 1800 terms p·(a − b) of either sign and size up to ~10, and
    // rounds at ~1e-13; h = 1e-3 keeps that below 1e-10 in the difference
    // quotient (truncation ~h²·|∂³L| ≈ 3e-9): ~3e-6 of the gradient's floor
    // (1e-3 of its largest entry, ~1e-1) at worst. A wrong gradient is off by O(1).
    test::grad_check("kl dz slice " + std::to_string(k), param, dz.parts[k], loss, 1e-5, 24, 1e-3);
  }
}

// A NaN or ±inf logit in either model, in any slice, makes the KL sum
// non-finite on every backend.
template <class T>
void non_finite_reaches_the_sum(Backend<T>& be) {
  const index_t n = 9, V = 300;
  const auto zs = logits(n, V, 7, 3.0f), zt = logits(n, V, 8, 3.0f);
  int checked = 0;
  for (const bool in_teacher : {false, true})
    for (index_t pos : {index_t{0}, index_t{4 * V + 150}, n * V - 1})
      for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                         -std::numeric_limits<double>::infinity()}) {
        auto s = zs, t = zt;
        (in_teacher ? t : s)[static_cast<std::size_t>(pos)] = bad;
        const double kl = sliced_kl(be, n, slice_columns(s, n, V, 128), slice_columns(t, n, V, 128), nullptr);
        EXPECT_FALSE(std::isfinite(kl)) << be.name << (in_teacher ? " teacher" : " student") << " " << bad << " at "
                                        << pos << " gave " << kl;
        ++checked;
      }
  EXPECT_EQ(checked, 18);
}

TEST(Kl, NonFiniteLogitsReachTheSum) {
  non_finite_reaches_the_sum(test::ref_backend());
  for (const auto& name : test::available_backends()) non_finite_reaches_the_sum(test::backend(name));
}

TEST(Kl, BadInputIsAnError) {
  auto& ops = test::cpu_backend().kl();
  Buffer<float> a(host_memory(), 4096), b(host_memory(), 4096), run(host_memory(), 64), run2(host_memory(), 64);
  test::expect_error(
      [&] {
        ops.kl_lse_merge(a.view({10, 30}), run.view({10, 3}), true);
      },
      "kl_lse_merge: run has shape [10, 3], expected [10, 2]");
  test::expect_error([&] { ops.kl_lse_merge(a.view({300}), run.view({10, 2}), true); }, "kl_lse_merge: z has rank 1");
  test::expect_error(
      [&] {
        ops.kl_slice_backward(a.view({10, 30}), b.view({30, 10}), run.view({10, 2}), run2.view({10, 2}), 0.1,
                              a.view({10, 30}));
      },
      "kl_slice_backward: zt has shape [30, 10], expected [10, 30]");
  test::expect_error(
      [&] {
        ops.kl_slice_backward(a.view({10, 30}), b.view({10, 30}), run.view({9, 2}), run2.view({10, 2}), 0.1,
                              a.view({10, 30}));
      },
      "kl_slice_backward: run_s has shape [9, 2], expected [10, 2]");
  test::expect_error(
      [&] {
        ops.kl_slice_backward(a.view({10, 30}), b.view({10, 30}), run.view({10, 2}), run2.view({10, 2}), 0.1,
                              a.view({300}));
      },
      "kl_slice_backward: dz has shape [300], expected [10, 30]");
  test::expect_error(
      [&] {
        ops.kl_slice_backward(a.view({10, 30}), b.view({10, 30}), run.view({10, 2}), run2.view({10, 2}),
                              std::numeric_limits<double>::quiet_NaN(), a.view({10, 30}));
      },
      "kl_slice_backward: grad_mul must be finite");
}

}  // namespace
}  // namespace bitrank
