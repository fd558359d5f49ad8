// f64 reference of the column reductions (contract: include/bitrank/ops/reduce.hpp).
#include "ref/ops.hpp"

namespace bitrank::ref {
namespace {

class RefReduceOps final : public ReduceOps<double> {
 protected:
  void col_sum_prod_impl(CView<double> a, CView<double> b, View<double> out) override {
    const index_t rows = a.dim(0), cols = a.dim(1);
    for (index_t j = 0; j < cols; ++j) {
      double sum = 0;
      for (index_t t = 0; t < rows; ++t) sum += a[t * cols + j] * b[t * cols + j];
      out[j] += sum;
    }
  }

  void scale_cols_impl(CView<double> a, CView<double> col, View<double> out, bool accumulate) override {
    const index_t rows = a.dim(0), cols = a.dim(1);
    for (index_t t = 0; t < rows; ++t)
      for (index_t j = 0; j < cols; ++j) {
        const double v = a[t * cols + j] * col[j];
        out[t * cols + j] = accumulate ? out[t * cols + j] + v : v;
      }
  }

  double sum_squares_impl(CView<double> a) override {
    double sum = 0;
    for (index_t i = 0; i < a.numel(); ++i) sum += a[i] * a[i];
    return sum;
  }

  double squared_error_impl(CView<double> y, CView<double> target, double grad_mul, View<double> dy) override {
    double sum = 0;
    for (index_t i = 0; i < y.numel(); ++i) {
      const double d = y[i] - target[i];
      sum += d * d;
      dy[i] = grad_mul * d;
    }
    return sum;
  }
};

}  // namespace

std::unique_ptr<ReduceOps<double>> make_reduce_ops() { return std::make_unique<RefReduceOps>(); }

}  // namespace bitrank::ref
