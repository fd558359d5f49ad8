// The chunkwise form of the Gated DeltaNet core (src/ref/gdn_chunked.hpp)
// against the token-by-token recurrence, both in f64 inside the ref op:
// out, the tape's o_pre, and every gradient (d_qkv, d_z, d_a, d_b) must agree
// to 1e-10 relative (each tensor's max |difference| over its max |value|;
// the two are the same function evaluated in different orders, so only f64
// rounding separates them — the error seen is ~1e-15, ~1e-11 under strong
// decay — and a wrong term in the derivation shows as O(1)).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "bitrank/rng.hpp"
#include "ref/ops.hpp"

namespace bitrank {
namespace {

struct Case {
  index_t hk, hv, d, T, windows, chunk;
  double a_log0 = -0.5, dt_shift = 0;  // strong decay: a_log0 = 2, dt_shift = 3 (ℓ ≈ −7.4·softplus(x + 3))
};

struct Run {
  std::vector<double> out, o_pre, d_qkv, d_z, d_a, d_b;
};

Run run(const Case& c, index_t chunk) {
  GdnConfig cfg;
  cfg.k_heads = c.hk, cfg.v_heads = c.hv, cfg.head_dim = c.d, cfg.conv_kernel = 4, cfg.window = c.T;
  cfg.ckpt_every = 8;
  const index_t n = c.windows * c.T, C = cfg.channels(), V = cfg.value_width(), hv = c.hv;
  std::uint64_t seed = 7;
  auto draw = [&](index_t count, float scale, double offset = 0) {
    const auto f = rnd(static_cast<std::size_t>(count), seed++, scale);
    std::vector<double> v(f.size());
    for (std::size_t i = 0; i < f.size(); ++i) v[i] = f[i] + offset;
    return v;
  };
  std::vector<double> conv = draw(C * 4, 0.5f), dt_bias = draw(hv, 0.5f, c.dt_shift), gain = draw(c.d, 0.3f, 1.0);
  std::vector<double> a_log(static_cast<std::size_t>(hv));
  for (index_t h = 0; h < hv; ++h) a_log[static_cast<std::size_t>(h)] = c.a_log0 + 0.3 * static_cast<double>(h % 4);
  std::vector<double> qkv = draw(n * C, 1.0f), z = draw(n * V, 1.0f), a = draw(n * hv, 1.0f), b = draw(n * hv, 1.0f),
                      d_out = draw(n * V, 1.0f);
  std::vector<double> tape(static_cast<std::size_t>(gdn_tape_size(cfg, n)), 0.0);
  Run r;
  r.out.assign(static_cast<std::size_t>(n * V), 0.0);
  r.d_qkv.assign(static_cast<std::size_t>(n * C), 0.0);
  r.d_z.assign(static_cast<std::size_t>(n * V), 0.0);
  r.d_a.assign(static_cast<std::size_t>(n * hv), 0.0);
  r.d_b.assign(static_cast<std::size_t>(n * hv), 0.0);
  auto v = [](std::vector<double>& x, Shape s) { return View<double>(x.data(), s); };
  const GdnParams<double> prm{v(conv, {C, 4}), v(a_log, {hv}), v(dt_bias, {hv}), v(gain, {c.d})};
  auto ops = ref::make_gdn_ops(chunk);
  const View<double> tp = v(tape, {static_cast<index_t>(tape.size())});
  ops->gdn_forward(cfg, prm, v(qkv, {n, C}), v(z, {n, V}), v(a, {n, hv}), v(b, {n, hv}), v(r.out, {n, V}), tp);
  ops->gdn_backward(cfg, prm, v(qkv, {n, C}), v(z, {n, V}), tp, v(d_out, {n, V}), v(r.d_qkv, {n, C}),
                    v(r.d_z, {n, V}), v(r.d_a, {n, hv}), v(r.d_b, {n, hv}));
  const index_t o_pre = gdn_tape_layout(cfg, n).o_pre;
  r.o_pre.assign(tape.begin() + o_pre, tape.begin() + o_pre + n * V);
  return r;
}

double rel_err(const std::vector<double>& x, const std::vector<double>& ref) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::fabs(x[i] - ref[i]));
    scale = std::max(scale, std::fabs(ref[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

void expect_equal_to_recurrence(const Case& c, const std::string& tag) {
  const Run seq = run(c, 0), chk = run(c, c.chunk);
  constexpr double kTol = 1e-10;
  const std::pair<const char*, double> errs[] = {
      {"o_pre", rel_err(chk.o_pre, seq.o_pre)}, {"out", rel_err(chk.out, seq.out)},
      {"d_qkv", rel_err(chk.d_qkv, seq.d_qkv)}, {"d_z", rel_err(chk.d_z, seq.d_z)},
      {"d_a", rel_err(chk.d_a, seq.d_a)},       {"d_b", rel_err(chk.d_b, seq.d_b)}};
  double worst = 0;
  for (const auto& [name, e] : errs) {
    EXPECT_LE(e, kTol) << tag << ": " << name;
    worst = std::max(worst, e);
  }
  // A gradient that is all zeros would compare trivially: require signal.
  EXPECT_GT(rel_err(seq.d_a, std::vector<double>(seq.d_a.size(), 0.0)), 0.0) << tag;
  std::printf("[gdn chunked] %-44s worst rel err %.2e\n", tag.c_str(), worst);
}

TEST(GdnChunked, EqualsRecurrenceTNotMultipleOfChunk) {
  expect_equal_to_recurrence({2, 4, 8, 23, 2, 8}, "hk2 hv4 d8 T23 C8 2 windows");
}

TEST(GdnChunked, EqualsRecurrenceTShorterThanChunk) {
  expect_equal_to_recurrence({1, 3, 7, 11, 2, 64}, "hk1 hv3 d7 T11 C64 2 windows");
}

TEST(GdnChunked, EqualsRecurrenceChunkOne) {
  expect_equal_to_recurrence({1, 2, 7, 9, 2, 1}, "hk1 hv2 d7 T9 C1 2 windows");
}

TEST(GdnChunked, EqualsRecurrenceHvEqualsHk) {
  expect_equal_to_recurrence({3, 3, 7, 20, 3, 6}, "hk3 hv3 d7 T20 C6 3 windows");
}

TEST(GdnChunked, EqualsRecurrenceHvThreeHkDefaultChunk) {
  expect_equal_to_recurrence({2, 6, 7, 150, 1, 64}, "hk2 hv6 d7 T150 C64 1 window");
}

TEST(GdnChunked, EqualsRecurrenceHeadDim128) {
  expect_equal_to_recurrence({1, 3, 128, 21, 2, 8}, "hk1 hv3 d128 T21 C8 2 windows");
}

TEST(GdnChunked, EqualsRecurrenceStrongDecay) {
  Case c{2, 6, 7, 70, 2, 64};
  c.a_log0 = 2.0;  // e^{a_log} ≈ 7.4..18: ℓ down to ≈ −80 a token, e^{c} underflows inside a chunk
  c.dt_shift = 3.0;
  expect_equal_to_recurrence(c, "strong decay hk2 hv6 d7 T70 C64 2 windows");
  c.chunk = 16;
  expect_equal_to_recurrence(c, "strong decay hk2 hv6 d7 T70 C16 2 windows");
}

}  // namespace
}  // namespace bitrank
