// f64 reference of the sliced KL objective (contract: include/bitrank/ops/kl.hpp).
#include <algorithm>
#include <cmath>

#include "ref/ops.hpp"

namespace bitrank::ref {
namespace {

class RefKlOps final : public KlOps<double> {
 protected:
  void kl_lse_merge_impl(CView<double> z, View<double> run, bool first) override {
    const index_t n = z.dim(0), vs = z.dim(1);
    for (index_t r = 0; r < n; ++r) {
      const double* zr = z.data + r * vs;
      // A NaN logit is not a maximum (std::max keeps m); the sum below carries it.
      double m = first ? zr[0] : run[2 * r];
      for (index_t j = 0; j < vs; ++j) m = std::max(m, zr[j]);
      double s = first ? 0.0 : run[2 * r + 1] * std::exp(run[2 * r] - m);
      for (index_t j = 0; j < vs; ++j) s += std::exp(zr[j] - m);
      run[2 * r] = m;
      run[2 * r + 1] = s;
    }
  }

  double kl_slice_backward_impl(CView<double> zs, CView<double> zt, CView<double> run_s, CView<double> run_t,
                                double grad_mul, View<double> dz) override {
    const index_t n = zs.dim(0), vs = zs.dim(1);
    double total = 0;
    for (index_t r = 0; r < n; ++r) {
      const double ls = run_s[2 * r] + std::log(run_s[2 * r + 1]);
      const double lt = run_t[2 * r] + std::log(run_t[2 * r + 1]);
      for (index_t j = 0; j < vs; ++j) {
        const index_t i = r * vs + j;
        const double a = zt[i] - lt, b = zs[i] - ls, pa = std::exp(a);
        total += pa * (a - b);
        dz[i] = grad_mul * (std::exp(b) - pa);
      }
    }
    return total;
  }
};

}  // namespace

std::unique_ptr<KlOps<double>> make_kl_ops() { return std::make_unique<RefKlOps>(); }

}  // namespace bitrank::ref
