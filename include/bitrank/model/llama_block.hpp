// The op sequence of one dense Llama-style block, written once for every
// kind of projection: the teacher's dense weights (LlamaModel) and the
// student's BLR layers (train/student_block.hpp) run the same code.
//
//     xn1 = rmsnorm(x, attn_norm)           q, k, v = P_q(xn1), P_k(xn1), P_v(xn1)
//     qr, kr = rope(q), rope(k)             att = causal GQA(qr, kr, v) per window
//     h = x + P_o(att)
//     xn2 = rmsnorm(h, ffn_norm)            gate, up = P_gate(xn2), P_up(xn2)
//     act = silu(gate)·up                   y = h + P_down(act)
//
// A projection is a callable project(LlamaProj p, CView<T> in, View<T> out)
// that overwrites out [n][out_features(p)] with in·W_pᵀ. Every intermediate
// lands in BlockActivations (model.hpp), the tape a backward reads; `proj`
// is scratch (P_o's, then P_down's output before its residual add, so
// outputs never alias inputs).
#pragma once

#include <map>
#include <type_traits>

#include "bitrank/backend.hpp"
#include "bitrank/io/hf_config.hpp"

namespace bitrank::model {

// The seven projections of a block, in GGUF order.
enum class LlamaProj : int { q, k, v, o, gate, up, down };
inline constexpr int kLlamaProjs = 7;
inline constexpr LlamaProj kAllLlamaProjs[kLlamaProjs] = {LlamaProj::q,    LlamaProj::k,  LlamaProj::v,   LlamaProj::o,
                                                          LlamaProj::gate, LlamaProj::up, LlamaProj::down};
// "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down" (GGUF tensor names).
const char* llama_proj_name(LlamaProj p);

// A block's dimensions, from the model config.
struct LlamaBlockDims {
  index_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0;
  float eps = 1e-5f;        // RMSNorm epsilon
  double rope_theta = 1e4;  // RoPE base

  static LlamaBlockDims of(const io::ModelConfig& c);
  index_t q_width() const { return heads * head_dim; }
  index_t kv_width() const { return kv_heads * head_dim; }
  index_t in_features(LlamaProj p) const;   // columns of W_p
  index_t out_features(LlamaProj p) const;  // rows of W_p
};

// Every intermediate of one block's forward over n rows.
template <class T>
struct BlockActivations {
  Buffer<T> xn1, inv1, q, k, v, qr, kr, att, lse, h, xn2, inv2, gate, up, act;
  Buffer<T> proj;  // scratch: P_o(att), then P_down(act) (each added to its residual)

  // Grows every buffer to hold n rows (never shrinks).
  void reserve(Memory& mem, const LlamaBlockDims& dims, index_t n);
};

// Rotary tables [window][half][2] (rope_table, ops/rope.hpp) on a backend,
// made once per window; one object serves one (half, θ) (another is an Error).
template <class T>
class RopeTables {
 public:
  CView<T> get(Memory& mem, index_t half, double theta, index_t window);
  // The Llama block's: half = head_dim/2.
  CView<T> get(Memory& mem, const LlamaBlockDims& dims, index_t window) {
    return get(mem, dims.head_dim / 2, dims.rope_theta, window);
  }

 private:
  std::map<index_t, Buffer<T>> tables_;
  index_t half_ = 0;
  double theta_ = 0;
};

// y [n][hidden] = the block applied to x [n][hidden] with its attention
// core given (generation with a KV cache, kv_cache.hpp): the keys after
// RoPE go to k_out and the values to v_out (each [n][kv_width]: the
// activations' kr and v, or rows of a cache), then attend(qr, att, lse)
// overwrites att [n][q_width] and lse [n][heads] from qr [n][q_width].
// `table` rotates row r by its row r mod table.dim(0). `a` must hold n rows
// (BlockActivations::reserve); its kr and v are not written.
template <class T, class Project, class Attend>
void llama_block_forward_with(Backend<T>& be, const LlamaBlockDims& dims, std::type_identity_t<CView<T>> x,
                              std::type_identity_t<CView<T>> table, std::type_identity_t<CView<T>> attn_norm,
                              std::type_identity_t<CView<T>> ffn_norm, Project&& project,
                              std::type_identity_t<View<T>> k_out, std::type_identity_t<View<T>> v_out,
                              Attend&& attend, BlockActivations<T>& a, std::type_identity_t<View<T>> y) {
  const index_t n = x.dim(0), d = dims.hidden, H = dims.heads, Hkv = dims.kv_heads, f = dims.ffn, qw = dims.q_width(),
                kw = dims.kv_width();
  if (x.rank() != 2 || !(x.shape == Shape{n, d}) || !x.contiguous())
    fail("llama block forward: x has shape {}, expected a contiguous [n, {}]", x.shape.str(), d);
  if (!(y.shape == x.shape) || !y.contiguous())
    fail("llama block forward: y has shape {}, expected a contiguous {}", y.shape.str(), x.shape.str());

  // Attention half.
  be.norm().rmsnorm_forward(x, attn_norm, GainStyle::plain, dims.eps, a.xn1.view({n, d}), a.inv1.view({n}));
  project(LlamaProj::q, a.xn1.view({n, d}), a.q.view({n, qw}));
  project(LlamaProj::k, a.xn1.view({n, d}), a.k.view({n, kw}));
  project(LlamaProj::v, a.xn1.view({n, d}), v_out);
  be.rope().rope_forward(a.q.view({n, qw}), table, H, a.qr.view({n, qw}));
  be.rope().rope_forward(a.k.view({n, kw}), table, Hkv, k_out);
  attend(CView<T>(a.qr.view({n, qw})), a.att.view({n, qw}), a.lse.view({n, H}));
  project(LlamaProj::o, a.att.view({n, qw}), a.proj.view({n, d}));
  be.act().add(x.flat(), a.proj.view({n * d}), a.h.view({n * d}));

  // MLP half.
  be.norm().rmsnorm_forward(a.h.view({n, d}), ffn_norm, GainStyle::plain, dims.eps, a.xn2.view({n, d}),
                            a.inv2.view({n}));
  project(LlamaProj::gate, a.xn2.view({n, d}), a.gate.view({n, f}));
  project(LlamaProj::up, a.xn2.view({n, d}), a.up.view({n, f}));
  be.act().swiglu_forward(a.gate.view({n * f}), a.up.view({n * f}), a.act.view({n * f}));
  project(LlamaProj::down, a.act.view({n, f}), a.proj.view({n, d}));
  be.act().add(a.h.view({n * d}), a.proj.view({n * d}), y.flat());
}

// y [n][hidden] = the block applied to x [n][hidden] (rows: windows of
// `window` tokens; table from RopeTables for that window): the op
// sequence above with causal attention per window over the block's own kr, v.
// (T is deduced from the backend alone: the views convert.)
template <class T, class Project>
void llama_block_forward(Backend<T>& be, const LlamaBlockDims& dims, std::type_identity_t<CView<T>> x, index_t window,
                         std::type_identity_t<CView<T>> table, std::type_identity_t<CView<T>> attn_norm,
                         std::type_identity_t<CView<T>> ffn_norm, Project&& project, BlockActivations<T>& a,
                         std::type_identity_t<View<T>> y) {
  const index_t n = x.dim(0), kw = dims.kv_width();
  a.reserve(*be.memory, dims, n);
  const AttentionGeometry geo{
      .window = window, .heads = dims.heads, .kv_heads = dims.kv_heads, .head_dim = dims.head_dim};
  const auto attend = [&](CView<T> qr, View<T> att, View<T> lse) {
    be.attention().attention_forward(qr, a.kr.view({n, kw}), a.v.view({n, kw}), geo, att, lse);
  };
  llama_block_forward_with(be, dims, x, table, attn_norm, ffn_norm, project, a.kr.view({n, kw}), a.v.view({n, kw}),
                           attend, a, y);
}

extern template struct BlockActivations<float>;
extern template struct BlockActivations<double>;
extern template class RopeTables<float>;
extern template class RopeTables<double>;

}  // namespace bitrank::model
