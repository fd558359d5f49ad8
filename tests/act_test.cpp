// Elementwise activations: the reference forwards against the formulas
// written out independently, gradient checks of every reference backward,
// saturation and in-place use on every backend, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
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

View<double> view(std::vector<double>& v) { return View<double>(v.data(), Shape{static_cast<index_t>(v.size())}); }

// The textbook forms, as the seed's host check writes them.
double sg(double v) { return 1.0 / (1.0 + std::exp(-v)); }
double silu(double v) { return v * sg(v); }

double rel_err(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

// Moves values within `margin` of `kink` to kink ± margin, so central
// differences never straddle a clamp's corner.
void push_off(std::vector<double>& v, double kink, double margin) {
  for (double& x : v)
    if (std::fabs(x - kink) < margin) x = kink + (x >= kink ? margin : -margin);
}

TEST(Act, ReferenceForwardsMatchFormulas) {
  auto& act = test::ref_backend().act();
  const index_t rows = 13, width = 21, n = rows * width;
  auto a = test::rnd64(n, 31, 4.0), b = test::rnd64(n, 32, 2.0);
  auto rw = test::rnd64(rows, 33, 0.5, 0.5), cg = test::rnd64(width, 34, 0.5, 0.5);
  std::vector<double> out(n), want(n);
  const double L = 1.5, s = 0.75;
  auto clamped = [&](std::size_t i) { return s * silu(std::min(a[i], L)) * std::clamp(b[i], -L, L); };

  act.swiglu_forward(view(a), view(b), view(out));
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = silu(a[i]) * b[i];
  EXPECT_LT(rel_err(out, want), 1e-14) << "swiglu";

  act.swiglu_limit_forward(view(a), view(b), {1.5f, 0.75f}, view(out));
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = clamped(i);
  EXPECT_LT(rel_err(out, want), 1e-14) << "swiglu_limit";

  act.swiglu_limit_forward(view(a), view(b), {-2.0f, 0.75f}, view(out));
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = s * silu(a[i]) * b[i];
  EXPECT_LT(rel_err(out, want), 1e-14) << "swiglu_limit without clamp";

  act.swiglu_limit_routed_forward(view(a), view(b), view(rw), width, {1.5f, 0.75f}, view(out));
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = clamped(i) * rw[i / width];
  EXPECT_LT(rel_err(out, want), 1e-14) << "swiglu_limit_routed";

  act.swiglu_col_gate_forward(view(a), view(b), view(cg), view(out));
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = silu(a[i]) * b[i] * cg[i % width];
  EXPECT_LT(rel_err(out, want), 1e-14) << "swiglu_col_gate";

  act.sigmoid_gate_forward(view(a), view(b), view(out));
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = a[i] * sg(b[i]);
  EXPECT_LT(rel_err(out, want), 1e-14) << "sigmoid_gate";

  act.add(view(a), view(b), view(out));
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = a[i] + b[i];
  EXPECT_LT(rel_err(out, want), 1e-15) << "add";
}

// Gradient checks of the reference: L = Σ d_out ⊙ out(inputs). Every entry
// is checked (the vectors are short).
TEST(Act, SwigluGradCheck) {
  auto& act = test::ref_backend().act();
  const std::size_t n = 48;
  auto gate = test::rnd64(n, 41, 4.0), up = test::rnd64(n, 42, 2.0), d_out = test::rnd64(n, 43, 1.0);
  std::vector<double> out(n), d_gate(n), d_up(n);
  auto loss = [&] {
    act.swiglu_forward(view(gate), view(up), view(out));
    return test::dot(d_out, out);
  };
  act.swiglu_backward(view(gate), view(up), view(d_out), view(d_gate), view(d_up));
  test::grad_check("swiglu d_gate", gate, d_gate, loss, 1e-6, 64);
  test::grad_check("swiglu d_up", up, d_up, loss, 1e-6, 64);
}

TEST(Act, SwigluLimitGradCheck) {
  auto& act = test::ref_backend().act();
  const std::size_t n = 64;
  for (SwigluLimit lim : {SwigluLimit{1.5f, 0.75f}, SwigluLimit{0.0f, 1.25f}}) {
    auto gate = test::rnd64(n, 51, 4.0), up = test::rnd64(n, 52, 2.0), d_out = test::rnd64(n, 53, 1.0);
    int clamped_gate = 0, clamped_up = 0;
    if (lim.limit > 0) {
      push_off(gate, lim.limit, 1e-2);
      push_off(up, lim.limit, 1e-2);
      push_off(up, -lim.limit, 1e-2);
      for (std::size_t i = 0; i < n; ++i) {
        clamped_gate += gate[i] > lim.limit;
        clamped_up += std::fabs(up[i]) > lim.limit;
      }
      // Both clamps must be active somewhere, or the zero gradients go unchecked.
      EXPECT_GT(clamped_gate, 4);
      EXPECT_GT(clamped_up, 4);
    }
    std::vector<double> out(n), d_gate(n), d_up(n);
    auto loss = [&] {
      act.swiglu_limit_forward(view(gate), view(up), lim, view(out));
      return test::dot(d_out, out);
    };
    act.swiglu_limit_backward(view(gate), view(up), view(d_out), lim, view(d_gate), view(d_up));
    const std::string tag = lim.limit > 0 ? " L 1.5" : " no clamp";
    test::grad_check("swiglu_limit d_gate" + tag, gate, d_gate, loss, 1e-6, 64);
    test::grad_check("swiglu_limit d_up" + tag, up, d_up, loss, 1e-6, 64);
    if (lim.limit > 0)
      for (std::size_t i = 0; i < n; ++i) {
        if (gate[i] > lim.limit) {
          EXPECT_EQ(d_gate[i], 0.0) << i;
        }
        if (std::fabs(up[i]) > lim.limit) {
          EXPECT_EQ(d_up[i], 0.0) << i;
        }
      }
  }
}

TEST(Act, SwigluLimitRoutedGradCheck) {
  auto& act = test::ref_backend().act();
  const index_t rows = 5, width = 12;
  const std::size_t n = rows * width;
  const SwigluLimit lim{1.5f, 0.75f};
  auto gate = test::rnd64(n, 61, 4.0), up = test::rnd64(n, 62, 2.0), d_out = test::rnd64(n, 63, 1.0);
  auto rw = test::rnd64(rows, 64, 0.5, 0.5);
  push_off(gate, lim.limit, 1e-2);
  push_off(up, lim.limit, 1e-2);
  push_off(up, -lim.limit, 1e-2);
  std::vector<double> out(n), d_gate(n), d_up(n), d_rw(rows);
  auto loss = [&] {
    act.swiglu_limit_routed_forward(view(gate), view(up), view(rw), width, lim, view(out));
    return test::dot(d_out, out);
  };
  act.swiglu_limit_routed_backward(view(gate), view(up), view(rw), view(d_out), width, lim, view(d_gate), view(d_up),
                                   view(d_rw));
  test::grad_check("swiglu_limit_routed d_gate", gate, d_gate, loss, 1e-6, 64);
  test::grad_check("swiglu_limit_routed d_up", up, d_up, loss, 1e-6, 64);
  test::grad_check("swiglu_limit_routed d_route_weight", rw, d_rw, loss, 1e-6, 64);
}

TEST(Act, SwigluColGateGradCheck) {
  auto& act = test::ref_backend().act();
  const std::size_t n = 60;
  auto gate = test::rnd64(n, 71, 4.0), up = test::rnd64(n, 72, 2.0), d_out = test::rnd64(n, 73, 1.0);
  auto cg = test::rnd64(6, 74, 0.5, 0.5);
  std::vector<double> out(n), d_gate(n), d_up(n);
  auto loss = [&] {
    act.swiglu_col_gate_forward(view(gate), view(up), view(cg), view(out));
    return test::dot(d_out, out);
  };
  act.swiglu_col_gate_backward(view(gate), view(up), view(cg), view(d_out), view(d_gate), view(d_up));
  test::grad_check("swiglu_col_gate d_gate", gate, d_gate, loss, 1e-6, 64);
  test::grad_check("swiglu_col_gate d_up", up, d_up, loss, 1e-6, 64);
}

TEST(Act, SigmoidGateGradCheck) {
  auto& act = test::ref_backend().act();
  const std::size_t n = 48;
  auto x = test::rnd64(n, 81, 2.0), gate = test::rnd64(n, 82, 6.0), d_out = test::rnd64(n, 83, 1.0);
  std::vector<double> out(n), d_x(n), d_gate(n);
  auto loss = [&] {
    act.sigmoid_gate_forward(view(x), view(gate), view(out));
    return test::dot(d_out, out);
  };
  act.sigmoid_gate_backward(view(x), view(gate), view(d_out), view(d_x), view(d_gate));
  test::grad_check("sigmoid_gate d_x", x, d_x, loss, 1e-6, 64);
  test::grad_check("sigmoid_gate d_gate", gate, d_gate, loss, 1e-6, 64);
}

// Inputs far past where e^|v| overflows f32 (|v| > 88.7) and f64 (> 709):
// finite, saturated results on every backend.
TEST(Act, SigmoidSaturatesWithoutOverflow) {
  const std::vector<float> v = {-1000.0f, -100.0f, -89.0f, 89.0f, 100.0f, 1000.0f, 3e38f, -3e38f};
  const std::vector<float> ones(v.size(), 1.0f);
  const index_t n = static_cast<index_t>(v.size());
  for (const auto& name : test::available_backends()) {
    auto& be = test::backend(name);
    Buffer<float> bv(*be.memory, v.size()), b1(*be.memory, v.size());
    bv.upload(v);
    b1.upload(ones);
    Buffer<float> o1(*be.memory, v.size()), o2(*be.memory, v.size()), o3(*be.memory, v.size()),
        o4(*be.memory, v.size()), o5(*be.memory, v.size()), o6(*be.memory, v.size());
    be.act().sigmoid_gate_forward(b1.view({n}), bv.view({n}), o1.view({n}));           // σ(v)
    be.act().sigmoid_gate_backward(b1.view({n}), bv.view({n}), b1.view({n}), o2.view({n}), o3.view({n}));
    be.act().swiglu_forward(bv.view({n}), b1.view({n}), o4.view({n}));                 // silu(v)
    be.act().swiglu_backward(bv.view({n}), b1.view({n}), b1.view({n}), o5.view({n}), o6.view({n}));
    be.synchronize();
    const auto sig = o1.download(), dx = o2.download(), dg = o3.download(), si = o4.download(),
               dsi = o5.download(), dup = o6.download();
    // Exact values in f64 (e^−|v| never overflows); f32 results may be
    // subnormal or flushed where the true value is, hence the tiny floor.
    auto near = [](float got, double want) { return std::isfinite(got) && std::fabs(got - want) <= 1e-6 * std::fabs(want) + 1e-30; };
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double x = v[i], e = std::exp(-std::fabs(x));
      const double sp = x >= 0 ? 1 / (1 + e) : e / (1 + e), sm = x >= 0 ? e / (1 + e) : 1 / (1 + e);  // σ(x), σ(−x)
      EXPECT_PRED2(near, sig[i], sp) << name << " σ(" << x << ")";
      EXPECT_PRED2(near, dx[i], sp) << name << " σ(" << x << ")";
      EXPECT_PRED2(near, dg[i], sp * sm) << name << " σ'(" << x << ")";
      EXPECT_PRED2(near, si[i], x * sp) << name << " silu(" << x << ")";
      EXPECT_PRED2(near, dsi[i], sp * (1 + x * sm)) << name << " silu'(" << x << ")";
      EXPECT_EQ(dup[i], si[i]) << name;
    }
  }
}

// An output may be the very tensor of an n-element input; results match the
// out-of-place ones bit for bit on every backend.
TEST(Act, InPlaceMatchesOutOfPlace) {
  const index_t rows = 9, width = 37, n = rows * width;
  const auto a = rnd(n, 91, 4.0f), b = rnd(n, 92, 2.0f), dc = rnd(n, 93, 1.0f), rw = rnd(rows, 94, 1.0f);
  const SwigluLimit lim{1.5f, 0.75f};
  for (const auto& name : test::available_backends()) {
    auto& be = test::backend(name);
    auto buf = [&](const std::vector<float>& v) {
      Buffer<float> x(*be.memory, v.size());
      x.upload(v);
      return x;
    };
    auto ba = buf(a), bb = buf(b), bdc = buf(dc), brw = buf(rw);
    Buffer<float> out(*be.memory, n), dg(*be.memory, n), du(*be.memory, n), drw(*be.memory, rows);
    const Shape s{n};

    be.act().add(ba.view(s), bb.view(s), out.view(s));
    auto in_a = buf(a);
    be.act().add(in_a.view(s), bb.view(s), in_a.view(s));  // a += b
    be.synchronize();
    EXPECT_EQ(in_a.download(), out.download()) << name << " add";

    be.act().swiglu_backward(ba.view(s), bb.view(s), bdc.view(s), dg.view(s), du.view(s));
    auto g2 = buf(a), u2 = buf(b);
    be.act().swiglu_backward(g2.view(s), u2.view(s), bdc.view(s), g2.view(s), u2.view(s));
    be.synchronize();
    EXPECT_EQ(g2.download(), dg.download()) << name << " swiglu_backward d_gate";
    EXPECT_EQ(u2.download(), du.download()) << name << " swiglu_backward d_up";

    be.act().swiglu_limit_routed_backward(ba.view(s), bb.view(s), brw.view({rows}), bdc.view(s), width, lim,
                                          dg.view(s), du.view(s), drw.view({rows}));
    auto g3 = buf(a), u3 = buf(b);
    Buffer<float> drw3(*be.memory, rows);
    be.act().swiglu_limit_routed_backward(g3.view(s), u3.view(s), brw.view({rows}), bdc.view(s), width, lim,
                                          g3.view(s), u3.view(s), drw3.view({rows}));
    // The route weight's gradient is optional: skipping it changes nothing else.
    auto g4 = buf(a), u4 = buf(b);
    be.act().swiglu_limit_routed_backward(ba.view(s), bb.view(s), brw.view({rows}), bdc.view(s), width, lim,
                                          g4.view(s), u4.view(s), View<float>{});
    be.synchronize();
    EXPECT_EQ(g3.download(), dg.download()) << name << " routed d_gate";
    EXPECT_EQ(u3.download(), du.download()) << name << " routed d_up";
    EXPECT_EQ(drw3.download(), drw.download()) << name << " routed d_route_weight";
    EXPECT_EQ(g4.download(), dg.download()) << name << " routed d_gate without d_route_weight";
    EXPECT_EQ(u4.download(), du.download()) << name << " routed d_up without d_route_weight";
  }
}

TEST(Act, BadInputIsAnError) {
  auto& act = test::cpu_backend().act();
  Buffer<float> buf(host_memory(), 4096);
  const index_t n = 60;
  auto a = buf.view({n}), b = buf.view({n}), c = buf.view({n}), d = buf.view({n}), e = buf.view({n});
  auto short_ = buf.view({n - 1}), empty = buf.view({0}), matrix = buf.view({6, 10});
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const SwigluLimit lim{1.5f, 0.75f};

  test::expect_error([&] { act.swiglu_forward(a, short_, c); }, "swiglu_forward: up has shape [59], expected [60]");
  test::expect_error([&] { act.swiglu_forward(a, b, short_); }, "swiglu_forward: out has shape [59]");
  test::expect_error([&] { act.swiglu_forward(empty, empty, empty); }, "swiglu_forward: gate is empty");
  test::expect_error([&] { act.swiglu_forward(matrix, matrix, matrix); }, "swiglu_forward: gate has rank 2");
  test::expect_error([&] { act.swiglu_backward(a, b, short_, d, e); }, "swiglu_backward: d_out");
  test::expect_error([&] { act.swiglu_backward(a, b, c, short_, e); }, "swiglu_backward: d_gate");
  test::expect_error([&] { act.swiglu_backward(a, b, c, d, short_); }, "swiglu_backward: d_up");

  for (float bad : {nan, inf, -inf}) {
    test::expect_error([&] { act.swiglu_limit_forward(a, b, {bad, 1.0f}, c); }, "swiglu_limit_forward: limit must be finite");
    test::expect_error([&] { act.swiglu_limit_forward(a, b, {1.5f, bad}, c); }, "swiglu_limit_forward: scale must be finite");
    test::expect_error([&] { act.swiglu_limit_backward(a, b, c, {bad, 1.0f}, d, e); }, "swiglu_limit_backward: limit");
  }
  test::expect_error([&] { act.swiglu_limit_backward(a, short_, c, lim, d, e); }, "swiglu_limit_backward: up");

  auto rw = buf.view({5});
  test::expect_error([&] { act.swiglu_limit_routed_forward(a, b, rw, 7, lim, c); },
               "swiglu_limit_routed_forward: width 7 does not divide the 60 elements");
  test::expect_error([&] { act.swiglu_limit_routed_forward(a, b, rw, 0, lim, c); },
               "swiglu_limit_routed_forward: width must be positive");
  test::expect_error([&] { act.swiglu_limit_routed_forward(a, b, rw, 10, lim, c); },
               "swiglu_limit_routed_forward: route_weight has shape [5], expected [6]");
  test::expect_error([&] { act.swiglu_limit_routed_forward(a, b, rw, 12, {nan, 1.0f}, c); },
               "swiglu_limit_routed_forward: limit must be finite");
  test::expect_error([&] { act.swiglu_limit_routed_backward(a, b, rw, c, 12, lim, d, e, buf.view({6})); },
               "swiglu_limit_routed_backward: d_route_weight has shape [6], expected [5]");
  test::expect_error([&] { act.swiglu_limit_routed_backward(a, b, rw, c, 11, lim, d, e, buf.view({5})); },
               "swiglu_limit_routed_backward: width 11 does not divide");
  test::expect_error([&] { act.swiglu_limit_routed_backward(a, b, rw, short_, 12, lim, d, e, buf.view({5})); },
               "swiglu_limit_routed_backward: d_out");

  test::expect_error([&] { act.swiglu_col_gate_forward(a, b, buf.view({7}), c); },
               "swiglu_col_gate_forward: width 7 does not divide the 60 elements");
  test::expect_error([&] { act.swiglu_col_gate_forward(a, b, empty, c); }, "swiglu_col_gate_forward: col_gate is empty");
  test::expect_error([&] { act.swiglu_col_gate_forward(a, b, buf.view({2, 3}), c); },
               "swiglu_col_gate_forward: col_gate has rank 2");
  test::expect_error([&] { act.swiglu_col_gate_backward(a, b, buf.view({8}), c, d, e); },
               "swiglu_col_gate_backward: width 8 does not divide");
  test::expect_error([&] { act.swiglu_col_gate_backward(a, b, buf.view({6}), c, d, short_); },
               "swiglu_col_gate_backward: d_up");

  test::expect_error([&] { act.sigmoid_gate_forward(a, short_, c); }, "sigmoid_gate_forward: gate has shape [59]");
  test::expect_error([&] { act.sigmoid_gate_backward(a, b, c, d, short_); }, "sigmoid_gate_backward: d_gate");
  test::expect_error([&] { act.sigmoid_gate_backward(empty, empty, empty, empty, empty); }, "sigmoid_gate_backward: x is empty");
  test::expect_error([&] { act.add(a, b, short_); }, "add: out has shape [59], expected [60]");
  test::expect_error([&] { act.add(a, matrix, c); }, "add: b has shape [6, 10], expected [60]");
}

}  // namespace
}  // namespace bitrank
