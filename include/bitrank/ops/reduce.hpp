// Column reductions and scalings of the BLR layer and the trainer (seed 000).
//
//   col_sum_prod   out[j] += Σ_t a[t][j]·b[t][j]       a, b [rows][cols], out [cols]
//                  ACCUMULATES (it forms parameter gradients: dh = Σ_t dy⊙c,
//                  dℓ = Σ_t a⊙b, dg = Σ_t x⊙dx').
//   scale_cols     out[t][j] = a[t][j]·col[j]          a, out [rows][cols], col [cols]
//                  overwrites, or adds into out with `accumulate` (y += h⊙c
//                  of a second path). out may be a itself (in place).
//   sum_squares    Σ a² over every element of a (any rank), returned as a
//                  host double. A NaN or ±inf anywhere gives NaN or +inf: the
//                  trainer's skip-the-step check relies on it, so no backend
//                  may filter non-finite values.
//   squared_error  d = y − target (elementwise, any shape), dy = grad_mul·d
//                  (overwritten; dy may be y itself, in place), and Σ d²
//                  returned as a host double with sum_squares' non-finite
//                  propagation. The layer-wise objective: with N elements,
//                  loss = Σ d² / N and grad_mul = 2/N give dy = ∂loss/∂y
//                  on the backend, without a round trip through the host.
//
// Numerics: the reference sums in f64; the CPU backend sums col_sum_prod and
// sum_squares in f64 from the f32 values (fixed blocks, so the result does
// not depend on the thread count) and rounds once into f32. squared_error
// forms d = f32(y − target) and dy = f32(grad_mul·d) (two roundings) and sums
// the f32 d² in f64 like sum_squares. grad_mul is an f64 (2/N is rarely a
// float): the reference uses it as given, the f32 backends round it to f32
// once. Tolerance 1e-6.
#pragma once

#include "bitrank/ops/check.hpp"

namespace bitrank {

template <class T>
class ReduceOps {
 public:
  virtual ~ReduceOps() = default;

  void col_sum_prod(CView<T> a, CView<T> b, View<T> out) {
    constexpr std::string_view op = "col_sum_prod";
    check::rank(op, "a", a, 2);
    check::contiguous(op, "a", a);
    check::dense(op, "b", b, a.shape);
    check::dense(op, "out", out, Shape{a.dim(1)});
    col_sum_prod_impl(a, b, out);
  }

  void scale_cols(CView<T> a, CView<T> col, View<T> out, bool accumulate) {
    constexpr std::string_view op = "scale_cols";
    check::rank(op, "a", a, 2);
    check::contiguous(op, "a", a);
    check::dense(op, "col", col, Shape{a.dim(1)});
    check::dense(op, "out", out, a.shape);
    scale_cols_impl(a, col, out, accumulate);
  }

  double sum_squares(CView<T> a) {
    constexpr std::string_view op = "sum_squares";
    check::dense(op, "a", a, a.shape);
    return sum_squares_impl(a);
  }

  double squared_error(CView<T> y, CView<T> target, double grad_mul, View<T> dy) {
    constexpr std::string_view op = "squared_error";
    check::dense(op, "y", y, y.shape);
    check::dense(op, "target", target, y.shape);
    check::dense(op, "dy", dy, y.shape);
    check::finite(op, "grad_mul", grad_mul);
    return squared_error_impl(y, target, grad_mul, dy);
  }

 protected:
  virtual void col_sum_prod_impl(CView<T> a, CView<T> b, View<T> out) = 0;
  virtual void scale_cols_impl(CView<T> a, CView<T> col, View<T> out, bool accumulate) = 0;
  virtual double sum_squares_impl(CView<T> a) = 0;
  virtual double squared_error_impl(CView<T> y, CView<T> target, double grad_mul, View<T> dy) = 0;
};

}  // namespace bitrank
