// CPU backend of the elementwise activations (contract:
// include/bitrank/ops/act.hpp).
//
// f32 throughout; one exp per element gives both σ(v) and σ(−v) without
// overflow. Flat ops split the n elements over the pool; the per-row and
// per-column forms split over rows of `width` so the inner loop is
// contiguous. Each element's inputs are loaded before its outputs are
// stored, which keeps exact in-place use (output = an input) correct.
// Clamp tests are written so that a NaN input passes its gradient (NaN)
// through rather than hiding it behind a zero.
#include <algorithm>
#include <cmath>

#include "cpu/ops.hpp"

namespace bitrank::cpu {
namespace {

constexpr index_t kElementGrain = 1 << 15;  // elements per task, at least

// σ(v) and σ(−v) from e^−|v| ≤ 1.
struct Sigmoids {
  float pos, neg;
};
inline Sigmoids sigmoids(float v) {
  const float e = std::exp(-std::fabs(v));
  const float r = 1.0f / (1.0f + e);
  return v >= 0.0f ? Sigmoids{r, e * r} : Sigmoids{e * r, r};
}
inline float sigmoid(float v) { return sigmoids(v).pos; }
inline float silu(float v) { return v * sigmoid(v); }

// silu(v) and silu'(v) = σ(v)·(1 + v·σ(−v)).
struct Silu {
  float value, grad;
};
inline Silu silu_and_grad(float v) {
  const Sigmoids s = sigmoids(v);
  return {v * s.pos, s.pos * (1.0f + v * s.neg)};
}

// Rows per task for rows of `width`.
index_t row_grain(index_t width) { return std::max<index_t>(1, kElementGrain / width); }

class CpuActOps final : public ActOps<float> {
 public:
  explicit CpuActOps(ThreadPool& pool) : pool_(pool) {}

 protected:
  void swiglu_forward_impl(CView<float> gate, CView<float> up, View<float> out) override {
    elements(gate.numel(), [&](index_t i) { out[i] = silu(gate[i]) * up[i]; });
  }

  void swiglu_backward_impl(CView<float> gate, CView<float> up, CView<float> d_out, View<float> d_gate,
                            View<float> d_up) override {
    elements(gate.numel(), [&](index_t i) {
      const float u = up[i], dc = d_out[i];
      const Silu s = silu_and_grad(gate[i]);
      d_gate[i] = dc * u * s.grad;
      d_up[i] = dc * s.value;
    });
  }

  void swiglu_limit_forward_impl(CView<float> gate, CView<float> up, SwigluLimit lim, View<float> out) override {
    const float L = lim.limit, scale = lim.scale;
    if (L > 0.0f)
      elements(gate.numel(), [&](index_t i) {
        out[i] = scale * silu(std::min(gate[i], L)) * std::clamp(up[i], -L, L);
      });
    else
      elements(gate.numel(), [&](index_t i) { out[i] = scale * silu(gate[i]) * up[i]; });
  }

  void swiglu_limit_backward_impl(CView<float> gate, CView<float> up, CView<float> d_out, SwigluLimit lim,
                                  View<float> d_gate, View<float> d_up) override {
    const float L = lim.limit > 0.0f ? lim.limit : INFINITY, scale = lim.scale;
    elements(gate.numel(), [&](index_t i) {
      const float g = gate[i], u = up[i], dc = d_out[i] * scale;
      const float gc = std::min(g, L), uc = std::clamp(u, -L, L);
      const Silu s = silu_and_grad(gc);
      d_gate[i] = !(g > L) ? dc * uc * s.grad : 0.0f;
      d_up[i] = !(u < -L || u > L) ? dc * s.value : 0.0f;
    });
  }

  void swiglu_limit_routed_forward_impl(CView<float> gate, CView<float> up, CView<float> route_weight,
                                        index_t width, SwigluLimit lim, View<float> out) override {
    const float L = lim.limit > 0.0f ? lim.limit : INFINITY;
    rows(gate.numel() / width, width, [&](index_t r) {
      const float rs = lim.scale * route_weight[r];
      for (index_t i = r * width; i < (r + 1) * width; ++i)
        out[i] = rs * silu(std::min(gate[i], L)) * std::clamp(up[i], -L, L);
    });
  }

  void swiglu_limit_routed_backward_impl(CView<float> gate, CView<float> up, CView<float> route_weight,
                                         CView<float> d_out, index_t width, SwigluLimit lim, View<float> d_gate,
                                         View<float> d_up, View<float> d_route_weight) override {
    const float L = lim.limit > 0.0f ? lim.limit : INFINITY, scale = lim.scale;
    rows(gate.numel() / width, width, [&](index_t r) {
      const float rw = route_weight[r];
      double drw = 0;  // a sum over the row: f64, rounded once
      for (index_t i = r * width; i < (r + 1) * width; ++i) {
        const float g = gate[i], u = up[i], dc = d_out[i] * scale;
        const float gc = std::min(g, L), uc = std::clamp(u, -L, L);
        const Silu s = silu_and_grad(gc);
        drw += static_cast<double>(dc * s.value) * uc;
        d_gate[i] = !(g > L) ? dc * rw * uc * s.grad : 0.0f;
        d_up[i] = !(u < -L || u > L) ? dc * rw * s.value : 0.0f;
      }
      if (d_route_weight.data) d_route_weight[r] = static_cast<float>(drw);
    });
  }

  void swiglu_col_gate_forward_impl(CView<float> gate, CView<float> up, CView<float> col_gate,
                                    View<float> out) override {
    const index_t width = col_gate.numel();
    rows(gate.numel() / width, width, [&](index_t r) {
      const index_t o = r * width;
      for (index_t j = 0; j < width; ++j) out[o + j] = silu(gate[o + j]) * up[o + j] * col_gate[j];
    });
  }

  void swiglu_col_gate_backward_impl(CView<float> gate, CView<float> up, CView<float> col_gate, CView<float> d_out,
                                     View<float> d_gate, View<float> d_up) override {
    const index_t width = col_gate.numel();
    rows(gate.numel() / width, width, [&](index_t r) {
      const index_t o = r * width;
      for (index_t j = 0; j < width; ++j) {
        const float u = up[o + j], dc = d_out[o + j] * col_gate[j];
        const Silu s = silu_and_grad(gate[o + j]);
        d_gate[o + j] = dc * u * s.grad;
        d_up[o + j] = dc * s.value;
      }
    });
  }

  void sigmoid_gate_forward_impl(CView<float> x, CView<float> gate, View<float> out) override {
    elements(x.numel(), [&](index_t i) { out[i] = x[i] * sigmoid(gate[i]); });
  }

  void sigmoid_gate_backward_impl(CView<float> x, CView<float> gate, CView<float> d_out, View<float> d_x,
                                  View<float> d_gate) override {
    elements(x.numel(), [&](index_t i) {
      const float xv = x[i], dc = d_out[i];
      const Sigmoids s = sigmoids(gate[i]);
      d_x[i] = dc * s.pos;
      d_gate[i] = dc * xv * s.pos * s.neg;
    });
  }

  void add_impl(CView<float> a, CView<float> b, View<float> out) override {
    elements(a.numel(), [&](index_t i) { out[i] = a[i] + b[i]; });
  }

 private:
  // body(i) for every i < n, split over the pool.
  template <class Body>
  void elements(index_t n, const Body& body) {
    pool_.parallel_for(
        n,
        [&](index_t i0, index_t i1) {
          for (index_t i = i0; i < i1; ++i) body(i);
        },
        kElementGrain);
  }

  // body(r) for every row r < count of `width` elements.
  template <class Body>
  void rows(index_t count, index_t width, const Body& body) {
    pool_.parallel_for(
        count,
        [&](index_t r0, index_t r1) {
          for (index_t r = r0; r < r1; ++r) body(r);
        },
        row_grain(width));
  }

  ThreadPool& pool_;
};

}  // namespace

std::unique_ptr<ActOps<float>> make_act_ops(ThreadPool& pool) { return std::make_unique<CpuActOps>(pool); }

}  // namespace bitrank::cpu
