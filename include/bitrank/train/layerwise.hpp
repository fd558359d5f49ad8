// The layer-wise objective (DESIGN §7) and one training step of a student
// block against its teacher block.
//
//   loss = Σ (y − y_teacher)² / N       N = rows·hidden elements
//   dy   = 2·(y − y_teacher) / N        (squared_error, on the backend)
//
// train_step: zero_grad → forward → loss and dy → backward (with the
// current grad_scale) → finish_step. finish_step, the update half:
//   1. sums of squares of the Adam-trained gradients (BLR scales, gains)
//      and of the sign gradients; a non-finite sum (or loss) skips the
//      step: nothing is written, the scale is halved;
//   2. clip multiplier c = min(1, clip_norm / ‖g‖) over the Adam-trained
//      gradients, applied as AdamOptions.grad_scale (the sign optimizers
//      normalise their own steps and are not clipped);
//   3. Adam on the scales (relative steps), sign steps, Adam on the gains
//      (absolute steps), all at t = the number of applied steps.
//
// Gradient scale: a power of two handed to the BLR backward for its f16
// staging (blr_linear.hpp); gradients themselves stay in loss units. By
// default it starts at the largest power of two ≤ N/2, which undoes the
// mean's 2/N so the staged dy⊙h is on the scale of (y − y_teacher)·h,
// comfortably inside f16. A skipped step halves it (not below 2^-24);
// after `scale_growth_interval` clean steps in a row it doubles, back up to
// its starting value at most, so an overflowing scale does not cost every
// other step.
//
// Nothing leaves the backend inside a step but the scalars (the loss, the
// two sums of squares, the flip counts).
#pragma once

#include <cstdint>
#include <type_traits>

#include "bitrank/backend.hpp"
#include "bitrank/train/student_block.hpp"

namespace bitrank::train {

struct LayerwiseOptions {
  // BLR scales h, ℓ, g: relative steps, each scale moves by about
  // lr·max(|w|, relative_floor) per step.
  AdamOptions scales{.lr = 1e-3f, .relative_floor = 1e-3f};
  // RMSNorm gains (around 1): absolute steps.
  AdamOptions gains{.lr = 1e-4f};
  // Sign latents (z = ±τ at the start; a sign flips when z crosses −δ):
  // the sign optimizer's own defaults (factored Adam, lr 1e-3, clamp 4).
  SignOptions signs{};
  double clip_norm = 1.0;        // on ‖Adam-trained gradients‖₂; 0: no clipping
  float grad_scale = 0.0f;       // starting (and largest) scale, a power of two; 0: the largest power of two ≤ N/2
  std::int64_t scale_growth_interval = 100;  // clean steps in a row before the scale doubles
};

// What a training run carries from step to step.
struct LayerwiseState {
  std::int64_t step = 0;         // applied steps (Adam's and the sign optimizer's t)
  float grad_scale = 0.0f;       // current scale; 0: not chosen yet
  std::int64_t clean_steps = 0;  // applied steps in a row at the current scale
  std::int64_t skipped = 0;      // skipped steps in all
};

struct StepReport {
  double loss = 0;            // mean squared error of the forward before the update
  bool skipped = false;       // non-finite gradients or loss: nothing was updated
  std::int64_t flips = 0;     // signs flipped by this step
  double grad_norm = 0;       // ‖Adam-trained gradients‖₂ (non-finite when skipped)
  double sign_grad_norm = 0;  // ‖sign gradients‖₂
  double clip = 1;            // multiplier the Adam steps applied to the gradients
  float grad_scale = 0;       // the scale the backward used
};

// Forward tape and the step's activations and gradients (grown as needed).
template <class T>
struct LayerwiseBuffers {
  StudentTape<T> tape;
  Buffer<T> y, dy, dx;
};

// loss = mean (y − target)²; dy = ∂loss/∂y (overwritten). Shapes must match.
template <class T>
double layerwise_loss(Backend<T>& be, std::type_identity_t<CView<T>> y, std::type_identity_t<CView<T>> target,
                      std::type_identity_t<View<T>> dy);

// One step on x [n][hidden] (windows of `window` rows) towards target, the
// teacher block's output for x. (T comes from the block: the views convert.)
template <class T>
StepReport train_step(StudentLlamaBlock<T>& block, std::type_identity_t<CView<T>> x,
                      std::type_identity_t<CView<T>> target, index_t window, LayerwiseBuffers<T>& buffers,
                      LayerwiseState& state, const LayerwiseOptions& opt);

// The update half of train_step, for gradients already in the block (from
// a backward run with grad_scale = scale_for(state, opt, elements)).
template <class T>
StepReport finish_step(StudentLlamaBlock<T>& block, double loss, LayerwiseState& state, const LayerwiseOptions& opt,
                       index_t elements);

// The scale the next backward uses (state.grad_scale, chosen on first use).
float scale_for(LayerwiseState& state, const LayerwiseOptions& opt, index_t elements);

}  // namespace bitrank::train
