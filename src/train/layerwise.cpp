// Layer-wise objective and training step (contract: include/bitrank/train/layerwise.hpp).
#include "bitrank/train/layerwise.hpp"

#include <algorithm>
#include <cmath>

#include "bitrank/error.hpp"

namespace bitrank::train {
namespace {

constexpr float kMinGradScale = 0x1p-24f;

bool power_of_two(float s) {
  int e = 0;
  return s > 0 && std::isfinite(s) && std::frexp(s, &e) == 0.5f;
}

// The largest power of two ≤ elements / 2 (at least 1).
float auto_scale(index_t elements) {
  float s = 1.0f;
  while (static_cast<double>(s) * 4.0 <= static_cast<double>(elements) && s < 0x1p62f) s *= 2.0f;
  return s;
}

float ceiling(const LayerwiseOptions& opt, index_t elements) {
  if (opt.grad_scale != 0.0f) {
    if (!power_of_two(opt.grad_scale)) fail("layer-wise training: grad_scale {} is not a power of two", opt.grad_scale);
    return opt.grad_scale;
  }
  return auto_scale(elements);
}

}  // namespace

float scale_for(LayerwiseState& state, const LayerwiseOptions& opt, index_t elements) {
  if (state.grad_scale == 0.0f) state.grad_scale = ceiling(opt, elements);
  return state.grad_scale;
}

template <class T>
double layerwise_loss(Backend<T>& be, std::type_identity_t<CView<T>> y, std::type_identity_t<CView<T>> target,
                      std::type_identity_t<View<T>> dy) {
  const index_t n = y.numel();
  if (n <= 0) fail("layerwise_loss: y is empty");
  const double sum = be.reduce().squared_error(y, target, 2.0 / static_cast<double>(n), dy);
  return sum / static_cast<double>(n);
}

template <class T>
StepReport finish_step(StudentLlamaBlock<T>& block, double loss, LayerwiseState& state, const LayerwiseOptions& opt,
                       index_t elements) {
  if (opt.clip_norm < 0 || !std::isfinite(opt.clip_norm))
    fail("layer-wise training: clip_norm must be finite and ≥ 0, got {}", opt.clip_norm);
  if (opt.scale_growth_interval < 1)
    fail("layer-wise training: scale_growth_interval must be ≥ 1, got {}", opt.scale_growth_interval);
  StepReport rep;
  rep.loss = loss;
  rep.grad_scale = scale_for(state, opt, elements);
  const StudentGradSquares sq = block.grad_squares();
  rep.grad_norm = std::sqrt(sq.adam);
  rep.sign_grad_norm = std::sqrt(sq.signs);
  if (!std::isfinite(sq.adam) || !std::isfinite(sq.signs) || !std::isfinite(loss)) {
    rep.skipped = true;
    rep.clip = 0;
    ++state.skipped;
    state.clean_steps = 0;
    state.grad_scale = std::max(state.grad_scale * 0.5f, kMinGradScale);
    return rep;
  }
  rep.clip = opt.clip_norm > 0 && rep.grad_norm > opt.clip_norm ? opt.clip_norm / rep.grad_norm : 1.0;
  ++state.step;
  AdamOptions scales = opt.scales, gains = opt.gains;
  scales.step = gains.step = state.step;
  scales.grad_scale = gains.grad_scale = static_cast<float>(rep.clip);
  rep.flips = block.step(scales, gains, opt.signs);
  if (++state.clean_steps >= opt.scale_growth_interval) {
    state.grad_scale = std::min(state.grad_scale * 2.0f, ceiling(opt, elements));
    state.clean_steps = 0;
  }
  return rep;
}

template <class T>
StepReport train_step(StudentLlamaBlock<T>& block, std::type_identity_t<CView<T>> x,
                      std::type_identity_t<CView<T>> target, index_t window, LayerwiseBuffers<T>& buf,
                      LayerwiseState& state, const LayerwiseOptions& opt) {
  const index_t n = x.dim(0), d = block.dims().hidden;
  if (!(x.shape == Shape{n, d}) || !(target.shape == Shape{n, d}))
    fail("train_step: x {} and target {} must both be [n, {}]", x.shape.str(), target.shape.str(), d);
  Backend<T>& be = block.backend();
  for (Buffer<T>* b : {&buf.y, &buf.dy, &buf.dx}) grow(*b, *be.memory, static_cast<std::size_t>(n * d));
  const View<T> y = buf.y.view({n, d}), dy = buf.dy.view({n, d}), dx = buf.dx.view({n, d});
  block.zero_grad();
  block.forward(x, window, buf.tape, y);
  const double loss = layerwise_loss<T>(be, y, target, dy);
  block.backward(x, buf.tape, dy, scale_for(state, opt, n * d), dx);
  return finish_step(block, loss, state, opt, n * d);
}

template double layerwise_loss<float>(Backend<float>&, CView<float>, CView<float>, View<float>);
template double layerwise_loss<double>(Backend<double>&, CView<double>, CView<double>, View<double>);
template StepReport finish_step<float>(StudentLlamaBlock<float>&, double, LayerwiseState&, const LayerwiseOptions&,
                                       index_t);
template StepReport finish_step<double>(StudentLlamaBlock<double>&, double, LayerwiseState&, const LayerwiseOptions&,
                                        index_t);
template StepReport train_step<float>(StudentLlamaBlock<float>&, CView<float>, CView<float>, index_t,
                                      LayerwiseBuffers<float>&, LayerwiseState&, const LayerwiseOptions&);
template StepReport train_step<double>(StudentLlamaBlock<double>&, CView<double>, CView<double>, index_t,
                                       LayerwiseBuffers<double>&, LayerwiseState&, const LayerwiseOptions&);

}  // namespace bitrank::train
