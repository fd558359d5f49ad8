// Parity cases of RMSNorm: forward, backward and the accumulated gain
// gradient, each backend against the f64 reference.
//
// Tolerances (DESIGN §4): 1e-6 for y and inv — one f32 rounding per value
// (~6e-8) plus a few for x·inv·g, with the row sums kept in f64; 1e-5 for dx
// and dw — dx is a difference of two f32 terms that partly cancel, and
// both take the backend's own f32 inv from its forward, so the forward's
// rounding is amplified a little.
#include "support/parity.hpp"

namespace bitrank::test {
namespace {

void rmsnorm_case(ParityRun& p, index_t n, index_t d, GainStyle gain, float eps) {
  auto x = p.input({n, d}, 3.0f);
  auto w = p.input({d}, 0.5f);
  auto dy = p.input({n, d}, 1.0f);
  auto y = p.output({n, d});
  auto inv = p.output({n});
  auto dx = p.output({n, d});
  auto dw = p.accumulator({d}, 1.0f);  // random start: dw must be added to, not overwritten

  p.ref.norm().rmsnorm_forward(x.ref(), w.ref(), gain, eps, y.ref(), inv.ref());
  p.ref.norm().rmsnorm_backward(x.ref(), w.ref(), inv.ref(), dy.ref(), gain, dx.ref());
  p.ref.norm().rmsnorm_gain_grad(x.ref(), inv.ref(), dy.ref(), dw.ref());

  p.be.norm().rmsnorm_forward(x.be(), w.be(), gain, eps, y.be(), inv.be());
  p.be.norm().rmsnorm_backward(x.be(), w.be(), inv.be(), dy.be(), gain, dx.be());
  p.be.norm().rmsnorm_gain_grad(x.be(), inv.be(), dy.be(), dw.be());

  p.expect_close("y", y, 1e-6);
  p.expect_close("inv", inv, 1e-6);
  p.expect_close("dx", dx, 1e-5);
  p.expect_close("dw", dw, 1e-5);
}

}  // namespace

// The seed's shape: 37 tokens of hidden 5120, eps 1e-6, both gain styles.
BR_PARITY_CASE(rmsnorm_37x5120_plain) { rmsnorm_case(p, 37, 5120, GainStyle::plain, 1e-6f); }
BR_PARITY_CASE(rmsnorm_37x5120_zero_centred) { rmsnorm_case(p, 37, 5120, GainStyle::zero_centred, 1e-6f); }
// Odd sizes: a width that is no multiple of 8 (the partial-sum tail), one
// row, a tiny width, and an eps large enough to matter.
BR_PARITY_CASE(rmsnorm_5x1001_plain) { rmsnorm_case(p, 5, 1001, GainStyle::plain, 1e-6f); }
BR_PARITY_CASE(rmsnorm_1x576_zero_centred) { rmsnorm_case(p, 1, 576, GainStyle::zero_centred, 1e-5f); }
BR_PARITY_CASE(rmsnorm_9x3_plain) { rmsnorm_case(p, 9, 3, GainStyle::plain, 1e-6f); }
BR_PARITY_CASE(rmsnorm_300x13_zero_centred_eps) { rmsnorm_case(p, 300, 13, GainStyle::zero_centred, 0.5f); }

}  // namespace bitrank::test
