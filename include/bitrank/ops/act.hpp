// Elementwise activations of the trainer: SwiGLU and its clamped,
// route-weighted and column-gated forms, the sigmoid output gate, and add.
//
// Every tensor is a flat contiguous vector; the n-element operands
// (gate, up, x, a, b, out and their gradients) all have shape [n]. The two
// forms with a per-row or per-column factor see the n elements as rows of
// `width` (n must be a multiple of width): element i is in row i / width and
// column i % width.
//
//   swiglu                 out = silu(gate)·up                  silu(v) = v·σ(v)
//   swiglu_limit           out = s·silu(min(gate, L))·clamp(up, −L, L)
//   swiglu_limit_routed    out = s·rw[i / width]·silu(min(gate, L))·clamp(up, −L, L)
//   swiglu_col_gate        out = silu(gate)·up·col_gate[i % width]
//   sigmoid_gate           out = x·σ(gate)
//   add                    out = a + b
//
// swiglu_limit is DeepSeek's `swiglu_limit` L (L ≤ 0: no clamp) with an
// output scale s; the routed form multiplies in the router's weight rw of
// each token row (an expert's down-projection input). The column gate is a
// mask per intermediate column (e.g. σ(m) of a trained mask m).
//
// Backward: every op's input gradients are OVERWRITTEN (d_gate, d_up, d_x,
// d_route_weight — these are activations' gradients, not parameters').
// With silu'(v) = σ(v)·(1 + v·σ(−v)):
//   swiglu          d_gate = d_out·up·silu'(gate),  d_up = d_out·silu(gate)
//   swiglu_limit    the same at (min(gate, L), clamp(up, −L, L)) times s, and
//                   zero where the clamp is active: d_gate = 0 where gate > L,
//                   d_up = 0 where |up| > L (a value exactly at ±L passes
//                   the gradient, as torch.clamp does); routed: also times rw,
//                   and d_route_weight[r] = Σ_{i in row r} d_out·s·silu(min(gate, L))·clamp(up, −L, L)
//                   (optional: a default-constructed view skips it)
//   col_gate        swiglu's backward of d_out·col_gate[i % width]
//   sigmoid_gate    d_x = d_out·σ(gate),  d_gate = d_out·x·σ(gate)·σ(−gate)
//
// Aliasing: an output may be exactly the same tensor as one of the n-element
// inputs (in place, e.g. add into the residual stream, or d_gate over gate):
// all inputs of element i are read before element i is written. Outputs must
// not otherwise overlap inputs or each other.
//
// Numerics: σ is evaluated without overflow for any finite input,
// σ(v) = 1/(1 + e^−|v|) for v ≥ 0 and e^−|v|/(1 + e^−|v|) for v < 0, and
// 1 − σ(v) is taken as σ(−v) (no cancellation for large v).
#pragma once

#include <string_view>

#include "bitrank/ops/check.hpp"
#include "bitrank/tensor.hpp"

namespace bitrank {

// DeepSeek's clamped SwiGLU: limit L (≤ 0: no clamp) and output scale s.
struct SwigluLimit {
  float limit = 0.0f;
  float scale = 1.0f;
};

template <class T>
class ActOps {
 public:
  virtual ~ActOps() = default;

  // out = silu(gate)·up
  void swiglu_forward(CView<T> gate, CView<T> up, View<T> out) {
    constexpr std::string_view op = "swiglu_forward";
    const Shape s = elementwise(op, "gate", gate);
    check::dense(op, "up", up, s);
    check::dense(op, "out", out, s);
    swiglu_forward_impl(gate, up, out);
  }

  void swiglu_backward(CView<T> gate, CView<T> up, CView<T> d_out, View<T> d_gate, View<T> d_up) {
    constexpr std::string_view op = "swiglu_backward";
    const Shape s = elementwise(op, "gate", gate);
    check::dense(op, "up", up, s);
    check::dense(op, "d_out", d_out, s);
    check::dense(op, "d_gate", d_gate, s);
    check::dense(op, "d_up", d_up, s);
    swiglu_backward_impl(gate, up, d_out, d_gate, d_up);
  }

  // out = s·silu(min(gate, L))·clamp(up, −L, L)
  void swiglu_limit_forward(CView<T> gate, CView<T> up, SwigluLimit lim, View<T> out) {
    constexpr std::string_view op = "swiglu_limit_forward";
    const Shape s = elementwise(op, "gate", gate);
    check::dense(op, "up", up, s);
    check_limit(op, lim);
    check::dense(op, "out", out, s);
    swiglu_limit_forward_impl(gate, up, lim, out);
  }

  void swiglu_limit_backward(CView<T> gate, CView<T> up, CView<T> d_out, SwigluLimit lim, View<T> d_gate,
                             View<T> d_up) {
    constexpr std::string_view op = "swiglu_limit_backward";
    const Shape s = elementwise(op, "gate", gate);
    check::dense(op, "up", up, s);
    check::dense(op, "d_out", d_out, s);
    check_limit(op, lim);
    check::dense(op, "d_gate", d_gate, s);
    check::dense(op, "d_up", d_up, s);
    swiglu_limit_backward_impl(gate, up, d_out, lim, d_gate, d_up);
  }

  // out = s·route_weight[i / width]·silu(min(gate, L))·clamp(up, −L, L);
  // route_weight has n / width entries.
  void swiglu_limit_routed_forward(CView<T> gate, CView<T> up, CView<T> route_weight, index_t width, SwigluLimit lim,
                                   View<T> out) {
    constexpr std::string_view op = "swiglu_limit_routed_forward";
    const Shape s = elementwise(op, "gate", gate);
    check::dense(op, "up", up, s);
    const index_t rows = rows_of(op, s, width);
    check::dense(op, "route_weight", route_weight, Shape{rows});
    check_limit(op, lim);
    check::dense(op, "out", out, s);
    swiglu_limit_routed_forward_impl(gate, up, route_weight, width, lim, out);
  }

  // d_gate, d_up and d_route_weight [n / width]; a default-constructed or
  // empty d_route_weight skips the route weight's gradient.
  void swiglu_limit_routed_backward(CView<T> gate, CView<T> up, CView<T> route_weight, CView<T> d_out, index_t width,
                                    SwigluLimit lim, View<T> d_gate, View<T> d_up, View<T> d_route_weight) {
    constexpr std::string_view op = "swiglu_limit_routed_backward";
    const Shape s = elementwise(op, "gate", gate);
    check::dense(op, "up", up, s);
    const index_t rows = rows_of(op, s, width);
    check::dense(op, "route_weight", route_weight, Shape{rows});
    check::dense(op, "d_out", d_out, s);
    check_limit(op, lim);
    check::dense(op, "d_gate", d_gate, s);
    check::dense(op, "d_up", d_up, s);
    const bool want_rw = d_route_weight.rank() != 0 && !d_route_weight.empty();
    if (want_rw) check::dense(op, "d_route_weight", d_route_weight, Shape{rows});
    swiglu_limit_routed_backward_impl(gate, up, route_weight, d_out, width, lim, d_gate, d_up,
                                      want_rw ? d_route_weight : View<T>{});
  }

  // out = silu(gate)·up·col_gate[i % width], width = col_gate's length.
  void swiglu_col_gate_forward(CView<T> gate, CView<T> up, CView<T> col_gate, View<T> out) {
    constexpr std::string_view op = "swiglu_col_gate_forward";
    const Shape s = elementwise(op, "gate", gate);
    check::dense(op, "up", up, s);
    check_col_gate(op, s, col_gate);
    check::dense(op, "out", out, s);
    swiglu_col_gate_forward_impl(gate, up, col_gate, out);
  }

  void swiglu_col_gate_backward(CView<T> gate, CView<T> up, CView<T> col_gate, CView<T> d_out, View<T> d_gate,
                                View<T> d_up) {
    constexpr std::string_view op = "swiglu_col_gate_backward";
    const Shape s = elementwise(op, "gate", gate);
    check::dense(op, "up", up, s);
    check_col_gate(op, s, col_gate);
    check::dense(op, "d_out", d_out, s);
    check::dense(op, "d_gate", d_gate, s);
    check::dense(op, "d_up", d_up, s);
    swiglu_col_gate_backward_impl(gate, up, col_gate, d_out, d_gate, d_up);
  }

  // out = x·σ(gate)
  void sigmoid_gate_forward(CView<T> x, CView<T> gate, View<T> out) {
    constexpr std::string_view op = "sigmoid_gate_forward";
    const Shape s = elementwise(op, "x", x);
    check::dense(op, "gate", gate, s);
    check::dense(op, "out", out, s);
    sigmoid_gate_forward_impl(x, gate, out);
  }

  void sigmoid_gate_backward(CView<T> x, CView<T> gate, CView<T> d_out, View<T> d_x, View<T> d_gate) {
    constexpr std::string_view op = "sigmoid_gate_backward";
    const Shape s = elementwise(op, "x", x);
    check::dense(op, "gate", gate, s);
    check::dense(op, "d_out", d_out, s);
    check::dense(op, "d_x", d_x, s);
    check::dense(op, "d_gate", d_gate, s);
    sigmoid_gate_backward_impl(x, gate, d_out, d_x, d_gate);
  }

  // out = a + b
  void add(CView<T> a, CView<T> b, View<T> out) {
    constexpr std::string_view op = "add";
    const Shape s = elementwise(op, "a", a);
    check::dense(op, "b", b, s);
    check::dense(op, "out", out, s);
    add_impl(a, b, out);
  }

 protected:
  virtual void swiglu_forward_impl(CView<T> gate, CView<T> up, View<T> out) = 0;
  virtual void swiglu_backward_impl(CView<T> gate, CView<T> up, CView<T> d_out, View<T> d_gate, View<T> d_up) = 0;
  virtual void swiglu_limit_forward_impl(CView<T> gate, CView<T> up, SwigluLimit lim, View<T> out) = 0;
  virtual void swiglu_limit_backward_impl(CView<T> gate, CView<T> up, CView<T> d_out, SwigluLimit lim,
                                          View<T> d_gate, View<T> d_up) = 0;
  virtual void swiglu_limit_routed_forward_impl(CView<T> gate, CView<T> up, CView<T> route_weight, index_t width,
                                                SwigluLimit lim, View<T> out) = 0;
  // d_route_weight.data is null when its gradient is not wanted.
  virtual void swiglu_limit_routed_backward_impl(CView<T> gate, CView<T> up, CView<T> route_weight, CView<T> d_out,
                                                 index_t width, SwigluLimit lim, View<T> d_gate, View<T> d_up,
                                                 View<T> d_route_weight) = 0;
  virtual void swiglu_col_gate_forward_impl(CView<T> gate, CView<T> up, CView<T> col_gate, View<T> out) = 0;
  virtual void swiglu_col_gate_backward_impl(CView<T> gate, CView<T> up, CView<T> col_gate, CView<T> d_out,
                                             View<T> d_gate, View<T> d_up) = 0;
  virtual void sigmoid_gate_forward_impl(CView<T> x, CView<T> gate, View<T> out) = 0;
  virtual void sigmoid_gate_backward_impl(CView<T> x, CView<T> gate, CView<T> d_out, View<T> d_x,
                                          View<T> d_gate) = 0;
  virtual void add_impl(CView<T> a, CView<T> b, View<T> out) = 0;

 private:
  // The leading operand: a non-empty contiguous vector [n]; its shape is
  // the one every n-element operand must have.
  static Shape elementwise(std::string_view op, std::string_view name, const CView<T>& v) {
    check::rank(op, name, v, 1);
    check::contiguous(op, name, v);
    return v.shape;
  }
  // Rows of `width` elements: width > 0 and dividing n.
  static index_t rows_of(std::string_view op, const Shape& s, index_t width) {
    check::positive(op, "width", width);
    check::require(s.numel() % width == 0, op, "width {} does not divide the {} elements", width, s.numel());
    return s.numel() / width;
  }
  static void check_col_gate(std::string_view op, const Shape& s, const CView<T>& col_gate) {
    check::rank(op, "col_gate", col_gate, 1);
    check::contiguous(op, "col_gate", col_gate);
    rows_of(op, s, col_gate.dim(0));
  }
  static void check_limit(std::string_view op, SwigluLimit lim) {
    check::finite(op, "limit", lim.limit);
    check::finite(op, "scale", lim.scale);
  }
};

}  // namespace bitrank
