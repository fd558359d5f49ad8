// Exact causal grouped-query attention over windows of T tokens (DESIGN §2).
//
// Layout, row-major, one row per token, n = windows·T:
//   q, out, dout, dq   [n][heads·hd]      head h is columns [h·hd, (h+1)·hd)
//   k, v, dk, dv       [n][kv_heads·hd]
//   lse, delta         [n][heads]
// Query head h reads kv head h / (heads/kv_heads). A query at position i of
// a window sees the keys at positions 0..i of the SAME window: windows are
// never crossed.
//
// Forward, per (row i, head h), with scale = 1/√hd:
//     s_j = scale·q_i·k_j (j ≤ i),   lse_i = log Σ_j e^{s_j},
//     out_i = Σ_j e^{s_j − lse_i}·v_j
// Backward, with P_ij = e^{s_ij − lse_i} from the forward's lse:
//     delta_i = Σ_c dout_ic·out_ic
//     dS_ij  = P_ij·(dout_i·v_j − delta_i)
//     dq_i = scale·Σ_j dS_ij·k_j,  dk_j = scale·Σ_{h, i} dS_ij·q_i,  dv_j = Σ_{h, i} P_ij·dout_i
// (dk, dv summed over the query heads that share the kv head).
//
// Decoding (attention_decode, generation with a KV cache): the queries are
// the LAST n positions of one window of T = geo.window keys — the new
// tokens of a sequence whose keys and values (those of every earlier token
// and of the new ones) sit in a cache:
//   q, out [n][heads·hd],  k, v [T][kv_heads·hd],  lse [n][heads],  n ≤ T
// Query row i is at position T − n + i and sees keys 0..T − n + i; the
// formulas are the forward's. With n = T it is attention_forward of one
// window. No backward.
//
// Overwrite/accumulate: out, lse, delta, dq, dk, dv are all overwritten
// (activations and input gradients; attention has no parameters). delta is
// the backward's scratch, returned because the caller owns the memory.
// Outputs must not overlap inputs.
//
// Numerics: the f64 reference materialises each row of scores. The CPU
// backend (f32) follows FlashAttention-2: the forward streams key blocks
// through an online softmax (running max and sum, rescaling the partial
// output); the backward recomputes P from lse, once in a pass over key
// blocks that writes dk, dv and once in a pass over query blocks that
// writes dq, so no output has two writers and results do not depend on the
// number of threads. attention_decode is a plain online softmax per (row,
// head) on the CPU and CUDA (one task / warp each): n is one token while
// decoding, and its cost is reading the cache once.
#pragma once

#include "bitrank/ops/check.hpp"
#include "bitrank/tensor.hpp"

namespace bitrank {

struct AttentionGeometry {
  index_t window = 0;    // T: tokens per window; rows = windows·T
  index_t heads = 0;     // query heads
  index_t kv_heads = 0;  // key/value heads; divides heads
  index_t head_dim = 0;  // hd
};

template <class T>
class AttentionOps {
 public:
  virtual ~AttentionOps() = default;

  // out [n][heads·hd] and lse [n][heads] from q, k, v.
  void attention_forward(CView<T> q, CView<T> k, CView<T> v, const AttentionGeometry& geo, View<T> out, View<T> lse) {
    constexpr std::string_view op = "attention_forward";
    check_inputs(op, q, k, v, geo);
    const index_t n = q.dim(0);
    check::dense(op, "out", out, q.shape);
    check::dense(op, "lse", lse, Shape{n, geo.heads});
    attention_forward_impl(q, k, v, geo, out, lse);
  }

  // out [n][heads·hd] and lse [n][heads] of the last n positions of one
  // window of T = geo.window keys (decoding, above); k, v are [T][kv_heads·hd].
  void attention_decode(CView<T> q, CView<T> k, CView<T> v, const AttentionGeometry& geo, View<T> out, View<T> lse) {
    constexpr std::string_view op = "attention_decode";
    check_geometry(op, geo);
    check::rank(op, "q", q, 2);
    check::contiguous(op, "q", q);
    const index_t n = q.dim(0);
    check::require(q.dim(1) == geo.heads * geo.head_dim, op, "q has shape {}, expected [n, heads·hd] = [{}, {}]",
                   q.shape.str(), n, geo.heads * geo.head_dim);
    check::require(n >= 1 && n <= geo.window, op, "q has {} rows, expected 1 to T = {} (the keys' length)", n,
                   geo.window);
    check::dense(op, "k", k, Shape{geo.window, geo.kv_heads * geo.head_dim});
    check::dense(op, "v", v, Shape{geo.window, geo.kv_heads * geo.head_dim});
    check::dense(op, "out", out, q.shape);
    check::dense(op, "lse", lse, Shape{n, geo.heads});
    attention_decode_impl(q, k, v, geo, out, lse);
  }

  // delta [n][heads], dq [n][heads·hd], dk, dv [n][kv_heads·hd] from dout,
  // with out and lse of the forward.
  void attention_backward(CView<T> q, CView<T> k, CView<T> v, CView<T> out, CView<T> lse, CView<T> dout,
                          const AttentionGeometry& geo, View<T> delta, View<T> dq, View<T> dk, View<T> dv) {
    constexpr std::string_view op = "attention_backward";
    check_inputs(op, q, k, v, geo);
    const index_t n = q.dim(0);
    check::dense(op, "out", out, q.shape);
    check::dense(op, "lse", lse, Shape{n, geo.heads});
    check::dense(op, "dout", dout, q.shape);
    check::dense(op, "delta", delta, Shape{n, geo.heads});
    check::dense(op, "dq", dq, q.shape);
    check::dense(op, "dk", dk, k.shape);
    check::dense(op, "dv", dv, v.shape);
    attention_backward_impl(q, k, v, out, lse, dout, geo, delta, dq, dk, dv);
  }

 protected:
  virtual void attention_forward_impl(CView<T> q, CView<T> k, CView<T> v, const AttentionGeometry& geo, View<T> out,
                                      View<T> lse) = 0;
  virtual void attention_backward_impl(CView<T> q, CView<T> k, CView<T> v, CView<T> out, CView<T> lse, CView<T> dout,
                                       const AttentionGeometry& geo, View<T> delta, View<T> dq, View<T> dk,
                                       View<T> dv) = 0;
  virtual void attention_decode_impl(CView<T> q, CView<T> k, CView<T> v, const AttentionGeometry& geo, View<T> out,
                                     View<T> lse) = 0;

 private:
  static void check_geometry(std::string_view op, const AttentionGeometry& geo) {
    check::positive(op, "window", geo.window);
    check::positive(op, "heads", geo.heads);
    check::positive(op, "kv_heads", geo.kv_heads);
    check::positive(op, "head_dim", geo.head_dim);
    check::require(geo.heads % geo.kv_heads == 0, op, "heads {} is not a multiple of kv_heads {}", geo.heads,
                   geo.kv_heads);
  }
  static void check_inputs(std::string_view op, CView<T> q, CView<T> k, CView<T> v, const AttentionGeometry& geo) {
    check_geometry(op, geo);
    check::rank(op, "q", q, 2);
    check::contiguous(op, "q", q);
    const index_t n = q.dim(0);
    check::require(q.dim(1) == geo.heads * geo.head_dim, op, "q has shape {}, expected [n, heads·hd] = [{}, {}]",
                   q.shape.str(), n, geo.heads * geo.head_dim);
    check::require(n % geo.window == 0, op, "q has {} rows, not a whole number of windows of T = {}", n, geo.window);
    check::dense(op, "k", k, Shape{n, geo.kv_heads * geo.head_dim});
    check::dense(op, "v", v, Shape{n, geo.kv_heads * geo.head_dim});
  }
};

}  // namespace bitrank
