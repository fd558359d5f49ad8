// f64 reference of the small dense layers (contract: include/bitrank/ops/dense.hpp).
#include <span>
#include <vector>

#include "ref/ops.hpp"

namespace bitrank::ref {
namespace {

// The value of a weight element: f16 (and Q8_0's d·q, widened to f32) read exactly.
double value(double v) { return v; }
double value(f16 v) { return to_f32(v); }
double value(float v) { return v; }

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

  void dense_forward_q8_impl(CView<double> x, CView<q8_0> w, View<double> out, bool accumulate) override {
    std::vector<float> v(static_cast<std::size_t>(w.numel() * kQ8Block));  // the exact values d·q
    dequantize_q8_0(std::span<const q8_0>(w.data, static_cast<std::size_t>(w.numel())), v);
    forward(x, CView<float>(v.data(), Shape{w.dim(0), w.dim(1) * kQ8Block}), out, accumulate);
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
    for_each_q_element(qg.dim(0), heads, q.dim(1) / heads, [&](index_t in_qg, index_t in_q, index_t hd) {
      q[in_q] = qg[in_qg];
      gate[in_q] = qg[in_qg + hd];
    });
  }

  void merge_q_gate_impl(CView<double> q, CView<double> gate, index_t heads, View<double> qg) override {
    for_each_q_element(qg.dim(0), heads, q.dim(1) / heads, [&](index_t in_qg, index_t in_q, index_t hd) {
      qg[in_qg] = q[in_q];
      qg[in_qg + hd] = gate[in_q];
    });
  }

  // fn(in_qg, in_q, hd) for every element (t, h, d) of m rows of `heads`
  // heads of hd: its index in qg [m][heads][2·hd] (the q half; the gate's
  // is hd further) and in q, gate [m][heads·hd].
  template <class Fn>
  static void for_each_q_element(index_t m, index_t heads, index_t hd, Fn fn) {
    for (index_t t = 0; t < m; ++t)
      for (index_t h = 0; h < heads; ++h)
        for (index_t d = 0; d < hd; ++d) fn((t * heads + h) * 2 * hd + d, (t * heads + h) * hd + d, hd);
  }
};

}  // namespace

std::unique_ptr<DenseOps<double>> make_dense_ops() { return std::make_unique<RefDenseOps>(); }

}  // namespace bitrank::ref
