// Layer-wise objective and training step (contract: include/bitrank/train/layerwise.hpp).
#include "bitrank/train/layerwise.hpp"

#include <cmath>
#include <limits>

#include "bitrank/error.hpp"
#include "bitrank/train/student_hybrid_block.hpp"

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

StepReport decide_step(double loss, const StudentGradSquares& sq, LayerwiseState& state, double clip_norm,
                       std::string_view what) {
  if (!std::isfinite(clip_norm) || clip_norm < 0)  // before the scaler counts the step
    fail("{}: clip_norm must be finite and ≥ 0, got {}", what, clip_norm);
  StepReport rep;
  rep.loss = loss;
  rep.grad_scale = state.scaler.scale();
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
  rep.clip = clip_multiplier(rep.grad_norm, clip_norm);
  ++state.applied_steps;
  return rep;
}

AdamOptions step_adam(const AdamOptions& base, const LayerwiseState& state, const StepReport& rep) {
  AdamOptions o = base;
  o.step = state.applied_steps;
  o.grad_scale = static_cast<float>(rep.clip);
  return o;
}

template <LayerwiseStudent Block>
StepReport finish_step(Block& block, double loss, LayerwiseState& state, const LayerwiseOptions& opt) {
  StepReport rep = decide_step(loss, block.grad_squares(), state, opt.clip_norm, "layer-wise step");
  if (!rep.skipped)
    rep.flips = block.step(step_adam(opt.scales, state, rep), step_adam(opt.gains, state, rep), opt.signs);
  return rep;
}

template <LayerwiseStudent Block>
double forward_backward(Block& block, CView<typename Block::Real> x, CView<typename Block::Real> target,
                        index_t window, LayerwiseBuffersOf<Block>& buf, const LayerwiseState& state) {
  using T = typename Block::Real;
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

template <LayerwiseStudent Block>
StepReport train_step(Block& block, CView<typename Block::Real> x, CView<typename Block::Real> target, index_t window,
                      LayerwiseBuffersOf<Block>& buf, LayerwiseState& state, const LayerwiseOptions& opt) {
  const double loss = forward_backward(block, x, target, window, buf, state);
  return finish_step(block, loss, state, opt);
}

template double layerwise_loss<float>(Backend<float>&, CView<float>, CView<float>, View<float>);
template double layerwise_loss<double>(Backend<double>&, CView<double>, CView<double>, View<double>);
#define BITRANK_LAYERWISE_STEPS(Block)                                                                    \
  template StepReport finish_step<Block>(Block&, double, LayerwiseState&, const LayerwiseOptions&);       \
  template double forward_backward<Block>(Block&, CView<Block::Real>, CView<Block::Real>, index_t,        \
                                          LayerwiseBuffersOf<Block>&, const LayerwiseState&);             \
  template StepReport train_step<Block>(Block&, CView<Block::Real>, CView<Block::Real>, index_t,          \
                                        LayerwiseBuffersOf<Block>&, LayerwiseState&, const LayerwiseOptions&);
BITRANK_LAYERWISE_STEPS(StudentLlamaBlock<float>)
BITRANK_LAYERWISE_STEPS(StudentLlamaBlock<double>)
BITRANK_LAYERWISE_STEPS(StudentHybridBlock<float>)
BITRANK_LAYERWISE_STEPS(StudentHybridBlock<double>)
#undef BITRANK_LAYERWISE_STEPS

}  // namespace bitrank::train
