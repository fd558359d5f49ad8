// CPU backend of Adam (contract: include/bitrank/ops/adam.hpp): f32, entries
// in parallel chunks, the bias corrections formed once per call.
#include <algorithm>
#include <cmath>

#include "cpu/ops.hpp"

namespace bitrank::cpu {
namespace {

class CpuAdamOps final : public AdamOps<float> {
 public:
  explicit CpuAdamOps(ThreadPool& pool) : pool_(pool) {}

 protected:
  void adam_update_impl(View<float> w, CView<float> grad, View<float> m, View<float> v, CView<float> mask,
                        const AdamOptions& opt) override {
    const float lr = opt.lr, beta1 = opt.beta1, beta2 = opt.beta2, eps = opt.eps, grad_scale = opt.grad_scale;
    const float floor = opt.relative_floor;
    const bool relative = floor > 0;
    const float t = static_cast<float>(opt.step);
    const float correction1 = 1.0f - std::pow(beta1, t), correction2 = 1.0f - std::pow(beta2, t);
    const float* frozen = has_mask(mask) ? mask.data : nullptr;
    pool_.parallel_for(
        w.numel(),
        [&](index_t i0, index_t i1) {
          for (index_t i = i0; i < i1; ++i) {
            if (frozen && frozen[i] == 0.0f) continue;
            const float g = grad[i] * grad_scale;
            const float m1 = beta1 * m[i] + (1.0f - beta1) * g;
            const float m2 = beta2 * v[i] + (1.0f - beta2) * g * g;
            m[i] = m1;
            v[i] = m2;
            const float step = lr * (m1 / correction1) / (std::sqrt(m2 / correction2) + eps);
            w[i] -= relative ? step * std::max(std::fabs(w[i]), floor) : step;
          }
        },
        4096);
  }

 private:
  ThreadPool& pool_;
};

}  // namespace

std::unique_ptr<AdamOps<float>> make_adam_ops(ThreadPool& pool) { return std::make_unique<CpuAdamOps>(pool); }

}  // namespace bitrank::cpu
