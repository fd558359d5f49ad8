// f64 reference of RMSNorm (contract: include/bitrank/ops/norm.hpp).
#include <cmath>

#include "ref/ops.hpp"

namespace bitrank::ref {
namespace {

double gain_of(double w, GainStyle gain) { return gain == GainStyle::zero_centred ? 1.0 + w : w; }

class RefNormOps final : public NormOps<double> {
 protected:
  void rmsnorm_forward_impl(CView<double> x, CView<double> w, GainStyle gain, float eps, View<double> y,
                            View<double> inv) override {
    const index_t n = x.dim(0), d = x.dim(1);
    for (index_t r = 0; r < n; ++r) {
      const double* xr = x.data + r * d;
      double ss = 0;
      for (index_t j = 0; j < d; ++j) ss += xr[j] * xr[j];
      const double iv = 1.0 / std::sqrt(ss / static_cast<double>(d) + static_cast<double>(eps));
      for (index_t j = 0; j < d; ++j) y[r * d + j] = xr[j] * iv * gain_of(w[j], gain);
      inv[r] = iv;
    }
  }

  void rmsnorm_backward_impl(CView<double> x, CView<double> w, CView<double> inv, CView<double> dy, GainStyle gain,
                             View<double> dx) override {
    const index_t n = x.dim(0), d = x.dim(1);
    for (index_t r = 0; r < n; ++r) {
      const double* xr = x.data + r * d;
      const double* dyr = dy.data + r * d;
      const double iv = inv[r];
      double s = 0;  // Σ dy·g·x over the row
      for (index_t j = 0; j < d; ++j) s += dyr[j] * gain_of(w[j], gain) * xr[j];
      const double coef = s / static_cast<double>(d) * iv * iv * iv;
      for (index_t j = 0; j < d; ++j) dx[r * d + j] = iv * gain_of(w[j], gain) * dyr[j] - xr[j] * coef;
    }
  }

  void rmsnorm_gain_grad_impl(CView<double> x, CView<double> inv, CView<double> dy, View<double> dw) override {
    const index_t n = x.dim(0), d = x.dim(1);
    for (index_t j = 0; j < d; ++j) {
      double acc = 0;
      for (index_t r = 0; r < n; ++r) acc += dy[r * d + j] * x[r * d + j] * inv[r];
      dw[j] += acc;
    }
  }
};

}  // namespace

std::unique_ptr<NormOps<double>> make_norm_ops() { return std::make_unique<RefNormOps>(); }

}  // namespace bitrank::ref
