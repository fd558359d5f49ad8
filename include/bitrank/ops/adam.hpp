// Adam without weight decay (seed 000), for the dense trained parameters
// (BLR scales h, ℓ, g and the norm gains).
//
// For every entry i of w (any shape; grad, m, v and mask have w's shape):
//     if mask given and mask[i] == 0: nothing is touched (frozen entry)
//     gr    = grad[i] · grad_scale
//     m[i]  = β1·m[i] + (1 − β1)·gr                       first moment
//     v[i]  = β2·v[i] + (1 − β2)·gr²                      second moment
//     step  = lr · (m[i] / (1 − β1^t)) / (√(v[i] / (1 − β2^t)) + eps)
//     w[i] −= step                                        or, with relative steps
//     w[i] −= step · max(|w[i]|, relative_floor)          (relative_floor > 0)
// t = opt.step is 1-based. w, m, v are updated in place; grad is read only.
//
// Numerics: the reference in f64 (options widened from f32), the CPU backend
// in f32 as written above; tolerance 1e-6.
#pragma once

#include <cstdint>

#include "bitrank/ops/check.hpp"

namespace bitrank {

struct AdamOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float grad_scale = 1.0f;      // multiplies the gradient (unscaling, clipping)
  float relative_floor = 0.0f;  // > 0: steps relative to max(|w|, relative_floor); 0: absolute steps
  std::int64_t step = 1;        // 1-based step count of the bias correction
};

template <class T>
class AdamOps {
 public:
  virtual ~AdamOps() = default;

  // `mask` may be absent: a view without data (a default-constructed CView).
  void adam_update(View<T> w, CView<T> grad, View<T> m, View<T> v, CView<T> mask, const AdamOptions& opt) {
    constexpr std::string_view op = "adam_update";
    check::dense(op, "w", w, w.shape);
    check::dense(op, "grad", grad, w.shape);
    check::dense(op, "m", m, w.shape);
    check::dense(op, "v", v, w.shape);
    if (has_mask(mask)) check::dense(op, "mask", mask, w.shape);
    check::finite(op, "lr", opt.lr);
    check::require(opt.lr >= 0, op, "lr must be ≥ 0, got {}", opt.lr);
    check::finite(op, "beta1", opt.beta1);
    check::require(opt.beta1 >= 0 && opt.beta1 < 1, op, "beta1 must be in [0, 1), got {}", opt.beta1);
    check::finite(op, "beta2", opt.beta2);
    check::require(opt.beta2 >= 0 && opt.beta2 < 1, op, "beta2 must be in [0, 1), got {}", opt.beta2);
    check::finite(op, "eps", opt.eps);
    check::require(opt.eps > 0, op, "eps must be > 0, got {}", opt.eps);
    check::finite(op, "grad_scale", opt.grad_scale);
    check::finite(op, "relative_floor", opt.relative_floor);
    check::require(opt.relative_floor >= 0, op, "relative_floor must be ≥ 0, got {}", opt.relative_floor);
    check::require(opt.step >= 1, op, "step must be ≥ 1 (1-based), got {}", opt.step);
    adam_update_impl(w, grad, m, v, mask, opt);
  }

 protected:
  // Whether a mask was given (an absent one has no data).
  static bool has_mask(CView<T> mask) { return mask.data != nullptr; }

  virtual void adam_update_impl(View<T> w, CView<T> grad, View<T> m, View<T> v, CView<T> mask,
                                const AdamOptions& opt) = 0;
};

}  // namespace bitrank
