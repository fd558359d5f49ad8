// Layer-wise objective and training step (contract: include/bitrank/train/layerwise.hpp).
#include "bitrank/train/layerwise.hpp"

#include <cmath>
#include <limits>

#include "bitrank/error.hpp"

namespace bitrank::train {

GradScalerOptions layerwise_scaler_options(index_t elements) {
  if (elements <= 0) fail("layerwise_scaler_options: {} elements", elements);
  GradScalerOptions o;
  int k = 0;  // 2^k ≤ elements/2 < 2^(k+1), k ≤ 100 (the scaler's limit)
  while (k < 100 && std::ldexp(1.0, k + 2) <= static_cast<double>(elements)) ++k;
  o.init_log2 = o.max_log2 = k;
  return o;
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
StepReport finish_step(StudentLlamaBlock<T>& block, double loss, LayerwiseState& state, const LayerwiseOptions& opt) {
  if (!std::isfinite(opt.clip_norm) || opt.clip_norm < 0)  // before the scaler counts the step
    fail("layer-wise step: clip_norm must be finite and ≥ 0, got {}", opt.clip_norm);
  StepReport rep;
  rep.loss = loss;
  rep.grad_scale = state.scaler.scale();
  const StudentGradSquares sq = block.grad_squares();
  rep.grad_norm = std::sqrt(sq.adam);
  rep.sign_grad_norm = std::sqrt(sq.signs);
  // The scaler's Σ(scale·g)² of the true gradients held here; NaN for a non-finite loss.
  const double scaled = std::isfinite(loss) ? (sq.adam + sq.signs) * rep.grad_scale * rep.grad_scale
                                            : std::numeric_limits<double>::quiet_NaN();
  if (!state.scaler.update(scaled)) {
    rep.skipped = true;
    rep.clip = 0;
    return rep;
  }
  rep.clip = clip_multiplier(rep.grad_norm, opt.clip_norm);
  ++state.applied_steps;
  AdamOptions scales = opt.scales, gains = opt.gains;
  scales.step = gains.step = state.applied_steps;
  scales.grad_scale = gains.grad_scale = static_cast<float>(rep.clip);
  rep.flips = block.step(scales, gains, opt.signs);
  return rep;
}

template <class T>
double forward_backward(StudentLlamaBlock<T>& block, std::type_identity_t<CView<T>> x,
                        std::type_identity_t<CView<T>> target, index_t window, LayerwiseBuffers<T>& buf,
                        const LayerwiseState& state) {
  const index_t n = x.dim(0), d = block.dims().hidden;
  if (!(x.shape == Shape{n, d}) || !(target.shape == Shape{n, d}))
    fail("train_step: x {} and target {} must both be [n, {}]", x.shape.str(), target.shape.str(), d);
  Backend<T>& be = block.backend();
  for (Buffer<T>* b : {&buf.y, &buf.dy, &buf.dx}) ensure_size(*b, *be.memory, n * d);
  const View<T> y = buf.y.view({n, d}), dy = buf.dy.view({n, d}), dx = buf.dx.view({n, d});
  block.zero_grad();
  block.forward(x, window, buf.tape, y);
  const double loss = layerwise_loss<T>(be, y, target, dy);
  block.backward(x, buf.tape, dy, static_cast<float>(state.scaler.scale()), dx);
  return loss;
}

template <class T>
StepReport train_step(StudentLlamaBlock<T>& block, std::type_identity_t<CView<T>> x,
                      std::type_identity_t<CView<T>> target, index_t window, LayerwiseBuffers<T>& buf,
                      LayerwiseState& state, const LayerwiseOptions& opt) {
  const double loss = forward_backward(block, x, target, window, buf, state);
  return finish_step(block, loss, state, opt);
}

template double layerwise_loss<float>(Backend<float>&, CView<float>, CView<float>, View<float>);
template double layerwise_loss<double>(Backend<double>&, CView<double>, CView<double>, View<double>);
template StepReport finish_step<float>(StudentLlamaBlock<float>&, double, LayerwiseState&, const LayerwiseOptions&);
template StepReport finish_step<double>(StudentLlamaBlock<double>&, double, LayerwiseState&, const LayerwiseOptions&);
template double forward_backward<float>(StudentLlamaBlock<float>&, CView<float>, CView<float>, index_t,
                                        LayerwiseBuffers<float>&, const LayerwiseState&);
template double forward_backward<double>(StudentLlamaBlock<double>&, CView<double>, CView<double>, index_t,
                                         LayerwiseBuffers<double>&, const LayerwiseState&);
template StepReport train_step<float>(StudentLlamaBlock<float>&, CView<float>, CView<float>, index_t,
                                      LayerwiseBuffers<float>&, LayerwiseState&, const LayerwiseOptions&);
template StepReport train_step<double>(StudentLlamaBlock<double>&, CView<double>, CView<double>, index_t,
                                       LayerwiseBuffers<double>&, LayerwiseState&, const LayerwiseOptions&);

}  // namespace bitrank::train
