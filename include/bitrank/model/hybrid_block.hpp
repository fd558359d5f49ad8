// The op sequence of one Qwen3.5 / Qwen3-Next hybrid block (DESIGN §2),
// written once for every kind of projection: the teacher's dense weights
// (HybridModel) and the student's BLR layers (train/student_hybrid_block.hpp)
// run the same code. Formulas and weight meanings: hybrid.hpp.
//
//     xn1 = rmsnorm(x, attn_norm; 1 + w)
//     gated attention:  qg = P_q(xn1) → q, gate (per head [q_h | gate_h]);  k, v = P_k(xn1), P_v(xn1)
//                       qr, kr = qk_norm_rope(q; 1 + q_norm), qk_norm_rope(k; 1 + k_norm)
//                       att = causal GQA(qr, kr, v) per window;  gated = att ⊙ σ(gate)
//                       mix = P_o(gated)
//     GDN:              qkv, z, b, a = P_qkv(xn1), P_z(xn1), P_b(xn1), P_a(xn1)
//                       o = gdn_forward(qkv, z, a, b) (conv, A_log, dt_bias, ssm_norm frozen)
//                       mix = P_out(o)
//     h = x + mix;  xn2 = rmsnorm(h, post_norm; 1 + w)
//     y = h + P_down(silu(P_gate(xn2)) ⊙ P_up(xn2))
//
// A projection is a callable project(HybridProj p, CView<T> in, View<T> out)
// that overwrites out [n][out_features(p)] with in·W_pᵀ. Every intermediate
// lands in HybridBlockActivations — the GDN tape included — which a backward
// reads; `proj` is scratch (the mixer's out-projection, then the
// down-projection, before their residual adds: outputs never alias inputs).
#pragma once

#include <span>
#include <type_traits>

#include "bitrank/backend.hpp"
#include "bitrank/io/hf_config.hpp"

namespace bitrank::model {

// The projections of a hybrid block, named by their GGUF tensors (hybrid.hpp).
enum class HybridProj : int { q, k, v, o, qkv, z, b, a, out, gate, up, down };
inline constexpr int kHybridProjs = 12;
// "attn_q", "attn_k", "attn_v", "attn_output", "attn_qkv", "attn_gate",
// "ssm_beta", "ssm_alpha", "ssm_out", "ffn_gate", "ffn_up", "ffn_down".
const char* hybrid_proj_name(HybridProj p);
// The projections a block of the kind reads, in forward order: q, k, v, o
// or qkv, z, b, a, out; then gate, up, down.
std::span<const HybridProj> hybrid_block_projs(bool full_attention);
// Whether a compressor may turn p into a BLR matrix (DESIGN §7): every
// decoder projection but the GDN's b and a (Hv outputs each), which stay dense.
constexpr bool hybrid_proj_is_compressible(HybridProj p) { return p != HybridProj::b && p != HybridProj::a; }

// transformers' l2norm of q and k in the GDN (modeling_qwen3_5.py l2norm,
// called with its default eps whatever the config says).
inline constexpr float kGdnL2Eps = 1e-6f;

// The dimensions every block of a hybrid model shares, from its config.
struct HybridBlockDims {
  index_t hidden = 0, ffn = 0;
  float eps = 1e-6f;  // every RMSNorm's epsilon (block norms, q/k norms, the GDN gated norm)
  // Gated full attention.
  index_t heads = 0, kv_heads = 0, head_dim = 0, rotary_dim = 0;
  double rope_theta = 1e4;
  // GDN: k-heads, v-heads, dk = dv, conv kernel; ckpt_every is the tape's
  // state checkpoint interval (ops/gdn.hpp), a memory/time trade-off, not a
  // property of the model.
  index_t k_heads = 0, v_heads = 0, gdn_head_dim = 0, conv_kernel = 0;
  index_t ckpt_every = 8;

  static HybridBlockDims of(const io::ModelConfig& c);
  index_t q_width() const { return heads * head_dim; }  // q, gate, attention output
  index_t kv_width() const { return kv_heads * head_dim; }
  index_t in_features(HybridProj p) const;   // columns of W_p
  index_t out_features(HybridProj p) const;  // rows of W_p
  // The GDN op's configuration for windows of `window` tokens.
  GdnConfig gdn_config(index_t window) const;
};

// The non-projection parameters a block's forward reads: the block norms'
// gains (zero-centred), the q/k norm gains (attention) and the GDN core's
// frozen parameters (GDN). Those of the other mixer kind are not read.
template <class T>
struct HybridBlockParams {
  CView<T> attn_norm, post_norm;  // [hidden]
  CView<T> q_norm, k_norm;        // [head_dim]
  GdnParams<T> gdn;
};

// Every intermediate of one block's forward over n rows. Buffers of the
// other mixer kind stay empty.
template <class T>
struct HybridBlockActivations {
  Buffer<T> xn1, inv1;                                // attention norm: x̂ [n][d], 1/rms [n]
  Buffer<T> qg, q, gate, k, v, qr, q_inv, kr, k_inv;  // full attention: [q|gate] [n][2·H·hd], …
  Buffer<T> att, lse, gated;                          // attention out, lse [n][H], att ⊙ σ(gate)
  Buffer<T> qkv, z, a, b, o, tape;                    // GDN: projections, core output, gdn tape
  bool tape_recorded = false;                         // the GDN tape holds its record part
  Buffer<T> h, xn2, inv2, ffn_gate, ffn_up, act;      // residual after the mixer, MLP
  Buffer<T> proj;                                     // scratch: mixer out-projection, then down-projection

  // Grows the buffers a block of the kind uses to n rows (never shrinks);
  // the GDN tape to a forward of windows of `window`, with its record and
  // scratch parts when record_tape.
  void reserve(Memory& mem, const HybridBlockDims& dims, bool full_attention, index_t n, index_t window,
               bool record_tape);
};

// y [n][hidden] = the block applied to x [n][hidden] with its sequence
// mixing given (generation with a cache, kv_cache.hpp). Full attention: the
// keys after q/k norm and RoPE go to k_out and the values to v_out (each
// [n][kv_width]: the activations' kr and v, or rows of a cache), then
// attend(qr, att, lse) overwrites att [n][q_width] and lse [n][heads] from
// qr. GDN: gdn_core(qkv, z, a, b, o) overwrites o [n][Hv·d] from the
// projections (gdn_forward over windows, or gdn_decode on a carried state).
// `table` rotates row r by its row r mod table.dim(0) (full attention only).
// `a` must hold n rows of the block's kind (HybridBlockActivations::reserve);
// its kr, v and tape are not written here.
template <class T, class Project, class Attend, class GdnCore>
void hybrid_block_forward_with(Backend<T>& be, const HybridBlockDims& dims, bool full_attention,
                               std::type_identity_t<CView<T>> x, std::type_identity_t<CView<T>> table,
                               const HybridBlockParams<T>& prm, Project&& project, std::type_identity_t<View<T>> k_out,
                               std::type_identity_t<View<T>> v_out, Attend&& attend, GdnCore&& gdn_core,
                               HybridBlockActivations<T>& a, std::type_identity_t<View<T>> y) {
  const index_t n = x.dim(0), d = dims.hidden, f = dims.ffn;
  if (x.rank() != 2 || !(x.shape == Shape{n, d}) || !x.contiguous())
    fail("hybrid block forward: x has shape {}, expected a contiguous [n, {}]", x.shape.str(), d);
  if (!(y.shape == x.shape) || !y.contiguous())
    fail("hybrid block forward: y has shape {}, expected a contiguous {}", y.shape.str(), x.shape.str());

  be.norm().rmsnorm_forward(x, prm.attn_norm, GainStyle::zero_centred, dims.eps, a.xn1.view({n, d}), a.inv1.view({n}));
  const CView<T> xn1 = a.xn1.view({n, d});
  if (full_attention) {
    const index_t H = dims.heads, Hkv = dims.kv_heads, qw = dims.q_width(), kw = dims.kv_width();
    project(HybridProj::q, xn1, a.qg.view({n, 2 * qw}));
    be.dense().split_q_gate(a.qg.view({n, 2 * qw}), H, a.q.view({n, qw}), a.gate.view({n, qw}));
    project(HybridProj::k, xn1, a.k.view({n, kw}));
    project(HybridProj::v, xn1, v_out);
    const QkNormRopeOptions q_opt{.heads = H, .eps = dims.eps, .gain = GainStyle::zero_centred};
    const QkNormRopeOptions k_opt{.heads = Hkv, .eps = dims.eps, .gain = GainStyle::zero_centred};
    be.rope().qk_norm_rope_forward(a.q.view({n, qw}), prm.q_norm, table, q_opt, a.qr.view({n, qw}),
                                   a.q_inv.view({n, H}));
    be.rope().qk_norm_rope_forward(a.k.view({n, kw}), prm.k_norm, table, k_opt, k_out, a.k_inv.view({n, Hkv}));
    attend(CView<T>(a.qr.view({n, qw})), a.att.view({n, qw}), a.lse.view({n, H}));
    be.act().sigmoid_gate_forward(a.att.view({n * qw}), a.gate.view({n * qw}), a.gated.view({n * qw}));
    project(HybridProj::o, a.gated.view({n, qw}), a.proj.view({n, d}));
  } else {
    const index_t C = 2 * dims.k_heads * dims.gdn_head_dim + dims.v_heads * dims.gdn_head_dim;
    const index_t vw = dims.v_heads * dims.gdn_head_dim, hv = dims.v_heads;
    project(HybridProj::qkv, xn1, a.qkv.view({n, C}));
    project(HybridProj::z, xn1, a.z.view({n, vw}));
    project(HybridProj::b, xn1, a.b.view({n, hv}));
    project(HybridProj::a, xn1, a.a.view({n, hv}));
    gdn_core(CView<T>(a.qkv.view({n, C})), CView<T>(a.z.view({n, vw})), CView<T>(a.a.view({n, hv})),
             CView<T>(a.b.view({n, hv})), a.o.view({n, vw}));
    project(HybridProj::out, a.o.view({n, vw}), a.proj.view({n, d}));
  }
  be.act().add(x.flat(), a.proj.view({n * d}), a.h.view({n * d}));

  // MLP half.
  be.norm().rmsnorm_forward(a.h.view({n, d}), prm.post_norm, GainStyle::zero_centred, dims.eps, a.xn2.view({n, d}),
                            a.inv2.view({n}));
  project(HybridProj::gate, a.xn2.view({n, d}), a.ffn_gate.view({n, f}));
  project(HybridProj::up, a.xn2.view({n, d}), a.ffn_up.view({n, f}));
  be.act().swiglu_forward(a.ffn_gate.view({n * f}), a.ffn_up.view({n * f}), a.act.view({n * f}));
  project(HybridProj::down, a.act.view({n, f}), a.proj.view({n, d}));
  be.act().add(a.h.view({n * d}), a.proj.view({n * d}), y.flat());
}

// y [n][hidden] = the block applied to x [n][hidden] (rows: windows of
// `window` tokens): the op sequence above with causal attention per window
// over the block's own kr, v, and gdn_forward per window. `table` is the
// rotary table [window][rotary_dim/2][2] (RopeTables, llama_block.hpp) of a
// full-attention block, unread by a GDN block. With record_tape the GDN
// tape also holds what gdn_backward needs; without, only its forward part
// (inference). (T is deduced from the backend alone: the views convert.)
template <class T, class Project>
void hybrid_block_forward(Backend<T>& be, const HybridBlockDims& dims, bool full_attention,
                          std::type_identity_t<CView<T>> x, index_t window, std::type_identity_t<CView<T>> table,
                          const HybridBlockParams<T>& prm, Project&& project, HybridBlockActivations<T>& a,
                          std::type_identity_t<View<T>> y, bool record_tape) {
  const index_t n = x.dim(0), kw = dims.kv_width();
  if (window <= 0 || n % window != 0) fail("hybrid block forward: {} rows are not whole windows of {}", n, window);
  a.reserve(*be.memory, dims, full_attention, n, window, record_tape);
  const AttentionGeometry geo{
      .window = window, .heads = dims.heads, .kv_heads = dims.kv_heads, .head_dim = dims.head_dim};
  const auto attend = [&](CView<T> qr, View<T> att, View<T> lse) {
    be.attention().attention_forward(qr, a.kr.view({n, kw}), a.v.view({n, kw}), geo, att, lse);
  };
  const GdnConfig g = dims.gdn_config(window);
  const auto gdn_core = [&](CView<T> qkv, CView<T> z, CView<T> ga, CView<T> gb, View<T> o) {
    be.gdn().gdn_forward(g, prm.gdn, qkv, z, ga, gb, o, a.tape.view({gdn_tape_size(g, n, record_tape)}), record_tape);
    a.tape_recorded = record_tape;
  };
  const View<T> k_out = full_attention ? a.kr.view({n, kw}) : View<T>{};
  const View<T> v_out = full_attention ? a.v.view({n, kw}) : View<T>{};
  hybrid_block_forward_with(be, dims, full_attention, x, table, prm, project, k_out, v_out, attend, gdn_core, a, y);
}

extern template struct HybridBlockActivations<float>;
extern template struct HybridBlockActivations<double>;

}  // namespace bitrank::model
