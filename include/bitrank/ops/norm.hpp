// RMSNorm over the rows of a token-major activation, with its backward and
// its gain gradient (DESIGN §2: Llama-style gain w, Qwen3.5-style 1+w).
//
// Shapes: x, y, dy, dx [n][d] row-major and contiguous; w, dw [d]; inv [n].
//
//   forward      inv[r] = 1 / √(Σ_j x[r,j]² / d + eps)
//                y[r,j] = x[r,j] · inv[r] · g[j]        g = w or 1 + w
//   backward     dx[r,j] = inv[r]·g[j]·dy[r,j] − x[r,j]·inv[r]³/d · Σ_k dy[r,k]·g[k]·x[r,k]
//   gain grad    dw[j] += Σ_r dy[r,j] · x[r,j] · inv[r]
//
// y, inv and dx are OVERWRITTEN; dw is a parameter gradient and is
// ACCUMULATED. The backward takes the inv its forward wrote (it is not
// recomputed). ∂y/∂w is x·inv for both gain styles, so the gain gradient
// does not depend on the style. A backend forms 1 + w in its own precision
// and then computes exactly what the plain style computes with that gain.
// No output may overlap an input.
//
// Numerics: the row sums (Σx², Σ dy·g·x) and the column sums of the gain
// gradient are long reductions (d = 5120 in the seed shapes); the f32
// backends accumulate them in f64 and round once, so what remains is a few
// f32 roundings per element (relative L2 ~1e-7 against the f64 reference).
#pragma once

#include <string_view>

#include "bitrank/ops/check.hpp"
#include "bitrank/tensor.hpp"

namespace bitrank {

// How the stored gain vector w scales the normalised row.
enum class GainStyle {
  plain,         // y = x̂ · w          (Llama, Qwen2/3 dense, the GDN gated norm)
  zero_centred,  // y = x̂ · (1 + w)    (Qwen3.5 / Qwen3-Next block norms)
};

inline const char* gain_style_name(GainStyle g) { return g == GainStyle::plain ? "plain" : "zero_centred"; }

// An op's check of a GainStyle argument (an out-of-range cast is an Error).
inline void check_gain_style(std::string_view op, GainStyle gain) {
  check::require(gain == GainStyle::plain || gain == GainStyle::zero_centred, op, "unknown gain style {}",
                 static_cast<int>(gain));
}

template <class T>
class NormOps {
 public:
  virtual ~NormOps() = default;

  // y [n][d] and inv [n] from x [n][d] and w [d]; eps > 0 and finite.
  void rmsnorm_forward(CView<T> x, CView<T> w, GainStyle gain, float eps, View<T> y, View<T> inv) {
    constexpr std::string_view op = "rmsnorm_forward";
    const auto [n, d] = rows_of(op, x);
    check::dense(op, "w", w, Shape{d});
    check_gain_style(op, gain);
    check::finite(op, "eps", eps);
    check::require(eps > 0.0f, op, "eps must be positive, got {}", eps);
    check::dense(op, "y", y, Shape{n, d});
    check::dense(op, "inv", inv, Shape{n});
    rmsnorm_forward_impl(x, w, gain, eps, y, inv);
  }

  // dx [n][d] (overwritten) from x, w, the forward's inv [n] and dy [n][d].
  void rmsnorm_backward(CView<T> x, CView<T> w, CView<T> inv, CView<T> dy, GainStyle gain, View<T> dx) {
    constexpr std::string_view op = "rmsnorm_backward";
    const auto [n, d] = rows_of(op, x);
    check::dense(op, "w", w, Shape{d});
    check_gain_style(op, gain);
    check::dense(op, "inv", inv, Shape{n});
    check::dense(op, "dy", dy, Shape{n, d});
    check::dense(op, "dx", dx, Shape{n, d});
    rmsnorm_backward_impl(x, w, inv, dy, gain, dx);
  }

  // dw[j] += Σ_r dy[r,j]·x[r,j]·inv[r] (accumulated; the same for both gain styles).
  void rmsnorm_gain_grad(CView<T> x, CView<T> inv, CView<T> dy, View<T> dw) {
    constexpr std::string_view op = "rmsnorm_gain_grad";
    const auto [n, d] = rows_of(op, x);
    check::dense(op, "inv", inv, Shape{n});
    check::dense(op, "dy", dy, Shape{n, d});
    check::dense(op, "dw", dw, Shape{d});
    rmsnorm_gain_grad_impl(x, inv, dy, dw);
  }

 protected:
  virtual void rmsnorm_forward_impl(CView<T> x, CView<T> w, GainStyle gain, float eps, View<T> y, View<T> inv) = 0;
  virtual void rmsnorm_backward_impl(CView<T> x, CView<T> w, CView<T> inv, CView<T> dy, GainStyle gain,
                                     View<T> dx) = 0;
  virtual void rmsnorm_gain_grad_impl(CView<T> x, CView<T> inv, CView<T> dy, View<T> dw) = 0;

 private:
  struct Rows {
    index_t n, d;
  };
  // x must be a non-empty contiguous [n][d] matrix.
  static Rows rows_of(std::string_view op, const CView<T>& x) {
    check::rank(op, "x", x, 2);
    check::contiguous(op, "x", x);
    return {x.dim(0), x.dim(1)};
  }
};

}  // namespace bitrank
