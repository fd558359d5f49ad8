// The trainable student of one dense Llama block (DESIGN §7): the teacher's
// op sequence (model/llama_block.hpp, run by the same code) with the seven
// projections q, k, v, o, gate, up, down as BLR layers (BlrLinear) and the
// two RMSNorm gains (attn_norm, ffn_norm) trained by Adam with absolute
// steps; the scales by Adam with relative steps, the signs by the sign
// optimizer.
//
// Backward, from dy = ∂L/∂y (every parameter gradient accumulates; dx is
// overwritten):
//     d_act = P_downᵀ(dy)                      d_gate, d_up = swiglu_bwd(d_act)
//     d_xn2 = P_gateᵀ(d_gate) + P_upᵀ(d_up)    d_ffn_norm += gain_grad(h, d_xn2)
//     d_h = dy + rmsnorm_bwd(h, d_xn2)
//     d_att = P_oᵀ(d_h)                        dqr, dkr, dv = attention_bwd(d_att)
//     dq, dk = rope_bwd(dqr), rope_bwd(dkr)
//     d_xn1 = P_qᵀ(dq) + P_kᵀ(dk) + P_vᵀ(dv)  d_attn_norm += gain_grad(x, d_xn1)
//     dx = d_h + rmsnorm_bwd(x, d_xn1)
// where P_pᵀ is BlrLinear::backward (input gradient; the projection's own
// dh, dℓ, dg and sign gradients G_U, G_V accumulate on the way).
//
// grad_scale: every gradient here is in loss units; the power-of-two
// grad_scale passes unchanged to each BLR backward, the only place that
// stages gradients into f16 (blr_linear.hpp). The f32 ops (norms, RoPE,
// attention, SwiGLU, adds) never see it.
//
// Memory: one StudentArena (student_arena.hpp) for the whole block: the
// seven projections' state then the gains [attn_norm | ffn_norm] and their
// Adam moments (state region); every Adam-trained gradient — all BLR
// scales', then the gains' [2][hidden] — in one grads region (zero_grad is
// one memset, its sum of squares one reduction); all sign gradients in one
// sign_grads region. Backward scratch lives in the block (or is shared
// between blocks: share_scratch) and only grows.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "bitrank/backend.hpp"
#include "bitrank/blr/blr_matrix.hpp"
#include "bitrank/model/llama_block.hpp"
#include "bitrank/train/blr_linear.hpp"
#include "bitrank/train/student_arena.hpp"

namespace bitrank::train {

using model::LlamaBlockDims;
using model::LlamaProj;

// A student block on the host: what initialisation produces, download returns.
struct StudentBlockWeights {
  std::array<blr::HostBlrMatrix, model::kLlamaProjs> proj;  // in LlamaProj order; proj p is out×in features
  std::vector<float> attn_norm, ffn_norm;                   // [hidden]
};

// What forward saves for backward.
template <class T>
struct StudentTape {
  model::BlockActivations<T> acts;
  std::array<BlrTape<T>, model::kLlamaProjs> proj;
  index_t rows = 0, window = 0;  // of the forward that filled it
};

template <class T>
class StudentLlamaBlock {
 public:
  using Real = T;
  using Tape = StudentTape<T>;

  // Projections from init (each out×in per LlamaBlockDims, any rank, one or
  // two paths; blr::check_blr), latents z = τ·s, optimizer state zero.
  // Sign matrix ids start at sign_id (two per path per projection).
  // place: the block's arena at `place` (arena_bytes of the backend's
  // memory, zeroed: a streamed block's slot) instead of an allocation of its own.
  StudentLlamaBlock(Backend<T>& be, const LlamaBlockDims& dims, const StudentBlockWeights& init,
                    SignOptimizer sign_optimizer = SignOptimizer::factored_adam, float tau = 0.25f,
                    std::uint32_t sign_id = 0, std::byte* place = nullptr);
  // The bytes of the arena of a block made from `init`.
  static std::size_t arena_bytes(const LlamaBlockDims& dims, const StudentBlockWeights& init,
                                 SignOptimizer sign_optimizer);
  StudentLlamaBlock(const StudentLlamaBlock&) = delete;
  StudentLlamaBlock& operator=(const StudentLlamaBlock&) = delete;

  const LlamaBlockDims& dims() const { return dims_; }
  Backend<T>& backend() const { return *be_; }

  // y [n][hidden] from x [n][hidden], rows in windows of `window` tokens.
  void forward(CView<T> x, index_t window, StudentTape<T>& tape, View<T> y);
  // dx [n][hidden] (overwritten) from dy; x and tape are the forward's.
  void backward(CView<T> x, const StudentTape<T>& tape, CView<T> dy, float grad_scale, View<T> dx);
  void zero_grad();
  StudentGradSquares grad_squares() const;
  // One step at t = scales.step (gains.step must match): Adam on every
  // projection's scales (`scales`, relative steps), sign steps (`signs`),
  // Adam on the gains (`gains`, absolute steps). Returns the sign flips.
  std::int64_t step(const AdamOptions& scales, const AdamOptions& gains, const SignOptions& signs);

  void upload(const StudentBlockWeights& w, float tau);
  StudentBlockWeights download() const;
  // The state region (parameters and optimizer state) as bytes, and back:
  // a checkpoint's content, and what a bit-exact comparison reads.
  std::vector<std::byte> download_state() const;
  void upload_state(std::span<const std::byte> bytes);
  std::size_t state_bytes() const { return arena_.state_bytes(); }
  // The arena's bytes are at `base` from now on (the caller copied them
  // there: streaming; one copy moves the block, student_arena.hpp).
  void rebind(std::byte* base) { arena_.rebind(base); }
  // Backward scratch shared with `other` from now on (blocks that run one
  // after another need one scratch, not one each).
  void share_scratch(const StudentLlamaBlock& other) { scratch_ = other.scratch_; }

  BlrLinear<T>& proj(LlamaProj p) { return arena_.proj(static_cast<std::size_t>(p)); }
  const BlrLinear<T>& proj(LlamaProj p) const { return arena_.proj(static_cast<std::size_t>(p)); }
  View<T> attn_norm() const { return View<T>(arena_.gains().data, Shape{dims_.hidden}); }
  View<T> ffn_norm() const { return View<T>(arena_.gains().data + dims_.hidden, Shape{dims_.hidden}); }
  View<T> attn_norm_grad() const { return View<T>(arena_.gain_grads().data, Shape{dims_.hidden}); }
  View<T> ffn_norm_grad() const { return View<T>(arena_.gain_grads().data + dims_.hidden, Shape{dims_.hidden}); }

 private:
  // Backward scratch (grown to the rows).
  struct Scratch {
    BlrWorkspace<T> blr;
    Buffer<T> d_act, d_gate, d_up;  // [n][ffn]
    Buffer<T> d_xn, tmp, d_h;       // [n][hidden]
    Buffer<T> d_att, dqr, dq;       // [n][heads·hd]
    Buffer<T> dkr, dk, dv;          // [n][kv_heads·hd]
    Buffer<T> delta;                // [n][heads]
  };
  static BlrDims proj_dims(const LlamaBlockDims& dims, LlamaProj p, const blr::HostBlrMatrix& m);
  // The dimensions checked, then every projection's BlrDims in LlamaProj order.
  static std::vector<BlrDims> all_proj_dims(const LlamaBlockDims& dims, const StudentBlockWeights& w);

  Backend<T>* be_;
  LlamaBlockDims dims_;
  StudentArena<T> arena_;  // gains [2·hidden]: attn_norm, then ffn_norm
  model::RopeTables<T> ropes_;
  std::shared_ptr<Scratch> scratch_ = std::make_shared<Scratch>();
};

extern template class StudentLlamaBlock<float>;
extern template class StudentLlamaBlock<double>;

}  // namespace bitrank::train
