// Parity cases of causal GQA attention at the seed's shape (2 windows of
// 37, 6 heads on 2 kv heads, hd 256) and at odd sizes: one-token windows,
// windows longer than one CPU block with a one-row tail block, hd not a
// multiple of the CPU column tile, multi-query and plain multi-head, and
// peaked softmax rows (large scores) that exercise the online rescaling;
// attention_decode (the last n queries of a window over a KV cache) at a
// decoding step, a chunk and a whole window.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "bitrank/ops/attention.hpp"
#include "support/parity.hpp"

namespace bitrank::test {
namespace {

void attention_case(ParityRun& p, index_t windows, const AttentionGeometry& geo, float q_scale = 1.0f) {
  const index_t n = windows * geo.window;
  const index_t qw = geo.heads * geo.head_dim, kw = geo.kv_heads * geo.head_dim;
  auto q = p.input({n, qw}, q_scale);
  auto k = p.input({n, kw}, 1.0f);
  auto v = p.input({n, kw}, 1.0f);
  auto out = p.output({n, qw});
  auto lse = p.output({n, geo.heads});
  p.ref.attention().attention_forward(q.ref(), k.ref(), v.ref(), geo, out.ref(), lse.ref());
  p.be.attention().attention_forward(q.be(), k.be(), v.be(), geo, out.be(), lse.be());
  // f32 dot products of length hd and sums over ≤ T keys: errors ~1e-7, so
  // DESIGN §4's 1e-5 for the f32 path holds with a wide margin.
  p.expect_close("out", out, 1e-5);
  p.expect_close("lse", lse, 1e-5);

  // Each side's backward reads its own forward's out and lse.
  auto dout = p.input({n, qw}, 1.0f);
  auto delta = p.output({n, geo.heads});
  auto dq = p.output({n, qw});
  auto dk = p.output({n, kw});
  auto dv = p.output({n, kw});
  p.ref.attention().attention_backward(q.ref(), k.ref(), v.ref(), out.ref(), lse.ref(), dout.ref(), geo, delta.ref(),
                                       dq.ref(), dk.ref(), dv.ref());
  p.be.attention().attention_backward(q.be(), k.be(), v.be(), out.be(), lse.be(), dout.be(), geo, delta.be(), dq.be(),
                                      dk.be(), dv.be());
  // Same f32 path as the forward, plus the cancellation in dP − delta: 1e-5.
  p.expect_close("delta", delta, 1e-5);
  p.expect_close("dv", dv, 1e-5);
  if (geo.window > 1) {
    p.expect_close("dq", dq, 1e-5);
    p.expect_close("dk", dk, 1e-5);
  } else {
    // One key per query: P = 1 and out = v, so dS = dout·v − delta is 0 in
    // exact arithmetic; a relative error is meaningless, the f32 values must
    // be rounding-sized (and written: NaN fails).
    for (const auto* g : {&dq, &dk}) {
      double worst = 0;
      for (float x : g->be_values()) worst = std::fmax(worst, std::isnan(x) ? INFINITY : std::fabs(x));
      EXPECT_LE(worst, 1e-5) << "dq/dk of one-token windows";
    }
  }
}

// attention_decode: the last n queries of one window of T keys. The
// reference's own forward over the window (the same q rows in its last n
// positions, random ones before) must agree with its decode to f64
// rounding: the decode is the forward's rows, not a formula of its own.
void attention_decode_case(ParityRun& p, index_t n, const AttentionGeometry& geo, float q_scale = 1.0f) {
  const index_t T = geo.window, qw = geo.heads * geo.head_dim, kw = geo.kv_heads * geo.head_dim;
  auto q_all = p.input({T, qw}, q_scale);
  auto k = p.input({T, kw}, 1.0f);
  auto v = p.input({T, kw}, 1.0f);
  auto out = p.output({n, qw});
  auto lse = p.output({n, geo.heads});
  const CView<double> q_ref(q_all.ref().data + (T - n) * qw, Shape{n, qw});
  const CView<float> q_be(q_all.be().data + (T - n) * qw, Shape{n, qw});
  p.ref.attention().attention_decode(q_ref, k.ref(), v.ref(), geo, out.ref(), lse.ref());
  p.be.attention().attention_decode(q_be, k.be(), v.be(), geo, out.be(), lse.be());
  // The forward's f32 path (dot products of hd, sums over ≤ T keys): 1e-5.
  p.expect_close("out", out, 1e-5);
  p.expect_close("lse", lse, 1e-5);

  auto full = p.output({T, qw});
  auto full_lse = p.output({T, geo.heads});
  p.ref.attention().attention_forward(q_all.ref(), k.ref(), v.ref(), geo, full.ref(), full_lse.ref());
  const std::vector<double> want = full.ref_values(), got = out.ref_values();
  double worst = 0;
  for (index_t e = 0; e < n * qw; ++e) worst = std::fmax(worst, std::fabs(got[e] - want[(T - n) * qw + e]));
  EXPECT_LE(worst, 1e-12) << "ref attention_decode against the last rows of its attention_forward";
}

}  // namespace

// Decoding steps: one query over a cache of 37 (the seed's heads), of 1 (the first token).
BR_PARITY_CASE(attention_decode_1_of_37_h6_kv2_hd256) {
  attention_decode_case(p, 1, {.window = 37, .heads = 6, .kv_heads = 2, .head_dim = 256});
}
BR_PARITY_CASE(attention_decode_1_of_1_h2_kv1_hd64) {
  attention_decode_case(p, 1, {.window = 1, .heads = 2, .kv_heads = 1, .head_dim = 64});
}
// Several new tokens at once (a prefill after a cached prefix), hd 40, and a
// whole window (n = T: attention_forward of one window); peaked rows.
BR_PARITY_CASE(attention_decode_5_of_70_h4_kv1_hd40) {
  attention_decode_case(p, 5, {.window = 70, .heads = 4, .kv_heads = 1, .head_dim = 40});
}
BR_PARITY_CASE(attention_decode_33_of_33_h3_kv3_hd32_peaked) {
  attention_decode_case(p, 33, {.window = 33, .heads = 3, .kv_heads = 3, .head_dim = 32}, 16.0f);
}

BR_PARITY_CASE(attention_2x37_h6_kv2_hd256) {
  attention_case(p, 2, {.window = 37, .heads = 6, .kv_heads = 2, .head_dim = 256});
}
// One-token windows: each query sees only its own key (out = v).
BR_PARITY_CASE(attention_3x1_h2_kv2_hd64) {
  attention_case(p, 3, {.window = 1, .heads = 2, .kv_heads = 2, .head_dim = 64});
}
// 65 tokens: a full block and a one-row tail; hd 40 leaves an edge strip of 8 columns; one kv head.
BR_PARITY_CASE(attention_2x65_h4_kv1_hd40) {
  attention_case(p, 2, {.window = 65, .heads = 4, .kv_heads = 1, .head_dim = 40});
}
// Three blocks per window (tail of 2), plain multi-head.
BR_PARITY_CASE(attention_1x130_h3_kv3_hd64) {
  attention_case(p, 1, {.window = 130, .heads = 3, .kv_heads = 3, .head_dim = 64});
}
// Large scores (|s| up to ~20): peaked rows, the running max moves between key blocks.
BR_PARITY_CASE(attention_2x70_h4_kv2_hd32_peaked) {
  attention_case(p, 2, {.window = 70, .heads = 4, .kv_heads = 2, .head_dim = 32}, 16.0f);
}
// Odd head_dim below the tile.
BR_PARITY_CASE(attention_2x9_h2_kv1_hd7) {
  attention_case(p, 2, {.window = 9, .heads = 2, .kv_heads = 1, .head_dim = 7});
}

}  // namespace bitrank::test
