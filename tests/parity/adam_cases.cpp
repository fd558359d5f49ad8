// Parity cases of Adam: the parameters, both moments and the update itself.
#include <cmath>

#include "support/parity.hpp"

namespace bitrank::test {
namespace {

// 1e-6 (DESIGN §4) for w, m, v: a handful of f32 roundings per entry.
constexpr double kAdamTol = 1e-6;

struct AdamCase {
  index_t n = 0;
  AdamOptions opt;
  bool masked = false;
  bool fresh_moments = false;  // m = v = 0, as at the first step
};

void adam_case(ParityRun& p, const AdamCase& c) {
  const Shape s{c.n};
  const std::vector<float> zeros(static_cast<std::size_t>(c.n), 0.0f);
  auto w = p.accumulator(s, 1.0f);  // updated in place: random start
  auto grad = p.input(s, 1.0f / std::fabs(c.opt.grad_scale));
  auto m = c.fresh_moments ? p.input(s, zeros) : p.accumulator(s, 0.3f);
  auto v = c.fresh_moments ? p.input(s, zeros) : p.input(s, 0.2f, 0.2f);  // v > 0
  // Mask: about half frozen; trainable entries carry arbitrary nonzero values.
  auto mask_values = p.random(static_cast<std::size_t>(c.n), 1.0f);
  for (auto& x : mask_values) x = x < 0 ? 0.0f : x;
  auto mask = p.input(s, mask_values);
  const auto w_old = w.ref_values();
  p.ref.adam().adam_update(w.ref(), grad.ref(), m.ref(), v.ref(), c.masked ? CView<double>(mask.ref()) : CView<double>{}, c.opt);
  p.be.adam().adam_update(w.be(), grad.be(), m.be(), v.be(), c.masked ? CView<float>(mask.be()) : CView<float>{}, c.opt);
  p.expect_close("w", w, kAdamTol);
  p.expect_close("m", m, kAdamTol);
  p.expect_close("v", v, kAdamTol);

  // The update Δw = w_new − w_old, which a tolerance on w alone hardly sees
  // when lr is small. The backend stores w_new in f32, which alone moves Δw
  // by up to half an ulp of w per entry: allow 2^-24·‖w_new‖/‖Δw‖ for that,
  // plus 1e-6 for the arithmetic of the step.
  const auto ref_new = w.ref_values();
  const auto be_new = w.be_values();
  auto dw = p.output(s);
  std::vector<float> be_dw(be_new.size());
  double norm_w = 0, norm_dw = 0;
  for (std::size_t i = 0; i < ref_new.size(); ++i) {
    dw.ref_buffer().data()[i] = ref_new[i] - w_old[i];
    be_dw[i] = static_cast<float>(static_cast<double>(be_new[i]) - w_old[i]);
    norm_w += ref_new[i] * ref_new[i];
    norm_dw += (ref_new[i] - w_old[i]) * (ref_new[i] - w_old[i]);
  }
  dw.be_buffer().upload(be_dw);
  p.expect_close("dw", dw, 1e-6 + std::ldexp(1.0, -24) * std::sqrt(norm_w / norm_dw));
}

AdamOptions options(float lr, std::int64_t step, float grad_scale = 1.0f, float relative_floor = 0.0f) {
  AdamOptions o;
  o.lr = lr;
  o.step = step;
  o.grad_scale = grad_scale;
  o.relative_floor = relative_floor;
  return o;
}

}  // namespace

// h of an m = 5120 layer at the first step (moments zero).
BR_PARITY_CASE(adam_5120_first_step) { adam_case(p, {5120, options(1e-2f, 1), false, true}); }
// Later step, gradients staged under 1024 and unscaled by grad_scale.
BR_PARITY_CASE(adam_5120_step10_grad_scale) { adam_case(p, {5120, options(1e-2f, 10, 1.0f / 1024), false, false}); }
BR_PARITY_CASE(adam_4096_mask) { adam_case(p, {4096, options(5e-3f, 3), true, false}); }
// Relative steps: many |w| fall below the floor 0.25.
BR_PARITY_CASE(adam_384_relative) { adam_case(p, {384, options(2e-2f, 7, 1.0f, 0.25f), false, false}); }
BR_PARITY_CASE(adam_37_odd_everything) {
  AdamOptions o = options(1e-3f, 1000, 0.5f, 0.1f);
  o.beta1 = 0.8f;
  o.beta2 = 0.95f;
  o.eps = 1e-6f;
  adam_case(p, {37, o, true, false});
}

}  // namespace bitrank::test
