// Small dense layers: gradient checks of the ref, the adjoint identity on
// every backend, the [q | gate] layout, the CPU's f16 decode kernel at every
// SIMD level, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "bitrank/rng.hpp"
#include "cpu/dense_f16.hpp"
#include "cpu/dense_q8.hpp"
#include "support/backends.hpp"
#include "support/expect.hpp"
#include "support/gradcheck.hpp"
#include "support/simd_levels.hpp"

namespace bitrank {
namespace {

View<double> view_of(std::vector<double>& v, Shape s) { return View<double>(v.data(), s); }

// L = Σ dy ⊙ dense_forward(x, w): dense_backward(dy, w) is ∂L/∂x (it
// accumulates, so it starts from random values that are subtracted after).
TEST(Dense, ForwardInputGradient) {
  auto& ops = test::ref_backend().dense();
  const index_t m = 4, k = 13, r = 5;
  auto x = test::rnd64(static_cast<std::size_t>(m * k), 71, 1.0);
  auto w = test::rnd64(static_cast<std::size_t>(r * k), 72, 0.5);
  auto dy = test::rnd64(static_cast<std::size_t>(m * r), 73, 1.0);
  // The accumulate flag must not change the gradient: take L from both forms.
  for (const bool accumulate : {false, true}) {
    const auto start = test::rnd64(static_cast<std::size_t>(m * r), 74, 1.0);
    auto loss = [&] {
      std::vector<double> y = start;
      ops.dense_forward(view_of(x, {m, k}), view_of(w, {r, k}), view_of(y, {m, r}), accumulate);
      return test::dot(dy, y);
    };
    auto dx = test::rnd64(static_cast<std::size_t>(m * k), 75, 1.0);
    const auto dx0 = dx;
    ops.dense_backward(view_of(dy, {m, r}), view_of(w, {r, k}), view_of(dx, {m, k}));
    for (std::size_t i = 0; i < dx.size(); ++i) dx[i] -= dx0[i];
    test::grad_check(accumulate ? "dense_forward (accumulate) d/dx" : "dense_forward d/dx", x, dx, loss);
  }
}

// split and merge are each other's adjoint: with L = Σ dq⊙q + dgate⊙gate,
// ∂L/∂qg = merge_q_gate(dq, dgate).
TEST(Dense, SplitGradientIsMerge) {
  auto& ops = test::ref_backend().dense();
  const index_t m = 3, heads = 2, hd = 5, width = heads * hd;
  auto qg = test::rnd64(static_cast<std::size_t>(m * 2 * width), 81, 1.0);
  auto dq = test::rnd64(static_cast<std::size_t>(m * width), 82, 1.0);
  auto dgate = test::rnd64(static_cast<std::size_t>(m * width), 83, 1.0);
  auto loss = [&] {
    std::vector<double> q(dq.size()), gate(dgate.size());
    ops.split_q_gate(view_of(qg, {m, 2 * width}), heads, view_of(q, {m, width}), view_of(gate, {m, width}));
    return test::dot(dq, q) + test::dot(dgate, gate);
  };
  std::vector<double> dqg(qg.size());
  ops.merge_q_gate(view_of(dq, {m, width}), view_of(dgate, {m, width}), heads, view_of(dqg, {m, 2 * width}));
  test::grad_check("split_q_gate d/dqg", qg, dqg, loss);
}

// dense_backward is the adjoint of dense_forward on every backend:
// ⟨dy, x·wᵀ⟩ = ⟨dy·w, x⟩ up to f32 rounding.
TEST(Dense, BackwardIsAdjointOfForward) {
  const index_t m = 33, k = 300, r = 17;
  const auto xv = rnd(static_cast<std::size_t>(m * k), 91, 1.0f), wv = rnd(static_cast<std::size_t>(r * k), 92, 0.1f);
  const auto dyv = rnd(static_cast<std::size_t>(m * r), 93, 1.0f);
  for (const auto& name : test::available_backends()) {
    auto& be = test::backend(name);
    Buffer<float> x(*be.memory, xv.size()), w(*be.memory, wv.size()), dy(*be.memory, dyv.size());
    Buffer<float> y(*be.memory, dyv.size()), dx(*be.memory, xv.size());
    x.upload(xv);
    w.upload(wv);
    dy.upload(dyv);
    dx.upload(std::vector<float>(xv.size(), 0.0f));
    be.dense().dense_forward(x.view({m, k}), w.view({r, k}), y.view({m, r}), false);
    be.dense().dense_backward(dy.view({m, r}), w.view({r, k}), dx.view({m, k}));
    be.synchronize();
    const auto yv = y.download(), dxv = dx.download();
    double lhs = 0, rhs = 0, scale = 0;
    for (std::size_t i = 0; i < yv.size(); ++i) lhs += static_cast<double>(dyv[i]) * yv[i];
    for (std::size_t i = 0; i < dxv.size(); ++i) {
      rhs += static_cast<double>(dxv[i]) * xv[i];
      scale += std::fabs(static_cast<double>(dxv[i]) * xv[i]);
    }
    std::printf("  [adjoint] dense on %s: <dy, fwd(x)> %.9e  <bwd(dy), x> %.9e\n", name.c_str(), lhs, rhs);
    EXPECT_LE(std::fabs(lhs - rhs), 1e-6 * scale) << name;
  }
}

// The layout: per row and head, [q (hd) | gate (hd)]; merge(split(qg)) = qg
// bit for bit on every backend.
TEST(Dense, SplitLayoutAndRoundTrip) {
  const index_t m = 4, heads = 3, hd = 6, width = heads * hd;
  const auto v = rnd(static_cast<std::size_t>(m * 2 * width), 94, 1.0f);
  for (const auto& name : test::available_backends()) {
    auto& be = test::backend(name);
    Buffer<float> qg(*be.memory, v.size()), q(*be.memory, v.size() / 2), gate(*be.memory, v.size() / 2), back(*be.memory, v.size());
    qg.upload(v);
    be.dense().split_q_gate(qg.view({m, 2 * width}), heads, q.view({m, width}), gate.view({m, width}));
    be.dense().merge_q_gate(q.view({m, width}), gate.view({m, width}), heads, back.view({m, 2 * width}));
    be.synchronize();
    const auto qv = q.download(), gv = gate.download();
    int bad = 0;
    for (index_t t = 0; t < m; ++t)
      for (index_t h = 0; h < heads; ++h)
        for (index_t d = 0; d < hd; ++d) {
          const auto src = static_cast<std::size_t>(t * 2 * width + h * 2 * hd + d);
          const auto dst = static_cast<std::size_t>(t * width + h * hd + d);
          bad += qv[dst] != v[src];
          bad += gv[dst] != v[src + static_cast<std::size_t>(hd)];
        }
    EXPECT_EQ(bad, 0) << name;
    EXPECT_EQ(back.download(), v) << name;
  }
}

// A CPU dot kernel (cpu::dense_f16_dot, cpu::dense_q8_dot: decoding through
// an f16 or Q8_0 head) at every SIMD level this CPU has (scalar and AVX2
// forced on an AVX-512 machine), against the f64 reference on the same
// weights, per output: |got − want| ≤ 1e-5 · (Σ_c |x_c·w_c| + |out before|).
// f32 sums of 16 lanes of 36 terms at k = 576 (f16's scalar level: 8 of 72)
// err by a few 1e-8 of Σ|x·w| here; a lost, doubled or misplaced term is
// ~1/k of it (≥ 1e-3: a dropped tail column failed every k = 100 case).
// Each level is also bitwise repeatable: a second call, and 1 against 2
// threads; the AVX levels give the same bits (and with `scalar_same`, the
// scalar level too).
using DotAt = std::function<void(cpu::SimdLevel, ThreadPool&, bool accumulate, float* out)>;

void expect_dot_levels(const char* tag, const std::string& shape, const std::vector<double>& want,
                       const std::vector<double>& mag, const std::vector<float>& start, bool scalar_same,
                       bool print, const DotAt& dot) {
  using cpu::SimdLevel;
  ThreadPool one(1), two(2);
  for (const bool accumulate : {false, true}) {
    const std::string where = shape + (accumulate ? " accumulate" : "");
    auto run = [&](SimdLevel level, ThreadPool& pool) {
      std::vector<float> out = start;
      if (!accumulate) std::fill(out.begin(), out.end(), std::numeric_limits<float>::quiet_NaN());
      dot(level, pool, accumulate, out.data());
      return out;
    };
    std::vector<float> first;  // the first level's result that the others must equal
    for (SimdLevel level : test::simd_levels_here(tag)) {
      const std::string at = where + " at " + cpu::simd_level_name(level);
      const auto got = run(level, two);
      double worst = 0;
      int bad = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        const double base = accumulate ? start[i] : 0.0;
        const double err = std::fabs(got[i] - (base + want[i])) / (mag[i] + std::fabs(base));
        worst = std::max(worst, std::isnan(err) ? INFINITY : err);
        bad += !(err <= 1e-5);
      }
      EXPECT_EQ(bad, 0) << at << ": worst error " << worst << " of Σ|x·w|";
      EXPECT_EQ(0, std::memcmp(got.data(), run(level, two).data(), got.size() * sizeof(float)))
          << at << ": a second call differs";
      EXPECT_EQ(0, std::memcmp(got.data(), run(level, one).data(), got.size() * sizeof(float)))
          << at << ": 1 thread differs from 2";
      if (level != SimdLevel::scalar || scalar_same) {
        if (first.empty()) first = got;
        EXPECT_EQ(0, std::memcmp(got.data(), first.data(), got.size() * sizeof(float)))
            << at << " differs from the first level";
      }
      if (print) std::printf("  [%s] %-6s %s: worst %.2e of Σ|x·w|\n", tag, cpu::simd_level_name(level),
                             where.c_str(), worst);
    }
  }
}

// The dot kernel `dot` on x [m][k] (random) and a w whose exact values are
// w64 [r][k], against the f64 product, at every level (expect_dot_levels).
void expect_dot(const char* tag, index_t m, index_t k, index_t r, const std::vector<double>& w64,
                std::uint64_t seed, bool scalar_same, const std::function<void(const float* x, cpu::SimdLevel,
                                                                               ThreadPool&, bool, float*)>& dot) {
  const auto xv = rnd(static_cast<std::size_t>(m * k), seed, 1.0f);
  const auto start = rnd(static_cast<std::size_t>(m * r), seed + 1, 1.0f);
  const std::vector<double> x64(xv.begin(), xv.end());
  std::vector<double> want(static_cast<std::size_t>(m * r)), mag(want.size());
  for (index_t t = 0; t < m; ++t)
    for (index_t o = 0; o < r; ++o)
      for (index_t c = 0; c < k; ++c) {
        const double p = x64[static_cast<std::size_t>(t * k + c)] * w64[static_cast<std::size_t>(o * k + c)];
        want[static_cast<std::size_t>(t * r + o)] += p;
        mag[static_cast<std::size_t>(t * r + o)] += std::fabs(p);
      }
  const std::string shape = "m " + std::to_string(m) + " k " + std::to_string(k) + " r " + std::to_string(r);
  expect_dot_levels(tag, shape, want, mag, start, scalar_same, m == 16 && k == 576 && r == 300,
                    [&](cpu::SimdLevel level, ThreadPool& pool, bool acc, float* out) {
                      dot(xv.data(), level, pool, acc, out);
                    });
}

TEST(Dense, F16DotEveryLevelMatchesTheF64Reference) {
  std::uint64_t seed = 1200;
  for (const index_t m : {1, 3, 15, 16})  // 15: every group size of rows of x at both blockings
    for (const index_t k : {576, 100, 64})  // 100: a tail of 4 past the last 16
      for (const index_t r : {1, 37, 300}) {
        const auto wf = rnd(static_cast<std::size_t>(r * k), ++seed, 0.1f);
        std::vector<f16> w(wf.size());
        std::vector<double> w64(wf.size());
        for (std::size_t i = 0; i < wf.size(); ++i) w[i] = to_f16(wf[i]), w64[i] = to_f32(w[i]);
        expect_dot("dense_f16", m, k, r, w64, seed += 2, false,
                   [&](const float* x, cpu::SimdLevel level, ThreadPool& pool, bool acc, float* out) {
                     cpu::dense_f16_dot(x, w.data(), out, m, k, r, acc, level, pool);
                   });
      }
}

TEST(Dense, Q8DotEveryLevelMatchesTheF64ReferenceToTheSameBits) {
  std::uint64_t seed = 1300;
  for (const index_t m : {1, 3, 16})
    for (const index_t k : {576, 32})
      for (const index_t r : {1, 37, 300}) {
        const index_t kb = k / kQ8Block;
        XorShift g(++seed);
        std::vector<q8_0> w(static_cast<std::size_t>(r * kb));
        for (q8_0& b : w) {
          b.d = to_f16(static_cast<float>(g.next_u64() % 1000 + 1) * 1e-6f);
          for (std::int8_t& q : b.q) q = static_cast<std::int8_t>(static_cast<int>(g.next_u64() % 255) - 127);
        }
        std::vector<float> wf(static_cast<std::size_t>(r * k));
        dequantize_q8_0(w, wf);
        expect_dot("dense_q8", m, k, r, std::vector<double>(wf.begin(), wf.end()), seed += 2, true,
                   [&](const float* x, cpu::SimdLevel level, ThreadPool& pool, bool acc, float* out) {
                     cpu::dense_q8_dot(x, w.data(), out, m, kb, r, acc, level, pool);
                   });
      }
}

TEST(Dense, BadInputIsAnError) {
  auto& ops = test::cpu_backend().dense();
  Buffer<float> a(host_memory(), 8192), w(host_memory(), 8192), out(host_memory(), 8192);
  test::expect_error([&] { ops.dense_forward(a.view({70, 64}), w.view({48, 63}), out.view({70, 48}), false); },
               "dense_forward: w [48, 63] has 63 inputs, x [70, 64] has 64");
  test::expect_error([&] { ops.dense_forward(a.view({70, 64}), w.view({48, 64}), out.view({48, 70}), true); },
               "dense_forward: out has shape [48, 70], expected [70, 48]");
  test::expect_error([&] { ops.dense_forward(a.view({0, 64}), w.view({48, 64}), out.view({0, 48}), false); }, "dense_forward: x is empty");
  test::expect_error([&] { ops.dense_backward(a.view({70, 48}), w.view({47, 64}), out.view({70, 64})); },
               "dense_backward: w [47, 64] has 47 outputs, dy [70, 48] has 48");
  test::expect_error([&] { ops.dense_backward(a.view({70, 48}), w.view({48, 64}), out.view({70, 63})); },
               "dense_backward: dx has shape [70, 63], expected [70, 64]");
  test::expect_error([&] { ops.split_q_gate(a.view({4, 30}), 4, w.view({4, 15}), out.view({4, 15})); },
               "split_q_gate: qg [4, 30] does not split into 4 heads");
  test::expect_error([&] { ops.split_q_gate(a.view({4, 30}), 0, w.view({4, 15}), out.view({4, 15})); }, "split_q_gate: heads must be positive");
  test::expect_error([&] { ops.split_q_gate(a.view({4, 30}), 3, w.view({4, 16}), out.view({4, 15})); },
               "split_q_gate: q has shape [4, 16], expected [4, 15]");
  test::expect_error([&] { ops.merge_q_gate(a.view({4, 15}), w.view({4, 15}), 3, out.view({5, 30})); },
               "merge_q_gate: q has shape [4, 15], expected [5, 15]");
  Buffer<q8_0> wq(host_memory(), 96);
  test::expect_error([&] { ops.dense_forward_q8(a.view({2, 64}), wq.view({48, 1}), out.view({2, 48}), false); },
               "dense_forward_q8: w [48, 1] holds 32 inputs a row (blocks of 32), x [2, 64] has 64");
  test::expect_error([&] { ops.dense_forward_q8(a.view({2, 64}), wq.view({48, 2}), out.view({2, 47}), false); },
               "dense_forward_q8: out has shape [2, 47], expected [2, 48]");
}

}  // namespace
}  // namespace bitrank
