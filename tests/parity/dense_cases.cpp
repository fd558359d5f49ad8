// Parity cases of the small dense layers and the [q | gate] split.
#include "support/parity.hpp"

namespace bitrank::test {
namespace {

// 1e-6 (DESIGN §4): f32 sums of up to 5120 products against f64; OpenBLAS
// keeps many partial sums, measured ≤ 3e-7 here.
constexpr double kDenseTol = 1e-6;

// dense_forward, or with `half` dense_forward_f16 (a loaded model's head
// and dense projections): w's f16 values read exactly, f32 sums, the same
// tolerance; m ≤ 16 takes the CPU's dot products, above it its widened
// blocks and sgemm.
void dense_forward_case(ParityRun& p, index_t m, index_t k, index_t r, bool accumulate, bool half = false) {
  auto x = p.input({m, k}, 1.0f);
  auto out = accumulate ? p.accumulator({m, r}, 1.0f) : p.output({m, r});
  if (half) {
    auto w = p.input_f16({r, k}, 0.05f);
    p.ref.dense().dense_forward_f16(x.ref(), w.ref(), out.ref(), accumulate);
    p.be.dense().dense_forward_f16(x.be(), w.be(), out.be(), accumulate);
  } else {
    auto w = p.input({r, k}, 0.05f);
    p.ref.dense().dense_forward(x.ref(), w.ref(), out.ref(), accumulate);
    p.be.dense().dense_forward(x.be(), w.be(), out.be(), accumulate);
  }
  p.expect_close("out", out, kDenseTol);
}

// dense_forward_q8 (a loaded model's Q8_0 head): w's exact values d·q, f32
// sums, the same tolerance; m ≤ 16 takes the CPU's dot products, above it
// its widened blocks and sgemm.
void dense_forward_q8_case(ParityRun& p, index_t m, index_t k, index_t r, bool accumulate) {
  auto x = p.input({m, k}, 1.0f);
  auto out = accumulate ? p.accumulator({m, r}, 1.0f) : p.output({m, r});
  auto w = p.input_q8_0({r, k / kQ8Block}, 0.05f);
  p.ref.dense().dense_forward_q8(x.ref(), w.ref(), out.ref(), accumulate);
  p.be.dense().dense_forward_q8(x.be(), w.be(), out.be(), accumulate);
  p.expect_close("out", out, kDenseTol);
}

void dense_backward_case(ParityRun& p, index_t m, index_t k, index_t r) {
  auto dy = p.input({m, r}, 1.0f);
  auto w = p.input({r, k}, 0.05f);
  auto dx = p.accumulator({m, k}, 0.2f);  // accumulates: random start
  p.ref.dense().dense_backward(dy.ref(), w.ref(), dx.ref());
  p.be.dense().dense_backward(dy.be(), w.be(), dx.be());
  p.expect_close("dx", dx, kDenseTol);
}

void split_case(ParityRun& p, index_t m, index_t heads, index_t hd) {
  auto qg = p.input({m, 2 * heads * hd}, 1.0f);
  auto q = p.output({m, heads * hd});
  auto gate = p.output({m, heads * hd});
  p.ref.dense().split_q_gate(qg.ref(), heads, q.ref(), gate.ref());
  p.be.dense().split_q_gate(qg.be(), heads, q.be(), gate.be());
  p.expect_close("q", q, 0.0);  // a copy: exact
  p.expect_close("gate", gate, 0.0);
}

void merge_case(ParityRun& p, index_t m, index_t heads, index_t hd) {
  auto q = p.input({m, heads * hd}, 1.0f);
  auto gate = p.input({m, heads * hd}, 1.0f);
  auto qg = p.output({m, 2 * heads * hd});
  p.ref.dense().merge_q_gate(q.ref(), gate.ref(), heads, qg.ref());
  p.be.dense().merge_q_gate(q.be(), gate.be(), heads, qg.be());
  p.expect_close("qg", qg, 0.0);  // a copy: exact
}

}  // namespace

// GDN a/b projections at the 27B shape: hidden 5120 → 48 v-heads, 70 tokens.
BR_PARITY_CASE(dense_forward_70x5120_to_48) { dense_forward_case(p, 70, 5120, 48, false); }
BR_PARITY_CASE(dense_forward_70x5120_to_48_accumulate) { dense_forward_case(p, 70, 5120, 48, true); }
BR_PARITY_CASE(dense_forward_5x37_to_3_odd) { dense_forward_case(p, 5, 37, 3, true); }
// The head of SmolLM2 cut to 1,100 rows (two widened blocks and a ragged one), at decode and prefill sizes.
BR_PARITY_CASE(dense_forward_f16_1x576_to_1100) { dense_forward_case(p, 1, 576, 1100, false, true); }
BR_PARITY_CASE(dense_forward_f16_16x576_to_1100) { dense_forward_case(p, 16, 576, 1100, false, true); }
BR_PARITY_CASE(dense_forward_f16_70x576_to_1100) { dense_forward_case(p, 70, 576, 1100, false, true); }
BR_PARITY_CASE(dense_forward_f16_3x37_to_5_odd_accumulate) { dense_forward_case(p, 3, 37, 5, true, true); }
BR_PARITY_CASE(dense_forward_f16_20x37_to_5_odd_accumulate) { dense_forward_case(p, 20, 37, 5, true, true); }
BR_PARITY_CASE(dense_forward_q8_1x576_to_1100) { dense_forward_q8_case(p, 1, 576, 1100, false); }
BR_PARITY_CASE(dense_forward_q8_16x576_to_1100_accumulate) { dense_forward_q8_case(p, 16, 576, 1100, true); }
BR_PARITY_CASE(dense_forward_q8_70x576_to_1100) { dense_forward_q8_case(p, 70, 576, 1100, false); }
BR_PARITY_CASE(dense_forward_q8_3x32_to_5_accumulate) { dense_forward_q8_case(p, 3, 32, 5, true); }
BR_PARITY_CASE(dense_backward_70x48_to_5120) { dense_backward_case(p, 70, 5120, 48); }
BR_PARITY_CASE(dense_backward_5x3_to_37_odd) { dense_backward_case(p, 5, 37, 3); }
// Gated attention q_proj: 24 heads of 256 is the 27B shape; 3 heads keeps the ref fast.
BR_PARITY_CASE(split_q_gate_19x3x256) { split_case(p, 19, 3, 256); }
BR_PARITY_CASE(split_q_gate_2x5x7_odd) { split_case(p, 2, 5, 7); }
BR_PARITY_CASE(merge_q_gate_19x3x256) { merge_case(p, 19, 3, 256); }
BR_PARITY_CASE(merge_q_gate_2x5x7_odd) { merge_case(p, 2, 5, 7); }

}  // namespace bitrank::test
