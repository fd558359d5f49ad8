// q/k norm + RoPE: gradient checks of the reference backward, the rotary
// table, windows restarting the positions, and bad input.
#include "bitrank/ops/rope.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bitrank/backend.hpp"
#include "bitrank/rng.hpp"
#include "support/backends.hpp"
#include "support/expect.hpp"
#include "support/gradcheck.hpp"

namespace bitrank {
namespace {

using test::dot;
using test::rnd64;

View<double> view_of(std::vector<double>& v, Shape s) { return View<double>(v.data(), s); }

TEST(Rope, TableIsCosSinOfPositionTimesFrequency) {
  const index_t window = 5, half = 4;
  const double theta = 1e4;
  const auto t = rope_table<double>(window, half, theta);
  ASSERT_EQ(t.size(), static_cast<std::size_t>(window * half * 2));
  // Position 3, pair 2: angle 3·θ^(−2/4) = 3/100.
  EXPECT_DOUBLE_EQ(t[(3 * half + 2) * 2], std::cos(0.03));
  EXPECT_DOUBLE_EQ(t[(3 * half + 2) * 2 + 1], std::sin(0.03));
  // Position 0 is the identity.
  for (index_t i = 0; i < half; ++i) {
    EXPECT_EQ(t[i * 2], 1.0);
    EXPECT_EQ(t[i * 2 + 1], 0.0);
  }
  // The f32 table is the f64 one rounded.
  const auto tf = rope_table<float>(window, half, theta);
  for (std::size_t i = 0; i < t.size(); ++i) EXPECT_EQ(tf[i], static_cast<float>(t[i]));
}

// L = Σ dy ⊙ y(x, gain); the backward must give ∂L/∂x and (accumulated) ∂L/∂gain.
void gradcheck_qk_norm_rope(GainStyle style) {
  auto& ref = test::ref_backend().rope();
  const index_t windows = 2, window = 3, heads = 2, hd = 12, half = 4, n = windows * window, width = heads * hd;
  const QkNormRopeOptions opt{.heads = heads, .eps = 1e-6f, .gain = style};
  auto x = rnd64(n * width, 21, 1.5);
  auto gain = rnd64(hd, 22, 0.4, style == GainStyle::zero_centred ? 0.0 : 1.0);
  const auto dy = rnd64(n * width, 23, 1.0);
  auto table = rope_table<double>(window, half, 100.0);
  std::vector<double> y(n * width), inv(n * heads);
  auto loss = [&] {
    ref.qk_norm_rope_forward(view_of(x, {n, width}), view_of(gain, {hd}), view_of(table, {window, half, 2}), opt,
                             view_of(y, {n, width}), view_of(inv, {n, heads}));
    return dot(dy, y);
  };
  loss();
  std::vector<double> dx(n * width);
  const auto dgain_start = rnd64(hd, 24, 0.5);
  auto dgain = dgain_start;
  auto dyc = dy;
  ref.qk_norm_rope_backward(view_of(x, {n, width}), view_of(gain, {hd}), view_of(table, {window, half, 2}),
                            view_of(inv, {n, heads}), view_of(dyc, {n, width}), opt, view_of(dx, {n, width}),
                            view_of(dgain, {hd}));
  for (index_t c = 0; c < hd; ++c) dgain[c] -= dgain_start[c];  // the accumulated part
  const std::string name = std::string(" (gain ") + gain_style_name(style) + ")";
  test::grad_check("qk_norm_rope dx" + name, x, dx, loss, 1e-6, 64);
  test::grad_check("qk_norm_rope dgain" + name, gain, dgain, loss, 1e-6, 64);
}

TEST(Rope, GradCheckGainW) { gradcheck_qk_norm_rope(GainStyle::plain); }
TEST(Rope, GradCheckGainOnePlusW) { gradcheck_qk_norm_rope(GainStyle::zero_centred); }

// Positions restart in every window. Every row holds the same x, so rows
// differ only by their rotation: row T+r equals row r bit for bit, row 1
// differs from row 0 in the rotary dims and equals it past them.
template <class T>
void check_positions_restart(Backend<T>& be, const std::string& name) {
  const index_t window = 9, heads = 2, hd = 16, half = 6, n = 2 * window, width = heads * hd;
  const QkNormRopeOptions opt{.heads = heads, .eps = 1e-6f, .gain = GainStyle::zero_centred};
  const auto row = rnd(static_cast<std::size_t>(width), 31, 2.0f);
  std::vector<T> x(static_cast<std::size_t>(n * width));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<T>(row[i % row.size()]);
  std::vector<T> gain(static_cast<std::size_t>(hd));
  for (std::size_t c = 0; c < gain.size(); ++c) gain[c] = static_cast<T>(0.1f * static_cast<float>(c) - 0.5f);
  const auto table = rope_table<T>(window, half, 1e4);
  Buffer<T> bx(*be.memory, x.size()), bg(*be.memory, gain.size()), bt(*be.memory, table.size());
  Buffer<T> by(*be.memory, x.size()), binv(*be.memory, static_cast<std::size_t>(n * heads));
  bx.upload(x);
  bg.upload(gain);
  bt.upload(table);
  be.rope().qk_norm_rope_forward(bx.view({n, width}), bg.view({hd}), bt.view({window, half, 2}), opt,
                                 by.view({n, width}), binv.view({n, heads}));
  const auto y = by.download();
  const std::size_t window_size = static_cast<std::size_t>(window * width);
  EXPECT_EQ(std::memcmp(y.data(), y.data() + window_size, window_size * sizeof(T)), 0) << name;
  int rotated = 0, same_tail = 0;
  for (index_t u = 0; u < heads; ++u)
    for (index_t c = 0; c < hd; ++c) {
      const T y0 = y[static_cast<std::size_t>(u * hd + c)], y1 = y[static_cast<std::size_t>(width + u * hd + c)];
      if (c < 2 * half)
        rotated += y0 != y1;
      else
        same_tail += y0 == y1;
    }
  EXPECT_EQ(rotated, heads * 2 * half) << name;
  EXPECT_EQ(same_tail, heads * (hd - 2 * half)) << name;
}

TEST(Rope, PositionsRestartInEachWindow) {
  check_positions_restart(test::ref_backend(), "ref");
  for (const auto& name : test::available_backends()) check_positions_restart(test::backend(name), name);
}

// The CPU gain gradient (summed over row blocks) is the same bits for any
// number of threads.
TEST(Rope, CpuGainGradientDoesNotDependOnThreads) {
  const index_t window = 50, heads = 3, hd = 64, half = 16, n = 4 * window, width = heads * hd;
  const QkNormRopeOptions opt{.heads = heads, .eps = 1e-6f, .gain = GainStyle::zero_centred};
  const auto x = rnd(static_cast<std::size_t>(n * width), 81, 2.0f);
  const auto gain = rnd(static_cast<std::size_t>(hd), 82, 0.3f);
  const auto dy = rnd(x.size(), 83, 1.0f);
  const auto table = rope_table<float>(window, half, 1e6);
  auto run = [&](ThreadPool& pool) {
    auto be = make_cpu_backend(pool);
    std::vector<float> y(x.size()), inv(static_cast<std::size_t>(n * heads)), dx(x.size()), dgain(gain.size(), 0.25f);
    auto cv = [](const std::vector<float>& v, Shape s) { return CView<float>(v.data(), s); };
    auto mv = [](std::vector<float>& v, Shape s) { return View<float>(v.data(), s); };
    be->rope().qk_norm_rope_forward(cv(x, {n, width}), cv(gain, {hd}), cv(table, {window, half, 2}), opt,
                                    mv(y, {n, width}), mv(inv, {n, heads}));
    be->rope().qk_norm_rope_backward(cv(x, {n, width}), cv(gain, {hd}), cv(table, {window, half, 2}),
                                     cv(inv, {n, heads}), cv(dy, {n, width}), opt, mv(dx, {n, width}), mv(dgain, {hd}));
    return std::vector<std::vector<float>>{y, inv, dx, dgain};
  };
  ThreadPool one(1), three(3);
  EXPECT_EQ(run(one), run(three));
}

// Plain RoPE: position 0 is the identity, each pair keeps its length, the
// tail past 2·half is copied, and the backward is the forward's adjoint
// (⟨dy, R·x⟩ = ⟨Rᵀ·dy, x⟩) and its inverse (Rᵀ·R·x = x).
TEST(Rope, PlainRopeRotatesPairsAndItsBackwardIsTheAdjoint) {
  auto& ref = test::ref_backend().rope();
  const index_t window = 5, heads = 3, hd = 10, half = 4, n = 2 * window, width = heads * hd;
  auto x = rnd64(n * width, 41, 1.5);
  auto dy = rnd64(n * width, 42, 1.0);
  auto table = rope_table<double>(window, half, 100.0);
  std::vector<double> y(x.size()), dx(x.size()), back(x.size());
  ref.rope_forward(view_of(x, {n, width}), view_of(table, {window, half, 2}), heads, view_of(y, {n, width}));
  ref.rope_backward(view_of(dy, {n, width}), view_of(table, {window, half, 2}), heads, view_of(dx, {n, width}));
  ref.rope_backward(view_of(y, {n, width}), view_of(table, {window, half, 2}), heads, view_of(back, {n, width}));
  EXPECT_NEAR(dot(dy, y), dot(dx, x), 1e-12 * (1 + std::abs(dot(dy, y))));
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(back[i], x[i], 1e-13) << i;
  int moved = 0;
  for (index_t row = 0; row < n; ++row)
    for (index_t u = 0; u < heads; ++u) {
      const index_t base = (row * heads + u) * hd;
      for (index_t i = 0; i < half; ++i) {
        const double a = x[base + i], b = x[base + i + half], ya = y[base + i], yb = y[base + i + half];
        EXPECT_NEAR(ya * ya + yb * yb, a * a + b * b, 1e-12);
        if (row % window == 0) {
          EXPECT_EQ(ya, a);
          EXPECT_EQ(yb, b);
        } else {
          moved += ya != a;
        }
      }
      for (index_t c = 2 * half; c < hd; ++c) EXPECT_EQ(y[base + c], x[base + c]);
    }
  EXPECT_EQ(moved, (n - 2) * heads * half);
  // Position 1, pair 0 turns by exactly 1 radian: (a, b) → (a cos 1 − b sin 1, a sin 1 + b cos 1).
  const double a = x[width], b = x[width + half];
  EXPECT_NEAR(y[width], a * std::cos(1.0) - b * std::sin(1.0), 1e-14);
  EXPECT_NEAR(y[width + half], a * std::sin(1.0) + b * std::cos(1.0), 1e-14);
}

TEST(Rope, PlainRopeBadInputIsAnError) {
  auto& be = test::cpu_backend().rope();
  Buffer<float> buf(host_memory(), 4096), out(host_memory(), 4096);
  auto fwd = [&](Shape x, Shape table, index_t heads, Shape y) {
    be.rope_forward(buf.view(x), buf.view(table), heads, out.view(y));
  };
  EXPECT_NO_THROW(fwd({8, 32}, {4, 8, 2}, 2, {8, 32}));
  EXPECT_THROW(fwd({8, 30}, {4, 4, 2}, 4, {8, 30}), Error);   // 30 columns are not 4 heads
  EXPECT_THROW(fwd({6, 32}, {4, 4, 2}, 2, {6, 32}), Error);   // 6 rows, windows of 4
  EXPECT_THROW(fwd({8, 32}, {4, 9, 2}, 2, {8, 32}), Error);   // 2·half > hd
  EXPECT_THROW(fwd({8, 32}, {4, 4, 3}, 2, {8, 32}), Error);   // not [T][half][2]
  EXPECT_THROW(fwd({8, 32}, {4, 4, 2}, 0, {8, 32}), Error);   // no heads
  EXPECT_THROW(fwd({0, 32}, {4, 4, 2}, 2, {0, 32}), Error);   // empty
  EXPECT_THROW(fwd({8, 32}, {4, 4, 2}, 2, {8, 16}), Error);   // wrong y
  EXPECT_THROW(be.rope_backward(buf.view({8, 32}), buf.view({4, 4, 2}), 2, out.view({4, 32})), Error);
  try {
    fwd({8, 32}, {4, 9, 2}, 2, {8, 32});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rope_forward: rotary dims 2·half = 18 exceed head_dim 16"), std::string::npos)
        << e.what();
  }
}

TEST(Rope, BadInputIsAnError) {
  auto& be = test::cpu_backend().rope();
  Buffer<float> buf(host_memory(), 4096), out(host_memory(), 4096), out2(host_memory(), 4096);
  const QkNormRopeOptions opt{.heads = 2, .eps = 1e-6f, .gain = GainStyle::plain};
  auto fwd = [&](Shape x, Shape gain, Shape table, const QkNormRopeOptions& o, Shape y, Shape inv) {
    be.qk_norm_rope_forward(buf.view(x), buf.view(gain), buf.view(table), o, out.view(y), out2.view(inv));
  };
  // The good call works.
  EXPECT_NO_THROW(fwd({8, 32}, {16}, {4, 4, 2}, opt, {8, 32}, {8, 2}));
  // x columns are not heads·hd.
  EXPECT_THROW(fwd({8, 30}, {16}, {4, 4, 2}, opt, {8, 30}, {8, 2}), Error);
  // Rows not a whole number of windows.
  EXPECT_THROW(fwd({6, 32}, {16}, {4, 4, 2}, opt, {6, 32}, {6, 2}), Error);
  // 2·half > hd.
  EXPECT_THROW(fwd({8, 32}, {16}, {4, 9, 2}, opt, {8, 32}, {8, 2}), Error);
  // Table not [T][half][2].
  EXPECT_THROW(fwd({8, 32}, {16}, {4, 4, 3}, opt, {8, 32}, {8, 2}), Error);
  EXPECT_THROW(fwd({8, 32}, {16}, {4, 8}, opt, {8, 32}, {8, 2}), Error);
  // Empty x, empty gain.
  EXPECT_THROW(fwd({0, 32}, {16}, {4, 4, 2}, opt, {0, 32}, {0, 2}), Error);
  EXPECT_THROW(fwd({8, 0}, {0}, {4, 0, 2}, opt, {8, 0}, {8, 2}), Error);
  // Wrong output shapes.
  EXPECT_THROW(fwd({8, 32}, {16}, {4, 4, 2}, opt, {8, 16}, {8, 2}), Error);
  EXPECT_THROW(fwd({8, 32}, {16}, {4, 4, 2}, opt, {8, 32}, {8, 1}), Error);
  // Options: no heads, non-finite or negative eps.
  EXPECT_THROW(fwd({8, 32}, {16}, {4, 4, 2}, {.heads = 0}, {8, 32}, {8, 2}), Error);
  EXPECT_THROW(fwd({8, 32}, {16}, {4, 4, 2}, {.heads = 2, .eps = NAN}, {8, 32}, {8, 2}), Error);
  EXPECT_THROW(fwd({8, 32}, {16}, {4, 4, 2}, {.heads = 2, .eps = INFINITY}, {8, 32}, {8, 2}), Error);
  EXPECT_THROW(fwd({8, 32}, {16}, {4, 4, 2}, {.heads = 2, .eps = -1e-6f}, {8, 32}, {8, 2}), Error);
  // An out-of-range gain style, in the forward and the backward.
  const QkNormRopeOptions bad_style{.heads = 2, .eps = 1e-6f, .gain = static_cast<GainStyle>(7)};
  test::expect_error([&] { fwd({8, 32}, {16}, {4, 4, 2}, bad_style, {8, 32}, {8, 2}); },
                     "qk_norm_rope_forward: unknown gain style 7");
  // Backward: dgain of the wrong length, inv_rms of the wrong shape.
  Buffer<float> dx(host_memory(), 4096), dgain(host_memory(), 64);
  EXPECT_THROW(be.qk_norm_rope_backward(buf.view({8, 32}), buf.view({16}), buf.view({4, 4, 2}), buf.view({8, 2}),
                                        buf.view({8, 32}), opt, dx.view({8, 32}), dgain.view({15})),
               Error);
  EXPECT_THROW(be.qk_norm_rope_backward(buf.view({8, 32}), buf.view({16}), buf.view({4, 4, 2}), buf.view({8, 3}),
                                        buf.view({8, 32}), opt, dx.view({8, 32}), dgain.view({16})),
               Error);
  test::expect_error(
      [&] {
        be.qk_norm_rope_backward(buf.view({8, 32}), buf.view({16}), buf.view({4, 4, 2}), buf.view({8, 2}),
                                 buf.view({8, 32}), bad_style, dx.view({8, 32}), dgain.view({16}));
      },
      "qk_norm_rope_backward: unknown gain style 7");
  // The table builder checks its arguments.
  EXPECT_THROW(rope_table<float>(4, 0, 1e4), Error);
  EXPECT_THROW(rope_table<float>(0, 4, 1e4), Error);
  EXPECT_THROW(rope_table<float>(4, 4, -1.0), Error);
  EXPECT_THROW(rope_table<float>(4, 4, NAN), Error);
  // The message names the op and the shapes.
  try {
    fwd({8, 32}, {16}, {4, 9, 2}, opt, {8, 32}, {8, 2});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qk_norm_rope_forward: rotary dims 2·half = 18 exceed head_dim 16"),
              std::string::npos)
        << e.what();
  }
  try {
    fwd({6, 32}, {16}, {4, 4, 2}, opt, {6, 32}, {6, 2});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qk_norm_rope_forward: x has 6 rows, not a whole number of windows of T = 4"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace bitrank
