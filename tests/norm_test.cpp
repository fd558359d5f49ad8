// RMSNorm: a hand-computed forward, the two gain styles against each other
// on every backend, gradient checks of the reference backward and gain
// gradient, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "bitrank/rng.hpp"
#include "support/backends.hpp"
#include "support/gradcheck.hpp"
#include "support/expect.hpp"

namespace bitrank {
namespace {

View<double> view(std::vector<double>& v, Shape s) { return View<double>(v.data(), s); }

// x = [1, 2, 2]: Σx²/3 = 3, and with eps = 1 the inverse rms is exactly 1/2.
TEST(Norm, RmsnormHandComputed) {
  auto& norm = test::ref_backend().norm();
  std::vector<double> x = {1, 2, 2, -3, 0, 3}, y(6), inv(2);
  // Row 2: Σx²/3 = 6, eps = 1 → 1/√7.
  std::vector<double> w = {1.0, 0.5, -2.0};
  norm.rmsnorm_forward(view(x, {2, 3}), view(w, {3}), GainStyle::plain, 1.0f, view(y, {2, 3}), view(inv, {2}));
  EXPECT_DOUBLE_EQ(inv[0], 0.5);
  EXPECT_DOUBLE_EQ(inv[1], 1.0 / std::sqrt(7.0));
  EXPECT_DOUBLE_EQ(y[0], 0.5);
  EXPECT_DOUBLE_EQ(y[1], 0.5);
  EXPECT_DOUBLE_EQ(y[2], -2.0);
  EXPECT_DOUBLE_EQ(y[5], 3.0 / std::sqrt(7.0) * -2.0);
  // The same gain stored zero-centred: w − 1.
  std::vector<double> wz = {0.0, -0.5, -3.0}, yz(6);
  norm.rmsnorm_forward(view(x, {2, 3}), view(wz, {3}), GainStyle::zero_centred, 1.0f, view(yz, {2, 3}),
                       view(inv, {2}));
  for (int i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(yz[static_cast<std::size_t>(i)], y[static_cast<std::size_t>(i)]) << i;
}

// On every backend, zero_centred with w gives what plain gives with 1 + w
// (forward and backward), and the gain gradient does not depend on the style.
TEST(Norm, ZeroCentredIsPlainWithOnePlusW) {
  const index_t n = 6, d = 45;
  auto x = rnd(n * d, 11, 2.0f), w = rnd(d, 12, 0.5f), dy = rnd(n * d, 13, 1.0f);
  std::vector<float> w1(w.size());
  for (std::size_t j = 0; j < w.size(); ++j) w1[j] = 1.0f + w[j];  // exact: |w| < 1/2
  for (const auto& name : test::available_backends()) {
    auto& be = test::backend(name);
    auto buf = [&](const std::vector<float>& v) {
      Buffer<float> b(*be.memory, v.size());
      b.upload(v);
      return b;
    };
    auto bx = buf(x), bw = buf(w), bw1 = buf(w1), bdy = buf(dy);
    Buffer<float> y_z(*be.memory, n * d), y_p(*be.memory, n * d), inv_z(*be.memory, n), inv_p(*be.memory, n);
    Buffer<float> dx_z(*be.memory, n * d), dx_p(*be.memory, n * d);
    be.norm().rmsnorm_forward(bx.view({n, d}), bw.view({d}), GainStyle::zero_centred, 1e-6f, y_z.view({n, d}),
                              inv_z.view({n}));
    be.norm().rmsnorm_forward(bx.view({n, d}), bw1.view({d}), GainStyle::plain, 1e-6f, y_p.view({n, d}),
                              inv_p.view({n}));
    be.norm().rmsnorm_backward(bx.view({n, d}), bw.view({d}), inv_z.view({n}), bdy.view({n, d}),
                               GainStyle::zero_centred, dx_z.view({n, d}));
    be.norm().rmsnorm_backward(bx.view({n, d}), bw1.view({d}), inv_p.view({n}), bdy.view({n, d}), GainStyle::plain,
                               dx_p.view({n, d}));
    be.synchronize();
    EXPECT_EQ(y_z.download(), y_p.download()) << name;
    EXPECT_EQ(inv_z.download(), inv_p.download()) << name;
    EXPECT_EQ(dx_z.download(), dx_p.download()) << name;
  }
}

// Gradient checks of the reference: L = Σ dy ⊙ y(x, w).
TEST(Norm, RmsnormGradCheck) {
  auto& norm = test::ref_backend().norm();
  const index_t n = 3, d = 10;
  for (GainStyle gain : {GainStyle::plain, GainStyle::zero_centred})
    for (float eps : {1e-6f, 0.25f}) {
      auto x = test::rnd64(n * d, 21, 2.0), w = test::rnd64(d, 22, 0.5, 0.5), dy = test::rnd64(n * d, 23, 1.0);
      std::vector<double> y(n * d), inv(n), dx(n * d);
      auto loss = [&] {
        norm.rmsnorm_forward(view(x, {n, d}), view(w, {d}), gain, eps, view(y, {n, d}), view(inv, {n}));
        return test::dot(dy, y);
      };
      loss();
      norm.rmsnorm_backward(view(x, {n, d}), view(w, {d}), view(inv, {n}), view(dy, {n, d}), gain, view(dx, {n, d}));
      // The gain gradient accumulates: start from random values and take the difference.
      const auto start = test::rnd64(d, 24, 1.0);
      auto dw = start;
      norm.rmsnorm_gain_grad(view(x, {n, d}), view(inv, {n}), view(dy, {n, d}), view(dw, {d}));
      for (index_t j = 0; j < d; ++j) dw[j] -= start[j];
      const std::string tag = std::string(gain_style_name(gain)) + (eps > 0.1f ? " eps 0.25" : " eps 1e-6");
      test::grad_check("rmsnorm dx " + tag, x, dx, loss, 1e-6, 64);
      test::grad_check("rmsnorm dw " + tag, w, dw, loss, 1e-6, 64);
    }
}

TEST(Norm, BadInputIsAnError) {
  auto& norm = test::cpu_backend().norm();
  Buffer<float> buf(host_memory(), 4096);
  const index_t n = 4, d = 16;
  auto x = buf.view({n, d}), w = buf.view({d}), y = buf.view({n, d}), inv = buf.view({n});
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const auto P = GainStyle::plain;
  test::expect_error([&] { norm.rmsnorm_forward(x, buf.view({d + 1}), P, 1e-6f, y, inv); },
               "rmsnorm_forward: w has shape [17], expected [16]");
  test::expect_error([&] { norm.rmsnorm_forward(x, w, P, 1e-6f, buf.view({n, d - 1}), inv); }, "rmsnorm_forward: y");
  test::expect_error([&] { norm.rmsnorm_forward(x, w, P, 1e-6f, y, buf.view({n + 1})); }, "rmsnorm_forward: inv");
  test::expect_error([&] { norm.rmsnorm_forward(buf.view({n * d}), w, P, 1e-6f, y, inv); }, "rmsnorm_forward: x has rank 1");
  test::expect_error([&] { norm.rmsnorm_forward(buf.view({0, d}), w, P, 1e-6f, buf.view({0, d}), buf.view({0})); },
               "rmsnorm_forward: x is empty");
  for (float eps : {0.0f, -1e-6f})
    test::expect_error([&] { norm.rmsnorm_forward(x, w, P, eps, y, inv); }, "rmsnorm_forward: eps must be positive");
  for (float eps : {nan, inf})
    test::expect_error([&] { norm.rmsnorm_forward(x, w, P, eps, y, inv); }, "rmsnorm_forward: eps must be finite");
  test::expect_error([&] { norm.rmsnorm_forward(x, w, static_cast<GainStyle>(7), 1e-6f, y, inv); },
               "rmsnorm_forward: unknown gain style");
  // A column slice is not a dense row block.
  test::expect_error([&] { norm.rmsnorm_forward(View<float>::strided(buf.data(), n, d, d + 3), w, P, 1e-6f, y, inv); },
               "rmsnorm_forward: x must be contiguous");

  auto dx = buf.view({n, d}), dy = buf.view({n, d});
  test::expect_error([&] { norm.rmsnorm_backward(x, w, inv, buf.view({n, d + 1}), P, dx); },
               "rmsnorm_backward: dy has shape [4, 17], expected [4, 16]");
  test::expect_error([&] { norm.rmsnorm_backward(x, w, buf.view({n - 1}), dy, P, dx); }, "rmsnorm_backward: inv");
  test::expect_error([&] { norm.rmsnorm_backward(x, w, inv, dy, P, buf.view({d, n})); }, "rmsnorm_backward: dx");
  test::expect_error([&] { norm.rmsnorm_backward(x, buf.view({1, d}), inv, dy, P, dx); }, "rmsnorm_backward: w");

  test::expect_error([&] { norm.rmsnorm_gain_grad(x, inv, dy, buf.view({d - 1})); },
               "rmsnorm_gain_grad: dw has shape [15], expected [16]");
  test::expect_error([&] { norm.rmsnorm_gain_grad(x, inv, buf.view({n + 1, d}), w); }, "rmsnorm_gain_grad: dy");
  test::expect_error([&] { norm.rmsnorm_gain_grad(x, buf.view({n, 1}), dy, w); }, "rmsnorm_gain_grad: inv");
  test::expect_error([&] { norm.rmsnorm_gain_grad(buf.view({0, d}), buf.view({0}), buf.view({0, d}), w); },
               "rmsnorm_gain_grad: x is empty");
}

}  // namespace
}  // namespace bitrank
