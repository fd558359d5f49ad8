// The layer-wise objective (DESIGN §7) and one training step of a student
// block against its teacher block — any student block (LayerwiseStudent:
// StudentLlamaBlock, StudentHybridBlock).
//
//   loss = Σ (y − y_teacher)² / N       N = rows·hidden elements
//   dy   = 2·(y − y_teacher) / N        (squared_error, on the backend)
//
// train_step: forward_backward (zero_grad → forward → loss and dy →
// backward with the scaler's grad_scale) → finish_step. finish_step, the update half:
//   1. sums of squares of the Adam-trained gradients (BLR scales, gains)
//      and of the sign gradients; GradScaler::update (grad_scale.hpp) gets
//      their total — NaN when the loss is not finite — and decides: a
//      non-finite step is skipped (nothing is written; the scale halves);
//   2. clip multiplier c = clip_multiplier(‖g‖, clip_norm) over the
//      Adam-trained gradients, applied as AdamOptions.grad_scale (the sign
//      optimizers normalise their own steps and are not clipped);
//   3. Adam on the scales (relative steps), sign steps, Adam on the gains
//      (absolute steps), all at t = the number of applied steps.
//
// Gradient scale. The BLR backward (blr.hpp) multiplies grad_scale into its
// f16-staged operands and divides it out of its GEMM outputs, so every
// gradient buffer holds the TRUE gradient (loss units) and the f32 ops
// never see the scale (blr_linear.hpp). The scaler's contract takes
// Σ(scale·g)², which is therefore scale²·Σg² here; the clip reads ‖g‖
// directly and the optimizers get the clip multiplier alone (no 1/scale).
// Keeping the stored gradients unscaled also keeps the sign optimizer's
// moments consistent when the scale changes (it has no gradient multiplier).
// layerwise_scaler_options(N) starts the scale at, and caps it to, the
// largest power of two ≤ N/2: that undoes the mean's 2/N, so the staged
// dy⊙h is on the scale of (y − y_teacher)·h, well inside f16.
//
// Nothing leaves the backend inside a step but scalars (the loss, two sums
// of squares, the flip counts).
#pragma once

#include <concepts>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "bitrank/backend.hpp"
#include "bitrank/train/grad_scale.hpp"
#include "bitrank/train/student_arena.hpp"
#include "bitrank/train/student_block.hpp"

namespace bitrank::train {

struct LayerwiseOptions {
  // BLR scales h, ℓ, g: relative steps, each scale moves by about
  // lr·max(|w|, relative_floor) per step.
  AdamOptions scales{.lr = 1e-3f, .relative_floor = 1e-3f};
  // RMSNorm gains (around 1): absolute steps.
  AdamOptions gains{.lr = 1e-4f};
  // Sign latents (z = ±τ at the start, τ = 0.25; a sign flips when z
  // crosses −δ): the sign optimizer's defaults (factored Adam, lr 1e-3,
  // clamp 4, no hysteresis), so a flip takes ≥ 250 steps of one direction.
  SignOptions signs{};
  double clip_norm = 1.0;  // on ‖Adam-trained gradients‖₂; 0: no clipping
};

// The grad scaler's options for a layer-wise run over `elements` = rows·hidden
// per step: init_log2 = max_log2 = ⌊log2(elements / 2)⌋ (at least 0), the
// other fields GradScalerOptions' defaults.
GradScalerOptions layerwise_scaler_options(index_t elements);

// What a run carries from step to step (a checkpoint's TrainerState holds
// applied_steps and scaler.state()).
struct LayerwiseState {
  explicit LayerwiseState(const GradScalerOptions& scaler_options) : scaler(scaler_options) {}
  std::int64_t applied_steps = 0;  // Adam's and the sign optimizer's t of the last step applied
  GradScaler scaler;
};

struct StepReport {
  double loss = 0;            // mean squared error of the forward before the update
  bool skipped = false;       // non-finite gradients or loss: nothing was updated
  std::int64_t flips = 0;     // signs flipped by this step
  double grad_norm = 0;       // ‖Adam-trained gradients‖₂ (non-finite when skipped)
  double sign_grad_norm = 0;  // ‖sign gradients‖₂
  double clip = 1;            // multiplier the Adam steps applied (0 when skipped)
  double grad_scale = 0;      // the scale the backward used
};

// What a step needs of a student block: its real type and tape, and the
// forward / backward / zero_grad / grad_squares / step of student_block.hpp.
template <class B>
concept LayerwiseStudent = requires(B& b, const B& cb, CView<typename B::Real> x, View<typename B::Real> y,
                                    typename B::Tape& tape, const AdamOptions& adam, const SignOptions& signs) {
  { cb.backend() } -> std::same_as<Backend<typename B::Real>&>;
  { cb.dims().hidden } -> std::convertible_to<index_t>;
  b.zero_grad();
  b.forward(x, index_t{1}, tape, y);
  b.backward(x, tape, x, 1.0f, y);
  { cb.grad_squares() } -> std::same_as<StudentGradSquares>;
  { b.step(adam, adam, signs) } -> std::same_as<std::int64_t>;
};

// Forward tape and the step's activations and gradients (grown as needed).
template <class T, class Tape = StudentTape<T>>
struct LayerwiseBuffers {
  Tape tape;
  Buffer<T> y, dy, dx;
};
// The buffers of a block type.
template <LayerwiseStudent Block>
using LayerwiseBuffersOf = LayerwiseBuffers<typename Block::Real, typename Block::Tape>;

// loss = mean (y − target)²; dy = ∂loss/∂y (overwritten). Shapes must match.
template <class T>
double layerwise_loss(Backend<T>& be, std::type_identity_t<CView<T>> y, std::type_identity_t<CView<T>> target,
                      std::type_identity_t<View<T>> dy);

// One step on x [n][hidden] (windows of `window` rows) towards target, the
// teacher block's output for x. (The block type comes from the block: the
// views convert.) Instantiated for StudentLlamaBlock and StudentHybridBlock
// over float and double.
template <LayerwiseStudent Block>
StepReport train_step(Block& block, CView<typename Block::Real> x, CView<typename Block::Real> target, index_t window,
                      LayerwiseBuffersOf<Block>& buffers, LayerwiseState& state, const LayerwiseOptions& opt);

// The first half of train_step: zero_grad, forward, loss and dy, backward
// with grad_scale = state.scaler.scale(); returns the loss. The gradients
// stay in the block for finish_step (a caller may inspect them in between).
template <LayerwiseStudent Block>
double forward_backward(Block& block, CView<typename Block::Real> x, CView<typename Block::Real> target,
                        index_t window, LayerwiseBuffersOf<Block>& buffers, const LayerwiseState& state);

// The update half of train_step, for the gradients of one backward run with
// grad_scale = state.scaler.scale() (and `loss`, the forward's).
template <LayerwiseStudent Block>
StepReport finish_step(Block& block, double loss, LayerwiseState& state, const LayerwiseOptions& opt);

// finish_step's decision, for any set of trained tensors (one block here,
// a whole model in e2e.hpp): from the loss and the true sums of squares of
// every gradient of the step, the scaler decides (1. above). Skipped: the
// report says so (clip 0) and nothing else changes. Applied:
// state.applied_steps advances, clip = clip_multiplier(‖g‖, clip_norm), and
// the caller updates with the step's Adam options (step_adam). `what` names
// the step in errors (a negative or non-finite clip_norm).
StepReport decide_step(double loss, const StudentGradSquares& sq, LayerwiseState& state, double clip_norm,
                       std::string_view what);
// `base` at t = state.applied_steps with the clip multiplier of `rep`.
AdamOptions step_adam(const AdamOptions& base, const LayerwiseState& state, const StepReport& rep);

}  // namespace bitrank::train
