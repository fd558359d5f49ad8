// Gated DeltaNet core: gradient checks of the f64 reference, independence
// of the checkpoint interval, forward with and without the tape, repeated
// backward, and bad input.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "bitrank/rng.hpp"
#include "support/backends.hpp"
#include "support/gdn_config.hpp"
#include "support/gradcheck.hpp"

namespace bitrank {
namespace {

// Host data of one layer call in the backend's real type, at the scales of
// the seed's test; views are made over the vectors (host memory backends).
template <class T>
struct GdnData {
  GdnConfig cfg;
  index_t n = 0;
  std::vector<T> conv, a_log, dt_bias, gain, qkv, z, a, b, d_out;
  std::vector<T> out, tape, d_qkv, d_z, d_a, d_b;

  GdnData(const GdnConfig& c, index_t windows, std::uint64_t seed) : cfg(c), n(windows * c.window) {
    auto draw = [&](index_t count, float scale, float offset = 0.0f) {
      const auto f = rnd(static_cast<std::size_t>(count), seed++, scale);
      std::vector<T> v(f.size());
      for (std::size_t i = 0; i < f.size(); ++i) v[i] = static_cast<T>(f[i] + offset);
      return v;
    };
    const index_t C = cfg.channels(), V = cfg.value_width(), hv = cfg.v_heads;
    conv = draw(C * cfg.conv_kernel, 0.5f);
    a_log.resize(static_cast<std::size_t>(hv));
    for (index_t h = 0; h < hv; ++h) a_log[static_cast<std::size_t>(h)] = static_cast<T>(-0.5f + 0.3f * h);
    dt_bias = draw(hv, 0.5f);
    gain = draw(cfg.head_dim, 0.3f, 1.0f);
    qkv = draw(n * C, 1.0f);
    z = draw(n * V, 1.0f);
    a = draw(n * hv, 1.0f);
    b = draw(n * hv, 1.0f);
    d_out = draw(n * V, 1.0f);
    out.assign(static_cast<std::size_t>(n * V), T(0));
    tape.assign(static_cast<std::size_t>(gdn_tape_size(cfg, n)), T(0));
    d_qkv.assign(static_cast<std::size_t>(n * C), T(0));
    d_z.assign(static_cast<std::size_t>(n * V), T(0));
    d_a.assign(static_cast<std::size_t>(n * hv), T(0));
    d_b.assign(static_cast<std::size_t>(n * hv), T(0));
  }

  static View<T> view(std::vector<T>& v, Shape s) { return View<T>(v.data(), s); }
  GdnParams<T> params() {
    return {view(conv, {cfg.channels(), cfg.conv_kernel}), view(a_log, {cfg.v_heads}), view(dt_bias, {cfg.v_heads}),
            view(gain, {cfg.head_dim})};
  }
  void forward(GdnOps<T>& ops, bool record = true) {
    const index_t C = cfg.channels(), V = cfg.value_width(), hv = cfg.v_heads;
    ops.gdn_forward(cfg, params(), view(qkv, {n, C}), view(z, {n, V}), view(a, {n, hv}), view(b, {n, hv}),
                    view(out, {n, V}), view(tape, {static_cast<index_t>(tape.size())}), record);
  }
  void backward(GdnOps<T>& ops) {
    const index_t C = cfg.channels(), V = cfg.value_width(), hv = cfg.v_heads;
    ops.gdn_backward(cfg, params(), view(qkv, {n, C}), view(z, {n, V}), view(tape, {static_cast<index_t>(tape.size())}),
                     view(d_out, {n, V}), view(d_qkv, {n, C}), view(d_z, {n, V}), view(d_a, {n, hv}),
                     view(d_b, {n, hv}));
  }
  double loss(GdnOps<T>& ops) {
    forward(ops);
    double s = 0;
    for (std::size_t i = 0; i < out.size(); ++i) s += static_cast<double>(d_out[i]) * static_cast<double>(out[i]);
    return s;
  }
};

bool bit_equal(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// ∂(Σ d_out ⊙ out)/∂θ of the reference backward against central
// differences, θ = raw qkv, z, a, b. Tolerance 1e-6: f64 with h = 1e-5
// leaves ~1e-9 of truncation and rounding error on these smooth functions.
void grad_check_config(const GdnConfig& cfg, index_t windows, const std::string& tag) {
  auto& ops = test::ref_backend().gdn();
  GdnData<double> g(cfg, windows, 11);
  g.forward(ops);
  g.backward(ops);
  const auto dq = g.d_qkv, dz = g.d_z, da = g.d_a, db = g.d_b;
  auto loss = [&] { return g.loss(ops); };
  test::grad_check("gdn d_qkv " + tag, g.qkv, dq, loss, 1e-6, 96);
  test::grad_check("gdn d_z " + tag, g.z, dz, loss, 1e-6, 48);
  test::grad_check("gdn d_a " + tag, g.a, da, loss, 1e-6, 48);
  test::grad_check("gdn d_b " + tag, g.b, db, loss, 1e-6, 48);
}

TEST(Gdn, ReferenceGradients) {
  // Two k-heads, Hv/Hk = 2, two windows of 5 (two checkpoint segments, the last short).
  grad_check_config(test::gdn_config(2, 4, 4, 3, 5, 2), 2, "hk2 hv4 d4 K3 2x5");
  // Hv = Hk, conv 4 longer than half the window, d 6.
  grad_check_config(test::gdn_config(1, 1, 6, 4, 7, 8), 1, "hk1 hv1 d6 K4 1x7");
}

TEST(Gdn, ReferenceIndependentOfCkptEvery) {
  auto& ops = test::ref_backend().gdn();
  GdnData<double> base(test::gdn_config(1, 2, 8, 4, 11, 8), 2, 21);
  base.forward(ops);
  base.backward(ops);
  for (index_t cs : {1, 3, 16}) {
    GdnData<double> g(test::gdn_config(1, 2, 8, 4, 11, cs), 2, 21);
    g.forward(ops);
    g.backward(ops);
    EXPECT_EQ(g.out, base.out) << "ckpt_every " << cs;
    EXPECT_EQ(g.d_qkv, base.d_qkv) << "ckpt_every " << cs;
    EXPECT_EQ(g.d_z, base.d_z) << "ckpt_every " << cs;
    EXPECT_EQ(g.d_a, base.d_a) << "ckpt_every " << cs;
    EXPECT_EQ(g.d_b, base.d_b) << "ckpt_every " << cs;
  }
}

// The replay rebuilds each state with the forward's own roundings, so the
// CPU results are bit-identical for every checkpoint interval.
TEST(Gdn, CpuBitIdenticalAcrossCkptEvery) {
  auto& ops = test::cpu_backend().gdn();
  const auto shape = [](index_t cs) { return test::gdn_config(2, 6, 32, 4, 45, cs); };
  GdnData<float> base(shape(8), 2, 31);
  base.forward(ops);
  base.backward(ops);
  for (index_t cs : {1, 2, 7, 45, 64}) {
    GdnData<float> g(shape(cs), 2, 31);
    g.forward(ops);
    g.backward(ops);
    EXPECT_TRUE(bit_equal(g.out, base.out)) << "out, ckpt_every " << cs;
    EXPECT_TRUE(bit_equal(g.d_qkv, base.d_qkv)) << "d_qkv, ckpt_every " << cs;
    EXPECT_TRUE(bit_equal(g.d_z, base.d_z)) << "d_z, ckpt_every " << cs;
    EXPECT_TRUE(bit_equal(g.d_a, base.d_a)) << "d_a, ckpt_every " << cs;
    EXPECT_TRUE(bit_equal(g.d_b, base.d_b)) << "d_b, ckpt_every " << cs;
  }
}

// Skipping the record part changes nothing in the output, and needs only
// the forward part of the tape.
TEST(Gdn, ForwardWithoutTapeSameOutput) {
  const GdnConfig cfg = test::gdn_config(2, 4, 16, 4, 19, 4);
  {
    auto& ops = test::cpu_backend().gdn();
    GdnData<float> rec(cfg, 2, 41), plain(cfg, 2, 41);
    plain.tape.assign(static_cast<std::size_t>(gdn_tape_size(cfg, plain.n, false)), 0.0f);
    ASSERT_LT(plain.tape.size(), rec.tape.size());
    rec.forward(ops, true);
    plain.forward(ops, false);
    EXPECT_TRUE(bit_equal(rec.out, plain.out));
  }
  {
    auto& ops = test::ref_backend().gdn();
    GdnData<double> rec(cfg, 2, 41), plain(cfg, 2, 41);
    plain.tape.assign(static_cast<std::size_t>(gdn_tape_size(cfg, plain.n, false)), 0.0);
    rec.forward(ops, true);
    plain.forward(ops, false);
    EXPECT_EQ(rec.out, plain.out);
  }
}

// The backward writes only the scratch part of the tape: a second backward
// on the same tape gives the same gradients.
TEST(Gdn, BackwardRepeatable) {
  auto& ops = test::cpu_backend().gdn();
  GdnData<float> g(test::gdn_config(1, 3, 16, 4, 21, 5), 2, 51);
  g.forward(ops);
  g.backward(ops);
  const auto dq = g.d_qkv, dz = g.d_z, da = g.d_a, db = g.d_b;
  g.backward(ops);
  EXPECT_TRUE(bit_equal(g.d_qkv, dq));
  EXPECT_TRUE(bit_equal(g.d_z, dz));
  EXPECT_TRUE(bit_equal(g.d_a, da));
  EXPECT_TRUE(bit_equal(g.d_b, db));
}

TEST(Gdn, TapeSize) {
  // nb = 2, T = 10, Hk = 1, Hv = 2, d = 4, K = 4, C = 2·4 + 8 = 16, nseg = 3, 4 replay slots.
  const GdnConfig cfg = test::gdn_config(1, 2, 4, 4, 10, 4);
  const index_t n = 20, fwd = n * 16 + 2 * n * 4 + 2 * n + 3 * n * 2 + n * 8 + n * 2;
  EXPECT_EQ(gdn_tape_size(cfg, n, false), fwd);
  EXPECT_EQ(gdn_tape_size(cfg, n, true), fwd + n * 8 + 2 * 2 * 2 * 16 + 2 * 2 * 4 * 16 + 2 * n * 8);
  GdnConfig bad = cfg;
  bad.ckpt_every = 0;
  EXPECT_THROW(gdn_tape_size(bad, n), Error);
}

TEST(Gdn, BadInputIsAnError) {
  auto& ops = test::cpu_backend().gdn();
  GdnData<float> g(test::gdn_config(2, 4, 8, 4, 6, 4), 2, 61);
  g.forward(ops);  // the good call works
  g.backward(ops);

  auto expect_error = [&](GdnConfig cfg, const char* what) {
    GdnData<float> bad = g;
    bad.cfg = cfg;
    EXPECT_THROW(bad.forward(ops), Error) << what;
    EXPECT_THROW(bad.backward(ops), Error) << what;
  };
  GdnConfig c = g.cfg;
  c.v_heads = 5;  // not a multiple of k_heads
  expect_error(c, "v_heads % k_heads");
  c = g.cfg;
  c.window = 5;  // 12 rows are not windows of 5
  expect_error(c, "rows % window");
  c = g.cfg;
  c.ckpt_every = 0;
  expect_error(c, "ckpt_every 0");
  c = g.cfg;
  c.head_dim = 0;
  expect_error(c, "head_dim 0");
  c = g.cfg;
  c.conv_kernel = 0;
  expect_error(c, "conv_kernel 0");
  c = g.cfg;
  c.norm_eps = 1.0f / 0.0f;
  expect_error(c, "norm_eps inf");
  c = g.cfg;
  c.l2_eps = 0.0f;
  expect_error(c, "l2_eps 0");

  const GdnConfig cfg = g.cfg;
  const index_t n = g.n, C = cfg.channels(), V = cfg.value_width(), hv = cfg.v_heads;
  auto V_ = [](std::vector<float>& v, Shape s) { return View<float>(v.data(), s); };
  auto fwd = [&](Shape qkv_s, Shape z_s, Shape a_s, Shape out_s, index_t tape_n, bool record) {
    ops.gdn_forward(cfg, g.params(), V_(g.qkv, qkv_s), V_(g.z, z_s), V_(g.a, a_s), V_(g.b, {n, hv}), V_(g.out, out_s),
                    V_(g.tape, {tape_n}), record);
  };
  const index_t full = gdn_tape_size(cfg, n, true), part = gdn_tape_size(cfg, n, false);
  EXPECT_NO_THROW(fwd({n, C}, {n, V}, {n, hv}, {n, V}, part, false));
  EXPECT_THROW(fwd({n, C}, {n, V}, {n, hv}, {n, V}, part, true), Error);  // too small to record
  EXPECT_THROW(fwd({n, C}, {n, V}, {n, hv}, {n, V}, part - 1, false), Error);
  EXPECT_THROW(fwd({0, C}, {0, V}, {0, hv}, {0, V}, full, true), Error);  // empty
  EXPECT_THROW(fwd({n, C + 1}, {n, V}, {n, hv}, {n, V}, full, true), Error);
  EXPECT_THROW(fwd({n, C}, {n, V - 1}, {n, hv}, {n, V}, full, true), Error);
  EXPECT_THROW(fwd({n, C}, {n, V}, {n, hv + 1}, {n, V}, full, true), Error);
  EXPECT_THROW(fwd({n, C}, {n, V}, {n, hv}, {n - 1, V}, full, true), Error);
  EXPECT_THROW(fwd({n, C}, {n, V}, {n, hv}, {n, V}, 0, true), Error);  // empty tape

  // Parameters of the wrong shape.
  GdnParams<float> p = g.params();
  p.conv_weight = V_(g.conv, {C, cfg.conv_kernel - 1});
  EXPECT_THROW(ops.gdn_forward(cfg, p, V_(g.qkv, {n, C}), V_(g.z, {n, V}), V_(g.a, {n, hv}), V_(g.b, {n, hv}),
                               V_(g.out, {n, V}), V_(g.tape, {full})),
               Error);
  p = g.params();
  p.norm_gain = V_(g.gain, {cfg.head_dim - 1});
  EXPECT_THROW(ops.gdn_forward(cfg, p, V_(g.qkv, {n, C}), V_(g.z, {n, V}), V_(g.a, {n, hv}), V_(g.b, {n, hv}),
                               V_(g.out, {n, V}), V_(g.tape, {full})),
               Error);

  // Backward: a forward-only tape, and gradients of the wrong shape.
  auto bwd = [&](index_t tape_n, Shape dqkv_s, Shape da_s) {
    ops.gdn_backward(cfg, g.params(), V_(g.qkv, {n, C}), V_(g.z, {n, V}), V_(g.tape, {tape_n}), V_(g.d_out, {n, V}),
                     V_(g.d_qkv, dqkv_s), V_(g.d_z, {n, V}), V_(g.d_a, da_s), V_(g.d_b, {n, hv}));
  };
  EXPECT_NO_THROW(bwd(full, {n, C}, {n, hv}));
  EXPECT_THROW(bwd(part, {n, C}, {n, hv}), Error);
  EXPECT_THROW(bwd(full, {n, C - 1}, {n, hv}), Error);
  EXPECT_THROW(bwd(full, {n, C}, {n - 1, hv}), Error);

  // The message names the op and says what is wrong.
  try {
    GdnData<float> bad = g;
    bad.cfg.v_heads = 5;
    bad.forward(ops);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gdn_forward: v_heads 5 is not a multiple of k_heads 2"), std::string::npos)
        << e.what();
  }
  try {
    bwd(part, {n, C}, {n, hv});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gdn_backward: tape"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("too small"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bitrank
