// The trainable student of one Qwen3.5 / Qwen3-Next hybrid block (DESIGN
// §2, §7): the teacher's op sequence (model/hybrid_block.hpp, run by the
// same code) with every decoder projection a BLR layer (BlrLinear) —
// gated attention q, k, v, o or GDN qkv, z, out; MLP gate, up, down — and
// the rest as §7 and §4 say:
//   trained (Adam, absolute steps): the block norms' gains attn_norm and
//     post_norm, and in a full-attention block the q/k norm gains q_norm,
//     k_norm — all zero-centred (the norms multiply by 1 + w), all "norm
//     gains" of the block;
//   frozen (dense, never updated): the GDN's b and a projections
//     (ssm_beta, ssm_alpha: a few outputs each, kept dense) and the GDN
//     core's own parameters — conv, A_log, dt_bias and its gated-norm gain
//     ssm_norm (gdn_backward gives them no gradient, ops/gdn.hpp);
// the BLR scales by Adam with relative steps, the signs by the sign
// optimizer, exactly as StudentLlamaBlock (student_block.hpp), whose API
// this mirrors; train_step / finish_step (layerwise.hpp) run either.
//
// Backward, from dy = ∂L/∂y (every trained gradient accumulates; dx is
// overwritten; P_pᵀ is BlrLinear::backward, which accumulates the
// projection's dh, dℓ, dg and sign gradients on the way):
//   MLP      d_act = P_downᵀ(dy);  d_gate, d_up = swiglu_bwd(d_act)
//            d_xn2 = P_gateᵀ(d_gate) + P_upᵀ(d_up);  d_post_norm += gain_grad(h, d_xn2)
//            d_h = dy + rmsnorm_bwd(h, d_xn2; 1 + w)
//   attention  d_gated = P_oᵀ(d_h);  d_att, d_g = sigmoid_gate_bwd(d_gated)
//            dqr, dkr, dv = attention_bwd(d_att)
//            dq = qk_norm_rope_bwd(dqr) (d_q_norm +=), dk = qk_norm_rope_bwd(dkr) (d_k_norm +=)
//            d_xn1 = P_qᵀ(merge_q_gate(dq, d_g)) + P_kᵀ(dk) + P_vᵀ(dv)
//   GDN      d_o = P_outᵀ(d_h);  d_qkv, d_z, d_a, d_b = gdn_backward(d_o) (the forward's tape)
//            d_xn1 = P_qkvᵀ(d_qkv) + P_zᵀ(d_z) + d_b·W_b + d_a·W_a
//   dx = d_h + rmsnorm_bwd(x, d_xn1; 1 + w);  d_attn_norm += gain_grad(x, d_xn1)
// grad_scale passes unchanged to each BLR backward, the only place that
// stages gradients into f16 (blr_linear.hpp); the f32 ops never see it.
//
// The GDN tape: the forward records it (record_tape) in the tape's
// activations; the backward replays it by segments (gdn_backward), writing
// only the tape's scratch part — so backward takes the tape non-const, and
// may run again on the same tape.
//
// Memory: one StudentArena (student_arena.hpp) for the block. State
// region: the BLR projections' state (in forward order), the gains
// [attn_norm d | post_norm d | q_norm hd | k_norm hd] (q/k only in attention
// blocks) and their Adam moments, then the frozen GDN tensors [b | a | conv
// | A_log | dt_bias | ssm_norm] — so a checkpoint or a streamed block is
// still one copy of the state region. Grads region: every BLR scale
// gradient, then the gains' (one memset, one sum of squares). Sign
// gradients: the sign_grads region. Backward scratch lives in the block (or
// is shared between blocks: share_scratch) and only grows. A streamed block
// (e2e.hpp) is placed in a caller's bytes and moved with rebind, as
// StudentLlamaBlock's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "bitrank/backend.hpp"
#include "bitrank/blr/accounting.hpp"
#include "bitrank/blr/blr_matrix.hpp"
#include "bitrank/blr/init.hpp"
#include "bitrank/model/decoder.hpp"
#include "bitrank/model/hybrid_block.hpp"
#include "bitrank/model/llama_block.hpp"
#include "bitrank/model/projection.hpp"
#include "bitrank/train/student_arena.hpp"

namespace bitrank::train {

using model::HybridBlockDims;
using model::HybridProj;

// Whether the student holds projection p in BLR form: every compressible
// projection (model::hybrid_proj_is_compressible); the GDN's b and a stay
// dense and frozen (DESIGN §7).
constexpr bool hybrid_proj_is_blr(HybridProj p) { return model::hybrid_proj_is_compressible(p); }

// A student hybrid block on the host: what initialisation produces, download returns.
struct StudentHybridWeights {
  bool full_attention = false;  // the mixer: gated full attention, else GDN
  // By HybridProj: the BLR projections of the block's kind (out×in,
  // HybridBlockDims); the others empty.
  std::array<blr::HostBlrMatrix, model::kHybridProjs> proj;
  std::vector<float> attn_norm, post_norm;  // [hidden], zero-centred
  std::vector<float> q_norm, k_norm;        // [head_dim], zero-centred; attention only (else empty)
  // Frozen, GDN only (else empty), in transformers' meaning (model/hybrid.hpp):
  std::vector<float> ssm_beta, ssm_alpha;  // b, a projections [Hv][hidden]
  std::vector<float> conv;                 // [C][K]
  std::vector<float> a_log, dt_bias;       // [Hv]
  std::vector<float> gdn_norm;             // [dk], plain gain
};

// The student of block b of a hybrid teacher (model/hybrid.hpp weights):
// each BLR projection by blr::dual_svid of the teacher's weight (`init`,
// rank and paths for every projection; its name is set per matrix), gains
// and frozen tensors copied. Error naming the teacher and tensor.
StudentHybridWeights hybrid_student_init(const model::HostWeights& teacher, index_t b, const blr::InitOptions& init);
// The same with each projection at the rank `ranks` plans for it — the entry
// named blk.b.<proj> (without ".weight"), as blr::plan_ranks returns for
// model::compressible_projections: init.rank is not read, and projection
// entry i gets the SVD seed init.svd.seed + i (compress's seeding of matrix
// i). Error naming a projection without an entry or with one of another shape.
StudentHybridWeights hybrid_student_init(const model::HostWeights& teacher, index_t b, const blr::InitOptions& init,
                                         std::span<const blr::RankPlan> ranks);
// The student of block b with BLR projections made elsewhere (compress's
// Dual-SVID of every matrix at once): each from `blr` by name (blk.b.<proj>,
// shape and blr::check_blr checked), gains and frozen tensors from the
// teacher, whose dense projections are not read. Error naming the matrix.
StudentHybridWeights hybrid_student_weights(const model::HostWeights& teacher, index_t b,
                                            const model::BlrProjections& blr);

// What forward saves for backward.
template <class T>
struct StudentHybridTape {
  model::HybridBlockActivations<T> acts;  // the GDN tape included
  std::array<BlrTape<T>, model::kHybridProjs> proj;
  index_t rows = 0, window = 0;  // of the forward that filled it
};

template <class T>
class StudentHybridBlock {
 public:
  using Real = T;
  using Tape = StudentHybridTape<T>;

  // The block's kind from init.full_attention; its projections from init
  // (any rank, one or two paths; blr::check_blr, shapes per `dims`),
  // latents z = τ·s, optimizer state zero. Sign matrix ids start at
  // sign_id (two per path per BLR projection, in forward order).
  // place: the block's arena at `place` (arena_bytes of the backend's
  // memory, zeroed: a streamed block's slot) instead of an allocation of its own.
  StudentHybridBlock(Backend<T>& be, const HybridBlockDims& dims, const StudentHybridWeights& init,
                     SignOptimizer sign_optimizer = SignOptimizer::factored_adam, float tau = 0.25f,
                     std::uint32_t sign_id = 0, std::byte* place = nullptr);
  // The bytes of the arena of a block made from `init`.
  static std::size_t arena_bytes(const HybridBlockDims& dims, const StudentHybridWeights& init,
                                 SignOptimizer sign_optimizer);
  StudentHybridBlock(const StudentHybridBlock&) = delete;
  StudentHybridBlock& operator=(const StudentHybridBlock&) = delete;

  const HybridBlockDims& dims() const { return dims_; }
  bool full_attention() const { return full_; }
  Backend<T>& backend() const { return *be_; }

  // y [n][hidden] from x [n][hidden], rows in windows of `window` tokens;
  // records the GDN tape.
  void forward(CView<T> x, index_t window, Tape& tape, View<T> y);
  // dx [n][hidden] (overwritten) from dy; x and tape are the forward's.
  void backward(CView<T> x, Tape& tape, CView<T> dy, float grad_scale, View<T> dx);
  void zero_grad();
  StudentGradSquares grad_squares() const;
  // One step at t = scales.step (gains.step must match): Adam on every
  // projection's scales (`scales`, relative steps), sign steps (`signs`),
  // Adam on the gains (`gains`, absolute steps). Returns the sign flips.
  std::int64_t step(const AdamOptions& scales, const AdamOptions& gains, const SignOptions& signs);

  // Trained and frozen parameters from w (same kind and shapes); latents
  // z = τ·s; optimizer state zeroed.
  void upload(const StudentHybridWeights& w, float tau);
  StudentHybridWeights download() const;
  // The state region (parameters, frozen tensors and optimizer state) as
  // bytes, and back: a checkpoint's content, and what a bit-exact
  // comparison reads.
  std::vector<std::byte> download_state() const;
  void upload_state(std::span<const std::byte> bytes);
  std::size_t state_bytes() const { return arena_.state_bytes(); }
  // The arena's bytes are at `base` from now on (the caller copied them there: streaming).
  void rebind(std::byte* base) { arena_.rebind(base); }
  // Backward scratch shared with `other` from now on (blocks that run one
  // after another need one scratch, not one each).
  void share_scratch(const StudentHybridBlock& other) { scratch_ = other.scratch_; }

  // Whether this block has p as a BLR layer; proj(p) is an Error otherwise.
  bool is_blr(HybridProj p) const;
  BlrLinear<T>& proj(HybridProj p);
  const BlrLinear<T>& proj(HybridProj p) const;
  // Gains and their gradients (q_norm, k_norm: empty views in a GDN block).
  View<T> attn_norm() const { return gain(0); }
  View<T> post_norm() const { return gain(1); }
  View<T> q_norm() const { return gain(2); }
  View<T> k_norm() const { return gain(3); }
  View<T> attn_norm_grad() const { return gain_grad(0); }
  View<T> post_norm_grad() const { return gain_grad(1); }
  View<T> q_norm_grad() const { return gain_grad(2); }
  View<T> k_norm_grad() const { return gain_grad(3); }

 private:
  // The frozen GDN tensors (state region).
  struct Frozen {
    View<T> w_b, w_a, conv, a_log, dt_bias, gdn_norm;
  };
  // Backward scratch (grown to the rows).
  struct Scratch {
    BlrWorkspace<T> blr;
    Buffer<T> d_act, d_gate, d_up;             // [n][ffn]
    Buffer<T> d_xn, tmp, d_h;                  // [n][hidden]
    Buffer<T> d_gated, d_att, d_sig, dqr, dq;  // [n][heads·hd]
    Buffer<T> d_qg;                            // [n][2·heads·hd]
    Buffer<T> dkr, dk, dv;                     // [n][kv_heads·hd]
    Buffer<T> delta;                           // [n][heads]
    Buffer<T> d_qkv, d_z, d_o, d_a, d_b;       // GDN: [n][C], [n][Hv·d] ×2, [n][Hv] ×2
  };

  // Gain i (attn_norm, post_norm, q_norm, k_norm) inside a gains-layout vector.
  View<T> gain_at(View<T> all, int i) const;
  View<T> gain(int i) const { return gain_at(arena_.gains(), i); }
  View<T> gain_grad(int i) const { return gain_at(arena_.gain_grads(), i); }
  // Checks dims and init; the BLR projections' BlrDims in forward order.
  static std::vector<BlrDims> checked_proj_dims(const HybridBlockDims& dims, const StudentHybridWeights& init);
  static index_t gains_size(const HybridBlockDims& dims, bool full_attention);
  // The frozen GDN tensors of a block of the kind `full` taken from the
  // state carver (none in an attention block); carve_frozen sets frozen_
  // (StudentArena's extra).
  static Frozen frozen_views(const HybridBlockDims& dims, bool full, Carver& state);
  void carve_frozen(Carver& state) { frozen_ = frozen_views(dims_, full_, state); }
  model::HybridBlockParams<T> params() const;
  CView<T> table(index_t window);

  Backend<T>* be_;
  HybridBlockDims dims_;
  bool full_;
  Frozen frozen_;  // (before arena_, whose constructor sets it)
  StudentArena<T> arena_;
  model::RopeTables<T> ropes_;
  std::shared_ptr<Scratch> scratch_ = std::make_shared<Scratch>();
};

extern template class StudentHybridBlock<float>;
extern template class StudentHybridBlock<double>;

}  // namespace bitrank::train
