// Parity cases of plain RoPE (SmolLM2's attention shape; odd head_dim with
// partial rotary dims; one-token windows) and of the q/k norm + RoPE at the
// seed's shape (2 windows of 19 tokens, 3 heads of 256, 64 rotary dims,
// θ = 1e7, both gain styles) and at odd sizes: one-token windows, windows
// longer than a row block, a head_dim that is not a multiple of 8 with
// partial rotary dims, and full rotary.
#include "bitrank/ops/rope.hpp"
#include <gtest/gtest.h>

#include "support/parity.hpp"

namespace bitrank::test {
namespace {

struct RopeShape {
  index_t windows, window, heads, hd, half;
  double theta;
  GainStyle gain;
};

void qk_norm_rope_case(ParityRun& p, const RopeShape& s) {
  const index_t n = s.windows * s.window, width = s.heads * s.hd;
  const QkNormRopeOptions opt{.heads = s.heads, .eps = 1e-6f, .gain = s.gain};
  auto x = p.input({n, width}, 2.0f);
  // A zero-centred gain is small around 0; a plain gain sits around 1.
  auto gain = p.input({s.hd}, 0.3f, s.gain == GainStyle::zero_centred ? 0.0f : 1.0f);
  // One table of f32 numbers for both sides, as every backend will get it.
  const auto table_values = rope_table<float>(s.window, s.half, s.theta);
  auto table = p.input({s.window, s.half, 2}, table_values);
  auto y = p.output({n, width});
  auto inv_rms = p.output({n, s.heads});
  p.ref.rope().qk_norm_rope_forward(x.ref(), gain.ref(), table.ref(), opt, y.ref(), inv_rms.ref());
  p.be.rope().qk_norm_rope_forward(x.be(), gain.be(), table.be(), opt, y.be(), inv_rms.be());
  // Forward: one f32 sum of hd squares and a few f32 products per element.
  p.expect_close("y", y, 1e-6);
  p.expect_close("inv_rms", inv_rms, 1e-6);

  auto dy = p.input({n, width}, 1.0f);
  auto dx = p.output({n, width});
  auto dgain = p.accumulator({s.hd}, 0.5f);
  p.ref.rope().qk_norm_rope_backward(x.ref(), gain.ref(), table.ref(), inv_rms.ref(), dy.ref(), opt, dx.ref(),
                                     dgain.ref());
  p.be.rope().qk_norm_rope_backward(x.be(), gain.be(), table.be(), inv_rms.be(), dy.be(), opt, dx.be(), dgain.be());
  // Backward: dx subtracts two comparable terms (cancellation), dgain sums
  // n·heads f32 terms per column — DESIGN §4's 1e-5 for backward passes.
  p.expect_close("dx", dx, 1e-5);
  p.expect_close("dgain", dgain, 1e-5);
}

// Plain RoPE (Llama q and k): forward and its backward (the inverse rotation).
void rope_case(ParityRun& p, index_t windows, index_t window, index_t heads, index_t hd, index_t half, double theta) {
  const index_t n = windows * window, width = heads * hd;
  auto x = p.input({n, width}, 2.0f);
  const auto table_values = rope_table<float>(window, half, theta);
  auto table = p.input({window, half, 2}, table_values);
  auto y = p.output({n, width});
  p.ref.rope().rope_forward(x.ref(), table.ref(), heads, y.ref());
  p.be.rope().rope_forward(x.be(), table.be(), heads, y.be());
  // Two f32 products and a sum per element.
  p.expect_close("y", y, 1e-6);
  auto dx = p.output({n, width});
  p.ref.rope().rope_backward(x.ref(), table.ref(), heads, dx.ref());
  p.be.rope().rope_backward(x.be(), table.be(), heads, dx.be());
  p.expect_close("dx", dx, 1e-6);  // the same arithmetic as the forward
}

}  // namespace

// SmolLM2-135M's attention: 9 heads of 64, full rotary, θ = 1e5.
BR_PARITY_CASE(rope_2x33_h9_hd64_half32) { rope_case(p, 2, 33, 9, 64, 32, 1e5); }
// Odd head_dim with partial rotary dims, one-token windows.
BR_PARITY_CASE(rope_7x1_h3_hd37_half11) { rope_case(p, 7, 1, 3, 37, 11, 1e4); }
BR_PARITY_CASE(rope_1x130_h2_hd20_half7) { rope_case(p, 1, 130, 2, 20, 7, 1e6); }

BR_PARITY_CASE(qk_norm_rope_2x19_h3_hd256_half32_gain1pw) { qk_norm_rope_case(p, {2, 19, 3, 256, 32, 1e7, GainStyle::zero_centred}); }
BR_PARITY_CASE(qk_norm_rope_2x19_h3_hd256_half32_gainw) { qk_norm_rope_case(p, {2, 19, 3, 256, 32, 1e7, GainStyle::plain}); }
// Windows of one token: every row is position 0 (no rotation).
BR_PARITY_CASE(qk_norm_rope_5x1_h2_hd64_half32) { qk_norm_rope_case(p, {5, 1, 2, 64, 32, 1e4, GainStyle::zero_centred}); }
// Windows of 65 rows; head_dim 37 (odd, not a multiple of the 8 sum lanes), 22 rotary dims.
BR_PARITY_CASE(qk_norm_rope_2x65_h2_hd37_half11) { qk_norm_rope_case(p, {2, 65, 2, 37, 11, 1e4, GainStyle::plain}); }
// Full rotary (2·half = hd), more heads than rows per window.
BR_PARITY_CASE(qk_norm_rope_3x7_h5_hd64_half32_full) { qk_norm_rope_case(p, {3, 7, 5, 64, 32, 1e6, GainStyle::zero_centred}); }

}  // namespace bitrank::test
