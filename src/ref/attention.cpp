// f64 reference of causal GQA attention (contract: include/bitrank/ops/attention.hpp).
//
// Each (window, head, query row) materialises its row of scores and applies
// the softmax formula directly; attention_decode runs the same row formula
// for the query at position T − n + i of one window.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ref/ops.hpp"

namespace bitrank::ref {
namespace {

class RefAttentionOps final : public AttentionOps<double> {
 protected:
  void attention_forward_impl(CView<double> q, CView<double> k, CView<double> v, const AttentionGeometry& geo,
                              View<double> out, View<double> lse) override {
    const Layout L(q.dim(0), geo);
    std::vector<double> s(static_cast<std::size_t>(L.window));
    for (index_t b = 0; b < L.windows; ++b)
      for (index_t h = 0; h < L.heads; ++h)
        for (index_t i = 0; i < L.window; ++i) {
          const double* qi = q.data + L.q_at(b, i, h);
          double mx = -INFINITY;
          for (index_t j = 0; j <= i; ++j) {
            s[j] = L.scale * dot(qi, k.data + L.kv_at(b, j, h), L.hd);
            mx = std::max(mx, s[j]);
          }
          double sum = 0;
          for (index_t j = 0; j <= i; ++j) sum += std::exp(s[j] - mx);
          double* oi = out.data + L.q_at(b, i, h);
          for (index_t c = 0; c < L.hd; ++c) oi[c] = 0;
          for (index_t j = 0; j <= i; ++j) {
            const double p = std::exp(s[j] - mx) / sum;
            const double* vj = v.data + L.kv_at(b, j, h);
            for (index_t c = 0; c < L.hd; ++c) oi[c] += p * vj[c];
          }
          lse[(b * L.window + i) * L.heads + h] = mx + std::log(sum);
        }
  }

  void attention_decode_impl(CView<double> q, CView<double> k, CView<double> v, const AttentionGeometry& geo,
                             View<double> out, View<double> lse) override {
    const index_t n = q.dim(0), past = geo.window - n, group = geo.heads / geo.kv_heads, hd = geo.head_dim;
    const index_t kv_stride = geo.kv_heads * hd;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    std::vector<double> s(static_cast<std::size_t>(geo.window));
    for (index_t i = 0; i < n; ++i)
      for (index_t h = 0; h < geo.heads; ++h) {
        const index_t last = past + i, kv_col = h / group * hd;
        const double* qi = q.data + (i * geo.heads + h) * hd;
        double mx = -INFINITY;
        for (index_t j = 0; j <= last; ++j) {
          s[j] = scale * dot(qi, k.data + j * kv_stride + kv_col, hd);
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (index_t j = 0; j <= last; ++j) sum += std::exp(s[j] - mx);
        double* oi = out.data + (i * geo.heads + h) * hd;
        for (index_t c = 0; c < hd; ++c) oi[c] = 0;
        for (index_t j = 0; j <= last; ++j) {
          const double p = std::exp(s[j] - mx) / sum;
          const double* vj = v.data + j * kv_stride + kv_col;
          for (index_t c = 0; c < hd; ++c) oi[c] += p * vj[c];
        }
        lse[i * geo.heads + h] = mx + std::log(sum);
      }
  }

  void attention_backward_impl(CView<double> q, CView<double> k, CView<double> v, CView<double> out, CView<double> lse,
                               CView<double> dout, const AttentionGeometry& geo, View<double> delta, View<double> dq,
                               View<double> dk, View<double> dv) override {
    const Layout L(q.dim(0), geo);
    for (index_t r = 0; r < L.rows; ++r)
      for (index_t h = 0; h < L.heads; ++h)
        delta[r * L.heads + h] = dot(dout.data + (r * L.heads + h) * L.hd, out.data + (r * L.heads + h) * L.hd, L.hd);
    std::fill(dk.data, dk.data + dk.numel(), 0.0);
    std::fill(dv.data, dv.data + dv.numel(), 0.0);
    for (index_t b = 0; b < L.windows; ++b)
      for (index_t h = 0; h < L.heads; ++h)
        for (index_t i = 0; i < L.window; ++i) {
          const index_t row = b * L.window + i;
          const double* qi = q.data + L.q_at(b, i, h);
          const double* doi = dout.data + L.q_at(b, i, h);
          double* dqi = dq.data + L.q_at(b, i, h);
          for (index_t c = 0; c < L.hd; ++c) dqi[c] = 0;
          for (index_t j = 0; j <= i; ++j) {
            const double* kj = k.data + L.kv_at(b, j, h);
            const double* vj = v.data + L.kv_at(b, j, h);
            const double p = std::exp(L.scale * dot(qi, kj, L.hd) - lse[row * L.heads + h]);
            const double ds = p * (dot(doi, vj, L.hd) - delta[row * L.heads + h]) * L.scale;
            double* dkj = dk.data + L.kv_at(b, j, h);
            double* dvj = dv.data + L.kv_at(b, j, h);
            for (index_t c = 0; c < L.hd; ++c) {
              dqi[c] += ds * kj[c];
              dkj[c] += ds * qi[c];
              dvj[c] += p * doi[c];
            }
          }
        }
  }

 private:
  // Offsets of one head's vector in the row-major tensors.
  struct Layout {
    index_t rows, window, windows, heads, hd, group;
    double scale;
    Layout(index_t n, const AttentionGeometry& g)
        : rows(n),
          window(g.window),
          windows(n / g.window),
          heads(g.heads),
          hd(g.head_dim),
          group(g.heads / g.kv_heads),
          scale(1.0 / std::sqrt(static_cast<double>(g.head_dim))) {}
    index_t q_at(index_t b, index_t i, index_t h) const { return ((b * window + i) * heads + h) * hd; }
    index_t kv_at(index_t b, index_t j, index_t h) const {
      return ((b * window + j) * (heads / group) + h / group) * hd;
    }
  };

  static double dot(const double* a, const double* b, index_t len) {
    double s = 0;
    for (index_t c = 0; c < len; ++c) s += a[c] * b[c];
    return s;
  }
};

}  // namespace

std::unique_ptr<AttentionOps<double>> make_attention_ops() { return std::make_unique<RefAttentionOps>(); }

}  // namespace bitrank::ref
