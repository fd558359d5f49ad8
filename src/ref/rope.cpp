// f64 reference of the q/k norm + RoPE (contract: include/bitrank/ops/rope.hpp).
#include <cmath>
#include <vector>

#include "ref/ops.hpp"

namespace bitrank::ref {
namespace {

class RefRopeOps final : public RopeOps<double> {
 protected:
  void rope_forward_impl(CView<double> x, CView<double> table, index_t heads, View<double> y) override {
    rotate(x, table, heads, 1.0, y);
  }
  void rope_backward_impl(CView<double> dy, CView<double> table, index_t heads, View<double> dx) override {
    rotate(dy, table, heads, -1.0, dx);  // Rᵀ: the same angle, negated
  }

  void qk_norm_rope_forward_impl(CView<double> x, CView<double> gain, CView<double> table, const QkNormRopeOptions& opt,
                                 View<double> y, View<double> inv_rms) override {
    const index_t n = x.dim(0), heads = opt.heads, hd = gain.dim(0);
    const index_t window = table.dim(0), half = table.dim(1);
    const double eps = opt.eps;
    std::vector<double> z(static_cast<std::size_t>(hd));
    for (index_t row = 0; row < n; ++row) {
      const index_t pos = row % window;
      for (index_t u = 0; u < heads; ++u) {
        const double* xr = x.data + (row * heads + u) * hd;
        double* yr = y.data + (row * heads + u) * hd;
        double sum_sq = 0;
        for (index_t c = 0; c < hd; ++c) sum_sq += xr[c] * xr[c];
        const double inv = 1.0 / std::sqrt(sum_sq / static_cast<double>(hd) + eps);
        for (index_t c = 0; c < hd; ++c) z[c] = xr[c] * inv * gain_of(gain, c, opt);
        for (index_t i = 0; i < half; ++i) {
          const double cs = table[(pos * half + i) * 2], sn = table[(pos * half + i) * 2 + 1];
          yr[i] = z[i] * cs - z[i + half] * sn;
          yr[i + half] = z[i] * sn + z[i + half] * cs;
        }
        for (index_t c = 2 * half; c < hd; ++c) yr[c] = z[c];
        inv_rms[row * heads + u] = inv;
      }
    }
  }

  void qk_norm_rope_backward_impl(CView<double> x, CView<double> gain, CView<double> table, CView<double> inv_rms,
                                  CView<double> dy, const QkNormRopeOptions& opt, View<double> dx,
                                  View<double> dgain) override {
    const index_t n = x.dim(0), heads = opt.heads, hd = gain.dim(0);
    const index_t window = table.dim(0), half = table.dim(1);
    std::vector<double> g(static_cast<std::size_t>(hd));
    for (index_t row = 0; row < n; ++row) {
      const index_t pos = row % window;
      for (index_t u = 0; u < heads; ++u) {
        const double* xr = x.data + (row * heads + u) * hd;
        const double* dyr = dy.data + (row * heads + u) * hd;
        double* dxr = dx.data + (row * heads + u) * hd;
        // g = Rᵀ·dy: rotate the pair back by the same angle.
        for (index_t i = 0; i < half; ++i) {
          const double cs = table[(pos * half + i) * 2], sn = table[(pos * half + i) * 2 + 1];
          g[i] = dyr[i] * cs + dyr[i + half] * sn;
          g[i + half] = -dyr[i] * sn + dyr[i + half] * cs;
        }
        for (index_t c = 2 * half; c < hd; ++c) g[c] = dyr[c];
        const double inv = inv_rms[row * heads + u];
        double gwx = 0;
        for (index_t c = 0; c < hd; ++c) gwx += g[c] * gain_of(gain, c, opt) * xr[c];
        const double coef = gwx / static_cast<double>(hd) * inv * inv * inv;
        for (index_t c = 0; c < hd; ++c) {
          dxr[c] = inv * gain_of(gain, c, opt) * g[c] - xr[c] * coef;
          dgain[c] += g[c] * xr[c] * inv;
        }
      }
    }
  }

 private:
  // y = R(direction·angle)·x per (row, head); dims past 2·half are copied.
  static void rotate(CView<double> x, CView<double> table, index_t heads, double direction, View<double> y) {
    const index_t n = x.dim(0), hd = x.dim(1) / heads, window = table.dim(0), half = table.dim(1);
    for (index_t row = 0; row < n; ++row) {
      const index_t pos = row % window;
      for (index_t u = 0; u < heads; ++u) {
        const double* xr = x.data + (row * heads + u) * hd;
        double* yr = y.data + (row * heads + u) * hd;
        for (index_t i = 0; i < half; ++i) {
          const double cs = table[(pos * half + i) * 2], sn = direction * table[(pos * half + i) * 2 + 1];
          yr[i] = xr[i] * cs - xr[i + half] * sn;
          yr[i + half] = xr[i] * sn + xr[i + half] * cs;
        }
        for (index_t c = 2 * half; c < hd; ++c) yr[c] = xr[c];
      }
    }
  }

  static double gain_of(CView<double> gain, index_t c, const QkNormRopeOptions& opt) {
    return opt.gain == GainStyle::zero_centred ? 1.0 + gain[c] : gain[c];
  }
};

}  // namespace

std::unique_ptr<RopeOps<double>> make_rope_ops() { return std::make_unique<RefRopeOps>(); }

}  // namespace bitrank::ref
