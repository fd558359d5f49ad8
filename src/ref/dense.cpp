// f64 reference of the small dense layers (contract: include/bitrank/ops/dense.hpp).
#include "ref/ops.hpp"

namespace bitrank::ref {
namespace {

// The value of a weight element: f16 read exactly.
double value(double v) { return v; }
double value(f16 v) { return to_f32(v); }

class RefDenseOps final : public DenseOps<double> {
 private:
  template <class W>
  static void forward(CView<double> x, CView<W> w, View<double> out, bool accumulate) {
    const index_t m = x.dim(0), k = x.dim(1), r = w.dim(0);
    for (index_t t = 0; t < m; ++t)
      for (index_t o = 0; o < r; ++o) {
        double sum = 0;
        for (index_t j = 0; j < k; ++j) sum += x[t * k + j] * value(w[o * k + j]);
        out[t * r + o] = accumulate ? out[t * r + o] + sum : sum;
      }
  }

 protected:
  void dense_forward_impl(CView<double> x, CView<double> w, View<double> out, bool accumulate) override {
    forward(x, w, out, accumulate);
  }

  void dense_forward_f16_impl(CView<double> x, CView<f16> w, View<double> out, bool accumulate) override {
    forward(x, w, out, accumulate);
  }

  void dense_backward_impl(CView<double> dy, CView<double> w, View<double> dx) override {
    const index_t m = dy.dim(0), r = dy.dim(1), k = w.dim(1);
    for (index_t t = 0; t < m; ++t)
      for (index_t j = 0; j < k; ++j) {
        double sum = 0;
        for (index_t o = 0; o < r; ++o) sum += dy[t * r + o] * w[o * k + j];
        dx[t * k + j] += sum;
      }
  }

  void split_q_gate_impl(CView<double> qg, index_t heads, View<double> q, View<double> gate) override {
    const index_t m = qg.dim(0), hd = q.dim(1) / heads;
    for (index_t t = 0; t < m; ++t)
      for (index_t h = 0; h < heads; ++h)
        for (index_t d = 0; d < hd; ++d) {
          const index_t src = (t * heads + h) * 2 * hd + d, dst = (t * heads + h) * hd + d;
          q[dst] = qg[src];
          gate[dst] = qg[src + hd];
        }
  }

  void merge_q_gate_impl(CView<double> q, CView<double> gate, index_t heads, View<double> qg) override {
    const index_t m = qg.dim(0), hd = q.dim(1) / heads;
    for (index_t t = 0; t < m; ++t)
      for (index_t h = 0; h < heads; ++h)
        for (index_t d = 0; d < hd; ++d) {
          const index_t dst = (t * heads + h) * 2 * hd + d, src = (t * heads + h) * hd + d;
          qg[dst] = q[src];
          qg[dst + hd] = gate[src];
        }
  }
};

}  // namespace

std::unique_ptr<DenseOps<double>> make_dense_ops() { return std::make_unique<RefDenseOps>(); }

}  // namespace bitrank::ref
