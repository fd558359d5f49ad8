// f64 reference of the elementwise activations (contract:
// include/bitrank/ops/act.hpp).
#include <algorithm>
#include <cmath>

#include "ref/ops.hpp"

namespace bitrank::ref {
namespace {

// σ(v) without overflow: e^−|v| ≤ 1 always.
double sigmoid(double v) {
  const double e = std::exp(-std::fabs(v));
  return v >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}
double silu(double v) { return v * sigmoid(v); }
// d silu / dv = σ(v)·(1 + v·σ(−v))
double silu_grad(double v) { return sigmoid(v) * (1.0 + v * sigmoid(-v)); }

// One element of the clamped SwiGLU: the clamped inputs and whether the
// gradient passes each clamp (it is stopped only where the clamp is active,
// so a value exactly at the limit, or a NaN, passes).
struct Clamped {
  double gate, up;
  bool gate_passes, up_passes;
};
Clamped clamp_inputs(double gate, double up, double limit) {
  if (limit <= 0) return {gate, up, true, true};
  return {std::min(gate, limit), std::clamp(up, -limit, limit), !(gate > limit), !(up < -limit || up > limit)};
}

class RefActOps final : public ActOps<double> {
 protected:
  void swiglu_forward_impl(CView<double> gate, CView<double> up, View<double> out) override {
    for (index_t i = 0; i < gate.numel(); ++i) out[i] = silu(gate[i]) * up[i];
  }

  void swiglu_backward_impl(CView<double> gate, CView<double> up, CView<double> d_out, View<double> d_gate,
                            View<double> d_up) override {
    for (index_t i = 0; i < gate.numel(); ++i) {
      const double g = gate[i], u = up[i], dc = d_out[i];
      d_gate[i] = dc * u * silu_grad(g);
      d_up[i] = dc * silu(g);
    }
  }

  void swiglu_limit_forward_impl(CView<double> gate, CView<double> up, SwigluLimit lim, View<double> out) override {
    for (index_t i = 0; i < gate.numel(); ++i) {
      const Clamped c = clamp_inputs(gate[i], up[i], lim.limit);
      out[i] = lim.scale * silu(c.gate) * c.up;
    }
  }

  void swiglu_limit_backward_impl(CView<double> gate, CView<double> up, CView<double> d_out, SwigluLimit lim,
                                  View<double> d_gate, View<double> d_up) override {
    for (index_t i = 0; i < gate.numel(); ++i) {
      const Clamped c = clamp_inputs(gate[i], up[i], lim.limit);
      const double dc = d_out[i] * lim.scale;
      d_gate[i] = c.gate_passes ? dc * c.up * silu_grad(c.gate) : 0.0;
      d_up[i] = c.up_passes ? dc * silu(c.gate) : 0.0;
    }
  }

  void swiglu_limit_routed_forward_impl(CView<double> gate, CView<double> up, CView<double> route_weight,
                                        index_t width, SwigluLimit lim, View<double> out) override {
    for (index_t i = 0; i < gate.numel(); ++i) {
      const Clamped c = clamp_inputs(gate[i], up[i], lim.limit);
      out[i] = lim.scale * route_weight[i / width] * silu(c.gate) * c.up;
    }
  }

  void swiglu_limit_routed_backward_impl(CView<double> gate, CView<double> up, CView<double> route_weight,
                                         CView<double> d_out, index_t width, SwigluLimit lim, View<double> d_gate,
                                         View<double> d_up, View<double> d_route_weight) override {
    const index_t rows = gate.numel() / width;
    for (index_t r = 0; r < rows; ++r) {
      double drw = 0;
      for (index_t i = r * width; i < (r + 1) * width; ++i) {
        const Clamped c = clamp_inputs(gate[i], up[i], lim.limit);
        const double dc = d_out[i] * lim.scale;
        drw += dc * silu(c.gate) * c.up;
        d_gate[i] = c.gate_passes ? dc * route_weight[r] * c.up * silu_grad(c.gate) : 0.0;
        d_up[i] = c.up_passes ? dc * route_weight[r] * silu(c.gate) : 0.0;
      }
      if (d_route_weight.data) d_route_weight[r] = drw;
    }
  }

  void swiglu_col_gate_forward_impl(CView<double> gate, CView<double> up, CView<double> col_gate,
                                    View<double> out) override {
    const index_t width = col_gate.numel();
    for (index_t i = 0; i < gate.numel(); ++i) out[i] = silu(gate[i]) * up[i] * col_gate[i % width];
  }

  void swiglu_col_gate_backward_impl(CView<double> gate, CView<double> up, CView<double> col_gate,
                                     CView<double> d_out, View<double> d_gate, View<double> d_up) override {
    const index_t width = col_gate.numel();
    for (index_t i = 0; i < gate.numel(); ++i) {
      const double g = gate[i], u = up[i], dc = d_out[i] * col_gate[i % width];
      d_gate[i] = dc * u * silu_grad(g);
      d_up[i] = dc * silu(g);
    }
  }

  void sigmoid_gate_forward_impl(CView<double> x, CView<double> gate, View<double> out) override {
    for (index_t i = 0; i < x.numel(); ++i) out[i] = x[i] * sigmoid(gate[i]);
  }

  void sigmoid_gate_backward_impl(CView<double> x, CView<double> gate, CView<double> d_out, View<double> d_x,
                                  View<double> d_gate) override {
    for (index_t i = 0; i < x.numel(); ++i) {
      const double xv = x[i], g = gate[i], dc = d_out[i];
      d_x[i] = dc * sigmoid(g);
      d_gate[i] = dc * xv * sigmoid(g) * sigmoid(-g);
    }
  }

  void add_impl(CView<double> a, CView<double> b, View<double> out) override {
    for (index_t i = 0; i < a.numel(); ++i) out[i] = a[i] + b[i];
  }
};

}  // namespace

std::unique_ptr<ActOps<double>> make_act_ops() { return std::make_unique<RefActOps>(); }

}  // namespace bitrank::ref
