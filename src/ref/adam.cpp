// f64 reference of Adam (contract: include/bitrank/ops/adam.hpp).
#include <algorithm>
#include <cmath>

#include "ref/ops.hpp"

namespace bitrank::ref {
namespace {

class RefAdamOps final : public AdamOps<double> {
 protected:
  void adam_update_impl(View<double> w, CView<double> grad, View<double> m, View<double> v, CView<double> mask,
                        const AdamOptions& opt) override {
    const double lr = opt.lr, beta1 = opt.beta1, beta2 = opt.beta2, eps = opt.eps;
    const double t = static_cast<double>(opt.step);
    const double correction1 = 1.0 - std::pow(beta1, t), correction2 = 1.0 - std::pow(beta2, t);
    for (index_t i = 0; i < w.numel(); ++i) {
      if (has_mask(mask) && mask[i] == 0) continue;
      const double g = grad[i] * static_cast<double>(opt.grad_scale);
      m[i] = beta1 * m[i] + (1 - beta1) * g;
      v[i] = beta2 * v[i] + (1 - beta2) * g * g;
      const double step = lr * (m[i] / correction1) / (std::sqrt(v[i] / correction2) + eps);
      if (opt.relative_floor > 0)
        w[i] -= step * std::max(std::fabs(w[i]), static_cast<double>(opt.relative_floor));
      else
        w[i] -= step;
    }
  }
};

}  // namespace

std::unique_ptr<AdamOps<double>> make_adam_ops() { return std::make_unique<RefAdamOps>(); }

}  // namespace bitrank::ref
