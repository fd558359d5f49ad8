// The end-to-end objective (DESIGN §7) and its training step, for either
// family: the dense Llama student (StudentLlamaBlock under a LlamaModel
// teacher) and the Qwen3.5 / Qwen3-Next hybrid's (StudentHybridBlock under a
// HybridModel). One step logic for both: the trainer is a template over the
// student block, and E2eFamily<Student> names the rest — the teacher model,
// the block weights, the teacher block's activations, the block dimensions
// and the teacher block's forward. The head is DecoderModel's in both (the
// final gain's style is the family's: w, or 1 + w).
//
//   loss  = KL + (λ/T)·Σ_b MSE_b                  λ = mse_weight (10: LittleBit's l2l_loss_scale), T the window
//   KL    = mean over the n tokens of KL(p_teacher ‖ p_student) of the
//           next-token distributions (every row of every window: a
//           distribution needs no label)
//           LittleBit's loss is T·KL + λ·Σ MSE (its kl_div "batchmean" over
//           [windows][T][V] sums a window's T tokens): this is that loss
//           per token — the same balance between the terms, the magnitude
//           of a per-token mean. (With λ instead of λ/T the hidden-state
//           terms outweighed the KL T-fold: SmolLM2 on the CPU, 16 steps at
//           T = 256 from a layer-wise start, perplexity 74,893 against 7,630
//           with λ/T; LittleBit's own magnitude, T·KL + λ·Σ MSE, reached
//           38,625 — its 256× larger gradients are clipped every step.
//           docs/results.md.)
//   MSE_b = mean over the n·d elements of (y_b − ŷ_b)², y_b the student's
//           block b output on the student's own input, ŷ_b the teacher's
//           on the teacher's (the student runs free, as in LittleBit)
//
// The student: one student block per teacher block (BLR projections, norm
// gains; a hybrid block's frozen GDN tensors) and the final RMSNorm gain
// (trained: Adam with the gains' options). The embedding and the head stay
// the teacher's (frozen; read from the teacher model, no second copy).
//
// A step (forward_backward, then finish_step):
//   forward   x_0 = embed(tokens), shared by both models. For each block b:
//             the teacher's block (no gradient, no GDN tape; its activations
//             reused block after block) gives ŷ_b, the student's y_b = x_{b+1};
//             squared_error gives MSE_b and g_b = ∂(λ·MSE_b)/∂y_b, kept. The
//             student keeps only its block inputs x_0..x_L (its tape is
//             reused block after block): DESIGN §7's streaming shape.
//   head      xn = [rmsnorm(x_L, final gain); rmsnorm(ŷ_L, teacher's gain)],
//             [2n][d] — both models' logits come from one GEMM per slice.
//             Pass 1 over vocabulary slices W_v [vs][d] of the head:
//             z = xn·W_vᵀ [2n][vs], kl_lse_merge of its student and teacher
//             halves (ops/kl.hpp). Pass 2: z again (kept from pass 1 when
//             the vocabulary is one slice), KL += kl_slice_backward with
//             grad_mul 1/n, dz over the student half in place;
//             dxn += dz·W_v (dense_backward). Then the final gain's gradient
//             and dh = rmsnorm_backward(x_L, dxn).
//   backward  for b = L−1..0: dy = dh + g_b; block b's forward is recomputed
//             from x_b (filling the tape; the last block's tape is still the
//             forward's), its backward gives the next dh.
//             Block 0's input gradient is dropped (the embedding is frozen).
//   update    after the whole backward. decide_step (layerwise.hpp) takes the
//             loss and the sums of squares of EVERY gradient of the model —
//             each block's and the final gain's: a non-finite one anywhere
//             skips the whole step (nothing changes but the scaler), and the
//             clip multiplier comes from the global norm. Then each block's
//             step and Adam on the final gain, at one t.
// Why the update waits for the whole backward rather than following each
// block's backward: both the skip and the clip need the global sum of
// squares, which is only known after the last block; an update during the
// backward could not be undone when a later block turns out non-finite.
// Each block's gradients already live in its own arena until then, so
// waiting costs no memory.
//
// Streaming (`stream`, train/streaming.hpp): every student block's arena —
// parameters, optimizer state, gradients (a hybrid block's frozen GDN
// tensors too) — lives in host memory (the backend's staging memory) and is
// copied into one of two device slots when the block runs
// (model/streamed_weights.hpp), the next block's copy overlapping the
// current block's compute; a block written in its slot is copied back
// before the slot is reused. The teacher streams its own blocks
// (make_model(…, stream)). A step is then three sweeps:
//   forward   blocks 0..L−1 in (read only), keeping x_b and g_b as above;
//   backward  blocks L−1..0 in: recompute the forward, zero the block's
//             gradients, backward, and the block's sums of squares, kept
//             on the host (its gradients stay with it in host memory);
//   update    decide_step on the sums, added in block order as the resident
//             run adds them (the same doubles), then blocks 0..L−1 in for
//             their steps.
// Every op sees the same bytes as in the resident run, so the losses and
// the trained state equal it bit for bit on the same backend. Device
// memory: two student slots, the teacher's two, the head and the step
// buffers below. The block-boundary activations x_b and g_b live in host
// (staging: page-locked on cuda) memory: the forward copies each out as it
// is made, the backward copies x_b and g_b back before block b (plain
// copies, not yet overlapped); the device holds x_b, x_{b+1} and one g.
// Checkpoints (download_state / upload_state) pass every block through the
// slots in order.
//
// Memory per step beyond the blocks: x_0..x_L and g_0..g_{L−1}
// ((2L + 1)·n·d; streamed: 3·n·d on the device, the rest on the host), the
// teacher's activations of one block, one student tape,
// the logits of one slice for both models [2n][vs] and a few [n][d].
//
// Gradient scale: the blocks' backward stages dy⊙h into f16 under the
// scaler's power of two. The KL's 1/n and the MSE's 2λ/(n·d) make dy ~1/n
// of a token's own gradient, so e2e_scaler_options(n) starts the scale at,
// and caps it to, the largest power of two ≤ n (undoing the mean).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "bitrank/error.hpp"
#include "bitrank/model/hybrid.hpp"
#include "bitrank/model/model.hpp"
#include "bitrank/model/streamed_weights.hpp"
#include "bitrank/train/layerwise.hpp"
#include "bitrank/train/student_block.hpp"
#include "bitrank/train/student_hybrid_block.hpp"

namespace bitrank::train {

// What the trainer needs of a family, by its student block type.
template <class Student>
struct E2eFamily;

template <class T>
struct E2eFamily<StudentLlamaBlock<T>> {
  using Teacher = model::LlamaModel<T>;
  using BlockWeights = StudentBlockWeights;
  using TeacherActivations = model::BlockActivations<T>;
  using Dims = model::LlamaBlockDims;
  static Dims dims(const Teacher& teacher) { return model::LlamaBlockDims::of(teacher.config()); }
  static void check_block(const Teacher&, index_t, const BlockWeights&) {}
  static void teacher_block(const Teacher& teacher, index_t b, CView<T> x, index_t window, TeacherActivations& acts,
                            View<T> y) {
    teacher.block_forward(b, x, window, acts, y);
  }
};

template <class T>
struct E2eFamily<StudentHybridBlock<T>> {
  using Teacher = model::HybridModel<T>;
  using BlockWeights = StudentHybridWeights;
  using TeacherActivations = model::HybridBlockActivations<T>;
  using Dims = model::HybridBlockDims;
  static Dims dims(const Teacher& teacher) { return teacher.block_dims(); }
  // The student block's mixer must be the teacher block's.
  static void check_block(const Teacher& teacher, index_t b, const BlockWeights& w) {
    if (w.full_attention != teacher.is_full_attention(b))
      fail("E2eTrainer: student block {} is a {} block, the teacher's a {} block", b,
           w.full_attention ? "full-attention" : "GDN", teacher.is_full_attention(b) ? "full-attention" : "GDN");
  }
  static void teacher_block(const Teacher& teacher, index_t b, CView<T> x, index_t window, TeacherActivations& acts,
                            View<T> y) {
    teacher.block_forward(b, x, window, acts, y, /*record_tape=*/false);  // inference: no GDN tape
  }
};

struct E2eOptions {
  LayerwiseOptions optim{};  // Adam on the BLR scales and gains (the final gain: `gains`), signs, clipping
  double mse_weight = 10.0;  // λ of the hidden-state MSE terms (≥ 0, finite)
};

// The student on the host: what initialisation gives, download returns.
template <class BlockWeights>
struct E2eStudentWeightsOf {
  std::vector<BlockWeights> blocks;  // one per teacher block
  std::vector<float> final_norm;     // [hidden], as the teacher stores it; empty at construction: the teacher's
};
using E2eStudentWeights = E2eStudentWeightsOf<StudentBlockWeights>;
using HybridE2eStudentWeights = E2eStudentWeightsOf<StudentHybridWeights>;

// The scaler's options for n tokens per step: init_log2 = max_log2 =
// ⌊log2 n⌋ (at least 0), the rest GradScalerOptions' defaults.
GradScalerOptions e2e_scaler_options(index_t tokens);

struct E2eLoss {
  double kl = 0;                  // mean KL per token (nats)
  double mse = 0;                 // Σ_b MSE_b
  double total = 0;               // kl + (λ/T)·mse (T: the window)
  std::vector<double> block_mse;  // MSE_b
};

struct E2eReport {
  E2eLoss loss;     // of the forward before the update
  StepReport step;  // step.loss = loss.total; skip, norms, clip, flips, grad scale
};

template <class Student>
class E2eTrainerOf {
 public:
  using T = typename Student::Real;
  using Family = E2eFamily<Student>;
  using Teacher = typename Family::Teacher;
  using Weights = E2eStudentWeightsOf<typename Family::BlockWeights>;

  // `teacher` (kept by reference: it must outlive the trainer) gives the
  // embedding, the head, the targets and the backend; `init` one student
  // block per teacher block (dimensions from the teacher: its config, and a
  // hybrid's block_dims; a hybrid block's mixer the teacher block's). Sign
  // matrix ids run on from block to block (distinct stochastic flips).
  // stream: the student blocks streamed from host memory (above).
  E2eTrainerOf(const Teacher& teacher, const Weights& init, const GradScalerOptions& scaler,
               const E2eOptions& options = {}, SignOptimizer sign_optimizer = SignOptimizer::factored_adam,
               float tau = 0.25f, bool stream = false);
  E2eTrainerOf(const E2eTrainerOf&) = delete;
  E2eTrainerOf& operator=(const E2eTrainerOf&) = delete;

  // One step on tokens cut into windows of `window`: forward_backward, then
  // finish_step.
  E2eReport step(std::span<const std::int32_t> tokens, index_t window);
  // Zeroes every gradient, then forward, head and backward: the gradients of
  // loss.total (in loss units) in every block and final_norm_grad(), the
  // backward at grad_scale = state().scaler.scale(). Updates nothing.
  E2eLoss forward_backward(std::span<const std::int32_t> tokens, index_t window);
  // The update half, for the gradients of the last forward_backward and its loss.
  E2eReport finish_step(const E2eLoss& loss);
  // The loss alone (forward and both head passes; no gradient is touched).
  E2eLoss evaluate(std::span<const std::int32_t> tokens, index_t window);

  Weights download() const;
  // Every block's state region in order, then the final gain and its Adam
  // moments: a checkpoint's content, what a bit-exact comparison reads.
  std::vector<std::byte> download_state() const;
  void upload_state(std::span<const std::byte> bytes);

  // Applied steps and the scaler (a checkpoint's TrainerState holds them).
  LayerwiseState& state() { return state_; }
  E2eOptions& options() { return options_; }  // e.g. the schedule's lr of the next step
  const Teacher& teacher() const { return *teacher_; }
  index_t blocks() const { return static_cast<index_t>(blocks_.size()); }
  // Block b (streamed: brought into a slot, and copied back before the slot is reused).
  Student& block(index_t b);
  bool streamed() const { return slots_ != nullptr; }
  View<T> final_norm() const { return final_.view({dims_.hidden}); }
  View<T> final_norm_grad() const { return final_grad_.view({dims_.hidden}); }

 private:
  // x_0..x_L and g_b of tokens; returns the MSE terms (ŷ_L lands in teacher_y_).
  E2eLoss forward(std::span<const std::int32_t> tokens, index_t window);
  // Both head passes: loss.kl, and with `backward` dh of x_L (into dh_) and
  // the final gain's gradient.
  void head(E2eLoss& loss, index_t n, index_t window, bool backward);
  // λ/T, the weight of Σ_b MSE_b in the loss for windows of T tokens.
  double mse_lambda(index_t window) const { return options_.mse_weight / static_cast<double>(window); }
  View<T> x(index_t b, index_t n) const;         // student block input b [n][d] (b = L: the output)
  View<T> mse_grad(index_t b, index_t n) const;  // g_b [n][d]
  // Streamed (no-ops otherwise): x_b and/or g_b from the device to their
  // host copies after the forward made them; both back before b's backward.
  void keep_boundary(index_t b, index_t n, bool x_too, bool g_too);
  void bring_boundary(index_t b, index_t n);
  // Block b ready to run: streamed, in a slot (next: the block to prefetch,
  // −1: none; write: the block will change there).
  Student& use(index_t b, index_t next, bool write) const;

  const Teacher* teacher_;
  Backend<T>* be_;
  typename Family::Dims dims_;
  E2eOptions options_;
  LayerwiseState state_;
  std::unique_ptr<model::BlockSlots> slots_;  // streamed: the blocks' arenas (declared first: destroyed last)
  std::vector<std::unique_ptr<Student>> blocks_;
  // Streamed: each block's sums of squares, taken in the backward (reset by
  // block(b), whose caller may write its gradients: finish_step reads them again).
  std::vector<std::optional<StudentGradSquares>> block_squares_;
  Buffer<T> final_, final_m_, final_v_, final_grad_;  // [hidden] each
  // Step buffers (grown to the step's tokens).
  Buffer<T> xs_, mse_grads_;                 // [(L + 1)·n·d], [L·n·d]; streamed: [2·n·d], [n·d]
  Buffer<T> xs_host_, mse_grads_host_;       // streamed: all of them in host (staging) memory
  Buffer<T> teacher_a_, teacher_b_;          // the teacher's block outputs, alternating [n·d]
  const T* teacher_y_ = nullptr;             // ŷ_L after forward
  typename Family::TeacherActivations teacher_acts_;  // one block's, reused
  typename Student::Tape tape_;                       // one block's, reused
  Buffer<T> xn_, inv_, logits_, runs_;       // [2n·d], [2n], [2n·vs], [2][n][2]
  Buffer<T> dxn_, dh_, dy_, dx_, y_;         // [n·d]
};

// The dense Llama family's trainer and the hybrid's.
template <class T>
using E2eTrainer = E2eTrainerOf<StudentLlamaBlock<T>>;
template <class T>
using HybridE2eTrainer = E2eTrainerOf<StudentHybridBlock<T>>;

extern template class E2eTrainerOf<StudentLlamaBlock<float>>;
extern template class E2eTrainerOf<StudentLlamaBlock<double>>;
extern template class E2eTrainerOf<StudentHybridBlock<float>>;
extern template class E2eTrainerOf<StudentHybridBlock<double>>;

}  // namespace bitrank::train
