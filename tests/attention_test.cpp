// Causal GQA attention: gradient checks of the reference backward, windows
// never crossed (on every backend), and bad input.
#include "bitrank/ops/attention.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "bitrank/rng.hpp"
#include "support/backends.hpp"
#include "support/gradcheck.hpp"

namespace bitrank {
namespace {

using test::dot;
using test::rnd64;

View<double> view_of(std::vector<double>& v, Shape s) { return View<double>(v.data(), s); }

// L = Σ dout ⊙ out(q, k, v); the backward must give ∂L/∂q, ∂L/∂k, ∂L/∂v.
void gradcheck_attention(index_t windows, const AttentionGeometry& geo, double q_scale, const std::string& label) {
  auto& ref = test::ref_backend().attention();
  const index_t n = windows * geo.window, qw = geo.heads * geo.head_dim, kw = geo.kv_heads * geo.head_dim;
  auto q = rnd64(n * qw, 41, q_scale);
  auto k = rnd64(n * kw, 42, 1.0);
  auto v = rnd64(n * kw, 43, 1.0);
  auto dout = rnd64(n * qw, 44, 1.0);
  std::vector<double> out(n * qw), lse(n * geo.heads);
  auto loss = [&] {
    ref.attention_forward(view_of(q, {n, qw}), view_of(k, {n, kw}), view_of(v, {n, kw}), geo, view_of(out, {n, qw}),
                          view_of(lse, {n, geo.heads}));
    return dot(dout, out);
  };
  loss();
  std::vector<double> delta(n * geo.heads), dq(n * qw), dk(n * kw), dv(n * kw);
  ref.attention_backward(view_of(q, {n, qw}), view_of(k, {n, kw}), view_of(v, {n, kw}), view_of(out, {n, qw}),
                         view_of(lse, {n, geo.heads}), view_of(dout, {n, qw}), geo, view_of(delta, {n, geo.heads}),
                         view_of(dq, {n, qw}), view_of(dk, {n, kw}), view_of(dv, {n, kw}));
  test::grad_check("attention dq " + label, q, dq, loss, 1e-6, 64);
  test::grad_check("attention dk " + label, k, dk, loss, 1e-6, 64);
  test::grad_check("attention dv " + label, v, dv, loss, 1e-6, 64);
}

TEST(Attention, GradCheckGqa) {
  gradcheck_attention(2, {.window = 5, .heads = 4, .kv_heads = 2, .head_dim = 6}, 1.5, "(2x5, 4/2 heads, hd 6)");
}
TEST(Attention, GradCheckMqaPeaked) {
  gradcheck_attention(1, {.window = 7, .heads = 3, .kv_heads = 1, .head_dim = 5}, 4.0, "(1x7, 3/1 heads, hd 5)");
}

// delta is rowsum(dout ⊙ out) of the tensors given to the backward.
TEST(Attention, DeltaIsRowDotOfDoutAndOut) {
  auto& ref = test::ref_backend().attention();
  const AttentionGeometry geo{.window = 3, .heads = 2, .kv_heads = 1, .head_dim = 4};
  const index_t n = 6, qw = 8, kw = 4;
  auto q = rnd64(n * qw, 51, 1.0), k = rnd64(n * kw, 52, 1.0), v = rnd64(n * kw, 53, 1.0);
  auto out = rnd64(n * qw, 54, 1.0), lse = rnd64(n * 2, 55, 1.0), dout = rnd64(n * qw, 56, 1.0);
  std::vector<double> delta(n * 2), dq(n * qw), dk(n * kw), dv(n * kw);
  ref.attention_backward(view_of(q, {n, qw}), view_of(k, {n, kw}), view_of(v, {n, kw}), view_of(out, {n, qw}),
                         view_of(lse, {n, 2}), view_of(dout, {n, qw}), geo, view_of(delta, {n, 2}),
                         view_of(dq, {n, qw}), view_of(dk, {n, kw}), view_of(dv, {n, kw}));
  for (index_t r = 0; r < n; ++r)
    for (index_t h = 0; h < 2; ++h) {
      double want = 0;
      for (index_t c = 0; c < 4; ++c) want += dout[r * qw + h * 4 + c] * out[r * qw + h * 4 + c];
      EXPECT_NEAR(delta[r * 2 + h], want, 1e-15);
    }
}

// Everything attention computes for one run, downloaded.
template <class T>
struct AttentionRun {
  std::vector<T> out, lse, delta, dq, dk, dv;
};

template <class T>
AttentionRun<T> run_attention(Backend<T>& be, const AttentionGeometry& geo, index_t n, const std::vector<T>& q,
                              const std::vector<T>& k, const std::vector<T>& v, const std::vector<T>& dout) {
  const index_t qw = geo.heads * geo.head_dim, kw = geo.kv_heads * geo.head_dim;
  auto up = [&](const std::vector<T>& x) {
    Buffer<T> b(*be.memory, x.size());
    b.upload(x);
    return b;
  };
  auto bq = up(q), bk = up(k), bv = up(v), bdo = up(dout);
  Buffer<T> out(*be.memory, q.size()), lse(*be.memory, static_cast<std::size_t>(n * geo.heads));
  Buffer<T> delta(*be.memory, static_cast<std::size_t>(n * geo.heads)), dq(*be.memory, q.size());
  Buffer<T> dk(*be.memory, k.size()), dv(*be.memory, v.size());
  be.attention().attention_forward(bq.view({n, qw}), bk.view({n, kw}), bv.view({n, kw}), geo, out.view({n, qw}),
                                   lse.view({n, geo.heads}));
  be.attention().attention_backward(bq.view({n, qw}), bk.view({n, kw}), bv.view({n, kw}), out.view({n, qw}),
                                    lse.view({n, geo.heads}), bdo.view({n, qw}), geo, delta.view({n, geo.heads}),
                                    dq.view({n, qw}), dk.view({n, kw}), dv.view({n, kw}));
  return {out.download(), lse.download(), delta.download(), dq.download(), dk.download(), dv.download()};
}

// Perturbing the first key and value of window 1 leaves every output of
// window 0 bit-identical, and does change window 1.
template <class T>
void check_windows_isolated(Backend<T>& be, const std::string& name) {
  const AttentionGeometry geo{.window = 70, .heads = 4, .kv_heads = 2, .head_dim = 40};
  const index_t n = 2 * geo.window, qw = geo.heads * geo.head_dim, kw = geo.kv_heads * geo.head_dim;
  auto to_t = [](const std::vector<float>& f) { return std::vector<T>(f.begin(), f.end()); };
  const auto q = to_t(rnd(static_cast<std::size_t>(n * qw), 61, 2.0f));
  auto k = to_t(rnd(static_cast<std::size_t>(n * kw), 62, 1.0f));
  auto v = to_t(rnd(static_cast<std::size_t>(n * kw), 63, 1.0f));
  const auto dout = to_t(rnd(static_cast<std::size_t>(n * qw), 64, 1.0f));
  const auto before = run_attention(be, geo, n, q, k, v, dout);
  for (index_t c = 0; c < kw; ++c) {
    k[static_cast<std::size_t>(geo.window * kw + c)] += static_cast<T>(0.75);
    v[static_cast<std::size_t>(geo.window * kw + c)] -= static_cast<T>(0.5);
  }
  const auto after = run_attention(be, geo, n, q, k, v, dout);
  auto window0_same = [&](const std::vector<T>& a, const std::vector<T>& b, index_t width) {
    return std::memcmp(a.data(), b.data(), static_cast<std::size_t>(geo.window * width) * sizeof(T)) == 0;
  };
  auto window1_changed = [&](const std::vector<T>& a, const std::vector<T>& b, index_t width) {
    const std::size_t off = static_cast<std::size_t>(geo.window * width);
    return std::memcmp(a.data() + off, b.data() + off, off * sizeof(T)) != 0;
  };
  EXPECT_TRUE(window0_same(before.out, after.out, qw)) << name;
  EXPECT_TRUE(window0_same(before.lse, after.lse, geo.heads)) << name;
  EXPECT_TRUE(window0_same(before.delta, after.delta, geo.heads)) << name;
  EXPECT_TRUE(window0_same(before.dq, after.dq, qw)) << name;
  EXPECT_TRUE(window0_same(before.dk, after.dk, kw)) << name;
  EXPECT_TRUE(window0_same(before.dv, after.dv, kw)) << name;
  EXPECT_TRUE(window1_changed(before.out, after.out, qw)) << name;
  EXPECT_TRUE(window1_changed(before.lse, after.lse, geo.heads)) << name;
  EXPECT_TRUE(window1_changed(before.dq, after.dq, qw)) << name;
  EXPECT_TRUE(window1_changed(before.dk, after.dk, kw)) << name;
  EXPECT_TRUE(window1_changed(before.dv, after.dv, kw)) << name;
}

TEST(Attention, WindowsAreNeverCrossed) {
  check_windows_isolated(test::ref_backend(), "ref");
  for (const auto& name : test::available_backends()) check_windows_isolated(test::backend(name), name);
}

// The CPU results are the same bits for any number of threads.
TEST(Attention, CpuResultsDoNotDependOnThreads) {
  const AttentionGeometry geo{.window = 100, .heads = 4, .kv_heads = 2, .head_dim = 48};
  const index_t n = 2 * geo.window;
  const auto q = rnd(static_cast<std::size_t>(n * geo.heads * geo.head_dim), 71, 2.0f);
  const auto k = rnd(static_cast<std::size_t>(n * geo.kv_heads * geo.head_dim), 72, 1.0f);
  const auto v = rnd(static_cast<std::size_t>(n * geo.kv_heads * geo.head_dim), 73, 1.0f);
  const auto dout = rnd(q.size(), 74, 1.0f);
  ThreadPool one(1), three(3);
  auto serial = make_cpu_backend(one), threaded = make_cpu_backend(three);
  const auto a = run_attention(*serial, geo, n, q, k, v, dout);
  const auto b = run_attention(*threaded, geo, n, q, k, v, dout);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.lse, b.lse);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
}

TEST(Attention, BadInputIsAnError) {
  auto& be = test::cpu_backend().attention();
  Buffer<float> in(host_memory(), 8192), o1(host_memory(), 8192), o2(host_memory(), 8192);
  const AttentionGeometry geo{.window = 4, .heads = 4, .kv_heads = 2, .head_dim = 8};
  auto fwd = [&](Shape q, Shape k, Shape v, const AttentionGeometry& g, Shape out, Shape lse) {
    be.attention_forward(in.view(q), in.view(k), in.view(v), g, o1.view(out), o2.view(lse));
  };
  EXPECT_NO_THROW(fwd({8, 32}, {8, 16}, {8, 16}, geo, {8, 32}, {8, 4}));
  // heads not a multiple of kv_heads.
  EXPECT_THROW(fwd({8, 32}, {8, 24}, {8, 24}, {.window = 4, .heads = 4, .kv_heads = 3, .head_dim = 8}, {8, 32}, {8, 4}),
               Error);
  // Rows not a whole number of windows.
  EXPECT_THROW(fwd({6, 32}, {6, 16}, {6, 16}, geo, {6, 32}, {6, 4}), Error);
  // q, k, v of the wrong widths or row counts.
  EXPECT_THROW(fwd({8, 30}, {8, 16}, {8, 16}, geo, {8, 30}, {8, 4}), Error);
  EXPECT_THROW(fwd({8, 32}, {8, 32}, {8, 16}, geo, {8, 32}, {8, 4}), Error);
  EXPECT_THROW(fwd({8, 32}, {8, 16}, {4, 16}, geo, {8, 32}, {8, 4}), Error);
  // Outputs of the wrong shapes.
  EXPECT_THROW(fwd({8, 32}, {8, 16}, {8, 16}, geo, {8, 16}, {8, 4}), Error);
  EXPECT_THROW(fwd({8, 32}, {8, 16}, {8, 16}, geo, {8, 32}, {8, 2}), Error);
  // Empty tensors and zero sizes.
  EXPECT_THROW(fwd({0, 32}, {0, 16}, {0, 16}, geo, {0, 32}, {0, 4}), Error);
  EXPECT_THROW(fwd({8, 0}, {8, 0}, {8, 0}, {.window = 4, .heads = 4, .kv_heads = 2, .head_dim = 0}, {8, 0}, {8, 4}),
               Error);
  EXPECT_THROW(fwd({8, 32}, {8, 16}, {8, 16}, {.window = 0, .heads = 4, .kv_heads = 2, .head_dim = 8}, {8, 32}, {8, 4}),
               Error);
  EXPECT_THROW(fwd({8, 32}, {8, 16}, {8, 16}, {.window = 4, .heads = 4, .kv_heads = 0, .head_dim = 8}, {8, 32}, {8, 4}),
               Error);
  // A strided (non-contiguous) q.
  EXPECT_THROW(be.attention_forward(View<float>::strided(in.data(), 8, 32, 40), in.view({8, 16}), in.view({8, 16}), geo,
                                    o1.view({8, 32}), o2.view({8, 4})),
               Error);
  // Backward: delta, dk of the wrong shapes.
  Buffer<float> g1(host_memory(), 8192), g2(host_memory(), 8192), g3(host_memory(), 8192);
  auto bwd = [&](Shape delta, Shape dk) {
    be.attention_backward(in.view({8, 32}), in.view({8, 16}), in.view({8, 16}), in.view({8, 32}), in.view({8, 4}),
                          in.view({8, 32}), geo, o2.view(delta), g1.view({8, 32}), g2.view(dk), g3.view({8, 16}));
  };
  EXPECT_NO_THROW(bwd({8, 4}, {8, 16}));
  EXPECT_THROW(bwd({8, 2}, {8, 16}), Error);
  EXPECT_THROW(bwd({8, 4}, {8, 32}), Error);
  // The message names the op and what is wrong.
  try {
    fwd({8, 32}, {8, 24}, {8, 24}, {.window = 4, .heads = 4, .kv_heads = 3, .head_dim = 8}, {8, 32}, {8, 4});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_forward: heads 4 is not a multiple of kv_heads 3"),
              std::string::npos)
        << e.what();
  }
  try {
    bwd({8, 4}, {8, 32});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_backward: dk has shape [8, 32], expected [8, 16]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace bitrank
