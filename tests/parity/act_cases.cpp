// Parity cases of the elementwise activations, each backend against the f64
// reference, at the seed's sizes (4097 elements; rows of 17 and of 241) and
// at an odd size (1001 = 7·11·13).
//
// Tolerances (DESIGN §4): 1e-6 forward — a handful of f32 roundings per
// element (exp, the reciprocal, two or three products), ~1e-7 relative;
// 1e-5 backward — a few more roundings per element (silu' has a sum and
// more products) and, for the route weight, a row sum.
#include "support/parity.hpp"

namespace bitrank::test {
namespace {

// The seed's data: gate in (−4, 4), up in (−2, 2), d_out in (−1, 1).
struct Swiglu {
  Real gate, up, d_out;
};
Swiglu swiglu_inputs(ParityRun& p, index_t n) {
  return {p.input({n}, 4.0f), p.input({n}, 2.0f), p.input({n}, 1.0f)};
}

void swiglu_case(ParityRun& p, index_t n) {
  auto [gate, up, d_out] = swiglu_inputs(p, n);
  auto out = p.output({n}), d_gate = p.output({n}), d_up = p.output({n});
  p.ref.act().swiglu_forward(gate.ref(), up.ref(), out.ref());
  p.ref.act().swiglu_backward(gate.ref(), up.ref(), d_out.ref(), d_gate.ref(), d_up.ref());
  p.be.act().swiglu_forward(gate.be(), up.be(), out.be());
  p.be.act().swiglu_backward(gate.be(), up.be(), d_out.be(), d_gate.be(), d_up.be());
  p.expect_close("out", out, 1e-6);
  p.expect_close("d_gate", d_gate, 1e-5);
  p.expect_close("d_up", d_up, 1e-5);
}

void swiglu_limit_case(ParityRun& p, index_t n, SwigluLimit lim) {
  auto [gate, up, d_out] = swiglu_inputs(p, n);
  auto out = p.output({n}), d_gate = p.output({n}), d_up = p.output({n});
  p.ref.act().swiglu_limit_forward(gate.ref(), up.ref(), lim, out.ref());
  p.ref.act().swiglu_limit_backward(gate.ref(), up.ref(), d_out.ref(), lim, d_gate.ref(), d_up.ref());
  p.be.act().swiglu_limit_forward(gate.be(), up.be(), lim, out.be());
  p.be.act().swiglu_limit_backward(gate.be(), up.be(), d_out.be(), lim, d_gate.be(), d_up.be());
  p.expect_close("out", out, 1e-6);
  p.expect_close("d_gate", d_gate, 1e-5);
  p.expect_close("d_up", d_up, 1e-5);
}

void swiglu_limit_routed_case(ParityRun& p, index_t rows, index_t width, SwigluLimit lim) {
  const index_t n = rows * width;
  auto [gate, up, d_out] = swiglu_inputs(p, n);
  auto route_weight = p.input({rows}, 0.5f, 0.5f);  // router weights in (0, 1)
  auto out = p.output({n}), d_gate = p.output({n}), d_up = p.output({n}), d_rw = p.output({rows});
  p.ref.act().swiglu_limit_routed_forward(gate.ref(), up.ref(), route_weight.ref(), width, lim, out.ref());
  p.ref.act().swiglu_limit_routed_backward(gate.ref(), up.ref(), route_weight.ref(), d_out.ref(), width, lim,
                                           d_gate.ref(), d_up.ref(), d_rw.ref());
  p.be.act().swiglu_limit_routed_forward(gate.be(), up.be(), route_weight.be(), width, lim, out.be());
  p.be.act().swiglu_limit_routed_backward(gate.be(), up.be(), route_weight.be(), d_out.be(), width, lim,
                                          d_gate.be(), d_up.be(), d_rw.be());
  p.expect_close("out", out, 1e-6);
  p.expect_close("d_gate", d_gate, 1e-5);
  p.expect_close("d_up", d_up, 1e-5);
  p.expect_close("d_route_w", d_rw, 1e-5);
}

void swiglu_col_gate_case(ParityRun& p, index_t n, index_t width) {
  auto [gate, up, d_out] = swiglu_inputs(p, n);
  auto col_gate = p.input({width}, 0.5f, 0.5f);  // a sigmoid mask, in (0, 1)
  auto out = p.output({n}), d_gate = p.output({n}), d_up = p.output({n});
  p.ref.act().swiglu_col_gate_forward(gate.ref(), up.ref(), col_gate.ref(), out.ref());
  p.ref.act().swiglu_col_gate_backward(gate.ref(), up.ref(), col_gate.ref(), d_out.ref(), d_gate.ref(), d_up.ref());
  p.be.act().swiglu_col_gate_forward(gate.be(), up.be(), col_gate.be(), out.be());
  p.be.act().swiglu_col_gate_backward(gate.be(), up.be(), col_gate.be(), d_out.be(), d_gate.be(), d_up.be());
  p.expect_close("out", out, 1e-6);
  p.expect_close("d_gate", d_gate, 1e-5);
  p.expect_close("d_up", d_up, 1e-5);
}

void sigmoid_gate_case(ParityRun& p, index_t n, float gate_scale) {
  auto x = p.input({n}, 2.0f), gate = p.input({n}, gate_scale), d_out = p.input({n}, 1.0f);
  auto out = p.output({n}), d_x = p.output({n}), d_gate = p.output({n});
  p.ref.act().sigmoid_gate_forward(x.ref(), gate.ref(), out.ref());
  p.ref.act().sigmoid_gate_backward(x.ref(), gate.ref(), d_out.ref(), d_x.ref(), d_gate.ref());
  p.be.act().sigmoid_gate_forward(x.be(), gate.be(), out.be());
  p.be.act().sigmoid_gate_backward(x.be(), gate.be(), d_out.be(), d_x.be(), d_gate.be());
  p.expect_close("out", out, 1e-6);
  p.expect_close("d_x", d_x, 1e-5);
  p.expect_close("d_gate", d_gate, 1e-5);
}

void add_case(ParityRun& p, index_t n) {
  auto a = p.input({n}, 3.0f), b = p.input({n}, 1.0f);
  auto out = p.output({n});
  p.ref.act().add(a.ref(), b.ref(), out.ref());
  p.be.act().add(a.be(), b.be(), out.be());
  p.expect_close("out", out, 1e-6);  // one f32 rounding of an exact f64 sum
}

}  // namespace

BR_PARITY_CASE(swiglu_4097) { swiglu_case(p, 4097); }
BR_PARITY_CASE(swiglu_1001) { swiglu_case(p, 1001); }
// Seed: limit 1.5 inside the data range (many elements clamped), scale 0.75.
BR_PARITY_CASE(swiglu_limit_4097) { swiglu_limit_case(p, 4097, {1.5f, 0.75f}); }
BR_PARITY_CASE(swiglu_limit_1001) { swiglu_limit_case(p, 1001, {2.5f, 1.25f}); }
BR_PARITY_CASE(swiglu_limit_off_1001) { swiglu_limit_case(p, 1001, {0.0f, 0.5f}); }  // limit ≤ 0: no clamp
// Seed: 17 rows of 241 route-weighted.
BR_PARITY_CASE(swiglu_limit_routed_17x241) { swiglu_limit_routed_case(p, 17, 241, {1.5f, 0.75f}); }
BR_PARITY_CASE(swiglu_limit_routed_77x13) { swiglu_limit_routed_case(p, 77, 13, {1.5f, 2.0f}); }
BR_PARITY_CASE(swiglu_limit_routed_off_7x143) { swiglu_limit_routed_case(p, 7, 143, {-1.0f, 1.0f}); }
// Seed: rows of 17 over 4097 elements.
BR_PARITY_CASE(swiglu_col_gate_4097_w17) { swiglu_col_gate_case(p, 4097, 17); }
BR_PARITY_CASE(swiglu_col_gate_1001_w7) { swiglu_col_gate_case(p, 1001, 7); }
BR_PARITY_CASE(swiglu_col_gate_1001_w1001) { swiglu_col_gate_case(p, 1001, 1001); }  // one row
BR_PARITY_CASE(sigmoid_gate_4097) { sigmoid_gate_case(p, 4097, 4.0f); }
BR_PARITY_CASE(sigmoid_gate_1001) { sigmoid_gate_case(p, 1001, 4.0f); }
// Gate logits up to ±120: σ saturates, and e^|v| would overflow f32 if taken.
BR_PARITY_CASE(sigmoid_gate_1001_saturated) { sigmoid_gate_case(p, 1001, 120.0f); }
BR_PARITY_CASE(add_4097) { add_case(p, 4097); }
BR_PARITY_CASE(add_1001) { add_case(p, 1001); }

}  // namespace bitrank::test
